/**
 * The job actor raises a `run_ended` post effect for every run end a run event names — succeeded,
 * failed, timed out, skipped, missed — carrying the terminal record it writes, and none for a
 * cancelled run (src/notify/run-events.ts turns them into events).
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Driver, JOB, T0, cfg, spec } from "./driver.ts";
import { runIdFor } from "../../../src/protocol/ids.ts";
import { TERMINAL } from "../../../src/protocol/model.ts";
import { endEventOf } from "../../../src/protocol/events.ts";

/** Every terminal record but cancelled ones has exactly one run_ended, with that very record. */
function assertOnePerEnd(d: Driver): void {
  const ended = d.postsOf("run_ended").map((x) => x.record);
  const terminal = [...d.records.values()].filter(
    (r) => TERMINAL.has(r.status) && r.status !== "cancelled",
  );
  assert.ok(terminal.length > 0);
  assert.deepEqual(
    ended.map((r) => r.run_id).sort(),
    terminal.map((r) => r.run_id).sort(),
    "one run_ended per end",
  );
  for (const r of ended) {
    assert.deepEqual(r, d.records.get(r.run_id), `the record written for ${r.run_id}`);
    assert.ok(endEventOf(r.status), `${r.status} names an event`);
  }
}

describe("run_ended", () => {
  it("succeeded, failed and timed out runs each raise one", () => {
    for (const outcome of [
      { exit_code: 0 },
      { exit_code: 3, output: "boom" },
      { outcome: "timed_out" as const, exit_code: null },
    ]) {
      const d = new Driver(cfg(), { autoComplete: () => outcome });
      d.create(spec({ schedule: { at: "2026-01-01T00:00:02Z" } }));
      d.advance(5_000);
      assertOnePerEnd(d);
      const status = d.postsOf("run_ended")[0]?.record.status;
      assert.equal(
        status,
        outcome.exit_code === 0 ? "succeeded" : outcome.exit_code === 3 ? "failed" : "timed_out",
      );
    }
  });

  it("skipped occurrences (overlap skip behind a running run) raise one each", () => {
    const d = new Driver(cfg(), { autoClaim: true });
    d.create(spec({ overlap: "skip" }));
    for (let i = 0; i < 6; i++) {
      d.advance(1_000);
      for (const r of d.state.runs)
        if (r.status === "leased") d.heartbeat(r.run_id, r.fence, d.now); // runs on and on
    }
    assert.ok(d.recordsByStatus("skipped").length >= 2, "skips recorded");
    assertOnePerEnd(d);
  });

  it("missed occurrences (the actor was down past them) raise one each", () => {
    const d = new Driver(cfg({ misfireGraceMs: 1_000 }), {
      autoComplete: () => ({ exit_code: 0 }),
    });
    d.create(spec({ overlap: "allow", misfire: { policy: "skip", starting_deadline_s: null } }));
    d.skipTime(21_000);
    d.send({ kind: "fire" });
    d.advance(3_000);
    assert.ok(d.recordsByStatus("missed").length >= 5, "missed recorded");
    assertOnePerEnd(d);
  });

  it("a cancelled run raises none", () => {
    const d = new Driver(cfg(), { autoClaim: true });
    d.create(spec({ schedule: { at: "2026-01-01T00:00:02Z" } }));
    d.advance(2_000);
    const run = runIdFor(JOB, T0 - 500 + 2_000);
    d.send({ kind: "cancel", run_id: run, by: "API key k1" });
    assert.equal(d.records.get(run)?.status, "cancelled");
    assert.equal(d.postsOf("run_ended").length, 0);
  });
});
