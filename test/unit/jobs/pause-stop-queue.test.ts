/**
 * A run a pause or a schedule change is stopping on its worker (run-lifecycle.ts
 * `stopBeforeStart`) is not an occurrence waiting to run: a run-now under overlap=queue does not
 * send it back to the queue (job-commands.ts `unprepareQueued`), where it would run later. One
 * too far ahead to have started is cancelled at once, its drain holding `skip` runs behind it.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { runIdFor } from "../../../src/protocol/ids.ts";
import { holdOf } from "../../../src/jobs/job-actor.ts";
import { Driver, JOB, cfg, spec, type DriverOptions } from "./driver.ts";

const HOUR = Date.UTC(2026, 0, 1, 1, 0, 0);
const PREPARED = runIdFor(JOB, HOUR);

/** An hourly queue job whose 01:00 run is prepared ahead and claimed by w1, 8 s before its start. */
function claimedAhead(): Driver {
  const d = new Driver(cfg({ lookaheadMs: 300_000 }), {}, Date.UTC(2026, 0, 1, 0, 59, 50) + 500);
  d.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" }, overlap: "queue" }));
  d.advance(2_000);
  assert.equal(d.run(PREPARED)?.status, "leased");
  return d;
}

/**
 * A new owner whose clock is a minute behind (read back after a move): the stopped run is again
 * more than a lease TTL from its due time by that clock, as `unprepareQueued` asks.
 */
function movedBehind(d: Driver): void {
  d.activate();
  d.now -= 60_000;
}

describe("a run being stopped and a run-now under overlap=queue", () => {
  it("pause, run-now while paused, resume: the stopped occurrence is not queued again", () => {
    const d = claimedAhead();
    d.send({ kind: "patch", patch: { enabled: false } });
    assert.equal(d.run(PREPARED)?.stopping, "job paused");
    movedBehind(d);
    const man = d.send({ kind: "run_now" }).reply!.run!.run_id;
    assert.ok(!d.state.queued.includes(HOUR), "the stopped occurrence is not in the queue");
    d.advance(1_000);
    d.complete(man);
    d.send({ kind: "patch", patch: { enabled: true } });
    d.advance(2 * 3600_000);
    assert.equal(
      d.dispatches.filter((x) => x.run_id === PREPARED).length,
      1,
      "the occurrence the pause stopped is never offered again",
    );
    assert.deepEqual(d.violations, []);
  });

  it("schedule change, then a run-now: the old schedule's stopped occurrence is not queued again", () => {
    const d = claimedAhead();
    d.send({ kind: "patch", patch: { schedule: { cron: "30 * * * *", time_zone: "UTC" } } });
    assert.equal(d.run(PREPARED)?.stopping, "schedule changed");
    movedBehind(d);
    const man = d.send({ kind: "run_now" }).reply!.run!.run_id;
    assert.ok(!d.state.queued.includes(HOUR), "the stopped occurrence is not in the queue");
    d.advance(1_000);
    d.complete(man);
    d.advance(10_000);
    assert.equal(
      d.dispatches.filter((x) => x.run_id === PREPARED).length,
      1,
      "the old schedule's occurrence is never offered again",
    );
    assert.deepEqual(d.violations, []);
  });
});

describe("an occurrence a run-now sent back to the queue, then a schedule change", () => {
  // Prepared ahead and sent back to the queue by a run-now (`unprepareQueued`), it is still an
  // occurrence created ahead of its due time: a schedule change cancels it like one prepared on
  // a worker, rather than leaving it queued to run once the manual run ends.
  for (const cron of ["30 * * * *", "*/30 * * * *"])
    it(`the old schedule's occurrence is cancelled, never offered again (new schedule ${cron})`, () => {
      const d = new Driver(cfg({ lookaheadMs: 300_000 }), {}, Date.UTC(2026, 0, 1, 0, 56, 0) + 500);
      d.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" }, overlap: "queue" }));
      d.advance(4_000);
      assert.equal(d.run(PREPARED)?.status, "leased");
      const man = d.send({ kind: "run_now" }).reply!.run!.run_id;
      assert.ok(d.state.queued.includes(HOUR), "sent back to the queue by the run-now");
      d.send({ kind: "patch", patch: { schedule: { cron, time_zone: "UTC" } } });
      assert.ok(!d.state.queued.includes(HOUR), "the old schedule's occurrence left the queue");
      assert.equal(d.written.get(PREPARED)?.status, "cancelled");
      d.advance(1_000);
      d.complete(man);
      d.advance(2 * 3600_000);
      assert.equal(
        d.dispatches.filter((x) => x.run_id === PREPARED).length,
        1,
        "the old schedule's occurrence is never offered again",
      );
      assert.equal(d.written.get(PREPARED)?.status, "cancelled");
      assert.deepEqual(d.violations, []);
    });
});

describe("a run being stopped and the new schedule's overlap", () => {
  // A run claimed further ahead of its start than a lease TTL + the start tolerance cannot have
  // started (its worker starts it no earlier than its start less the tolerance, by the owner's
  // clock): it is cancelled at once, not left waiting for its worker's answer. Its worker may
  // still start it under its claim's cover if the cancel is lost, so its drain holds the new
  // schedule's later `skip` runs until the worker reports the attempt gone (`holdOf`).
  function changedFarAhead(cancelReport?: DriverOptions["cancelReport"]) {
    const start = Date.UTC(2026, 0, 1, 0, 56, 0) + 500;
    const d = new Driver(
      cfg({ lookaheadMs: 300_000 }),
      cancelReport ? { cancelReport } : {},
      start,
    );
    d.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" }, overlap: "skip" }));
    d.advance(4_000);
    assert.equal(d.run(PREPARED)?.status, "leased");
    const p = d.send({
      kind: "patch",
      patch: { schedule: { cron: "*/10 * * * * *", time_zone: "UTC" } },
    });
    assert.equal(d.run(PREPARED), undefined, "ended at once");
    assert.equal(d.records.get(PREPARED)?.status, "cancelled");
    assert.equal(d.records.get(PREPARED)?.reason, "schedule changed before it started");
    assert.ok(
      p.post?.some((fx) => fx.kind === "cancel_on_worker" && fx.run_id === PREPARED),
      "its worker is told to drop it",
    );
    return d;
  }

  it("a schedule change 4 min before a prepared run's start cancels it at once; its worker's report frees the new schedule", () => {
    const d = changedFarAhead(() => ({ not_started: true }));
    assert.equal(d.state.draining, undefined, "the worker said it is gone: no drain");
    d.opts.autoComplete = () => ({});
    d.advance(5 * 60_000);
    assert.equal(d.recordsByStatus("skipped").length, 0);
    assert.ok(d.recordsByStatus("succeeded").length >= 25);
    assert.deepEqual(d.violations, []);
  });

  it("its worker silent (the cancel lost, it may start the run under its cover): the drain holds the new schedule's skip runs", () => {
    const d = changedFarAhead();
    assert.equal(d.state.draining?.[0]?.run_id, PREPARED);
    d.advance(1_000);
    const next = d.state.runs.find((r) => r.trigger === "schedule");
    assert.ok(next, "the new schedule's next run is prepared");
    assert.equal(holdOf(d.state, next), true);
  });

  it("within a lease TTL of its start it is stopped on its worker (it may have started)", () => {
    const d = claimedAhead(); // 8 s before its start
    d.send({ kind: "patch", patch: { enabled: false } });
    assert.equal(d.run(PREPARED)?.stopping, "job paused");
    assert.equal(d.written.get(PREPARED)?.status, "queued", "no end on a guess");
  });
});
