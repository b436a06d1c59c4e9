/**
 * A run record write of unknown outcome, through the real actor host (src/actors) and the job
 * shell's record writes and reconcile (record-writes.ts) on the in-memory KV: the `pre` write of a
 * decision times out after it landed. The turn fails; the actor must not go on from the memory it
 * had before that turn (it re-decides a retried timer against it, unaware of the record): it is
 * dropped and read back, reconciled with the records. Slots and offers are answered by the test
 * (`performPost`), as the driver does (driver.ts).
 *
 * The case (simulation seed 2000356): an `overlap: skip` job's next run, prepared ahead under a
 * gate, is skipped at its due instant because the run before it is still active; its `skipped`
 * record lands, the write times out. Kept in memory, the run was still active there: the earlier
 * run ended, nothing blocked it any more, and its worker was told to start it.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ActorHost } from "../../../src/actors/host.ts";
import { decode } from "../../../src/cluster/codec.ts";
import { EventBus } from "../../../src/cluster/events.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import type { WriteOptions, WriteResult } from "../../../src/cluster/kv.ts";
import { RunMetrics } from "../../../src/history/run-metrics.ts";
import { RunRecordStore } from "../../../src/history/run-record-store.ts";
import type { JobEffect, JobMsg } from "../../../src/job-state/job-types.ts";
import { makeJobActor } from "../../../src/jobs/job-actor.ts";
import { makeRecordWrites } from "../../../src/jobs/record-writes.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { KairosError, isKairosError } from "../../../src/lib/errors.ts";
import { JOB_ACTOR, runIdFor, runKey } from "../../../src/protocol/ids.ts";
import type { RunView } from "../../../src/protocol/model.ts";
import type { HeartbeatAck } from "../../../src/protocol/worker.ts";
import { ACTOR_ID, JOB, T0, TENANT, WORKER, cfg, spec } from "./driver.ts";

const T = { timeout: 10_000 };
const EPOCH = 7;
const sec = (s: number) => Date.UTC(2026, 0, 1, 0, 0, s);
const RUN_A = runIdFor(JOB, sec(2));
const RUN_B = runIdFor(JOB, sec(4));

/** The runs bucket, whose next update of `timeoutKey` lands and then times out. */
class RunsKv extends MemoryKv {
  timeoutKey: string | undefined;
  override async update(
    key: string,
    value: Uint8Array,
    rev: number,
    opts?: WriteOptions,
  ): Promise<WriteResult> {
    if (key !== this.timeoutKey) return super.update(key, value, rev, opts);
    this.timeoutKey = undefined;
    await super.update(key, value, rev, opts);
    throw new KairosError("timeout", `kv runs: update ${key} timed out`);
  }
}

type Dispatch = Extract<JobEffect, { kind: "dispatch" }>;

function setup() {
  const clock = new FakeClock(T0);
  const runs = new RunsKv("runs");
  const errors: string[] = [];
  let onError: (() => void) | undefined;
  const offers: Dispatch[] = [];
  /** Cancels told to workers and slots given back, in order. */
  const told: string[] = [];
  let onOffer: ((fx: Dispatch) => void) | undefined;
  const host = new ActorHost({
    nodeId: "n1",
    clock,
    events: new EventBus(),
    kv: new MemoryKv("actors"),
    partitions: 1,
    isTrusted: () => true,
    epochOf: () => EPOCH,
    send: async () => undefined,
    mailboxLimit: 64,
    idleMs: 600_000,
    onError: (m, e) => {
      errors.push(`${m}: ${String(e)}`);
      onError?.();
    },
  });
  const records = new RunRecordStore(runs, new RunMetrics());
  const jobCfg = cfg({ lookaheadMs: 2_000 });
  host.register({
    // A job prepared 2 s ahead (`skip`: under a gate), as the simulation's short profile does.
    definition: makeJobActor(jobCfg),
    ...makeRecordWrites(
      runs,
      records,
      false,
      () => undefined,
      (startAtMs) => Math.max(clock.now(), startAtMs) + jobCfg.leaseTtlMs + jobCfg.drainGraceMs,
    ),
    // The tenant grants every slot at once; offers wait for the test's `claimed`.
    performPost(effects, ctx) {
      for (const fx of effects as JobEffect[]) {
        if (fx.kind === "acquire_slot") ctx.tell({ kind: "slot_granted", run_id: fx.grant });
        if (fx.kind === "cancel_on_worker") told.push(`cancel ${fx.run_id} ${fx.fence}`);
        if (fx.kind === "release_slot") told.push(`release ${fx.grant}`);
        if (fx.kind === "dispatch") {
          offers.push(fx);
          onOffer?.(fx);
        }
      }
    },
  });
  const send = (msg: JobMsg) => host.deliver(JOB_ACTOR, ACTOR_ID, msg);
  /** Resolves with the first offer of `runId`, made already or to come. */
  const offerOf = (runId: string) =>
    new Promise<Dispatch>((r) => {
      const made = offers.find((fx) => fx.run_id === runId);
      if (made) r(made);
      else
        onOffer = (fx) => {
          if (fx.run_id === runId) r(fx);
        };
    });
  /** Resolves at the next error the host reports (arm before acting). */
  const nextError = () => new Promise<void>((r) => (onError = r));
  const record = async (runId: string): Promise<RunView | undefined> => {
    const e = await runs.get(runKey(0, TENANT, JOB, runId));
    return e ? decode<RunView>(e.value) : undefined;
  };
  const heartbeat = (runId: string, fence: number, startedAtMs?: number) =>
    send({
      kind: "heartbeat",
      run_id: runId,
      fence,
      worker: WORKER,
      ...(startedAtMs === undefined ? {} : { started_at_ms: startedAtMs }),
    }) as Promise<HeartbeatAck>;
  return {
    clock,
    runs,
    errors,
    offers,
    told,
    jobCfg,
    host,
    send,
    offerOf,
    nextError,
    record,
    heartbeat,
  };
}

