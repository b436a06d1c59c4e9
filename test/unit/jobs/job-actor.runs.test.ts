/**
 * Runs after they are created: tenant slots, claims, leases and fences (heartbeat, completion,
 * lease expiry and re-queue), retries with backoff, dead letters, timeouts.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { retryDelayMs } from "../../../src/runs/backoff.ts";
import { grantId, runIdFor, splitGrant } from "../../../src/protocol/ids.ts";
import { Driver, JOB, cfg, spec } from "./driver.ts";
import { makeJobActor } from "../../../src/jobs/job-actor.ts";

const sec = (s: number) => Date.UTC(2026, 0, 1, 0, 0, s);
const at = (iso: string | null | undefined) => Date.parse(iso ?? "");
const RUN = runIdFor(JOB, sec(2));
const hourly = { cron: "0 * * * *", time_zone: "UTC" };

/** A job whose first run (:02) is leased to w1; nothing else fires for a while. */
function leased(maxAttempts = 3, leaseTtlMs = 10_000) {
  const d = new Driver(cfg({ leaseTtlMs }));
  d.create(
    spec({ retry: { max_attempts: maxAttempts, backoff: "exponential", base_s: 1, max_s: 60 } }),
  );
  d.advance(1_500);
  d.send({ kind: "patch", patch: { schedule: hourly } });
  const r = d.run(RUN);
  assert.equal(r?.status, "leased");
  return d;
}

