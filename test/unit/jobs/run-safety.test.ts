/**
 * Run-path guarantees of the job actor's pure core (src/jobs/job-actor.ts), one `describe` per
 * failure mode, each at the depth of the fault: a message or an activation of the core on the
 * simulated shell of driver.ts, asserting the decision.
 * - one fence, one worker — a heartbeat, completion or `claimed` from a worker other than the
 *      claimant changes nothing;
 * - a takeover with an offer out waits the offer timeout before offering again (an offer
 *      lost with its state is made again at once, under a fence never handed out);
 * - a record left `queued` by a crash is settled (missed, cancelled or skipped);
 * - unknown outcomes — retried run-now and patch answer their first result; a re-queued run
 *      has fence 0, so an old worker's heartbeat gets lease_lost;
 * - a busy scheduler is not a dead worker — a recent arrival keeps the lease, and the job
 *      actor declares the arrival key the host records heartbeats under.
 * Most fail against a core without the mechanism they name; the rest guard behaviour that holds
 * without it too.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { grantId, runIdFor } from "../../../src/protocol/ids.ts";
import { completionKey, heartbeatKey, makeJobActor } from "../../../src/jobs/job-actor.ts";
import { type JobEffect } from "../../../src/job-state/job-types.ts";
import { Driver, JOB, cfg, spec } from "./driver.ts";

const sec = (s: number) => Date.UTC(2026, 0, 1, 0, 0, s);
const RUN = runIdFor(JOB, sec(2));
const hourly = { cron: "0 * * * *", time_zone: "UTC" };
const retries = (max_attempts: number) => ({
  retry: { max_attempts, backoff: "fixed" as const, base_s: 1, max_s: 1 },
});
type PutRun = Extract<JobEffect, { kind: "put_run" }>;

/** A job whose :02 run is leased to w1 (claimed at :02.0); nothing else fires for an hour. */
function leased(maxAttempts = 2): Driver {
  const d = new Driver(cfg());
  d.create(spec(retries(maxAttempts)));
  d.advance(1_500);
  d.send({ kind: "patch", patch: { schedule: hourly } });
  assert.equal(d.run(RUN)?.status, "leased");
  assert.equal(d.run(RUN)?.worker, "w1");
  return d;
}

const completion = { outcome: "exited" as const, exit_code: 0, output: "ok", error: null };

/** The pre effects (run-record writes) of the last decision on a message of this kind. */
function putRunsOf(d: Driver, kind: string): PutRun[] {
  const dec = [...d.decisions].reverse().find((x) => x.msg.kind === kind);
  return (dec?.d.pre ?? []).filter((p): p is PutRun => p.kind === "put_run");
}

describe("one fence, several workers", () => {
  it("a heartbeat with the current fence from a worker other than the claimant gets lease_lost and changes nothing", () => {
    const d = leased();
    const r = d.run(RUN)!;
    const lease = d.timers.get(`lease:${RUN}`)?.atMs;
    d.advance(3_000);
    const hb = d.send({
      kind: "heartbeat",
      run_id: RUN,
      fence: r.fence,
      worker: "w2",
      started_at_ms: d.now,
    });
    assert.equal(hb.fail?.code, "lease_lost");
    assert.equal(d.run(RUN)?.worker, "w1");
    assert.equal(
      d.run(RUN)?.status,
      "leased",
      "the intruder's started_at does not mark the run running",
    );
    assert.equal(
      d.timers.get(`lease:${RUN}`)?.atMs,
      lease,
      "the intruder does not extend the lease",
    );
    assert.deepEqual(d.heartbeat(RUN, r.fence).reply, { ok: true }, "the claimant still holds it");
  });

  it("a completion with the current fence from a worker other than the claimant gets stale_fence; the claimant's counts", () => {
    const d = leased();
    const f = d.run(RUN)!.fence;
    const c = d.send({
      kind: "complete",
      run_id: RUN,
      fence: f,
      worker: "w2",
      ...completion,
      output: "w2",
      started_at_ms: d.now,
      finished_at_ms: d.now,
    });
    assert.equal(c.fail?.code, "stale_fence");
    assert.equal(d.run(RUN)?.status, "leased");
    assert.equal(d.records.get(RUN)?.status, "leased", "no terminal record from the wrong worker");
    assert.deepEqual(d.complete(RUN, { output: "w1" }, f).reply, { ok: true });
    assert.equal(d.records.get(RUN)?.status, "succeeded");
    assert.equal(d.records.get(RUN)?.result?.output, "w1");
  });

  it("a `claimed` with the current fence from a worker other than the claimant is cancelled on that worker", () => {
    const d = leased();
    const f = d.run(RUN)!.fence;
    d.send({ kind: "claimed", run_id: RUN, fence: f, worker: "w2" });
    assert.deepEqual(d.postsOf("cancel_on_worker"), [
      { kind: "cancel_on_worker", worker: "w2", run_id: RUN, fence: f },
    ]);
    assert.equal(d.run(RUN)?.worker, "w1");
    assert.equal(d.run(RUN)?.attempt, 1, "no second attempt recorded");
  });
});

