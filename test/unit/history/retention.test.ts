/**
 * Bounded history: which run records retention keeps (pure), the shell keeping
 * the configured number while records keep coming (RunRetention over the in-memory KV, which
 * passes the KV conformance suite for `keys` and `purge`), a deleted job purged, the wrapped job
 * actor's timers and effects, and runs/jobs pages read from keys (NatsJobsService).
 */
import { memoryBuckets } from "../../support/memory-buckets.ts";
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { encode } from "../../../src/cluster/codec.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import type { ActorRouter } from "../../../src/cluster/router.ts";
import { partitionOf } from "../../../src/cluster/placement.ts";
import { JOB_ACTOR, jobActorId, runIdFor, runKey } from "../../../src/protocol/ids.ts";
import { makeJobActor } from "../../../src/jobs/job-actor.ts";
import { DEFAULT_JOB_CONFIG, type JobMsg } from "../../../src/job-state/job-types.ts";
import { emptyJobState, type JobState } from "../../../src/job-state/job-state.ts";
import type { JobSpec, RunStatus, RunView } from "../../../src/protocol/model.ts";
import { NatsJobsService } from "../../../src/service/nats-service.ts";
import {
  DEFAULT_RETENTION,
  retentionConfig,
  runsToPrune,
  type RetentionMsg,
} from "../../../src/history/retention.ts";
import { withRetention } from "../../../src/jobs/with-history.ts";
import { encodeRunRecord } from "../../../src/history/run-record.ts";
import { RunRetention, firstCount } from "../../../src/history/run-retention.ts";
import { formatUtc } from "../../../src/schedule/index.ts";
import { isKairosError } from "../../../src/lib/errors.ts";
import { seededRandom } from "../../../src/lib/random.ts";

const TENANT = "t1";
const JOB = "j0123456789abcdef";
const ACTOR = jobActorId(TENANT, JOB);
const P = 5;
const T0 = Date.UTC(2026, 0, 1);
const DAY = 86_400_000;

function record(runId: string, ms: number, status: RunStatus = "succeeded"): RunView {
  return {
    run_id: runId,
    job_id: JOB,
    tenant_id: TENANT,
    scheduled_for: formatUtc(ms),
    trigger: "schedule",
    status,
    attempt: 1,
    attempts: [],
    created_at: new Date(ms).toISOString(),
    started_at: null,
    finished_at: null,
    next_attempt_at: null,
    result: null,
    reason: null,
  };
}

/** Writes run `i` (occurrence T0 + i minutes) of the job; returns its run id. */
async function writeRun(
  runs: MemoryKv,
  i: number,
  partition = P,
  status: RunStatus = "succeeded",
): Promise<string> {
  const ms = T0 + i * 60_000;
  const id = runIdFor(JOB, ms);
  await runs.put(runKey(partition, TENANT, JOB, id), encodeRunRecord(record(id, ms, status), 1));
  return id;
}

const SPEC: JobSpec = {
  name: null,
  schedule: { cron: "0 0 1 1 *", time_zone: "UTC" },
  task: { image: "busybox", args: ["true"], env: {}, timeout_s: 60 },
  retry: { max_attempts: 1, backoff: "exponential", base_s: 1, max_s: 60 },
  overlap: "skip",
  misfire: { policy: "run_once", starting_deadline_s: null },
  flex_window_s: 0,
  enabled: true,
};

const jobKeys = async (runs: MemoryKv, partition = P) =>
  (await runs.keys(`${partition}.${TENANT}.${JOB}.*`)).map((k) => k.key).sort();