describe("job actor: slots and claims", () => {
  it("a run waits in queued until the tenant grants its slot, then is dispatched and claimed", () => {
    const d = new Driver(cfg(), { autoGrant: false, autoClaim: false });
    d.create(spec());
    d.advance(1_500);
    assert.equal(d.run(RUN)?.status, "queued");
    assert.deepEqual(d.pendingSlots, [RUN]);
    assert.equal(d.dispatches.length, 0);
    d.grant();
    assert.equal(d.run(RUN)?.slot, true);
    assert.equal(d.dispatches.length, 1);
    assert.equal(d.run(RUN)?.status, "queued", "still queued until the worker claims");
    d.claim();
    assert.equal(d.run(RUN)?.status, "leased");
    assert.equal(d.run(RUN)?.worker, "w1");
    assert.equal(d.records.get(RUN)?.status, "leased");
    assert.equal(d.timers.get(`lease:${RUN}`)?.atMs, d.now + 10_000);
  });

  it("a slot granted to a run that no longer exists is released at once", () => {
    const d = new Driver();
    d.create(spec());
    d.slots.add("ghost");
    d.send({ kind: "slot_granted", run_id: "ghost" });
    assert.deepEqual(d.postsOf("release_slot"), [{ kind: "release_slot", grant: "ghost" }]);
    assert.equal(d.slots.size, 0);
  });

  it("a duplicate slot grant does not dispatch twice", () => {
    const d = new Driver(cfg(), { autoClaim: false });
    d.create(spec());
    d.advance(1_500);
    d.send({ kind: "slot_granted", run_id: RUN });
    assert.equal(d.dispatches.length, 1);
  });

  it("a claim with a fence that is not the current dispatch is cancelled on that worker", () => {
    const d = new Driver(cfg(), { autoClaim: false });
    d.create(spec());
    d.advance(1_500);
    const first = d.pendingClaims[0]!;
    d.send({
      kind: "dispatch_failed",
      run_id: RUN,
      fence: first.fence,
      reason: "no worker with a free slot",
    });
    assert.equal(d.timers.get(`dispatch:${RUN}`)?.atMs, d.now + 1_000);
    d.advance(1_000); // redispatch with a new fence
    assert.equal(d.pendingClaims.length, 2);
    const second = d.pendingClaims[1]!;
    assert.ok(second.fence > first.fence);
    d.send({ kind: "claimed", run_id: RUN, fence: first.fence, worker: "w9" });
    assert.deepEqual(d.postsOf("cancel_on_worker"), [
      { kind: "cancel_on_worker", worker: "w9", run_id: RUN, fence: first.fence },
    ]);
    assert.equal(d.run(RUN)?.status, "queued");
    d.send({ kind: "claimed", run_id: RUN, fence: second.fence, worker: "w1" });
    assert.equal(d.run(RUN)?.status, "leased");
    assert.equal(d.run(RUN)?.attempt, 1);
  });

  it("a wake after a failed offer (worker room advertised) offers again at once, only under that offer's fence", () => {
    const d = new Driver(cfg(), { autoClaim: false });
    d.create(spec());
    d.advance(1_500);
    const first = d.pendingClaims[0]!;
    d.send({ kind: "dispatch_failed", run_id: RUN, fence: first.fence, reason: "no free slot" });
    d.send({ kind: "redispatch", run_id: RUN, fence: first.fence });
    assert.equal(d.pendingClaims.length, 2, "offered again now, not after the redispatch delay");
    const second = d.pendingClaims[1]!;
    assert.ok(second.fence > first.fence);
    assert.equal(
      d.timers.get(`dispatch:${RUN}`)?.atMs,
      d.now + cfg().offerTimeoutMs + cfg().redispatchDelayMs,
      "the failed offer's timer is replaced by the new offer's",
    );
    d.send({ kind: "redispatch", run_id: RUN, fence: first.fence });
    assert.equal(d.pendingClaims.length, 2, "a second wake for the old fence does nothing");
    d.send({ kind: "claimed", run_id: RUN, fence: second.fence, worker: "w1" });
    d.send({ kind: "redispatch", run_id: RUN, fence: second.fence });
    assert.equal(d.pendingClaims.length, 2, "nor one for a run claimed since");
    assert.equal(d.run(RUN)?.status, "leased");
  });

  it("a heartbeat with the current fence is ok, marks the run running and re-arms the lease", () => {
    const d = leased();
    const fence = d.run(RUN)!.fence;
    d.advance(4_000);
    const hb = d.heartbeat(RUN, fence, sec(2) + 100);
    assert.deepEqual(hb.reply, { ok: true });
    assert.equal(hb.fail, undefined);
    assert.equal(d.run(RUN)?.status, "running");
    assert.equal(d.records.get(RUN)?.status, "running");
    assert.equal(at(d.records.get(RUN)?.started_at), sec(2) + 100);
    assert.equal(d.timers.get(`lease:${RUN}`)?.atMs, d.now + 10_000);
    d.advance(9_000);
    assert.deepEqual(d.heartbeat(RUN, fence).reply, { ok: true }, "kept alive by heartbeats");
    d.advance(9_000);
    assert.equal(d.run(RUN)?.attempt, 1, "never expired");
  });

  it("a heartbeat with an old fence fails lease_lost; a completion with an old fence fails stale_fence", () => {
    const d = leased();
    const fence = d.run(RUN)!.fence;
    assert.equal(d.heartbeat(RUN, fence - 1).fail?.code, "lease_lost");
    assert.equal(d.heartbeat(RUN, fence + 1).fail?.code, "lease_lost");
    assert.equal(d.complete(RUN, {}, fence - 1).fail?.code, "stale_fence");
    assert.equal(d.run(RUN)?.status, "leased", "unchanged");
    assert.equal(d.heartbeat("nope", fence).fail?.code, "lease_lost");
  });

  it("the fast path (no mailbox) answers a dead offer's heartbeat lease_lost, as the mailbox does, and leaves a claimable or current one to the mailbox", () => {
    const d = leased();
    const fence = d.run(RUN)!.fence;
    const q = (run_id: string, f: number) =>
      d.actor.query!(
        d.state,
        { kind: "heartbeat", run_id, fence: f, worker: "w1" },
        { id: "t1.j1", nowMs: d.now },
      );
    for (const [run, f] of [
      [RUN, fence - 1],
      [RUN, fence + 1],
      ["nope", fence],
    ] as const) {
      const fast = q(run, f);
      assert.ok(fast && "fail" in fast, `fast answer for ${run}@${f}: ${JSON.stringify(fast)}`);
      assert.equal(fast.fail.code, "lease_lost");
      assert.equal(d.heartbeat(run, f).fail?.code, fast.fail.code, "the mailbox answers the same");
    }
    const live = q(RUN, fence);
    assert.ok(live === undefined || !("fail" in live), "the current lease is not refused");
  });

  it("lease expiry re-queues with a new fence while attempts remain; the old worker's heartbeat and completion are refused", () => {
    const d = leased(3);
    const old = d.run(RUN)!.fence;
    d.advance(10_000); // lease expires; slot still held → re-dispatched and claimed (attempt 2)
    const r = d.run(RUN)!;
    assert.ok(r.fence > old);
    assert.equal(r.attempt, 2);
    assert.equal(r.status, "leased");
    assert.equal(r.attempts[0]?.outcome, "lease_lost");
    assert.equal(
      r.attempts[0]?.error,
      "lease expired on worker w1, which did not answer, before the attempt was heard to start (not counted: presumed never started)",
    );
    assert.equal(d.heartbeat(RUN, old).fail?.code, "lease_lost");
    assert.equal(d.complete(RUN, {}, old).fail?.code, "stale_fence");
    assert.equal(d.run(RUN)?.status, "leased");
    assert.deepEqual(d.complete(RUN).reply, { ok: true });
    assert.equal(d.records.get(RUN)?.status, "succeeded");
    assert.deepEqual(
      d.records.get(RUN)?.attempts.map((a) => a.outcome),
      ["lease_lost", "succeeded"],
    );
  });

  it("a lease_expired with a stale fence does nothing", () => {
    const d = leased(3);
    const r = d.run(RUN)!;
    const before = d.state;
    d.send({ kind: "lease_expired", run_id: RUN, fence: r.fence - 1 });
    assert.equal(d.state, before);
  });

  it("lease expiry of a STARTED last attempt fails the run and dead-letters it", () => {
    const d = leased(2);
    d.heartbeat(RUN, undefined, d.now); // attempt 1 started
    d.advance(10_000); // expires; attempt 2 offered and claimed
    d.heartbeat(RUN, undefined, d.now); // attempt 2 started
    d.advance(10_000);
    assert.equal(d.run(RUN), undefined);
    const rec = d.records.get(RUN)!;
    assert.equal(rec.status, "failed");
    assert.equal(rec.attempt, 2);
    assert.equal(rec.reason, "dead-lettered after 2 attempt(s): lease lost");
    assert.deepEqual(
      d.postsOf("dead_letter").map((x) => x.record.run_id),
      [RUN],
    );
    assert.equal(d.slots.size, 0);
    assert.equal(d.timers.has(`lease:${RUN}`), false);
  });

  it("expiry while the slot is still held re-dispatches at once with a new fence, refreshing (not waiting for) the grant", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(spec({ retry: { max_attempts: 2, backoff: "fixed", base_s: 1, max_s: 1 } }));
    d.advance(1_500);
    d.grant();
    const f = d.run(RUN)!.fence;
    const asked = d.postsOf("acquire_slot").length;
    d.send({ kind: "lease_expired", run_id: RUN, fence: f });
    assert.equal(
      d.run(RUN)!.fence,
      f,
      "a lease_expired before the lease's end only re-arms its timer",
    );
    d.advance(cfg().leaseTtlMs); // no heartbeat arrives: the lease timer fires for real
    assert.equal(
      d.postsOf("acquire_slot").length,
      asked + 1,
      "one refresh of the held grant, so it cannot expire under the run",
    );
    assert.equal(d.run(RUN)?.status, "leased", "slot held: re-dispatched at once");
    assert.ok(d.run(RUN)!.fence > f);
  });
});

