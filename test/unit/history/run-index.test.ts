/**
 * The runs index (a runs page answers in O(page)): the pure index decision,
 * the real job actor core wrapped by `withRunIndex` driven through a small shell over the in-memory
 * KV (which passes the KV conformance suite), and `NatsJobsService.listRuns` reading it — KV
 * operations per page counted for 1,000 and 10,000 records (the same), every run exactly once and
 * newest first across a retention pass, the status filter's bound, the crash cases of a chunk
 * write, and a deleted job's chunks purged.
 */
import { memoryBuckets } from "../../support/memory-buckets.ts";
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { decode, encode } from "../../../src/cluster/codec.ts";
import type { KvStore } from "../../../src/cluster/kv.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { partitionOf } from "../../../src/cluster/placement.ts";
import type { ActorRouter } from "../../../src/cluster/router.ts";
import { JOB_ACTOR, jobActorId, runIdFor, runKey } from "../../../src/protocol/ids.ts";
import { makeJobActor } from "../../../src/jobs/job-actor.ts";
import { DEFAULT_JOB_CONFIG, type JobMsg } from "../../../src/job-state/job-types.ts";
import { activeRunsReply, emptyJobState, type JobState } from "../../../src/job-state/job-state.ts";
import type { JobSpec, RunView } from "../../../src/protocol/model.ts";
import { NatsJobsService } from "../../../src/service/nats-service.ts";
import { retentionConfig } from "../../../src/history/retention.ts";
import {
  RUN_INDEX_CHUNK,
  indexDecision,
  isRunIndexEffect,
  runIndexKey,
  runIdSuffix,
  type RunIndexEffect,
} from "../../../src/history/run-index.ts";
import { withRunIndex } from "../../../src/jobs/with-history.ts";
import { listRunIndex, writeRunIndexChunk } from "../../../src/history/run-index-store.ts";
import { MAX_EXAMINED } from "../../../src/history/run-pages.ts";
import { encodeRunRecord } from "../../../src/history/run-record.ts";
import { RunRetention } from "../../../src/history/run-retention.ts";
import { KairosError, isKairosError } from "../../../src/lib/errors.ts";
import { seededRandom } from "../../../src/lib/random.ts";

const TENANT = "t1";
const JOB = "j0123456789abcdef";
const ACTOR = jobActorId(TENANT, JOB);
const PARTITIONS = 8;
const P = partitionOf({ type: JOB_ACTOR, id: ACTOR }, PARTITIONS);
const T0 = Date.UTC(2026, 0, 1);
const MIN = 60_000;

/** Every minute; occurrences fired late are recorded `missed` (one record each, no run). */
const SPEC: JobSpec = {
  name: null,
  schedule: { cron: "* * * * *", time_zone: "UTC" },
  task: { image: "busybox", args: ["true"], env: {}, timeout_s: 60 },
  retry: { max_attempts: 1, backoff: "exponential", base_s: 1, max_s: 60 },
  overlap: "skip",
  misfire: { policy: "skip", starting_deadline_s: null },
  flex_window_s: 0,
  enabled: true,
};

const CFG = { ...DEFAULT_JOB_CONFIG, lookaheadMs: 0, catchUpLimit: 100 };

/** Counts every KV operation made on a store (the port's methods). */
function counted(kv: MemoryKv): {
  kv: MemoryKv;
  ops: Record<string, number>;
  reset(): void;
  total(): number;
} {
  const ops: Record<string, number> = {};
  for (const m of [
    "get",
    "create",
    "update",
    "put",
    "delete",
    "list",
    "scan",
    "keys",
    "purge",
  ] as const) {
    const f = (kv[m] as (...a: unknown[]) => Promise<unknown>).bind(kv);
    (kv as unknown as Record<string, unknown>)[m] = (...a: unknown[]) => (
      (ops[m] = (ops[m] ?? 0) + 1),
      f(...a)
    );
  }
  return {
    kv,
    ops,
    reset: () => {
      for (const k of Object.keys(ops)) delete ops[k];
    },
    total: () => Object.values(ops).reduce((a, b) => a + b, 0),
  };
}