describe("a takeover re-dispatches at once", () => {
  it("onActivate of a queued run holding an outstanding offer (fence > 0) arms its redispatch only after offerTimeoutMs", () => {
    const d = new Driver(cfg({ offerTimeoutMs: 2_000 }), { autoClaim: false });
    d.create(spec());
    d.advance(1_500); // :02 offered, not yet accepted
    d.flush(); // the offer's deferred state was written (a later write carried it along)
    const r = d.run(RUN)!;
    assert.equal(r.status, "queued");
    assert.ok(r.fence > 0);
    d.skipTime(300); // the old owner dies; a new one activates the job
    const fx = d.activate();
    const redispatch = fx.find((e) => e.kind === "timer" && e.name === `dispatch:${RUN}`);
    assert.ok(redispatch && redispatch.kind === "timer");
    assert.equal(redispatch.atMs, d.now + 2_000);
    const dispatched = d.dispatches.length;
    d.advance(1_999);
    assert.equal(d.dispatches.length, dispatched, "no new offer within the offer timeout");
    d.advance(1);
    assert.equal(d.dispatches.length, dispatched + 1, "offered again once the old offer is dead");
    assert.ok(d.run(RUN)!.fence > r.fence, "under a new fence");
  });

  it("after a takeover the old offer's worker claims it by heartbeat within offerTimeoutMs: no second offer", () => {
    const d = new Driver(cfg({ offerTimeoutMs: 2_000 }), { autoClaim: false });
    d.create(spec());
    d.advance(1_500);
    const offer = d.pendingClaims[0]!;
    d.flush(); // the offer's deferred state was written
    d.activate();
    d.advance(0);
    d.advance(1_000);
    assert.deepEqual(
      d.heartbeat(RUN, offer.fence).reply,
      { ok: true },
      "the accepted offer is still valid",
    );
    assert.equal(d.run(RUN)?.status, "leased");
    d.advance(5_000);
    assert.equal(d.dispatches.length, 1, "offered once only");
    assert.equal(d.run(RUN)?.fence, offer.fence);
  });

  it("a takeover that lost a deferred offer offers again at once, under a fence never handed out; the old offer's worker gets lease_lost and never starts", () => {
    const d = new Driver(cfg({ offerTimeoutMs: 2_000 }), { autoClaim: false });
    d.create(spec());
    d.advance(1_500); // :02 offered (deferred: not written), not yet accepted
    const offer = d.pendingClaims[0]!;
    assert.equal(
      d.stored.runs.find((x) => x.run_id === RUN)?.fence ?? 0,
      0,
      "the offer was not written",
    );
    d.activate(); // the old owner died: its offer is gone from the state
    d.advance(0);
    const again = d.dispatches.at(-1)!;
    assert.equal(d.dispatches.length, 2, "offered again at once");
    assert.ok(
      again.fence > offer.fence,
      `the new fence ${again.fence} was never handed out (old ${offer.fence})`,
    );
    // The old offer's worker accepted it and asks to start: no acknowledgement, so it never starts.
    assert.equal(d.heartbeat(RUN, offer.fence).reply, null);
    assert.equal(
      d.heartbeat(RUN, again.fence).reply?.ok,
      true,
      "the new offer's worker holds the lease",
    );
  });

  it("onActivate of a queued run with no offer (fence 0) arms its redispatch at once", () => {
    const d = new Driver(cfg({ offerTimeoutMs: 2_000 }), { autoGrant: false });
    d.create(spec());
    d.advance(1_500); // :02 created, waiting for its tenant slot
    assert.equal(d.run(RUN)?.fence, 0);
    d.flush(); // the fire's deferred state was written (a later write carried it)
    const fx = d.activate();
    const redispatch = fx.find((e) => e.kind === "timer" && e.name === `dispatch:${RUN}`);
    assert.ok(redispatch && redispatch.kind === "timer");
    assert.equal(redispatch.atMs, d.now);
  });
});

