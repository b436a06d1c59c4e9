// Regressions for bugs found by the job-actor unit tests (each failed before its fix).
import { it } from "node:test";
import assert from "node:assert/strict";
import { Driver, JOB, cfg, spec } from "./driver.ts";
import { runIdFor } from "../../../src/protocol/ids.ts";
const sec = (s: number) => Date.UTC(2026, 0, 1, 0, 0, s);

it("regression: delete: delete of an overlap=queue job with a held occurrence starts that occurrence", () => {
  const d = new Driver();
  d.create(spec({ overlap: "queue" }));
  d.advance(3_500); // :02 leased, :04 queued
  assert.deepEqual(d.state.queued, [sec(4)]);
  d.send({ kind: "delete" });
  assert.deepEqual(d.state.runs, [], "a deleted job must have no active runs");
  assert.equal(
    d.records.get(runIdFor(JOB, sec(4)))?.status,
    "skipped",
    "the held occurrence is recorded, not run",
  );
});

it("regression: pause then resume of a job with a look-ahead occurrence: the prepared occurrence stays cancelled (dispatched once, never again), the next one runs", () => {
  const d = new Driver(cfg({ lookaheadMs: 5_000 }), {
    cancelReport: () => ({ not_started: true }),
  });
  d.create(spec({ overlap: "allow" }));
  d.advance(0); // look-ahead: :02 created and leased (the next occurrence only)
  d.send({ kind: "patch", patch: { enabled: false } }); // cancelled once its worker says it had not started
  assert.equal(d.records.get(runIdFor(JOB, sec(2)))?.status, "cancelled");
  d.send({ kind: "patch", patch: { enabled: true } }); // the next occurrence after the cancelled one (README: "stay cancelled")
  assert.equal(d.state.next_run_at_ms, sec(4));
  d.advance(4_000);
  assert.deepEqual(d.violations, []);
  assert.equal(
    d.dispatches.filter((x) => x.run_id === runIdFor(JOB, sec(2))).length,
    1,
    ":02 dispatched once, before the pause",
  );
  assert.equal(d.records.get(runIdFor(JOB, sec(2)))?.status, "cancelled");
  assert.equal(
    d.dispatches.filter((x) => x.run_id === runIdFor(JOB, sec(4))).length,
    1,
    ":04 runs",
  );
});

it("regression: run_once after a downtime longer than catchUpLimit occurrences runs the oldest batch's last, not the latest missed", () => {
  const d = new Driver(cfg({ misfireGraceMs: 1_000, catchUpLimit: 5 }));
  d.create(spec({ misfire: { policy: "run_once", starting_deadline_s: null } }));
  d.skipTime(61_000); // 30 missed (:02 … 1:00)
  d.send({ kind: "fire" });
  assert.deepEqual(
    d.state.runs.map((r) => r.scheduled_for_ms),
    [sec(60)],
  );
});

it("regression: misfire skip past catchUpLimit records the newest catchUpLimit occurrences and counts the rest", () => {
  const d = new Driver(cfg({ misfireGraceMs: 1_000, catchUpLimit: 5 }));
  d.create(spec({ misfire: { policy: "skip", starting_deadline_s: null } }));
  d.skipTime(61_000);
  d.send({ kind: "fire" });
  const missed = d.recordsByStatus("missed");
  assert.equal(missed.length, 5, "records are bounded by catchUpLimit");
  assert.ok(
    missed.some((r) => /25 earlier occurrence\(s\) not recorded/.test(r.reason ?? "")),
    JSON.stringify(missed.map((r) => r.reason)),
  );
});

it("regression: overlap=allow after downtime (defaults): a finished occurrence is run a second time", () => {
  const d = new Driver(cfg(), { autoComplete: () => ({}) });
  d.create(spec({ schedule: { cron: "* * * * * *", time_zone: "UTC" }, overlap: "allow" }));
  d.skipTime(97_000); // down until 00:01:37.5; :01 … 1:42 is 102 occurrences > catchUpLimit 100
  d.send({ kind: "fire" });
  d.advance(0);
  const perRun = new Map<string, number>();
  for (const x of d.dispatches) perRun.set(x.run_id, (perRun.get(x.run_id) ?? 0) + 1);
  assert.deepEqual(
    [...perRun].filter(([, n]) => n > 1),
    [],
    "each occurrence dispatched once",
  );
  assert.deepEqual(d.violations, []);
});

it("regression: starting_deadline_s shorter than misfireGraceMs is ignored", () => {
  const d = new Driver(cfg({ misfireGraceMs: 10_000 }));
  d.create(spec({ misfire: { policy: "run_once", starting_deadline_s: 1 } }));
  d.skipTime(5_000); // now 00:00:05.5; :02 is 3.5 s past due, beyond its 1 s starting deadline
  d.send({ kind: "fire" });
  assert.equal(d.records.get(runIdFor(JOB, sec(2)))?.status, "missed");
});

it("regression: occurrences held by overlap=queue vanish without a record on pause", () => {
  const d = new Driver();
  d.create(spec({ overlap: "queue" }));
  d.advance(5_500); // :02 leased; :04, :06 queued
  d.send({ kind: "patch", patch: { enabled: false } });
  assert.ok(d.records.has(runIdFor(JOB, sec(4))), ":04 has a record (e.g. skipped or cancelled)");
});

it("regression: a worker's first heartbeat may arrive before its acceptance (claimed): it claims the attempt", () => {
  const d = new Driver(cfg(), { autoClaim: false });
  d.create(spec({ schedule: { at: "2026-01-01T01:00:00Z" } }));
  const run = d.send({ kind: "run_now" }).reply!.run!;
  const fence = d.run(run.run_id)!.fence;
  assert.ok(fence > 0);
  const hb = d.heartbeat(run.run_id, fence, d.now);
  assert.equal(hb.fail, undefined, "heartbeat with the current fence is accepted");
  assert.equal(d.run(run.run_id)?.status, "running");
  const cancelsBefore = d.postsOf("cancel_on_worker").length;
  d.claim(); // the acceptance arrives late
  assert.equal(
    d.postsOf("cancel_on_worker").length,
    cancelsBefore,
    "the late claimed message does not cancel the attempt",
  );
  assert.equal(d.complete(run.run_id, {}, fence).fail, undefined);
  assert.equal(d.records.get(run.run_id)?.status, "succeeded");
});

it("regression: a completion before the acceptance arrives is accepted with the current fence", () => {
  const d = new Driver(cfg(), { autoClaim: false });
  d.create(spec({ schedule: { at: "2026-01-01T01:00:00Z" } }));
  const run = d.send({ kind: "run_now" }).reply!.run!;
  const fence = d.run(run.run_id)!.fence;
  assert.equal(d.complete(run.run_id, {}, fence).fail, undefined);
  assert.equal(d.records.get(run.run_id)?.status, "succeeded");
  assert.equal(d.records.get(run.run_id)?.attempts.length, 1);
});