/**
 * The real job actor core with the index, and a shell doing what job-shell.ts does with its pre
 * effects (records created, chunks written with `writeRunIndexChunk`) and the host's state write.
 */
function harness() {
  const mk = (n: string) => new MemoryKv(n);
  const runs = counted(mk("runs"));
  const actors = counted(mk("actors"));
  const buckets = memoryBuckets({ actors: actors.kv, runs: runs.kv });
  // The job actor answers only `active_runs` (its live runs, for the overlay); the page itself
  // reads the job's state from KV.
  let live: () => JobState = () => emptyJobState();
  const router = {
    request: async (_to: unknown, msg: JobMsg) => {
      const s = live();
      if (msg.kind === "active_runs" && s.job && !s.deleted) return activeRunsReply(s);
      if (msg.kind === "active_runs" || msg.kind === "get")
        throw new KairosError("not_found", "job not found");
      throw new Error(`the job actor is asked only for active_runs here, not ${msg.kind}`);
    },
  } as unknown as ActorRouter;
  const service = new NatsJobsService(router, buckets, PARTITIONS, seededRandom(1));
  const def = withRunIndex(makeJobActor(CFG));
  const stateKey = `${JOB_ACTOR}.${P}.${ACTOR}`;
  const known = new Set<string>();
  const h = {
    runs,
    actors,
    service,
    state: emptyJobState(),
    created: [] as string[],
    epoch: 1,
    /** One decision, performed: records, then chunks, then the state (crash-safe order). */
    async send(msg: JobMsg, nowMs: number, opts: { dropStateWrite?: boolean } = {}) {
      const d = def.receive(h.state, msg, { id: ACTOR, nowMs });
      for (const fx of d.pre ?? []) {
        if (isRunIndexEffect(fx))
          await writeRunIndexChunk(
            runs.kv,
            { address: { type: JOB_ACTOR, id: ACTOR }, partition: P, epoch: h.epoch },
            fx,
          );
        else if (fx.kind === "put_run" && (fx.mode === "create" || fx.mode === "terminal")) {
          await runs.kv.create(
            runKey(P, TENANT, JOB, fx.record.run_id),
            encodeRunRecord(fx.record, h.epoch),
          );
          if (!known.has(fx.record.run_id)) {
            known.add(fx.record.run_id);
            h.created.push(fx.record.run_id);
          }
        }
      }
      if (opts.dropStateWrite) return d; // a crash before the state write
      h.state = d.state;
      await actors.kv.put(stateKey, encode({ s: h.state, e: h.epoch, w: "n1" }));
      return d;
    },
    /** A job, then `n` missed occurrences recorded (100 per fire), oldest first. */
    async build(n: number) {
      await h.send(
        { kind: "create", tenant_id: TENANT, job_id: JOB, spec: SPEC, request_hash: "h" },
        T0,
      );
      for (let done = 0; done < n; done += 100)
        await h.send({ kind: "fire" }, T0 + (done + Math.min(100, n - done)) * MIN + 30_000);
      assert.equal(h.created.length, n);
      return h;
    },
    /** Every page, following the cursor; the run ids in the order served. */
    async all(limit: number, between?: (page: number) => Promise<void>) {
      const seen: string[] = [];
      let cursor: string | undefined;
      let page = 0;
      do {
        const p = await service.listRuns(
          TENANT,
          JOB,
          cursor === undefined ? { limit } : { limit, cursor },
        );
        seen.push(...p.items.map((r) => r.run_id));
        cursor = p.next_cursor ?? undefined;
        if (between) await between(page++);
      } while (cursor !== undefined);
      return seen;
    },
  };
  live = () => h.state;
  return h;
}

/**
 * The set-up of the schedule-change cases: a job every minute that runs every occurrence (overlap
 * `allow`, misfire `run_all`) under a 30 s look-ahead, created at 00:01 with its index a chunk full
 * but one, then fired at 00:45 — so the 01:00 occurrence (`at60`) is prepared ahead and closes
 * chunk 0. `fires` fires at each time in turn and collects the run records each decision writes.
 */
