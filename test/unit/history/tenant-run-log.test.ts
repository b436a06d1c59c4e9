/**
 * The tenant's runs log (src/history/tenant-run-log.ts) and its pages (tenant-runs-page.ts): every
 * record created is listed once, newest first, across jobs and partitions, by writers on several
 * nodes; a page reads O(page) keys whatever the tenant's size; runs not ended shown through the
 * live views and every status as a filter; bad cursors, pruned records and a missing chunk.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import type { KvStore } from "../../../src/cluster/kv.ts";
import { partitionOf } from "../../../src/cluster/placement.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { JOB_ACTOR, jobActorId, runIdFor, runKey } from "../../../src/protocol/ids.ts";
import type { RunStatus, RunView } from "../../../src/protocol/model.ts";
import { RunMetrics } from "../../../src/history/run-metrics.ts";
import { RunRecordStore } from "../../../src/history/run-record-store.ts";
import { encodeRunRecord } from "../../../src/history/run-record.ts";
import {
  CHUNK,
  FLUSH_DELAY_MS,
  TenantRunLog,
  tenantLogKey,
} from "../../../src/history/tenant-run-log.ts";
import { tenantRunsPage } from "../../../src/history/tenant-runs-page.ts";
import { isKairosError } from "../../../src/lib/errors.ts";
import { countedKv } from "../../support/memory-buckets.ts";
import { ownerContext } from "../../support/shell-context.ts";

const PARTITIONS = 16;
const T = "tabcdefghijklmnop";
const quiet = () => undefined;

const jobId = (j: number) => `j${String(j).padStart(16, "0")}`;
const partition = (job: string) =>
  partitionOf({ type: JOB_ACTOR, id: jobActorId(T, job) }, PARTITIONS);

function record(job: string, i: number, status: RunStatus, tenant = T): RunView {
  return {
    run_id: runIdFor(job, 1_700_000_000_000 + i * 1000),
    job_id: job,
    tenant_id: tenant,
    scheduled_for: new Date(1_700_000_000_000 + i * 1000).toISOString(),
    trigger: "schedule",
    status,
    attempt: 0,
    attempts: [],
    created_at: "2026-12-05T12:55:00Z",
    started_at: null,
    finished_at: null,
    next_attempt_at: null,
    result: null,
    reason: null,
  };
}

/** Writes `r`'s record, as the job shell does, and tells the log. */
async function create(kv: KvStore, log: TenantRunLog, r: RunView): Promise<void> {
  const key = runKey(partition(r.job_id), r.tenant_id, r.job_id, r.run_id);
  assert.ok((await kv.create(key, encodeRunRecord(r, 1))).ok);
  log.created(r);
}

/** Every page of the tenant's runs, `limit` at a time. */
async function walk(kv: KvStore, limit: number, status?: RunStatus): Promise<RunView[]> {
  const out: RunView[] = [];
  let cursor: string | undefined;
  for (let pages = 0; pages < 10_000; pages++) {
    const page = await tenantRunsPage(kv, PARTITIONS, T, {
      limit,
      ...(cursor === undefined ? {} : { cursor }),
      ...(status === undefined ? {} : { status }),
    });
    out.push(...page.items);
    if (page.next_cursor === null) return out;
    cursor = page.next_cursor;
  }
  throw new Error("walk did not end");
}

const invalidField = (field: string) => (e: unknown) =>
  isKairosError(e, "invalid_argument") && e.field === field;