describe("job actor: retries and dead letters", () => {
  it("exit 3 with max_attempts 3: three attempts with growing backoff, then failed and dead-lettered", () => {
    const d = new Driver(cfg(), { autoComplete: () => ({ exit_code: 3, output: "boom" }) });
    d.create(
      spec({
        schedule: { at: "2026-01-01T00:00:02Z" },
        retry: { max_attempts: 3, backoff: "exponential", base_s: 2, max_s: 60 },
      }),
    );
    d.advance(1_500);
    const r1 = d.run(RUN)!;
    assert.equal(r1.status, "retry_wait");
    assert.equal(r1.attempt, 1);
    assert.equal(
      r1.next_attempt_at_ms,
      d.now +
        retryDelayMs({ max_attempts: 3, backoff: "exponential", base_s: 2, max_s: 60 }, 1, RUN),
    );
    const wait1 = r1.next_attempt_at_ms - d.now;
    assert.ok(wait1 >= 2_000 && wait1 < 4_000, `${wait1}`);
    assert.equal(at(d.records.get(RUN)?.next_attempt_at), Math.floor(r1.next_attempt_at_ms));
    assert.equal(d.records.get(RUN)?.status, "retry_wait");
    assert.equal(d.slots.size, 0, "no slot held while waiting");
    d.advance(wait1 - 2);
    assert.equal(d.run(RUN)?.attempt, 1);
    d.advance(2);
    const r2 = d.run(RUN)!;
    assert.equal(r2.attempt, 2);
    assert.equal(r2.status, "retry_wait");
    const wait2 = r2.next_attempt_at_ms! - d.now;
    assert.ok(wait2 >= 4_000 && wait2 < 8_000, `${wait2}`);
    assert.ok(wait2 > wait1);
    d.advance(wait2);
    assert.equal(d.run(RUN), undefined);
    const rec = d.records.get(RUN)!;
    assert.equal(rec.status, "failed");
    assert.equal(rec.attempt, 3);
    assert.deepEqual(
      rec.attempts.map((a) => [a.attempt, a.outcome, a.exit_code, a.error]),
      [
        [1, "failed", 3, "exit code 3"],
        [2, "failed", 3, "exit code 3"],
        [3, "failed", 3, "exit code 3"],
      ],
    );
    const starts = rec.attempts.map((a) => at(a.started_at));
    assert.ok(starts[2]! - starts[1]! > starts[1]! - starts[0]!, "gaps grow");
    assert.equal(rec.reason, "dead-lettered after 3 attempt(s): exit code 3");
    assert.deepEqual(rec.result, { exit_code: 3, output: "boom" });
    assert.deepEqual(
      d.postsOf("dead_letter").map((x) => x.record),
      [rec],
    );
    assert.deepEqual(
      d.dispatches.map((x) => x.attempt),
      [1, 2, 3],
    );
    assert.equal(d.slots.size, 0);
  });

  it("a non-retryable error fails after one attempt", () => {
    const d = new Driver(cfg(), {
      autoComplete: () => ({
        outcome: "error",
        exit_code: null,
        error: { class: "image_not_found", message: "no such image", retryable: false },
      }),
    });
    d.create(spec({ retry: { max_attempts: 5, backoff: "exponential", base_s: 1, max_s: 60 } }));
    d.advance(1_500);
    const rec = d.records.get(RUN)!;
    assert.equal(rec.status, "failed");
    assert.equal(rec.attempt, 1);
    assert.equal(rec.reason, "not retryable: no such image");
    assert.equal(rec.attempts[0]?.outcome, "error");
    assert.equal(d.postsOf("dead_letter").length, 1);
  });

  it("a timeout is retryable, and the final status of a run whose last attempt timed out is timed_out", () => {
    const d = new Driver(cfg(), {
      autoComplete: () => ({ outcome: "timed_out", exit_code: null }),
    });
    d.create(
      spec({
        schedule: { at: "2026-01-01T00:00:02Z" },
        retry: { max_attempts: 2, backoff: "fixed", base_s: 1, max_s: 60 },
      }),
    );
    d.advance(10_000);
    const rec = d.records.get(RUN)!;
    assert.equal(rec.status, "timed_out");
    assert.equal(rec.attempt, 2);
    assert.deepEqual(
      rec.attempts.map((a) => [a.outcome, a.error]),
      [
        ["timed_out", "timed out"],
        ["timed_out", "timed out"],
      ],
    );
    assert.equal(d.postsOf("dead_letter")[0]?.record.status, "timed_out");
  });

  it("success on a retry ends succeeded with every attempt kept", () => {
    let n = 0;
    const d = new Driver(cfg(), {
      autoComplete: () => (++n < 2 ? { exit_code: 1 } : { exit_code: 0 }),
    });
    d.create(
      spec({
        schedule: { at: "2026-01-01T00:00:02Z" },
        retry: { max_attempts: 3, backoff: "fixed", base_s: 1, max_s: 60 },
      }),
    );
    d.advance(10_000);
    const rec = d.records.get(RUN)!;
    assert.equal(rec.status, "succeeded");
    assert.deepEqual(
      rec.attempts.map((a) => a.outcome),
      ["failed", "succeeded"],
    );
    assert.equal(d.postsOf("dead_letter").length, 0);
  });

  it("a completion without an error object: killed is not retried", () => {
    const d = new Driver(cfg(), { autoComplete: () => ({ outcome: "killed", exit_code: 137 }) });
    d.create(spec({ retry: { max_attempts: 3, backoff: "fixed", base_s: 1, max_s: 60 } }));
    d.advance(1_500);
    assert.equal(d.records.get(RUN)?.status, "failed");
    assert.equal(d.records.get(RUN)?.attempt, 1);
  });
});

