/**
 * A run a pause or a schedule change is stopping on its worker (run-lifecycle.ts
 * `stopBeforeStart`) is not an occurrence waiting to run: a run-now under overlap=queue does not
 * send it back to the queue (job-commands.ts `unprepareQueued`), where it would run later.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { runIdFor } from "../../../src/protocol/ids.ts";
import { Driver, JOB, cfg, spec } from "./driver.ts";

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