describe("no record stuck queued", () => {
  /** The :02 fire's run record is written, then the node crashes before the job state advances. */
  function orphaned(over = {}): Driver {
    const d = new Driver(cfg(), {});
    d.create(spec(over));
    d.skipTime(1_500); // :02.0
    d.crashAfterPre({ kind: "fire" });
    assert.equal(d.records.get(RUN)?.status, "queued");
    assert.equal(d.run(RUN), undefined, "the job state never heard of it");
    return d;
  }

  it("a takeover past the misfire grace ends the orphaned queued record terminal (missed), via put_run mode terminal", () => {
    const d = orphaned({ misfire: { policy: "skip", starting_deadline_s: null } });
    d.skipTime(11_000); // down past the 10 s grace
    d.activate();
    d.advance(0); // the re-armed fire
    const put = putRunsOf(d, "fire").find((p) => p.record.run_id === RUN);
    assert.equal(put?.mode, "terminal");
    assert.equal(put.record.status, "missed");
    assert.equal(d.records.get(RUN)?.status, "missed");
    assert.match(d.records.get(RUN)?.reason ?? "", /misfire/);
    assert.equal(
      d.dispatches.filter((x) => x.run_id === RUN).length,
      0,
      "the missed occurrence never runs",
    );
    assert.deepEqual(d.violations, []);
  });

  it("a pause before the re-fire settles the orphan to cancelled via put_run mode settle", () => {
    const d = orphaned();
    d.activate();
    d.send({ kind: "patch", patch: { enabled: false } });
    const put = putRunsOf(d, "patch").find((p) => p.record.run_id === RUN);
    assert.equal(put?.mode, "settle");
    assert.equal(d.records.get(RUN)?.status, "cancelled");
    d.advance(10_000);
    assert.equal(d.records.get(RUN)?.status, "cancelled", "stays settled");
    assert.equal(d.dispatches.length, 0);
    assert.deepEqual(d.violations, []);
  });

  it("a delete before the re-fire settles the orphan to cancelled via put_run mode settle", () => {
    const d = orphaned();
    d.activate();
    d.send({ kind: "delete" });
    const put = putRunsOf(d, "delete").find((p) => p.record.run_id === RUN);
    assert.equal(put?.mode, "settle");
    assert.equal(d.records.get(RUN)?.status, "cancelled");
    assert.match(d.records.get(RUN)?.reason ?? "", /deleted/);
    assert.deepEqual(d.violations, []);
  });

  // Found by the simulation's users' commands during faults (seed 7151): several fires decided
  // without a state write (deferred) made records for :51, :54 and :57; the owner lost its
  // partition and took it back, reloading a state whose next_run_at was :51; a delete then
  // settled only :51, and :57's record stayed queued for good.
  it("a delete after a takeover lost several deferred fires settles every orphan from next_run_at on, not only the first", () => {
    const d = new Driver(cfg(), { autoGrant: false }); // the runs wait for slots: no write
    d.create(spec({ overlap: "allow" }));
    d.advance(5_000); // :02 and :04 fired, deferred: records queued, the stored state still says :02
    const orphans = [2, 4].map((x) => runIdFor(JOB, sec(x)));
    assert.deepEqual(
      orphans.map((id) => d.records.get(id)?.status),
      ["queued", "queued"],
    );
    d.activate(); // a takeover: the deferred fires are lost
    assert.equal(d.state.next_run_at_ms, sec(2));
    d.send({ kind: "delete" });
    assert.deepEqual(
      orphans.map((id) => d.records.get(id)?.status),
      ["cancelled", "cancelled"],
    );
    assert.equal(d.records.has(runIdFor(JOB, sec(6))), false, "settle never creates");
    assert.deepEqual(d.violations, []);
  });

  it("a run-now before the re-fire: the re-fire records the orphan skipped (overlap) over its queued record", () => {
    const d = orphaned();
    d.activate();
    d.send({ kind: "run_now" }); // a manual run, leased at once: :02 now overlaps it
    d.advance(0); // the re-armed fire for :02
    const put = putRunsOf(d, "fire").find((p) => p.record.run_id === RUN);
    assert.equal(put?.mode, "terminal");
    assert.equal(d.records.get(RUN)?.status, "skipped");
    assert.deepEqual(d.violations, []);
  });

  it("a pause with no orphan writes no record for the next occurrence (settle never creates)", () => {
    const d = new Driver(cfg());
    d.create(spec());
    d.send({ kind: "patch", patch: { enabled: false } });
    assert.equal(d.records.has(RUN), false);
  });
});

