/**
 * Every run with a record is in its job's runs list once (the runs index, run-index.ts), whatever
 * way the run came to its record: scheduled, started by hand, ended at once (replaced, cancelled,
 * paused), or recorded without a start (skipped, missed, throttled, settled, dropped from the
 * queue). The job actor's core wrapped with the index, driven as the shell runs it (driver.ts,
 * `index`); after every step the list the index gives is compared with the records written.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Driver, JOB, cfg, spec, T0 } from "./driver.ts";
import { RUN_INDEX_CHUNK } from "../../../src/history/run-index.ts";
import { runIdFor } from "../../../src/protocol/ids.ts";
import type { JobActorConfig } from "../../../src/job-state/job-types.ts";
import type { DriverOptions } from "./driver.ts";

/** Whole seconds after T0's minute (T0 is 00:00:00.500). */
const sec = (n: number) => T0 - 500 + n * 1000;
const everySecond = { cron: "* * * * * *", time_zone: "UTC" } as const;

/** A driver with the index whose list is checked after every message (`step`). */
function indexed(c: Partial<JobActorConfig> = {}, o: DriverOptions = {}) {
  const d = new Driver(cfg(c), { ...o, index: true });
  const check = (when: string) => assert.deepEqual(d.listingProblems(), [], when);
  return { d, check };
}

const manualRun = (d: Driver) => d.state.runs.find((r) => r.trigger === "manual");

describe("runs list: a run started by hand that ends at once", () => {
  it("replaced by the next occurrence 14 ms after its creation (overlap replace, at the due instant)", () => {
    const { d, check } = indexed();
    d.create(spec({ schedule: everySecond, overlap: "replace" }));
    d.advance(sec(1) - d.now); // :01 runs (claimed, not ended)
    check(":01 created");
    d.advance(sec(2) - 14 - d.now);
    const x = d.send({ kind: "run_now", request_id: "rq-1", requested_at_ms: d.now }).reply!.run!;
    check("run-now created");
    d.advance(14); // :02 falls due: replaces :01 and the run-now
    const rec = d.written.get(x.run_id)!;
    assert.equal(rec.status, "cancelled");
    assert.equal(rec.reason, "replaced by a newer occurrence");
    assert.equal(rec.trigger, "manual");
    check("run-now replaced");
    d.advance(sec(5) - d.now);
    assert.equal(
      d.listing().filter((id) => id === x.run_id).length,
      1,
      "listed once, after later runs",
    );
    check("later occurrences");
    // Read back by a new owner: the list is the stored index plus what it fires again.
    d.activate();
    d.advance(sec(7) - d.now);
    check("after a move");
    assert.deepEqual(d.violations, []);
  });

  it("replaced by an occurrence prepared ahead (its gate at the due instant)", () => {
    const { d, check } = indexed({ lookaheadMs: 5_000 });
    d.create(spec({ overlap: "replace" }));
    d.advance(0); // :02 prepared, gated
    const prepared = d.state.runs[0]!;
    assert.equal(prepared.gate, true);
    d.advance(sec(2) - 14 - d.now);
    const x = d.send({ kind: "run_now" }).reply!.run!;
    check("run-now beside the prepared run");
    d.advance(14);
    assert.equal(d.written.get(x.run_id)?.status, "cancelled");
    assert.deepEqual(
      d.state.runs.map((r) => r.run_id),
      [prepared.run_id],
    );
    check("run-now replaced by the gate");
    assert.deepEqual(d.violations, []);
  });

  it("cancelled by hand in the next turn, and by a pause", () => {
    const { d, check } = indexed({}, { autoGrant: false });
    d.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" } }));
    const x = d.send({ kind: "run_now" }).reply!.run!;
    d.send({ kind: "cancel", run_id: x.run_id, by: "API key k1" });
    assert.equal(d.written.get(x.run_id)?.status, "cancelled");
    check("cancelled by hand");
    const y = d.send({ kind: "run_now" }).reply!.run!;
    d.send({ kind: "patch", patch: { enabled: false }, request_id: "p1" });
    assert.equal(d.written.get(y.run_id)?.status, "cancelled");
    check("cancelled by the pause");
    assert.equal(d.listing().length, 2);
  });
});