/** Offered, then claimed by the worker: the claim is written (the state lists the run). */
async function claimNext(t: ReturnType<typeof setup>, runId: string, atMs: number) {
  const offered = t.offerOf(runId);
  t.clock.advance(atMs - t.clock.now());
  const fx = await offered;
  await t.send({ kind: "claimed", run_id: runId, fence: fx.fence, worker: WORKER });
  return fx.fence;
}

describe("job actor on the host: a run record write of unknown outcome", () => {
  it(
    "a gated run whose `skipped` record landed unseen is never let start: the actor is read back and drops it",
    T,
    async () => {
      const t = setup();
      await t.host.acquire(0);
      await t.send({
        kind: "create",
        tenant_id: TENANT,
        job_id: JOB,
        spec: spec({ schedule: { cron: "*/2 * * * * *", time_zone: "UTC" }, overlap: "skip" }),
        request_hash: "h1",
      });
      // :02 prepared ahead, claimed, started at its due time (it runs on).
      const fenceA = await claimNext(t, RUN_A, sec(1) + 900);
      t.clock.advance(sec(2) - t.clock.now());
      assert.deepEqual(await t.heartbeat(RUN_A, fenceA, sec(2)), { ok: true });
      // :04 prepared ahead while :02 runs: its worker is told to hold it.
      const fenceB = await claimNext(t, RUN_B, sec(3) + 500);
      assert.deepEqual(await t.heartbeat(RUN_B, fenceB), { ok: true, hold: true });

      // Its due instant, :02 still running: skipped. The record's write lands, then times out.
      t.runs.timeoutKey = runKey(0, TENANT, JOB, RUN_B);
      const failed = t.nextError();
      t.clock.advance(sec(4) - t.clock.now());
      await failed;
      assert.match(t.errors[0] ?? "", /timer for job\/.* timed out/);
      assert.equal((await t.record(RUN_B))?.status, "skipped", "the skipped record landed");

      // :02 ends before the gate's retry: nothing blocks :04 any more.
      await t.send({
        kind: "complete",
        run_id: RUN_A,
        fence: fenceA,
        worker: WORKER,
        outcome: "exited",
        exit_code: 0,
        output: "ok",
        error: null,
        started_at_ms: sec(2),
        finished_at_ms: t.clock.now(),
      });
      assert.equal((await t.record(RUN_A))?.status, "succeeded");
      // The worker holding :04 asks again: it must not hear "go" (it would start a skipped run).
      await assert.rejects(t.heartbeat(RUN_B, fenceB), (e) => isKairosError(e, "lease_lost"));
      // Nor after the gate's retry; nor is :04 offered again, or active.
      t.clock.advance(1_000);
      await assert.rejects(t.heartbeat(RUN_B, fenceB), (e) => isKairosError(e, "lease_lost"));
      const active = (await t.send({ kind: "active_runs" })) as { runs: { run_id: string }[] };
      assert.ok(!active.runs.some((r) => r.run_id === RUN_B), "the skipped run is not active");
      assert.equal(t.offers.filter((o) => o.run_id === RUN_B).length, 1, "offered once");
      assert.equal((await t.record(RUN_B))?.status, "skipped", "the record stands");
      // Its worker, which may hold it with a cover, is told to drop it — once — and its slot
      // stays held until the lease's end (plus the kill grace) has passed.
      assert.deepEqual(
        t.told.filter((x) => x.includes(RUN_B)),
        [`cancel ${RUN_B} ${fenceB}`],
        "the worker is told, the slot still held",
      );
      t.clock.advance(t.jobCfg.leaseTtlMs + t.jobCfg.drainGraceMs + 1_000);
      // A `get` waits behind the drain timer's turn (an `active_runs` read is answered during it).
      await t.send({ kind: "get" });
      const after = t.told.filter((x) => x.includes(RUN_B));
      assert.equal(after.length, 2, "the slot goes back at the drain bound, once");
      assert.match(after[1]!, new RegExp(`^release ${RUN_B}_\\d+$`));
    },
  );
});