describe("retention: which records a job keeps", () => {
  const keys = Array.from({ length: 30 }, (_, i) =>
    runKey(P, TENANT, JOB, runIdFor(JOB, T0 + i * 60_000)),
  );

  it("keeps the newest keepRuns terminal runs; active runs are neither pruned nor counted", () => {
    const cfg = retentionConfig({ keepRuns: 10, maxAgeMs: 0 });
    const active = new Set([runIdFor(JOB, T0), runIdFor(JOB, T0 + 60_000)]); // the two oldest
    const doomed = runsToPrune(keys, active, cfg, T0 + DAY);
    assert.deepEqual(doomed, keys.slice(2, 20)); // oldest first
  });

  it("drops runs older than maxAgeMs whatever their number", () => {
    const cfg = retentionConfig({ keepRuns: 0, maxAgeMs: 10 * 60_000 });
    const doomed = runsToPrune(keys, new Set(), cfg, T0 + 29 * 60_000);
    assert.deepEqual(doomed, keys.slice(0, 19)); // occurrences before minute 19
  });

  it("orders manual runs of the same second by their run id and skips keys that are not run ids", () => {
    const cfg = retentionConfig({ keepRuns: 1, maxAgeMs: 0 });
    const a = runKey(P, TENANT, JOB, runIdFor(JOB, T0 + 100, 1));
    const b = runKey(P, TENANT, JOB, runIdFor(JOB, T0 + 900, 2));
    assert.deepEqual(runsToPrune([b, a, `${P}.${TENANT}.${JOB}.garbage`], new Set(), cfg, T0), [a]);
  });

  it("keeps a recent run whose base-36 time ends in m and digits (ledger chaos: such records were deleted as 1970's)", () => {
    const at = Date.parse("2026-12-02T23:08:42Z"); // `mx6qm100`
    const ks = [at - 3000, at, at + 3000].map((ms) => runKey(P, TENANT, JOB, runIdFor(JOB, ms)));
    assert.deepEqual(runsToPrune(ks, new Set(), DEFAULT_RETENTION, at + 60_000), []);
    // Every time of one day, every second: none is mistaken for an old one.
    const day = Array.from({ length: 86_400 }, (_, i) =>
      runKey(P, TENANT, JOB, runIdFor(JOB, at + i * 1000)),
    );
    assert.deepEqual(runsToPrune(day, new Set(), retentionConfig({ keepRuns: 0 }), at + DAY), []);
  });

  it("config: defaults are 1,000 runs and 30 days; out-of-range values are refused with their field", () => {
    assert.equal(DEFAULT_RETENTION.keepRuns, 1_000);
    assert.equal(DEFAULT_RETENTION.maxAgeMs, 30 * DAY);
    assert.ok(Object.isFrozen(retentionConfig()));
    for (const bad of [
      { keepRuns: -1 },
      { keepRuns: 1.5 },
      { maxAgeMs: Number.NaN },
      { pruneEveryRuns: 0 },
      { maxDeletesPerPass: 0 },
    ]) {
      assert.throws(
        () => retentionConfig(bad),
        (e: unknown) => isKairosError(e, "invalid_argument"),
        JSON.stringify(bad),
      );
    }
  });
});