describe("unknown outcomes resolved, not guessed", () => {
  it("a retried run_now with the same request_id returns the same run and creates no second run", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(spec({ schedule: hourly }));
    const first = d.send({ kind: "run_now", request_id: "rq-1" });
    const runId = first.reply?.run?.run_id;
    assert.ok(runId);
    d.advance(100);
    const again = d.send({ kind: "run_now", request_id: "rq-1" });
    assert.equal(again.fail, undefined);
    assert.equal(again.reply?.run?.run_id ?? again.reply?.run_id, runId);
    assert.equal(d.state.runs.length, 1, "one manual run");
    assert.equal([...d.records.values()].filter((r) => r.trigger === "manual").length, 1);
    const other = d.send({ kind: "run_now", request_id: "rq-2" });
    assert.notEqual(other.reply?.run?.run_id, runId, "a different request id is a new run");
  });

  // Found by the simulation's users' commands during faults (seed 2011): a run-now whose state
  // write was fenced (its owner's lease thread cut from KV) left its record `queued` for good; the
  // router's retry made a second manual run under another id (the owner's clock had moved on).
  it("a run_now retried after its run ended is answered with that run's id, not a new run", () => {
    const d = new Driver(cfg(), { autoComplete: () => ({}) });
    d.create(spec({ schedule: hourly }));
    const runId = d.send({ kind: "run_now", request_id: "rq-1" }).reply?.run?.run_id;
    assert.equal(d.records.get(runId ?? "")?.status, "succeeded");
    const again = d.send({ kind: "run_now", request_id: "rq-1" });
    assert.equal(again.reply?.run?.run_id ?? again.reply?.run_id, runId);
    assert.equal(d.dispatches.length, 1);
  });

  it("a retried patch with the same request_id and an If-Match that matched the first time is answered with the job and applies once", () => {
    const d = new Driver(cfg());
    d.create(spec());
    const p = {
      kind: "patch" as const,
      patch: { name: "renamed" },
      if_match: 1,
      request_id: "rq-p",
    };
    const first = d.send(p);
    assert.equal(first.reply?.job?.version, 2);
    const again = d.send(p); // the reply was lost; the router retries
    assert.equal(again.fail, undefined, "not 412");
    assert.equal(again.reply?.job?.version, 2);
    assert.equal(again.reply?.job?.name, "renamed");
    assert.equal(d.state.job?.version, 2, "applied once");
    assert.equal(
      d.send({ kind: "patch", patch: { name: "x" }, if_match: 1, request_id: "rq-q" }).fail?.code,
      "precondition_failed",
      "a new request still checks If-Match",
    );
  });

  it("a slot granted during retry_wait lets the run go at retry_due (it does not hang)", () => {
    const d = new Driver(cfg(), { autoGrant: false, autoClaim: false });
    d.create(spec({ schedule: { at: "2026-01-01T00:00:02Z" }, ...retries(2) }));
    d.advance(1_500);
    d.grant();
    d.claim();
    d.complete(RUN, { exit_code: 1 });
    const r = d.run(RUN)!;
    assert.equal(r.status, "retry_wait");
    d.send({ kind: "slot_granted", run_id: grantId(r) }); // e.g. a re-ask answered late
    assert.equal(d.run(RUN)?.status, "retry_wait", "waits for its backoff");
    assert.equal(d.dispatches.length, 1);
    d.advance(1_000); // retry_due
    assert.equal(d.dispatches.length, 2, "the second attempt is offered at retry_due");
    d.claim();
    assert.equal(d.run(RUN)?.status, "leased");
    assert.equal(d.run(RUN)?.attempt, 2);
  });

  it("after a failed attempt the re-queued run has fence 0: the old worker's late heartbeat with its old fence gets lease_lost", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(spec({ schedule: { at: "2026-01-01T00:00:02Z" }, ...retries(2) }));
    d.advance(1_500);
    d.grant();
    const old = d.run(RUN)!.fence;
    d.complete(RUN, { exit_code: 1 }, old);
    d.advance(1_000); // retry_due: queued, waiting for a slot
    assert.equal(d.run(RUN)?.status, "queued");
    assert.equal(d.run(RUN)?.fence, 0);
    assert.equal(d.heartbeat(RUN, old).fail?.code, "lease_lost");
    assert.equal(d.complete(RUN, {}, old).fail?.code, "stale_fence");
    assert.equal(d.run(RUN)?.status, "queued", "not re-claimed by the old attempt");
    assert.equal(d.run(RUN)?.attempt, 1);
  });

  it("after a lease expiry the re-queued run has fence 0 and the old worker's heartbeat with the old fence gets lease_lost", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    // A long starting deadline: the re-queued run (never heard to start) keeps waiting past :12.
    d.create(spec({ ...retries(2), misfire: { policy: "run_once", starting_deadline_s: 3_600 } }));
    d.advance(1_500);
    d.grant();
    d.send({ kind: "patch", patch: { schedule: hourly } });
    const old = d.run(RUN)!.fence;
    assert.equal(d.run(RUN)?.status, "leased");
    // A run leased without a held slot (the tenant's grant lost, or a state from before grants
    // were durable): on expiry it must wait for a slot with no live fence.
    d.state = { ...d.state, runs: d.state.runs.map((r) => ({ ...r, slot: false })) };
    d.slots.delete(RUN);
    d.advance(10_000); // lease expires, no heartbeat
    assert.equal(d.run(RUN)?.status, "queued");
    assert.equal(d.run(RUN)?.fence, 0);
    assert.equal(d.heartbeat(RUN, old).fail?.code, "lease_lost");
    assert.equal(d.run(RUN)?.status, "queued", "the old worker did not re-claim it");
    assert.equal(d.run(RUN)?.attempt, 1);
    d.grant();
    assert.ok(d.run(RUN)!.fence > old, "the next offer has a new fence");
  });

  it("after a lease expiry with the slot held the run is offered again under a new fence; the old one gets lease_lost", () => {
    const d = leased();
    const old = d.run(RUN)!.fence;
    d.advance(10_000);
    assert.equal(d.run(RUN)?.attempt, 2);
    assert.ok(d.run(RUN)!.fence > old);
    assert.equal(d.heartbeat(RUN, old).fail?.code, "lease_lost");
  });
});