describe("job actor: slot audit", () => {
  it("a grant for a run the job no longer has is released; an audit never hands a queued run its slot", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(spec({ retry: { max_attempts: 2, backoff: "fixed", base_s: 1, max_s: 1 } }));
    d.advance(1_500);
    const before = d.postsOf("release_slot").length;
    d.send({ kind: "slot_audit", run_id: `${RUN}x` });
    assert.equal(d.postsOf("release_slot").length, before + 1);
    assert.equal(d.run(RUN)?.status, "queued");
    const asks = d.postsOf("acquire_slot").length;
    d.send({ kind: "slot_audit", run_id: grantId(d.run(RUN)!) });
    assert.equal(
      d.run(RUN)?.slot,
      false,
      "the grant may not be written yet: the run gets it from its own re-ask",
    );
    assert.equal(d.postsOf("release_slot").length, before + 1, "and the grant is kept");
    assert.deepEqual(
      d
        .postsOf("acquire_slot")
        .slice(asks)
        .map((p) => p.grant),
      [grantId(d.run(RUN)!)],
      "the re-ask goes out now, not at the slot check (before: nothing until then)",
    );
  });
});

describe("job actor: a run waiting for its slot re-asks less often the longer it waits", () => {
  it("first after SLOT_RECHECK_MS, then as long as it has waited, at most every SLOT_RECHECK_MAX_MS (before: every 10 s for as long as it waited)", async () => {
    const { SLOT_RECHECK_MS, SLOT_RECHECK_MAX_MS } =
      await import("../../../src/runs/run-dispatch.ts");
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(spec({ schedule: { at: "2026-01-01T00:00:02Z" } }));
    d.advance(1_500);
    assert.equal(d.run(RUN)?.status, "queued");
    const times: number[] = [];
    const n0 = d.postsOf("acquire_slot").length;
    const createdAt = d.run(RUN)!.created_at_ms;
    for (let t = 0; t < 600_000; t += 1_000) {
      const n = d.postsOf("acquire_slot").length;
      d.advance(1_000);
      for (let i = n; i < d.postsOf("acquire_slot").length; i++) times.push(d.now);
    }
    assert.equal(d.postsOf("acquire_slot").length - n0, times.length);
    const gaps = [createdAt, ...times].slice(1).map((t, i) => t - [createdAt, ...times][i]!);
    assert.deepEqual(
      gaps.slice(0, 4),
      [SLOT_RECHECK_MS, SLOT_RECHECK_MS, 2 * SLOT_RECHECK_MS, SLOT_RECHECK_MAX_MS].map(
        (g) => Math.ceil(g / 1_000) * 1_000,
      ),
    );
    assert.ok(
      gaps.every((g) => g <= SLOT_RECHECK_MAX_MS + 1_000),
      `never longer than SLOT_RECHECK_MAX_MS: ${gaps.join(",")}`,
    );
    assert.ok(
      times.length <= 22,
      `10 minutes of waiting: ${times.length} re-asks (every 10 s: 60)`,
    );
    // Granted from the tenant's waiting list by a message, whenever that comes: no timer involved.
    d.grant();
    assert.equal(d.run(RUN)?.slot, true);
    assert.equal(d.timers.has(`slot:${RUN}`), false);
  });
});