describe("retention: the shell keeps the configured number", () => {
  it("a job's records never exceed keepRuns + 2 × pruneEveryRuns, and a prune leaves exactly keepRuns (the newest)", async () => {
    const runs = new MemoryKv("runs");
    const cfg = retentionConfig({ keepRuns: 50, pruneEveryRuns: 10, maxAgeMs: 0 });
    const r = new RunRetention(cfg, { runs, nowMs: () => T0, log: () => undefined });
    let pruned = 0;
    for (let i = 0; i < 300; i++) {
      await writeRun(runs, i);
      const before = (await jobKeys(runs)).length;
      await r.perform(P, ACTOR, { kind: "prune_runs", settled: 1, active: [], force: false });
      const after = (await jobKeys(runs)).length;
      // The first pass on this node comes after 1..pruneEveryRuns runs (firstCount), then every pruneEveryRuns.
      assert.ok(after <= cfg.keepRuns + 2 * cfg.pruneEveryRuns, `run ${i}: ${after} records`);
      if (after < before) {
        pruned++;
        assert.equal(after, cfg.keepRuns, `run ${i}: a prune leaves keepRuns`);
      }
    }
    assert.ok(pruned >= 25, `pruned ${pruned} times`);
    const kept = await jobKeys(runs);
    const newest = Array.from({ length: 300 }, (_, i) =>
      runKey(P, TENANT, JOB, runIdFor(JOB, T0 + i * 60_000)),
    )
      .slice(-kept.length)
      .sort();
    assert.deepEqual(kept, newest);
    // A job new to a node starts at a count spread by its id (firstCount): its first pass comes
    // after exactly pruneEveryRuns − firstCount terminal runs, not at once.
    const fresh = new RunRetention(cfg, { runs, nowMs: () => T0, log: () => undefined });
    const wait = cfg.pruneEveryRuns - firstCount(ACTOR, cfg.pruneEveryRuns);
    const start = (await jobKeys(runs)).length;
    for (let i = 0; i < wait; i++) {
      assert.equal((await jobKeys(runs)).length, start + i, `no pass before run ${wait}`);
      await writeRun(runs, 300 + i);
      await fresh.perform(P, ACTOR, { kind: "prune_runs", settled: 1, active: [], force: false });
    }
    assert.equal((await jobKeys(runs)).length, cfg.keepRuns);
  });

  it("jobs new to a node list their keys at their first terminal run only one time in pruneEveryRuns (a burst of once-jobs)", () => {
    const n = 10_000;
    let first = 0;
    for (let i = 0; i < n; i++) if (firstCount(`t1.j${i}`, 100) === 99) first++;
    assert.ok(
      first > 50 && first < 150,
      `${first} of ${n} would list at their first run (expected about 100)`,
    );
  });

  it("records written after the oldest kept one are deleted one by one, maxDeletesPerPass a pass; the next terminal run continues; active runs stay", async () => {
    const runs = new MemoryKv("runs");
    const cfg = retentionConfig({
      keepRuns: 10,
      pruneEveryRuns: 100,
      maxDeletesPerPass: 40,
      maxAgeMs: 0,
    });
    const r = new RunRetention(cfg, { runs, nowMs: () => T0, log: () => undefined });
    const oldest = await writeRun(runs, 0, P, "running");
    // Forced passes (as the daily sweep asks): this test is about what one pass deletes.
    for (let i = 1; i < 100; i++) await writeRun(runs, i);
    await r.perform(P, ACTOR, { kind: "prune_runs", settled: 1, active: [oldest], force: true });
    assert.equal((await jobKeys(runs)).length, 100 - 40);
    await r.perform(P, ACTOR, { kind: "prune_runs", settled: 1, active: [oldest], force: false });
    await r.perform(P, ACTOR, { kind: "prune_runs", settled: 1, active: [oldest], force: false });
    const left = await jobKeys(runs);
    assert.equal(left.length, 11);
    assert.ok(left.includes(runKey(P, TENANT, JOB, oldest)), "the active run's record stays");
  });

  it("purge_job removes a deleted job's records and its actor state, and nothing of other jobs", async () => {
    const runs = new MemoryKv("runs");
    const actors = new MemoryKv("actors");
    for (let i = 0; i < 5; i++) await writeRun(runs, i);
    await runs.put(runKey(P, TENANT, "jzzzzzzzzzzzzzzzz", "jzzzzzzzzzzzzzzzz-1"), encode({}));
    await actors.put(
      `${JOB_ACTOR}.${P}.${ACTOR}`,
      encode({ s: { ...emptyJobState(), deleted: true } }),
    );
    await actors.put(
      `${JOB_ACTOR}.${P}.${TENANT}.jzzzzzzzzzzzzzzzz`,
      encode({ s: emptyJobState() }),
    );
    const r = new RunRetention(DEFAULT_RETENTION, {
      runs,
      actors,
      nowMs: () => T0,
      log: () => undefined,
    });
    await r.perform(P, ACTOR, { kind: "purge_job" });
    assert.deepEqual(await jobKeys(runs), []);
    assert.equal((await runs.keys(">")).length, 1);
    assert.deepEqual(
      (await actors.keys(">")).map((k) => k.key),
      [`${JOB_ACTOR}.${P}.${TENANT}.jzzzzzzzzzzzzzzzz`],
    );
  });
});