describe("a busy scheduler is not a dead worker", () => {
  it("a lease_expired while a heartbeat arrived within the TTL re-arms the lease at arrival + TTL instead of expiring", () => {
    const d = leased(); // claimed at :02.0: lease timer at :12.0
    const f = d.run(RUN)!.fence;
    assert.equal(d.timers.get(`lease:${RUN}`)?.atMs, sec(12));
    d.arrivals.set(heartbeatKey(RUN, f, "w1"), sec(10)); // arrived at :10, still queued in the mailbox
    d.advance(10_000); // :12: lease_expired
    assert.equal(d.run(RUN)?.status, "leased", "not expired");
    assert.equal(d.run(RUN)?.fence, f);
    assert.equal(d.run(RUN)?.attempt, 1);
    assert.equal(d.timers.get(`lease:${RUN}`)?.atMs, sec(20), "re-armed at arrival + TTL");
    d.advance(8_000); // :20 and nothing newer arrived: now it expires
    assert.equal(d.run(RUN)?.attempt, 2);
    assert.equal(d.run(RUN)?.attempts[0]?.outcome, "lease_lost");
  });

  it("a lease_expired while the holder's completion report waits in the mailbox re-arms it (now + TTL) however long the report waits; without it the lease expires", () => {
    // The worker does not heartbeat an attempt whose report is on the wire; a report queued behind
    // a saturated owner's turns for longer than a TTL must not lose its result to an expiry.
    const d = leased(); // claimed at :02.0: lease timer at :12.0
    const f = d.run(RUN)!.fence;
    d.arrivals.set(heartbeatKey(RUN, f, "w1"), sec(3)); // its report arrived at :03
    d.pending.add(completionKey(RUN, f, "w1")); // and still waits
    d.advance(10_000); // :12
    assert.equal(d.run(RUN)?.status, "leased", "kept");
    assert.equal(d.timers.get(`lease:${RUN}`)?.atMs, sec(22), "re-armed at now + TTL");
    d.advance(10_000); // :22, still waiting
    assert.equal(d.run(RUN)?.attempt, 1);
    assert.equal(d.timers.get(`lease:${RUN}`)?.atMs, sec(32));
    d.pending.delete(completionKey(RUN, f, "w1")); // gone without a turn (e.g. the actor moved)
    d.pending.add(completionKey(RUN, f, "w2")); // another worker's report keeps nothing
    d.advance(10_000); // :32
    assert.equal(d.run(RUN)?.attempt, 2);
    assert.equal(d.run(RUN)?.attempts[0]?.outcome, "lease_lost");
  });

  it("without a recent arrival the lease expires at its end", () => {
    const d = leased();
    const f = d.run(RUN)!.fence;
    d.arrivals.set(heartbeatKey(RUN, f, "w1"), sec(2)); // at the claim, then silence
    d.advance(10_000); // :12
    assert.equal(d.run(RUN)?.attempt, 2);
    assert.equal(d.run(RUN)?.attempts[0]?.outcome, "lease_lost");
  });

  it("the job actor declares a heartbeat's arrival key, so the host records heartbeat arrivals at all — and a completion report's under the same key (the worker does not heartbeat an attempt whose report is on the wire)", () => {
    const def = makeJobActor(cfg());
    assert.equal(
      def.arrivalKey?.({ kind: "heartbeat", run_id: RUN, fence: 3, worker: "w1" }),
      heartbeatKey(RUN, 3, "w1"),
    );
    const complete = {
      kind: "complete",
      run_id: RUN,
      fence: 3,
      worker: "w1",
      outcome: "exited",
      exit_code: 0,
      output: "",
      error: null,
      started_at_ms: sec(2),
      finished_at_ms: sec(3),
    } as const;
    assert.equal(def.arrivalKey?.(complete), heartbeatKey(RUN, 3, "w1"));
    assert.equal(def.arrivalKey?.({ kind: "lease_expired", run_id: RUN, fence: 3 }), undefined);
  });

  it("a heartbeat for a recorded lease is acknowledged from the committed state without queueing", () => {
    const d = leased();
    const def = makeJobActor(cfg());
    const f = d.run(RUN)!.fence;
    const ctx = { id: "t.j", nowMs: d.now };
    assert.deepEqual(
      def.query?.(d.state, { kind: "heartbeat", run_id: RUN, fence: f, worker: "w1" }, ctx),
      { reply: { ok: true }, alsoQueue: false },
    );
    assert.equal(
      def.query?.(d.state, { kind: "heartbeat", run_id: RUN, fence: f, worker: "w2" }, ctx),
      undefined,
      "another worker: queued, answered lease_lost",
    );
    assert.deepEqual(
      def.query?.(d.state, { kind: "heartbeat", run_id: RUN, fence: f - 1, worker: "w1" }, ctx),
      {
        fail: {
          code: "lease_lost",
          message: `run ${RUN}: lease with fence ${f - 1} of worker w1 is gone`,
        },
      },
      "an old fence: refused from memory (no mailbox turn), as the mailbox would",
    );
  });

  it("an arrival from another worker or under an old fence does not keep the lease alive", () => {
    const d = leased();
    const f = d.run(RUN)!.fence;
    d.arrivals.set(heartbeatKey(RUN, f, "w2"), sec(11));
    d.arrivals.set(heartbeatKey(RUN, f - 1, "w1"), sec(11));
    d.advance(10_000); // :12
    assert.equal(d.run(RUN)?.attempt, 2);
    assert.equal(d.run(RUN)?.attempts[0]?.outcome, "lease_lost");
  });
});

describe("an offer has a reminder", () => {
  it("an offer whose answer never comes back is offered again under a new fence after the offer timeout", () => {
    const d = new Driver(cfg(), { autoClaim: false });
    d.create(spec({ schedule: { at: "2026-01-01T00:00:02Z" } }));
    d.advance(1_500);
    const f = d.run(RUN)!.fence;
    assert.ok(f > 0 && d.run(RUN)?.status === "queued", "offered");
    d.advance(cfg().offerTimeoutMs + cfg().redispatchDelayMs + 10); // no claimed, no dispatch_failed
    assert.ok(d.run(RUN)!.fence > f, "offered again under a new fence");
  });
});