function preparedAhead() {
  const def = withRunIndex(makeJobActor({ ...CFG, lookaheadMs: 30_000 }));
  const ctx = (nowMs: number) => ({ id: ACTOR, nowMs });
  const spec: JobSpec = {
    ...SPEC,
    overlap: "allow",
    misfire: { policy: "run_all", starting_deadline_s: null },
  };
  let state = def.receive(
    emptyJobState(),
    { kind: "create", tenant_id: TENANT, job_id: JOB, spec, request_hash: "h" },
    ctx(T0 + 1000),
  ).state;
  // A chunk full but one: the prepared run closes it, so a second entry would land in the next.
  const filler = Array.from({ length: RUN_INDEX_CHUNK - 1 }, (_, i) => `x${i}`);
  state = { ...state, index: { seq: 0, pending: filler } };
  const at60 = runIdFor(JOB, T0 + MIN);
  state = def.receive(state, { kind: "fire" }, ctx(T0 + 45_000)).state; // :60 prepared
  const fires = (from: JobState, times: number[]): { state: JobState; written: string[] } => {
    const written: string[] = [];
    let s = from;
    for (const at of times) {
      const d = def.receive(s, { kind: "fire" }, ctx(at));
      for (const fx of d.pre ?? []) if (fx.kind === "put_run") written.push(fx.record.run_id);
      s = d.state;
    }
    return { state: s, written };
  };
  return { def, ctx, at60, state, fires };
}

const noDuplicates = (ids: string[]) =>
  assert.equal(new Set(ids).size, ids.length, "a run served twice");

describe("runs index: the pure decision", () => {
  const put = (id: string, mode: string) => ({
    kind: "put_run",
    mode,
    record: { run_id: `${JOB}-${id}` },
  });

  it("a new job starts indexed; records created (runs, skipped, missed) are appended, a full chunk becomes a chunk effect", () => {
    const first = indexDecision(undefined, JOB, [], true)!;
    assert.deepEqual(first, { index: { seq: 0, pending: [] }, effects: [] });
    const ids = Array.from({ length: RUN_INDEX_CHUNK + 3 }, (_, i) => `r${i}`);
    const d = indexDecision(
      { seq: 0, pending: [] },
      JOB,
      ids.map((id, i) => put(id, i % 2 ? "create" : "terminal")),
      false,
    )!;
    assert.deepEqual(d.effects, [
      { kind: "write_run_index", seq: 0, ids: ids.slice(0, RUN_INDEX_CHUNK) },
    ]);
    assert.deepEqual(d.index, { seq: 1, pending: ids.slice(RUN_INDEX_CHUNK) });
  });

  it("record updates are not new records, nor are settles until they wrote; a job from before the index stays unindexed", () => {
    assert.equal(indexDecision({ seq: 2, pending: ["a"] }, JOB, [put("b", "update")], false), null);
    assert.equal(
      indexDecision(
        { seq: 2, pending: ["a"] },
        JOB,
        [put("b", "update"), put("c", "settle")],
        false,
      ),
      null,
      "a settle may find nothing: indexed by run_settled once it wrote",
    );
    assert.equal(indexDecision(undefined, JOB, [put("b", "create")], false), null);
  });

  it("the wrapped actor keeps the index in the state its decision writes anyway (no extra write per run)", () => {
    const def = withRunIndex(makeJobActor(CFG));
    const created = def.receive(
      emptyJobState(),
      { kind: "create", tenant_id: TENANT, job_id: JOB, spec: SPEC, request_hash: "h" },
      { id: ACTOR, nowMs: T0 },
    );
    assert.deepEqual(created.state.index, { seq: 0, pending: [] });
    const run = def.receive(created.state, { kind: "run_now" }, { id: ACTOR, nowMs: T0 + 1000 });
    assert.equal(run.state.index!.pending.length, 1);
    assert.equal(
      `${JOB}-${run.state.index!.pending[0]}`,
      run.reply!.run!.run_id,
      "stored without the job id",
    );
    assert.equal((run.pre ?? []).filter(isRunIndexEffect).length, 0, "no KV operation of its own");
    const get = def.receive(run.state, { kind: "get" }, { id: ACTOR, nowMs: T0 + 2000 });
    assert.equal(get.state, run.state, "a decision creating nothing leaves the state alone");
  });
});