describe("retention: the wrapped job actor", () => {
  const cfg = retentionConfig({ purgeDeletedAfterMs: 60_000 });
  const actor = withRetention(makeJobActor(DEFAULT_JOB_CONFIG), cfg);
  const spec = SPEC;
  const ctx = (nowMs: number) => ({ id: ACTOR, nowMs });
  const send = (s: JobState, msg: JobMsg | RetentionMsg, nowMs: number) =>
    actor.receive(s, msg, ctx(nowMs));
  const timers = (effects: readonly { kind: string; name?: string; atMs?: number }[] | undefined) =>
    (effects ?? []).filter((e) => e.kind === "timer" && e.name?.startsWith("retention:"));

  it("arms a daily sweep on create; a delete arms the purge, not before the idempotency window of the create", () => {
    const created = send(
      emptyJobState(),
      { kind: "create", tenant_id: TENANT, job_id: JOB, spec, request_hash: "h" },
      T0,
    );
    const sweep = timers(created.effects);
    assert.equal(sweep.length, 1);
    assert.equal(sweep[0]!.name, "retention:sweep");
    assert.ok(sweep[0]!.atMs! > T0 && sweep[0]!.atMs! <= T0 + DAY);
    const deleted = send(created.state, { kind: "delete" }, T0 + 1000);
    const purge = timers(deleted.effects);
    assert.deepEqual(
      purge.map((t) => t.name),
      ["retention:purge"],
    );
    assert.ok(
      purge[0]!.atMs! >= T0 + DAY,
      "not within 24 h of the create (an Idempotency-Key replay would make it again)",
    );
    const late = send(created.state, { kind: "delete" }, T0 + 3 * DAY);
    assert.equal(timers(late.effects)[0]!.atMs, T0 + 3 * DAY + 60_000);
    // The timer: a deleted job asks its shell to purge it; a live job ignores it.
    assert.deepEqual(send(deleted.state, { kind: "purge_deleted" }, T0 + 2 * DAY).post, [
      { kind: "purge_job" },
    ]);
    assert.equal(send(created.state, { kind: "purge_deleted" }, T0 + 2 * DAY).post, undefined);
    // Activation of a deleted job (a partition acquired) re-arms the purge.
    assert.deepEqual(
      timers(actor.onActivate(deleted.state, ctx(T0 + 5 * DAY))).map((t) => t.name),
      ["retention:purge"],
    );
  });

  it("counts the terminal records a decision writes and hands them to the shell with the active runs", () => {
    const created = send(
      emptyJobState(),
      { kind: "create", tenant_id: TENANT, job_id: JOB, spec, request_hash: "h" },
      T0,
    );
    const manual = send(created.state, { kind: "run_now" }, T0 + 1000);
    assert.equal(manual.state.runs.length, 1);
    assert.equal(
      manual.post?.some((fx) => fx.kind === "prune_runs"),
      false,
      "no terminal record yet",
    );
    const deleted = send(manual.state, { kind: "delete" }, T0 + 2000); // cancels the active run
    assert.deepEqual(
      deleted.post?.filter((fx) => fx.kind === "prune_runs"),
      [{ kind: "prune_runs", settled: 1, active: [], force: false }],
    );
  });

  it("the sweep asks for a forced prune with the active run ids and re-arms itself", () => {
    const created = send(
      emptyJobState(),
      { kind: "create", tenant_id: TENANT, job_id: JOB, spec, request_hash: "h" },
      T0,
    );
    const d = send(created.state, { kind: "retention_sweep" }, T0 + DAY);
    assert.deepEqual(d.post, [{ kind: "prune_runs", settled: 0, active: [], force: true }]);
    assert.equal(timers(d.effects).length, 1);
    assert.equal(d.state, created.state, "no state write");
  });
});