describe("job actor: grants are named per hold", () => {
  it("a late release of an earlier grant cannot take the slot of the retry (the sim's seed 40)", () => {
    const d = new Driver(cfg(), { autoComplete: () => ({ exit_code: 1, output: "" }) });
    d.create(
      spec({
        schedule: { at: "2026-01-01T00:00:02Z" },
        retry: { max_attempts: 2, backoff: "fixed", base_s: 1, max_s: 1 },
      }),
    );
    d.advance(1_500);
    const releases = d.postsOf("release_slot").map((p) => p.grant);
    const asks = d.postsOf("acquire_slot").map((p) => p.grant);
    assert.equal(d.run(RUN)?.status, "retry_wait");
    const first = asks[0]!;
    const seq = splitGrant(first).seq;
    assert.deepEqual(releases, [first], "attempt 1 gives back its grant");
    d.advance(2_500); // retry_due asks again, under a new name
    const later = d
      .postsOf("acquire_slot")
      .map((p) => p.grant)
      .slice(asks.length);
    assert.ok(later.length > 0 && later.every((g) => g === `${RUN}_${seq + 1}`), later.join(","));
  });
});

describe("job actor: attempts that never started", () => {
  it("a lease that expires before its attempt started does not use up max_attempts (bounded)", async () => {
    const { MAX_UNSTARTED_ATTEMPTS } = await import("../../../src/jobs/job-actor.ts");
    const d = leased(1);
    d.advance(10_000); // never started: re-offered, not dead-lettered
    assert.equal(d.run(RUN)?.status, "leased");
    assert.equal(d.run(RUN)?.attempt, 2);
    assert.equal(d.postsOf("dead_letter").length, 0);
    for (let i = 1; i < MAX_UNSTARTED_ATTEMPTS; i++) d.advance(10_000);
    assert.equal(
      d.postsOf("dead_letter").length,
      0,
      `${MAX_UNSTARTED_ATTEMPTS} unstarted attempts are forgiven`,
    );
    d.advance(10_000);
    assert.equal(d.postsOf("dead_letter").length, 1, "then the bound dead-letters it");
  });
});