describe("runs index: settled orphans", () => {
  it("a settle that wrote is indexed by its run_settled; a settle of an occurrence fired later is listed once", () => {
    const def = withRunIndex(makeJobActor(CFG));
    const created = def.receive(
      emptyJobState(),
      { kind: "create", tenant_id: TENANT, job_id: JOB, spec: SPEC, request_hash: "h" },
      { id: ACTOR, nowMs: T0 },
    );
    // A full chunk pending but one, so the next entry closes the chunk.
    const ids = Array.from({ length: RUN_INDEX_CHUNK - 1 }, (_, i) => `x${i}`);
    const full = { ...created.state, index: { seq: 0, pending: ids } };
    const runId = runIdFor(JOB, T0 + MIN);
    const settled = def.receive(
      full,
      { kind: "run_settled", run_id: runId },
      {
        id: ACTOR,
        nowMs: T0 + 1000,
      },
    );
    assert.deepEqual(settled.state.index, { seq: 1, pending: [] });
    assert.deepEqual(
      (settled.pre ?? []).filter(isRunIndexEffect).map((fx) => fx.ids.at(-1)),
      [runIdSuffix(JOB, runId)],
    );
    // The decision that asks for a settle indexes nothing: had the settle found no orphan, the
    // occurrence's own run (fired after a resume) would stand at a second position.
    const paused = def.receive(
      full,
      { kind: "patch", patch: { enabled: false }, request_id: "p1" },
      { id: ACTOR, nowMs: T0 + 1000 },
    );
    assert.deepEqual(paused.state.index, full.index);
  });
});

describe("runs index: a schedule change over a run prepared ahead", () => {
  it("the cancelled prepared occurrence, called for again by the new schedule, is not fired or indexed again", () => {
    const { def, ctx, at60: ahead, state, fires } = preparedAhead();
    assert.ok(
      state.runs.some((r) => r.run_id === ahead),
      "prepared ahead by the look-ahead",
    );
    assert.deepEqual(state.index, { seq: 1, pending: [] });
    // Every 30 s: the new schedule calls for :60 again, and for nothing between now and it.
    const s = def.receive(
      state,
      { kind: "patch", patch: { schedule: { cron: "*/30 * * * * *", time_zone: "UTC" } } },
      ctx(T0 + 46_000),
    ).state;
    assert.ok(!s.runs.some((r) => r.run_id === ahead), "cancelled: it was prepared, not started");
    const fired = fires(s, [T0 + MIN, T0 + MIN + 30_000]);
    assert.ok(!fired.written.includes(ahead), "its record stays cancelled");
    assert.ok(
      !fired.state.index!.pending.includes(runIdSuffix(JOB, ahead)),
      "indexed once, in chunk 0",
    );
    assert.ok(
      fired.state.runs.some((r) => r.run_id === runIdFor(JOB, T0 + MIN + 30_000)),
      "the next runs",
    );
  });
});

describe("runs index: two schedule changes over runs prepared ahead", () => {
  it("the first change's cancelled occurrence stays handled after a second change cancels one prepared between", () => {
    const { def, ctx, at60, state, fires } = preparedAhead();
    const sched = (cron: string) => ({
      kind: "patch" as const,
      patch: { schedule: { cron, time_zone: "UTC" } },
    });
    let s = def.receive(state, sched("*/50 * * * * *"), ctx(T0 + 46_000)).state; // :60 cancelled
    s = def.receive(s, { kind: "fire" }, ctx(T0 + 46_500)).state; // :50 prepared
    assert.ok(s.runs.some((r) => r.run_id === runIdFor(JOB, T0 + 50_000)));
    s = def.receive(s, sched("*/30 * * * * *"), ctx(T0 + 47_000)).state; // :50 cancelled
    const fired = fires(s, [T0 + 50_000, T0 + MIN, T0 + MIN + 30_000]);
    assert.ok(!fired.written.includes(at60), ":60 stays cancelled");
    assert.ok(!fired.state.index!.pending.includes(runIdSuffix(JOB, at60)), "indexed once");
    assert.deepEqual(fired.state.handled_ahead, undefined, "passed, and forgotten");
  });
});

