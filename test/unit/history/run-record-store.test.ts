/**
 * The run-record store's revision cache (src/history/run-record-store.ts): a run's updates use the
 * revision its previous write returned, with no read, for as many runs as a burst keeps active.
 * A cache smaller than a burst, evicted oldest first, would find every revision evicted when
 * 200,000 runs created at once end in the same order — one `get` per run, each read-back evicting
 * the next. Terminal records leave the cache, and it holds as many runs as run metrics' baselines.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import type { RunView } from "../../../src/protocol/model.ts";
import { RunMetrics, type RunMetricsSink } from "../../../src/history/run-metrics.ts";
import { REVISION_CACHE_LIMIT, RunRecordStore } from "../../../src/history/run-record-store.ts";
import { countedKv } from "../../support/memory-buckets.ts";
import { ownerContext } from "../../support/shell-context.ts";

const ctx = ownerContext({ type: "job", id: "t1.j" }, 3);

function run(i: number, status: RunView["status"]): RunView {
  const ended = status === "succeeded";
  return {
    run_id: `r${i}`,
    job_id: `j${i}`,
    tenant_id: "t1",
    scheduled_for: "2026-12-05T13:00:00Z",
    trigger: "schedule",
    status,
    attempt: ended ? 1 : 0,
    attempts: ended
      ? [
          {
            attempt: 1,
            worker: "w1",
            started_at: "2026-12-05T13:00:00.100Z",
            finished_at: "2026-12-05T13:00:00.200Z",
            outcome: "succeeded",
            exit_code: 0,
            error: null,
          },
        ]
      : [],
    created_at: "2026-12-05T12:55:00Z",
    started_at: ended ? "2026-12-05T13:00:00.100Z" : null,
    finished_at: ended ? "2026-12-05T13:00:00.200Z" : null,
    next_attempt_at: null,
    result: null,
    reason: null,
  };
}

describe("run-record store: revisions for a burst", () => {
  it(
    `a burst of 150,000 runs created, then each ended in creation order, reads no record (the cache held 100,000); terminal runs leave no revision and no baseline (limit ${REVISION_CACHE_LIMIT})`,
    { timeout: 120_000 },
    async () => {
      const { kv, ops } = countedKv(new MemoryKv("runs"));
      const lags: number[] = [];
      const sink: RunMetricsSink = {
        dispatchLag: (_t, s) => lags.push(s),
        attempt: () => undefined,
        leaseExpiry: () => undefined,
        retry: () => undefined,
        deadLetter: () => undefined,
        throttled: () => undefined,
      };
      const metrics = new RunMetrics(sink);
      const store = new RunRecordStore(kv, metrics);
      const n = 150_000;
      for (let i = 0; i < n; i++) await store.put(ctx, run(i, "queued"), "create");
      assert.equal(store.cached, n, "every active run's revision is kept");
      for (let i = 0; i < n; i++) await store.put(ctx, run(i, "succeeded"), "update");
      assert.equal(ops.get("get") ?? 0, 0, "no run record was read back");
      assert.equal(ops.get("update"), n, "one update per run");
      assert.equal(store.cached, 0, "terminal runs leave the revision cache");
      assert.equal(metrics.size, 0, "and run metrics' baselines");
      assert.equal(lags.length, n, "every run's dispatch lag observed once (no baseline lost)");
    },
  );

  it("a revision missing (evicted, or written by another node) costs one read, then the update; a terminal record is not cached", async () => {
    const { kv, ops } = countedKv(new MemoryKv("runs"));
    const a = new RunRecordStore(kv, new RunMetrics());
    const b = new RunRecordStore(kv, new RunMetrics()); // a second store (another node, say)
    await a.put(ctx, run(1, "queued"), "create");
    await b.put(ctx, run(1, "running"), "update");
    assert.equal(ops.get("get"), 1, "b had no revision: one read");
    assert.equal(b.cached, 1);
    // a's cached revision is stale now: the CAS fails, it reads, and writes.
    await a.put(ctx, run(1, "succeeded"), "update");
    assert.equal(ops.get("get"), 2, "a stale revision: one read after the conflict");
    assert.equal(a.cached, 0, "a terminal record is not cached");
  });
});

describe("run metrics: a read-back does not replace a newer baseline", () => {
  it("a run whose start was counted (a noted transition), then read back as stored at creation (its revision evicted), is not counted again at its end", () => {
    const lags: number[] = [];
    const attempts: string[] = [];
    const sink: RunMetricsSink = {
      dispatchLag: (_t, s) => lags.push(s),
      attempt: (_t, o) => attempts.push(o),
      leaseExpiry: () => undefined,
      retry: () => undefined,
      deadLetter: () => undefined,
      throttled: () => undefined,
    };
    const m = new RunMetrics(sink);
    const running = {
      ...run(1, "queued"),
      status: "running" as const,
      started_at: "2026-12-05T13:00:00.100Z",
    };
    m.written("k", run(1, "queued"), true);
    m.written("k", running, false); // the start (noted, not written: the shell's `note`)
    assert.equal(lags.length, 1);
    m.known("k", run(1, "queued")); // the stored record, as created
    m.written("k", run(1, "succeeded"), false);
    assert.equal(lags.length, 1, "the start is counted once");
    assert.deepEqual(attempts, ["succeeded"]);
  });
});

describe("run-record store: a settle reports the orphan it finds", () => {
  it("writes an orphan left queued, finds one ended already, and writes nothing where none is", async () => {
    const kv = new MemoryKv("runs");
    const store = new RunRecordStore(kv, new RunMetrics());
    const cancelled = (i: number): RunView => ({
      ...run(i, "cancelled"),
      reason: "job paused before the occurrence started",
    });
    // Left queued by a fire whose state change was lost: the settle writes it.
    await store.put(ctx, run(1, "queued"), "create");
    assert.equal(await store.put(ctx, cancelled(1), "settle"), "settled");
    // Ended already by that fire (a `skipped` occurrence, say): nothing to write, and still an
    // orphan the job's runs index lacks — reported, so the job indexes it.
    await store.put(ctx, run(2, "succeeded"), "create");
    const before = await kv.get("3.t1.j2.r2");
    assert.equal(await store.put(ctx, cancelled(2), "settle"), "settled");
    assert.equal((await kv.get("3.t1.j2.r2"))?.revision, before?.revision, "not rewritten");
    // No record: nothing to settle.
    assert.equal(await store.put(ctx, cancelled(3), "settle"), undefined);
    assert.equal(await kv.get("3.t1.j3.r3"), null);
  });
});
