/**
 * A pause (or a schedule change) that meets a run a worker holds but whose start its owner has not
 * heard does not record it "cancelled before it started" on a guess (run-lifecycle.ts
 * `stopBeforeStart`, `endStopped`): the owner may have lost a start it knew only in memory (read
 * back after a move), and the worker's later heartbeats, answered from memory, never tell it again.
 * The worker is told to stop the attempt before the PATCH is answered, and its answer decides the
 * record: not started, ended by itself, killed running, or — silent — the probe of its lease.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { runIdFor } from "../../../src/protocol/ids.ts";
import { instant } from "../../../src/job-state/job-state.ts";
import type { ProbeReply } from "../../../src/protocol/worker.ts";
import type { JobEffect } from "../../../src/job-state/job-types.ts";
import { ACTOR_ID, Driver, JOB, WORKER, cfg, spec, type DriverOptions } from "./driver.ts";

const sec = (s: number) => Date.UTC(2026, 0, 1, 0, 0, s);
const RUN = runIdFor(JOB, sec(2));
const TTL = cfg().leaseTtlMs;
type ProbeFx = Extract<JobEffect, { kind: "probe_worker" }>;

/** The :02 run claimed by w1 at :02.0, not started (retries allowed: none may follow a pause). */
function claimed(opts: DriverOptions = {}): Driver {
  const d = new Driver(cfg(), { autoClaim: false, ...opts });
  d.create(spec({ retry: { max_attempts: 3, backoff: "fixed", base_s: 1, max_s: 1 } }));
  d.advance(1_500); // :02.0: fired, granted, offered
  d.claim();
  assert.equal(d.run(RUN)?.status, "leased");
  return d;
}

/** As `claimed`, but started on w1, the start heard in memory and lost with a read-back (a move). */
function startLost(opts: DriverOptions = {}): Driver {
  const d = claimed(opts);
  d.heartbeat(RUN, undefined, d.now); // the start: deferred, not written
  assert.equal(d.run(RUN)?.status, "running");
  d.activate();
  assert.equal(d.run(RUN)?.status, "leased", "the read-back lost the start");
  return d;
}

function pause(d: Driver) {
  return d.send({ kind: "patch", patch: { enabled: false } });
}

/** The record is not ended yet; the worker was told in the PATCH's own decision. */
function assertStopping(d: Driver, cancelsInPatch: readonly JobEffect[]): void {
  assert.equal(d.written.get(RUN)?.status, "queued", "no terminal record on a guess");
  assert.equal(d.run(RUN)?.stopping, "job paused");
  assert.ok(
    cancelsInPatch.some((fx) => fx.kind === "cancel_on_worker" && fx.run_id === RUN),
    "its worker is told before the PATCH is answered",
  );
}