describe("tenant runs log", () => {
  it("lists every created run once, newest first, across jobs and partitions, in pages", async () => {
    const kv = new MemoryKv("runs");
    const log = new TenantRunLog(() => kv, new FakeClock(0), quiet);
    const made: RunView[] = [];
    for (let i = 0; i < 500; i++) {
      const r = record(jobId(i % 37), i, i % 3 === 0 ? "succeeded" : "queued");
      await create(kv, log, r);
      made.push(r);
    }
    await log.flush();
    const listed = await walk(kv, 7);
    assert.deepEqual(
      listed.map((r) => r.run_id),
      made.map((r) => r.run_id).reverse(),
    );
    const succeeded = await walk(kv, 50, "succeeded");
    assert.deepEqual(
      succeeded.map((r) => r.run_id),
      made
        .filter((r) => r.status === "succeeded")
        .map((r) => r.run_id)
        .reverse(),
    );
  });

  it("writes a partial chunk FLUSH_DELAY_MS after its first id, not before", async () => {
    const kv = new MemoryKv("runs");
    const clock = new FakeClock(0);
    const log = new TenantRunLog(() => kv, clock, quiet);
    await create(kv, log, record(jobId(1), 1, "queued"));
    clock.advance(FLUSH_DELAY_MS - 1);
    assert.equal(await kv.get(tenantLogKey(T, 0)), null);
    clock.advance(1);
    await log.flush(); // waits for the write the timer started
    assert.equal((await walk(kv, 10)).length, 1);
  });

  it("keeps seqs dense and loses nothing when several nodes write one tenant's log at once", async () => {
    const kv = new MemoryKv("runs");
    const logs = [0, 1, 2].map(() => new TenantRunLog(() => kv, new FakeClock(0), quiet));
    const made = new Set<string>();
    const writes: Promise<void>[] = [];
    for (let i = 0; i < 3 * CHUNK * 5 + 11; i++) {
      const r = record(jobId(i % 50), i, "queued");
      made.add(r.run_id);
      writes.push(create(kv, logs[i % 3]!, r));
    }
    await Promise.all(writes);
    await Promise.all(logs.map((l) => l.flush()));
    const listed = (await walk(kv, 200)).map((r) => r.run_id);
    assert.equal(listed.length, made.size);
    assert.deepEqual(new Set(listed), made);
    const chunks = (await kv.list(`tl.${T}.*`)).map((e) => e.key).sort();
    assert.deepEqual(
      chunks,
      chunks.map((_, seq) => tenantLogKey(T, seq)),
    );
  });

  it("reads O(page) keys however many jobs and runs the tenant has", async () => {
    const { kv, ops } = countedKv(new MemoryKv("runs"));
    const log = new TenantRunLog(() => kv, new FakeClock(0), quiet);
    for (let i = 0; i < 20_000; i++)
      await create(kv, log, record(jobId(i % 2_000), i, "succeeded"));
    await log.flush();
    let cursor: string | undefined;
    for (let page = 0; page < 5; page++) {
      ops.clear();
      const p = await tenantRunsPage(kv, PARTITIONS, T, {
        limit: 50,
        ...(cursor === undefined ? {} : { cursor }),
      });
      assert.equal(p.items.length, 50);
      cursor = p.next_cursor!;
      const reads = [...ops.entries()].filter(([k]) => k !== "get");
      assert.deepEqual(reads, [], "a page only gets keys");
      // 51 records, the chunks the page spans (2, or 3 across a boundary), head + one probe.
      assert.ok(ops.get("get")! <= 51 + 3 + 2, `page ${page}: ${ops.get("get")} gets`);
    }
  });

  it("skips pruned records, steps over a missing chunk and says which argument is wrong", async () => {
    const kv = new MemoryKv("runs");
    const log = new TenantRunLog(() => kv, new FakeClock(0), quiet);
    const made: RunView[] = [];
    for (let i = 0; i < 4 * CHUNK; i++) {
      const r = record(jobId(i % 5), i, "succeeded");
      await create(kv, log, r);
      made.push(r);
    }
    await log.flush();
    const pruned = made[3 * CHUNK + 5]!;
    await kv.delete(runKey(partition(pruned.job_id), T, pruned.job_id, pruned.run_id));
    await kv.delete(tenantLogKey(T, 1)); // a chunk its writer gave up on
    const listed = (await walk(kv, 30)).map((r) => r.run_id);
    const expected = made
      .filter((r, i) => r !== pruned && (i < CHUNK || i >= 2 * CHUNK))
      .map((r) => r.run_id)
      .reverse();
    assert.deepEqual(listed, expected);

    for (const cursor of ["nope", Buffer.from("ix\n3").toString("base64url"), "dGwKLTEKMA"])
      await assert.rejects(
        tenantRunsPage(kv, PARTITIONS, T, { limit: 5, cursor }),
        invalidField("cursor"),
      );
  });

  it("shows runs not ended as their owners hold them, and filters by any status", async () => {
    const base = new MemoryKv("runs");
    const log = new TenantRunLog(() => base, new FakeClock(0), quiet);
    const made: RunView[] = [];
    for (let i = 0; i < 200; i++) {
      const r = record(jobId(i % 11), i, i % 4 === 0 ? "succeeded" : "queued");
      await create(base, log, r);
      made.push(r);
    }
    await log.flush();
    // The owners' memory: of the runs not ended, every third is running, every third leased; the
    // rest are not in any owner's memory (shown as recorded, queued).
    const held = new Map<string, RunView>();
    made
      .filter((r) => r.status === "queued")
      .forEach((r, i) => {
        if (i % 3 !== 2)
          held.set(r.run_id, { ...r, status: i % 3 === 0 ? "running" : "leased", attempt: 1 });
      });
    const asked: string[][] = [];
    const live = async (ids: string[]) => {
      asked.push(ids);
      return new Map(ids.flatMap((id) => (held.has(id) ? [[id, held.get(id)!] as const] : [])));
    };
    const shown = made.map((r) => held.get(r.run_id) ?? r);
    const { kv, ops } = countedKv(base);
    const page = async (limit: number, status?: RunStatus, cursor?: string) =>
      tenantRunsPage(
        kv,
        PARTITIONS,
        T,
        {
          limit,
          ...(status === undefined ? {} : { status }),
          ...(cursor === undefined ? {} : { cursor }),
        },
        live,
      );

    // The first page: the live views over the records, one request for the page's runs not ended.
    const first = await page(20);
    assert.deepEqual(first.items, shown.slice(-20).reverse());
    assert.equal(asked.length, 1);
    assert.deepEqual(
      new Set(asked[0]),
      new Set(
        made
          .slice(-21)
          .filter((r) => r.status === "queued")
          .map((r) => r.run_id),
      ),
    );
    // Every status filters what is shown, across pages.
    for (const status of ["running", "leased", "queued", "succeeded"] as const) {
      const out: RunView[] = [];
      let cursor: string | undefined;
      for (let n = 0; n < 100; n++) {
        const p = await page(7, status, cursor);
        out.push(...p.items);
        if (p.next_cursor === null) break;
        cursor = p.next_cursor;
      }
      assert.deepEqual(
        out.map((r) => r.run_id),
        shown
          .filter((r) => r.status === status)
          .map((r) => r.run_id)
          .reverse(),
        status,
      );
    }
    // A terminal filter reads records only: no live request.
    asked.length = 0;
    await page(50, "succeeded");
    assert.equal(asked.length, 0);
    // Still O(page) in KV reads with the overlay (head, a probe, chunks, the records).
    ops.clear();
    await page(20);
    assert.ok((ops.get("get") ?? 0) <= 2 * 21 + 6, `gets: ${ops.get("get")}`);
    assert.equal(ops.get("keys") ?? 0, 0);
    assert.equal(ops.get("list") ?? 0, 0);
  });

  it("shows no other tenant's runs and an empty tenant has one empty page", async () => {
    const kv = new MemoryKv("runs");
    const log = new TenantRunLog(() => kv, new FakeClock(0), quiet);
    await create(kv, log, record(jobId(1), 1, "queued", "tother0000000000a"));
    await log.flush();
    assert.deepEqual(await tenantRunsPage(kv, PARTITIONS, T, { limit: 5 }), {
      items: [],
      next_cursor: null,
    });
  });

  it("is told by the run-record store of records it creates, not of a re-fire's or an update", async () => {
    const kv = new MemoryKv("runs");
    const told: string[] = [];
    const store = new RunRecordStore(kv, new RunMetrics(), {
      created: (r) => told.push(r.run_id),
    });
    const r = record(jobId(1), 1, "queued");
    const ctx = ownerContext({ type: JOB_ACTOR, id: jobActorId(T, r.job_id) }, partition(r.job_id));
    await store.put(ctx, r, "create");
    await store.put(ctx, r, "create"); // re-fired after a lost state change: the record is there
    await store.put(ctx, { ...r, status: "succeeded" }, "update");
    assert.deepEqual(told, [r.run_id]);
  });
});
