/**
 * Run-path metrics derived from run records (src/history/run-metrics.ts), through the job shell's
 * real `putRun` (src/jobs/job-shell.ts) on the in-memory KV: each transition is counted once,
 * also when the next write comes from another owner (a new shell whose baseline is the stored
 * record it reads), and a create that finds the record already there counts nothing.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { ShellContext } from "../../../src/actors/host.ts";
import type { Bus } from "../../../src/cluster/bus.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { DEFAULT_JOB_CONFIG, type JobEffect } from "../../../src/job-state/job-types.ts";
import { jobRegistration } from "../../../src/jobs/job-shell.ts";
import type { AttemptView, RunStatus, RunView } from "../../../src/protocol/model.ts";
import { RunMetrics, type RunMetricsSink } from "../../../src/history/run-metrics.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import { WorkerDirectory } from "../../../src/slots/worker-directory.ts";

class Recorder implements RunMetricsSink {
  readonly lags: [string, number][] = [];
  readonly counts = new Map<string, number>();
  #inc(k: string): void {
    this.counts.set(k, (this.counts.get(k) ?? 0) + 1);
  }
  dispatchLag(tenant: string, s: number): void {
    this.lags.push([tenant, s]);
  }
  attempt(tenant: string, outcome: string): void {
    this.#inc(`attempt:${tenant}:${outcome}`);
  }
  leaseExpiry(kind: string): void {
    this.#inc(kind === "counted" ? "lease_expiry" : `lease_expiry_${kind}`);
  }
  retry(tenant: string): void {
    this.#inc(`retry:${tenant}`);
  }
  deadLetter(tenant: string): void {
    this.#inc(`dead:${tenant}`);
  }
  throttled(tenant: string): void {
    this.#inc(`throttled:${tenant}`);
  }
  get(k: string): number {
    return this.counts.get(k) ?? 0;
  }
}

const SCHEDULED = "2026-03-08T07:00:00Z";
const at = (s: number) => new Date(Date.parse(SCHEDULED) + s * 1000).toISOString();
const attempt = (
  n: number,
  outcome: AttemptView["outcome"],
  startedS: number | null = 1,
): AttemptView => ({
  attempt: n,
  worker: "w1",
  started_at: startedS === null ? null : at(startedS),
  finished_at: outcome ? at(9) : null,
  exit_code: null,
  outcome,
  error: null,
});
function run(status: RunStatus, attempts: AttemptView[], startedS: number | null): RunView {
  return {
    run_id: "j1-r1",
    job_id: "j1",
    tenant_id: "t1",
    scheduled_for: SCHEDULED,
    trigger: "schedule",
    status,
    attempt: attempts.length,
    attempts,
    created_at: SCHEDULED,
    started_at: startedS === null ? null : at(startedS),
    finished_at: null,
    next_attempt_at: null,
    result: null,
    reason: null,
  };
}

function shell(runs: MemoryKv, rec: Recorder, epoch = 1) {
  const bus: Bus = {
    publish: () => undefined,
    request: () => Promise.reject(new Error("unused")),
    subscribe: () => ({ unsubscribe: () => undefined }),
    isClosed: () => false,
  } as unknown as Bus;
  const clock = new FakeClock(0);
  const reg = jobRegistration(DEFAULT_JOB_CONFIG, {
    log: () => undefined,
    clock,
    workers: {
      nc: bus,
      clusterName: "c",
      directory: new WorkerDirectory(clock, seededRandom(1), 1000),
    },
    history: { runs, metrics: new RunMetrics(rec) },
    slots: {
      router: () => {
        throw new Error("unused");
      },
    },
  });
  const ctx = {
    address: { type: "job", id: "t1.j1" },
    partition: 3,
    epoch,
    stillOwner: () => true,
    tell: () => undefined,
  } as unknown as ShellContext;
  return (record: RunView, mode: "create" | "update" | "terminal" = "update") =>
    reg.perform!([{ kind: "put_run", record, mode } satisfies JobEffect], ctx);
}

describe("run metrics from run records", () => {
  it("counts start lag once, each ended attempt once, retries and the dead letter", async () => {
    const rec = new Recorder();
    const put = shell(new MemoryKv("runs"), rec);
    await put(run("queued", [], null), "create");
    await put(run("leased", [attempt(1, null, null)], null));
    await put(run("running", [attempt(1, null)], 2.5));
    await put(run("running", [attempt(1, null)], 2.5)); // a repeat write changes nothing
    await put(run("retry_wait", [attempt(1, "failed")], 2.5));
    await put(run("queued", [attempt(1, "failed")], 2.5));
    await put(run("leased", [attempt(1, "failed"), attempt(2, null, null)], 2.5));
    await put(run("running", [attempt(1, "failed"), attempt(2, null, 20)], 2.5));
    await put(run("queued", [attempt(1, "failed"), attempt(2, "lease_lost", 20)], 2.5)); // lease expired, re-queued
    await put(
      run(
        "failed",
        [attempt(1, "failed"), attempt(2, "lease_lost", 20), attempt(3, "timed_out", 30)],
        2.5,
      ),
    );
    assert.deepEqual(rec.lags, [["t1", 2.5]]);
    assert.equal(rec.get("attempt:t1:failed"), 1);
    assert.equal(rec.get("attempt:t1:lease_lost"), 1);
    assert.equal(rec.get("attempt:t1:timed_out"), 1);
    assert.equal(rec.get("lease_expiry"), 1);
    assert.equal(rec.get("retry:t1"), 2);
    assert.equal(rec.get("dead:t1"), 1);
  });

  it("a throttled run is counted once by tenant: recorded throttled at once, or a waiting run ended throttled; a re-fire's record is not counted again", async () => {
    const rec = new Recorder();
    const runs = new MemoryKv("runs");
    const put = shell(runs, rec);
    await put(run("throttled", [], null), "terminal");
    assert.equal(rec.get("throttled:t1"), 1);
    await shell(runs, rec)(run("throttled", [], null), "terminal"); // a re-fire meets it
    assert.equal(rec.get("throttled:t1"), 1);
    const other = { ...run("queued", [], null), run_id: "j1-r2" };
    await put(other, "create");
    await put({ ...other, status: "throttled" });
    assert.equal(rec.get("throttled:t1"), 2);
    assert.equal(rec.get("dead:t1"), 0, "not a dead letter");
  });

  it("a new owner compares with the stored record: nothing the old owner wrote is counted twice", async () => {
    const runs = new MemoryKv("runs");
    const rec = new Recorder();
    const old = shell(runs, rec, 1);
    await old(run("queued", [], null), "create");
    await old(run("running", [attempt(1, null)], 1));
    // The new owner (another node: an empty revision cache and no baselines) re-decides the start
    // (its state write after the record was lost) and then the completion.
    const next = shell(runs, rec, 2);
    await next(run("running", [attempt(1, null)], 1));
    await next(run("succeeded", [attempt(1, "succeeded")], 1));
    assert.equal(rec.lags.length, 1);
    assert.equal(rec.get("attempt:t1:succeeded"), 1);
  });

  it("a create that finds the record (re-fired after a crash) counts nothing; terminal runs keep no baseline", async () => {
    const runs = new MemoryKv("runs");
    const rec = new Recorder();
    const metrics = new RunMetrics(rec);
    await shell(runs, rec)(run("failed", [attempt(1, "failed")], 1), "create");
    assert.equal(rec.get("dead:t1"), 1);
    await shell(runs, rec)(run("failed", [attempt(1, "failed")], 1), "create");
    assert.equal(rec.get("dead:t1"), 1);
    assert.equal(rec.get("attempt:t1:failed"), 1);
    metrics.written("k", run("succeeded", [attempt(1, "succeeded")], 1), true);
    assert.equal(metrics.size, 0);
  });
});