describe("NatsJobsService pages from keys", () => {
  function setup() {
    const buckets = memoryBuckets();
    const router = {
      now: () => T0,
      request: async () => ({ job: { job_id: JOB, tenant_id: TENANT, ...SPEC } }),
    } as unknown as ActorRouter;
    const service = new NatsJobsService(router, buckets, 8, seededRandom(1));
    const p = partitionOf({ type: JOB_ACTOR, id: ACTOR }, 8);
    return { buckets, service, p, runs: buckets.runs as MemoryKv };
  }

  it("runs of a job created before the runs index: newest first, cursor pages, status filter, reading only the page's values", async () => {
    const h = setup();
    // A state without `index` (run-index.ts): the key listing, bounded by retention.
    const legacy: JobState = {
      ...emptyJobState(),
      job: {
        tenant_id: TENANT,
        job_id: JOB,
        spec: SPEC,
        version: 1,
        created_at_ms: T0,
        updated_at_ms: T0,
        request_hash: "h",
      },
    };
    await h.buckets.actors.put(`${JOB_ACTOR}.${h.p}.${ACTOR}`, encode({ s: legacy }));
    for (let i = 0; i < 25; i++)
      await writeRun(h.runs, i, h.p, i % 5 === 0 ? "failed" : "succeeded");
    let gets = 0;
    const get = h.runs.get.bind(h.runs);
    h.runs.get = async (k) => (gets++, get(k));
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      gets = 0;
      const page = await h.service.listRuns(
        TENANT,
        JOB,
        cursor === undefined ? { limit: 10 } : { limit: 10, cursor },
      );
      assert.ok(gets <= 11, `${gets} values read for a page of 10`);
      seen.push(...page.items.map((r) => r.run_id));
      cursor = page.next_cursor ?? undefined;
    } while (cursor !== undefined);
    assert.deepEqual(
      seen,
      Array.from({ length: 25 }, (_, i) => runIdFor(JOB, T0 + (24 - i) * 60_000)),
    );
    const failed = await h.service.listRuns(TENANT, JOB, { limit: 3, status: "failed" });
    assert.deepEqual(
      failed.items.map((r) => r.run_id),
      [20, 15, 10].map((i) => runIdFor(JOB, T0 + i * 60_000)),
    );
    const rest = await h.service.listRuns(TENANT, JOB, {
      limit: 3,
      status: "failed",
      cursor: failed.next_cursor!,
    });
    assert.deepEqual(
      rest.items.map((r) => r.run_id),
      [5, 0].map((i) => runIdFor(JOB, T0 + i * 60_000)),
    );
    assert.equal(rest.next_cursor, null);
  });

  it("jobs: by job id, deleted ones skipped", async () => {
    const h = setup();
    const ids = [
      "j000000000000000a",
      "j000000000000000b",
      "j000000000000000c",
      "j000000000000000d",
    ];
    for (const [i, id] of ids.entries()) {
      const s: JobState = {
        ...emptyJobState(),
        deleted: i === 1,
        job: {
          tenant_id: TENANT,
          job_id: id,
          spec: SPEC,
          version: 1,
          created_at_ms: T0,
          updated_at_ms: T0,
          request_hash: "h",
        },
      };
      const p = partitionOf({ type: JOB_ACTOR, id: jobActorId(TENANT, id) }, 8);
      await h.buckets.actors.put(`${JOB_ACTOR}.${p}.${TENANT}.${id}`, encode({ s }));
    }
    await h.buckets.actors.put(
      `${JOB_ACTOR}.0.other.j000000000000000e`,
      encode({ s: emptyJobState() }),
    );
    const p1 = await h.service.listJobs(TENANT, { limit: 2 });
    assert.deepEqual(
      p1.items.map((j) => j.job_id),
      [ids[0], ids[2]],
    );
    const p2 = await h.service.listJobs(TENANT, { limit: 2, cursor: p1.next_cursor! });
    assert.deepEqual(
      p2.items.map((j) => j.job_id),
      [ids[3]],
    );
    assert.equal(p2.next_cursor, null);
  });
});