describe("a pause meets a leased run whose start its owner has not heard", () => {
  it("tells the worker before the answer, keeps the slot and the run, refuses its heartbeats from memory, and shows it being stopped", () => {
    const d = startLost();
    const fence = d.run(RUN)!.fence;
    const p = pause(d);
    assertStopping(d, p.post ?? []);
    assert.equal(d.stored.runs[0]?.stopping, "job paused", "written with the pause");
    assert.ok(d.slots.has(RUN), "its slot is held until the worker answers");
    const view = d.send({ kind: "active_runs" }).reply!.runs!.find((r) => r.run_id === RUN)!;
    assert.equal(view.status, "leased");
    assert.equal(view.reason, "job paused: stopping it on its worker");
    // The worker's heartbeat, answered from memory (no turn): refused, so it stops the attempt.
    const q = d.actor.query!(
      d.state,
      { kind: "heartbeat", run_id: RUN, fence, worker: WORKER },
      { id: ACTOR_ID, nowMs: d.now },
    );
    assert.equal(q !== undefined && "fail" in q ? q.fail.code : undefined, "lease_lost");
    assert.equal(d.heartbeat(RUN, fence).fail?.code, "lease_lost", "through the mailbox too");
  });

  it("the worker reports it had not started: cancelled 'job paused before it started', its slot back at once", () => {
    const d = claimed();
    const offers = d.dispatches.length;
    assertStopping(d, pause(d).post ?? []);
    d.complete(RUN, { outcome: "killed", exit_code: null, not_started: true });
    const rec = d.written.get(RUN)!;
    assert.equal(rec.status, "cancelled");
    assert.equal(rec.reason, "job paused before it started");
    assert.equal(rec.started_at, null);
    assert.equal(rec.attempts[0]?.outcome, "cancelled");
    assert.equal(d.run(RUN), undefined);
    assert.ok(!d.slots.has(RUN), "the slot goes back: the worker said the task never started");
    assert.deepEqual(d.state.draining ?? [], []);
    d.advance(60_000);
    assert.equal(d.dispatches.length, offers, "nothing offered after the pause");
    assert.deepEqual(d.violations, []);
  });

  it("a worker of an earlier version reports the unstarted attempt killed, no exit, no output, no time: before it started", () => {
    const d = claimed();
    assertStopping(d, pause(d).post ?? []);
    d.complete(RUN, {
      outcome: "killed",
      exit_code: null,
      output: "",
      started_at_ms: d.now,
      finished_at_ms: d.now,
    });
    assert.equal(d.written.get(RUN)?.status, "cancelled");
    assert.equal(d.written.get(RUN)?.reason, "job paused before it started");
    assert.equal(d.written.get(RUN)?.started_at, null);
    assert.ok(!d.slots.has(RUN));
  });

  it("the attempt had ended by itself (its report was waiting): its real outcome is recorded — succeeded", () => {
    const d = startLost();
    assertStopping(d, pause(d).post ?? []);
    d.complete(RUN, { started_at_ms: sec(2), finished_at_ms: sec(3) });
    const rec = d.written.get(RUN)!;
    assert.equal(rec.status, "succeeded");
    assert.equal(rec.started_at, instant(sec(2)));
    assert.ok(!d.slots.has(RUN));
    assert.deepEqual(d.violations, []);
  });

  it("the attempt had failed by itself: recorded failed, not retried (the job is paused)", () => {
    const d = startLost();
    const offers = d.dispatches.length;
    assertStopping(d, pause(d).post ?? []);
    d.complete(RUN, { exit_code: 1, started_at_ms: sec(2), finished_at_ms: sec(3) });
    const rec = d.written.get(RUN)!;
    assert.equal(rec.status, "failed");
    assert.match(rec.reason ?? "", /^not retried \(job paused\)/);
    d.advance(60_000);
    assert.equal(d.dispatches.length, offers, "no further attempt");
  });

  it("the attempt was running and is killed by the stop: cancelled with its start recorded, not 'before it started'", () => {
    const d = startLost();
    assertStopping(d, pause(d).post ?? []);
    d.complete(RUN, {
      outcome: "killed",
      exit_code: 143,
      started_at_ms: sec(2),
      finished_at_ms: sec(3),
    });
    const rec = d.written.get(RUN)!;
    assert.equal(rec.status, "cancelled");
    assert.equal(rec.reason, "job paused after it started: stopped on worker w1");
    assert.equal(rec.started_at, instant(sec(2)));
    assert.equal(rec.attempts[0]?.started_at, instant(sec(2)));
    assert.equal(rec.attempts[0]?.outcome, "cancelled");
    assert.ok(!d.slots.has(RUN), "the task is gone: the slot goes back");
    assert.deepEqual(d.state.draining ?? [], []);
  });

  const silent: [string, ProbeReply | null | "gone", string, string | RegExp][] = [
    ["not_started", { state: "not_started" }, "cancelled", "job paused before it started"],
    [
      "started (its result lost)",
      { state: "started" },
      "cancelled",
      /^job paused after it started/,
    ],
    [
      "ended, with its completion",
      {
        state: "ended",
        completion: {
          outcome: "exited",
          exit_code: 0,
          output: "ok",
          error: null,
          started_at_ms: sec(2),
          finished_at_ms: sec(3),
        },
      },
      "succeeded",
      /^$/,
    ],
    ["gone", "gone", "cancelled", /did not say whether the attempt had started$/],
    ["no answer, ever", null, "cancelled", /did not say whether the attempt had started$/],
  ];
  for (const [what, answer, status, reason] of silent) {
    it(`no report: the probe of its lapsed lease decides — ${what}`, () => {
      const d = startLost({ probe: (_fx: ProbeFx) => answer });
      const offers = d.dispatches.length;
      assertStopping(d, pause(d).post ?? []);
      d.advance(TTL); // the lease's end: probed, not guessed
      d.advance(5 * TTL); // unanswered probes are asked again (MAX_UNANSWERED_PROBES)
      assert.ok(d.postsOf("probe_worker").length >= 1, "its worker is asked");
      const rec = d.written.get(RUN)!;
      assert.equal(rec.status, status);
      if (typeof reason === "string") assert.equal(rec.reason, reason);
      else assert.match(rec.reason ?? "", reason);
      assert.equal(d.run(RUN), undefined);
      assert.ok(!d.slots.has(RUN));
      assert.equal(d.dispatches.length, offers, "never offered again");
      assert.deepEqual(d.violations, []);
    });
  }

  // Its task may still be dying (a kill's grace) when its worker cannot say: the slot is held as a
  // cancel's drain holds it, until the lease's end + the drain grace, or the worker's report.
  for (const [what, answer] of [
    ["gone", "gone"],
    ["no answer", null],
    ["unknown", { state: "unknown" }],
  ] as const) {
    it(`the probe cannot say (${what}): the slot is held until the drain's bound`, () => {
      const d = startLost({ probe: (_fx: ProbeFx) => answer });
      pause(d);
      d.advance(TTL); // the lease's end: probed
      const ended = () => d.written.get(RUN)?.status === "cancelled";
      for (let i = 0; i < 100 && !ended(); i++) d.advance(500);
      assert.ok(d.slots.has(RUN), "the slot is held while the task may be dying");
      assert.ok(d.state.draining?.some((x) => x.run_id === RUN));
      d.advance(TTL + cfg().drainGraceMs);
      assert.ok(!d.slots.has(RUN), "given back at the drain's bound");
      assert.deepEqual(d.violations, []);
    });
  }

  it("the probe cannot say, then the worker's report of the killed task ends the drain at once", () => {
    const d = startLost({ probe: () => "gone" });
    const fence = d.run(RUN)!.fence;
    pause(d);
    d.advance(TTL);
    for (let i = 0; i < 100 && d.written.get(RUN)?.status !== "cancelled"; i++) d.advance(500);
    assert.ok(d.slots.has(RUN));
    d.complete(RUN, { outcome: "killed", exit_code: 143, started_at_ms: sec(2) }, fence);
    assert.ok(!d.slots.has(RUN), "the task is gone: the slot goes back");
    assert.deepEqual(d.violations, []);
  });

  it("the worker still runs it at the probe (the cancel was lost): told again, then its kill decides", () => {
    const d = startLost({ probe: () => ({ state: "running" }) });
    pause(d);
    const told = d.postsOf("cancel_on_worker").length;
    d.advance(TTL + 1);
    assert.ok(d.postsOf("cancel_on_worker").length > told, "told again");
    assert.equal(d.run(RUN)?.stopping, "job paused");
    d.complete(RUN, { outcome: "killed", exit_code: 143, started_at_ms: sec(2) });
    assert.equal(d.written.get(RUN)?.status, "cancelled");
    assert.match(d.written.get(RUN)?.reason ?? "", /^job paused after it started/);
  });

  it("a new owner reads the stop back and tells the worker again; a resume meanwhile offers it nowhere", () => {
    const d = startLost();
    pause(d); // the cancel is published, then the owner moves before any report arrives
    const told = d.postsOf("cancel_on_worker").length;
    d.activate();
    d.advance(0); // `recall`
    assert.equal(d.postsOf("cancel_on_worker").length, told + 1, "told again by the new owner");
    d.send({ kind: "patch", patch: { enabled: true } });
    assert.equal(d.run(RUN)?.stopping, "job paused", "a resume does not undo the stop");
    d.complete(RUN, { outcome: "killed", exit_code: 143, started_at_ms: sec(2) });
    assert.equal(d.written.get(RUN)?.status, "cancelled");
    assert.equal(
      d.dispatches.filter((x) => x.run_id === RUN).length,
      1,
      "the stopped run is never offered again",
    );
  });

  it("with the worker's report at once (the usual case) the run ends within the pause's own send", () => {
    const d = startLost({ cancelReport: () => ({ started_at_ms: sec(2) }) });
    d.skipTime(100); // it ran 100 ms (killed within the millisecond of its start, see below)
    pause(d);
    assert.equal(d.written.get(RUN)?.status, "cancelled");
    assert.match(d.written.get(RUN)?.reason ?? "", /^job paused after it started/);
    assert.equal(d.run(RUN), undefined);
  });

  it("a schedule change meets a claimed run prepared ahead: the worker's answer decides — 'schedule changed before it started'", () => {
    const start = Date.UTC(2026, 0, 1, 0, 58, 0) + 500;
    const d = new Driver(cfg({ lookaheadMs: 300_000 }), {}, start);
    d.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" }, overlap: "allow" }));
    d.advance(4_000); // the 01:00 run is prepared and claimed
    const prepared = runIdFor(JOB, Date.UTC(2026, 0, 1, 1, 0, 0));
    assert.equal(d.run(prepared)?.status, "leased");
    // Within a lease TTL of its start (further ahead it cannot have started: cancelled at once).
    d.skipTime(Date.UTC(2026, 0, 1, 0, 59, 52) - d.now);
    d.send({ kind: "patch", patch: { schedule: { cron: "*/10 * * * * *", time_zone: "UTC" } } });
    assert.equal(d.run(prepared)?.stopping, "schedule changed");
    assert.ok(d.postsOf("cancel_on_worker").some((fx) => fx.run_id === prepared));
    assert.notEqual(d.written.get(prepared)?.status, "cancelled");
    d.complete(prepared, { outcome: "killed", exit_code: null, not_started: true });
    assert.equal(d.written.get(prepared)?.status, "cancelled");
    assert.equal(d.written.get(prepared)?.reason, "schedule changed before it started");
    assert.deepEqual(d.violations, []);
  });
});