describe("runs index: a run cancelled by hand, then a schedule change", () => {
  it("the cancelled prepared occurrence, called for again by the new schedule, is not fired or indexed again", () => {
    const { def, ctx, at60, state, fires } = preparedAhead();
    let s = def.receive(
      state,
      { kind: "cancel", run_id: at60, by: "API key k1" },
      ctx(T0 + 46_000),
    ).state;
    assert.ok(!s.runs.some((r) => r.run_id === at60), "cancelled by hand");
    s = def.receive(
      s,
      { kind: "patch", patch: { schedule: { cron: "*/30 * * * * *", time_zone: "UTC" } } },
      ctx(T0 + 47_000),
    ).state;
    const fired = fires(s, [T0 + MIN, T0 + MIN + 30_000]);
    assert.ok(!fired.written.includes(at60), ":60 stays cancelled");
    assert.ok(!fired.state.index!.pending.includes(runIdSuffix(JOB, at60)), "indexed once");
    assert.ok(
      fired.state.runs.some((r) => r.run_id === runIdFor(JOB, T0 + MIN + 30_000)),
      "the next runs",
    );
  });
});

describe("runs index: a runs page reads O(page)", () => {
  /** KV operations of the first three pages of 50, by bucket and operation. */
  async function pageCost(n: number) {
    const h = await harness().build(n);
    const pages: { total: number; records: number; chunks: number; state: number }[] = [];
    let cursor: string | undefined;
    const served: string[] = [];
    for (let i = 0; i < 3; i++) {
      h.runs.reset();
      h.actors.reset();
      const page = await h.service.listRuns(
        TENANT,
        JOB,
        cursor === undefined ? { limit: 50 } : { limit: 50, cursor },
      );
      served.push(...page.items.map((r) => r.run_id));
      cursor = page.next_cursor!;
      assert.equal(
        (h.runs.ops.keys ?? 0) + (h.runs.ops.list ?? 0) + (h.runs.ops.scan ?? 0),
        0,
        "no listing",
      );
      const gets = h.runs.ops.get ?? 0;
      const chunks = gets - 51; // 51 records (a page and one to know there is more), the rest chunks
      pages.push({
        total: h.runs.total() + h.actors.total(),
        records: 51,
        chunks,
        state: h.actors.total(),
      });
    }
    assert.deepEqual(served, h.created.slice(-150).reverse(), "newest first");
    return pages;
  }

  it("a page of 50 costs the same KV operations for 1,000 and for 10,000 records (and for 1,040: the same place in a chunk as 10,000)", async () => {
    const small = await pageCost(1_000);
    const large = await pageCost(10_000);
    const aligned = await pageCost(1_040); // 10,000 and 1,040 both leave 16 ids pending
    assert.deepEqual(large, aligned, "the same offset in a chunk: exactly the same operations");
    for (const p of [...small, ...large]) {
      assert.equal(
        p.state,
        0,
        "no read of the job's state (the job actor answers its index from memory)",
      );
      assert.ok(p.chunks >= 0 && p.chunks <= 2, `${p.chunks} chunk reads`);
      assert.ok(p.total <= 2 + 51, `${p.total} KV operations for a page of 50`);
    }
    // Only where a page crosses a chunk boundary differs (1,000 leaves 40 ids pending, 10,000 16).
    assert.deepEqual(
      small.map((p) => p.total - p.chunks),
      large.map((p) => p.total - p.chunks),
    );
    console.log(
      `KV operations, pages 1-3 of 50: 1,000 records ${small.map((p) => p.total).join(", ")}; 10,000 records ${large.map((p) => p.total).join(", ")}`,
    );
  });

  it("every run exactly once, newest first by creation, also while retention prunes and runs are created between pages", async () => {
    const h = await harness().build(1_000);
    const cfg = retentionConfig({ keepRuns: 300, maxAgeMs: 0, maxDeletesPerPass: 1_000_000 });
    const retention = new RunRetention(cfg, {
      runs: h.runs.kv,
      nowMs: () => T0,
      log: () => undefined,
    });
    const chunksBefore = (await listRunIndex(h.runs.kv, P, TENANT, JOB)).length;
    const order = new Map(h.created.map((id, i) => [id, i]));
    const seen = await h.all(97, async (page) => {
      if (page === 2) {
        await retention.prune(P, ACTOR, new Set());
        await h.send({ kind: "fire" }, T0 + 1_050 * MIN + 30_000); // 50 newer records meanwhile
      }
    });
    noDuplicates(seen);
    const positions = seen.map((id) => order.get(id)!);
    assert.ok(
      positions.every((p, i) => p !== undefined && (i === 0 || p < positions[i - 1]!)),
      "newest first by creation",
    );
    // Everything retention kept is served; the pages before the prune served the newest 194 first.
    const kept = h.created.slice(1_000 - 300, 1_000);
    assert.deepEqual(
      seen.filter((id) => kept.includes(id)),
      [...kept].reverse(),
    );
    assert.equal(seen.length, 300, "pruned runs not yet served are skipped");
    const chunksAfter = (await listRunIndex(h.runs.kv, P, TENANT, JOB)).length;
    assert.ok(
      chunksAfter < chunksBefore && chunksAfter <= Math.ceil(300 / RUN_INDEX_CHUNK) + 1,
      `chunks ${chunksBefore} → ${chunksAfter}`,
    );
    // A fresh listing serves the 50 new ones and the 300 kept, nothing pruned.
    assert.deepEqual(await h.all(64), [...h.created.slice(-50).reverse(), ...[...kept].reverse()]);
  });

  it("a status filter that matches nothing reads a bounded number of records a page and continues by cursor", async () => {
    const h = await harness().build(2_500);
    h.runs.reset();
    const p1 = await h.service.listRuns(TENANT, JOB, { limit: 10, status: "failed" });
    assert.deepEqual(p1.items, []);
    assert.ok(p1.next_cursor, "the bound was hit: a cursor to go on");
    assert.ok(
      (h.runs.ops.get ?? 0) <= MAX_EXAMINED + Math.ceil(MAX_EXAMINED / RUN_INDEX_CHUNK) + 1,
      `${h.runs.ops.get} reads`,
    );
    let cursor: string | null = p1.next_cursor;
    let pages = 1;
    while (cursor) {
      const p: { items: RunView[]; next_cursor: string | null } = await h.service.listRuns(
        TENANT,
        JOB,
        { limit: 10, status: "failed", cursor },
      );
      assert.deepEqual(p.items, []);
      cursor = p.next_cursor;
      pages++;
    }
    assert.equal(pages, Math.ceil(2_500 / MAX_EXAMINED));
    const missed = await h.service.listRuns(TENANT, JOB, { limit: 3, status: "missed" });
    assert.deepEqual(
      missed.items.map((r) => r.run_id),
      h.created.slice(-3).reverse(),
    );
  });

  it("a cursor of another kind is refused", async () => {
    const h = await harness().build(100);
    const legacy = Buffer.from(`2026-01-01T00:00:00Z\n${runIdFor(JOB, T0)}`).toString("base64url");
    await assert.rejects(
      h.service.listRuns(TENANT, JOB, { limit: 5, cursor: legacy }),
      (e: unknown) => isKairosError(e, "invalid_argument"),
    );
  });
});