describe("runs list: records written without a start", () => {
  it("skipped at the due instant and by a gate (overlap skip)", () => {
    const { d, check } = indexed();
    d.create(spec({ overlap: "skip" }));
    d.advance(sec(4) - d.now); // :02 runs on, :04 skipped
    assert.equal(d.recordsByStatus("skipped").length, 1);
    check("skipped at its due instant");
    const ahead = indexed({ lookaheadMs: 5_000 });
    ahead.d.create(spec({ overlap: "skip" }));
    ahead.d.advance(sec(2) - ahead.d.now); // :02 starts (its gate opens), :04 prepared ahead
    const first = ahead.d.run(runIdFor(JOB, sec(2)))!;
    ahead.d.heartbeat(first.run_id, first.fence, ahead.d.now);
    ahead.d.advance(sec(4) - ahead.d.now); // :02 still runs at :04: its gate skips it
    assert.ok(ahead.d.recordsByStatus("skipped").length >= 1);
    ahead.check("skipped by its gate");
  });

  it("missed after downtime, and missed at its starting deadline while waiting for a slot", () => {
    const { d, check } = indexed();
    d.create(spec({ misfire: { policy: "skip", starting_deadline_s: null } }));
    d.skipTime(20_000);
    d.advance(0);
    d.send({ kind: "fire" });
    assert.ok(d.recordsByStatus("missed").length > 0);
    check("missed after downtime");
    const late = indexed({}, { autoGrant: false });
    late.d.create(spec({ misfire: { policy: "run_once", starting_deadline_s: 1 } }));
    late.d.advance(sec(4) - late.d.now); // :02 waits for a slot past its deadline
    assert.ok(late.d.recordsByStatus("missed").length > 0);
    late.check("missed at its starting deadline");
  });

  it("throttled by the job's bound and by the tenant's", () => {
    const { d, check } = indexed({ maxWaitingRuns: 1 }, { autoGrant: false });
    d.create(spec({ overlap: "allow" }));
    d.advance(sec(4) - d.now); // :02 waits, :04 beyond the job's bound
    assert.equal(d.recordsByStatus("throttled").length, 1);
    check("throttled by the job");
    const t = indexed({}, { autoGrant: false });
    t.d.create(spec({ overlap: "allow" }));
    t.d.advance(sec(2) - t.d.now);
    const ask = t.d.postsOf("acquire_slot").at(-1)!;
    t.d.send({ kind: "slot_throttled", run_id: ask.grant, waiting: 5, max_waiting: 5 });
    assert.equal(t.d.written.get(ask.run_id)?.status, "throttled");
    t.check("throttled by the tenant");
  });

  it("skipped when a pause drops the overlap queue; settled when a pause meets a fire's orphan", () => {
    const { d, check } = indexed();
    d.create(spec({ overlap: "queue" }));
    d.advance(sec(6) - d.now); // :02 runs on; :04 and :06 queued
    assert.equal(d.state.queued.length, 2);
    d.send({ kind: "patch", patch: { enabled: false }, request_id: "p1" });
    assert.equal(d.recordsByStatus("skipped").length, 2);
    check("queue dropped");
    const o = indexed();
    o.d.create(spec());
    o.d.skipTime(sec(2) - o.d.now);
    o.d.crashAfterPre({ kind: "fire" }); // :02's record written, the fire's state lost
    o.d.activate();
    o.d.send({ kind: "patch", patch: { enabled: false }, request_id: "p1" });
    assert.equal(o.d.written.get(runIdFor(JOB, sec(2)))?.status, "cancelled");
    o.check("the orphan settled");
  });
});

describe("runs list: an occurrence sent back to the queue by a run started by hand", () => {
  it("is listed once when it is re-created, also when a chunk closed in between", () => {
    // Sent back only more than TTL + the start tolerance (1 s) ahead of it: 1.5 s here.
    const { d, check } = indexed({ lookaheadMs: 5_000, leaseTtlMs: 400 });
    d.create(spec({ overlap: "queue" }));
    d.advance(0);
    const prepared = d.state.runs[0]!;
    assert.equal(prepared.gate, true);
    // A chunk full but one before the run-now: its entry closes the chunk.
    const filler = Array.from({ length: RUN_INDEX_CHUNK - 2 }, (_, i) => `x${i}`);
    d.state = { ...d.state, index: { seq: 0, pending: [...filler, ...d.state.index!.pending] } };
    check("prepared");
    const x = d.send({ kind: "run_now" }).reply!.run!;
    assert.deepEqual(d.state.queued, [sec(2)], "the prepared occurrence waits in the queue");
    assert.equal(d.state.index!.seq, 1, "the run-now closed chunk 0");
    check("sent back");
    d.heartbeat(x.run_id, d.run(x.run_id)!.fence, d.now);
    d.advance(sec(2) + 500 - d.now);
    d.complete(x.run_id);
    assert.equal(d.state.runs[0]?.run_id, prepared.run_id, "re-created when the run-now ends");
    check("re-created");
    d.complete(prepared.run_id);
    check("ended");
  });
});

describe("runs list: the driver's check", () => {
  it("reports a run-now whose index entry is missing", () => {
    const { d } = indexed({}, { autoGrant: false });
    d.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" } }));
    const x = d.send({ kind: "run_now" }).reply!.run!;
    d.state = { ...d.state, index: { seq: 0, pending: [] } };
    assert.deepEqual(d.listingProblems(), [
      `${x.run_id} (manual, queued) has a record but is not listed`,
    ]);
    assert.ok(manualRun(d));
  });
});