describe("job actor: a completion report or heartbeat sent again", () => {
  it("a copy shares the queued report's turn: one coalesce key per run, fence and worker, for reports and heartbeats apart", () => {
    // (The host side: test/unit/cluster/host.test.ts "coalesceKey".)
    const def = makeJobActor();
    const report = (fence: number, worker: string) => ({
      kind: "complete" as const,
      run_id: RUN,
      fence,
      worker,
      outcome: "exited" as const,
      exit_code: 0,
      output: "",
      error: null,
      started_at_ms: 1,
      finished_at_ms: 2,
    });
    const key = (m: Parameters<NonNullable<typeof def.coalesceKey>>[0]) => def.coalesceKey!(m);
    assert.equal(key(report(3, "w1")), key({ ...report(3, "w1") }));
    assert.notEqual(key(report(3, "w1")), key(report(4, "w1")));
    assert.notEqual(key(report(3, "w1")), key(report(3, "w2")));
    const beat = { kind: "heartbeat" as const, run_id: RUN, fence: 3, worker: "w1" };
    assert.equal(
      key(beat),
      key({ ...beat, started_at_ms: 5 }),
      "a heartbeat's copy joins it, started or not",
    );
    assert.notEqual(key(beat), key(report(3, "w1")));
    assert.notEqual(key(beat), key({ ...beat, fence: 4 }));
  });

  it("a claim (the dispatcher's `claimed`, a worker's heartbeat) is urgent at admission; a completion report, a fire or a lease expiry waits its turn", () => {
    // (The host side: test/unit/cluster/host.test.ts "an urgent message's turn".)
    const def = makeJobActor();
    const urgent = (m: Parameters<NonNullable<typeof def.urgent>>[0]) => def.urgent!(m);
    assert.equal(urgent({ kind: "claimed", run_id: RUN, fence: 3, worker: "w1" }), true);
    assert.equal(urgent({ kind: "heartbeat", run_id: RUN, fence: 3, worker: "w1" }), true);
    assert.equal(
      urgent({
        kind: "complete",
        run_id: RUN,
        fence: 3,
        worker: "w1",
        outcome: "exited",
        exit_code: 0,
        output: "",
        error: null,
        started_at_ms: 1,
        finished_at_ms: 2,
      }),
      false,
    );
    assert.equal(urgent({ kind: "fire" }), false);
    assert.equal(urgent({ kind: "lease_expired", run_id: RUN, fence: 3 }), false);
    assert.equal(urgent({ kind: "dispatch_failed", run_id: RUN, fence: 3, reason: "x" }), false);
  });
});