describe("runs index: crash cases", () => {
  it("a chunk written but not the state: the next decision writes the chunk again with what the state then holds", async () => {
    const h = await harness().build(60);
    // 10 more → a chunk of 64; the state write is lost (crash).
    const lost = await h.send({ kind: "fire" }, T0 + 70 * MIN + 30_000, { dropStateWrite: true });
    assert.equal((lost.pre ?? []).filter(isRunIndexEffect).length, 1);
    assert.equal(h.state.index!.seq, 0, "the state still holds the ids");
    // The re-fire after the crash finds its 10 records (create fails harmlessly) and makes 5 more.
    await h.send({ kind: "fire" }, T0 + 75 * MIN + 30_000);
    assert.equal(h.state.index!.seq, 1);
    const chunk = decode<{ ids: string[] }>(
      (await h.runs.kv.get(runIndexKey(P, TENANT, JOB, 0)))!.value,
    ).ids;
    assert.equal(chunk.length, RUN_INDEX_CHUNK);
    assert.equal(h.created.length, 75);
    const seen = await h.all(20);
    assert.deepEqual(seen, [...h.created].reverse(), "each run once, newest first");
  });

  it("a stale owner cannot overwrite a chunk a later epoch wrote", async () => {
    const runs = new MemoryKv("runs");
    const fx: RunIndexEffect = { kind: "write_run_index", seq: 3, ids: ["a", "b"] };
    const at = (epoch: number) => ({
      address: { type: JOB_ACTOR, id: ACTOR },
      partition: P,
      epoch,
    });
    await writeRunIndexChunk(runs, at(7), fx);
    await writeRunIndexChunk(runs, at(7), fx); // idempotent
    await assert.rejects(writeRunIndexChunk(runs, at(5), { ...fx, ids: ["x"] }), (e: unknown) =>
      isKairosError(e, "not_owner"),
    );
    await writeRunIndexChunk(runs, at(9), { ...fx, ids: ["a", "b", "c"] }); // a later owner replaces an orphan
    assert.deepEqual(
      decode<{ ids: string[] }>((await runs.get(runIndexKey(P, TENANT, JOB, 3)))!.value).ids,
      ["a", "b", "c"],
    );
  });

  it("an owner that loaded an older job state cannot replace a chunk a newer one wrote", async () => {
    const runs = new MemoryKv("runs");
    const fx: RunIndexEffect = { kind: "write_run_index", seq: 3, ids: ["a", "b"] };
    const at = (epoch: number, stateRevision: number) => ({
      address: { type: JOB_ACTOR, id: ACTOR },
      partition: P,
      epoch,
      stateRevision: () => stateRevision,
    });
    const ids = async () =>
      decode<{ ids: string[] }>((await runs.get(runIndexKey(P, TENANT, JOB, 3)))!.value).ids;
    // Written from job state revision 40 (its state write then lost, or not).
    await writeRunIndexChunk(runs, at(7, 40), fx);
    // A later owner that read revision 31 (a deposed stream leader's answer) re-fired older
    // occurrences: replacing the chunk would drop a, b from the list and list its ids twice.
    await assert.rejects(writeRunIndexChunk(runs, at(9, 31), { ...fx, ids: ["x"] }), (e: unknown) =>
      isKairosError(e, "conflict"),
    );
    assert.deepEqual(await ids(), ["a", "b"]);
    // One that read revision 40 (the write after the chunk was lost) replaces the orphan.
    await writeRunIndexChunk(runs, at(9, 40), { ...fx, ids: ["a", "b", "c"] });
    assert.deepEqual(await ids(), ["a", "b", "c"]);
  });

  it("a deleted job's chunks are purged with its records and state", async () => {
    const h = await harness().build(300);
    const retention = new RunRetention(retentionConfig(), {
      runs: h.runs.kv,
      actors: h.actors.kv,
      nowMs: () => T0,
      log: () => undefined,
    });
    assert.ok((await listRunIndex(h.runs.kv, P, TENANT, JOB)).length > 0);
    await retention.purgeJob(P, ACTOR);
    assert.equal((await listRunIndex(h.runs.kv, P, TENANT, JOB)).length, 0);
    assert.equal((await (h.runs.kv as KvStore).keys!(`${P}.${TENANT}.${JOB}.*`)).length, 0);
  });

  it("the state carries the index across an owner move (it is persisted); a job state from before the index lists by keys", async () => {
    const h = await harness().build(130);
    const stored = decode<{ s: JobState }>(
      (await h.actors.kv.get(`${JOB_ACTOR}.${P}.${ACTOR}`))!.value,
    ).s;
    assert.deepEqual(stored.index, {
      seq: 2,
      pending: h.created.slice(128).map((id) => id.slice(JOB.length + 1)),
    });
    const { index: _ix, ...legacy } = stored;
    await h.actors.kv.put(`${JOB_ACTOR}.${P}.${ACTOR}`, encode({ s: legacy }));
    const page = await h.service.listRuns(TENANT, JOB, { limit: 5 });
    assert.deepEqual(
      page.items.map((r) => r.run_id),
      h.created.slice(-5).reverse(),
    );
  });
});
