/** Runs waiting by reason (src/history/run-waiting.ts), from the records and effects the job shell reports. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { RunStatus, RunView } from "../../../src/protocol/model.ts";
import { RunsWaiting, STALE_MS } from "../../../src/history/run-waiting.ts";

const T0 = Date.parse("2026-03-08T07:00:00Z");
const rec = (id: string, status: RunStatus, scheduledMs = T0): RunView => ({
  run_id: id,
  job_id: "j",
  tenant_id: "t",
  scheduled_for: new Date(scheduledMs).toISOString(),
  trigger: "schedule",
  status,
  attempt: 0,
  attempts: [],
  created_at: "",
  started_at: null,
  finished_at: null,
  next_attempt_at: null,
  result: null,
  reason: null,
});

describe("runs waiting", () => {
  it("slot until offered to a worker, worker until claimed; not yet due and not owned are not counted", () => {
    let now = T0;
    const w = new RunsWaiting(() => now);
    const owner = () => true;
    w.record(rec("a", "queued"), owner);
    w.effect("a", "slot", owner);
    w.record(rec("b", "queued"), owner);
    w.effect("b", "slot", owner);
    w.effect("b", "worker", owner, T0);
    w.record(rec("later", "queued", T0 + 5_000), owner); // look-ahead: created before it is due
    w.effect("later", "worker", owner, T0 + 5_000);
    assert.deepEqual(w.count(now), { slot: 1, worker: 1 });
    assert.deepEqual(w.count(T0 + 5_000), { slot: 1, worker: 2 });
    w.record(rec("b", "leased"), owner); // claimed: no longer waiting
    w.record(rec("a", "retry_wait"), owner);
    assert.deepEqual(w.count(now), { slot: 0, worker: 0 });
    let owned = true;
    w.record(rec("moved", "queued"), () => owned);
    assert.deepEqual(w.count(now), { slot: 1, worker: 0 });
    owned = false; // the partition moved away: the new owner counts it
    assert.deepEqual(w.count(now), { slot: 0, worker: 0 });
    const before = w.size;
    now += STALE_MS + 1;
    w.count(now);
    assert.equal(w.size, before - 1, "forgotten once stale");
  });
});

describe("runs waiting by tenant", () => {
  it("counts each tenant's own runs due and owned, by reason; an effect keeps its record's tenant", () => {
    const w = new RunsWaiting(() => T0);
    const owner = () => true;
    w.record({ ...rec("a1", "queued"), tenant_id: "ta" }, owner);
    w.record({ ...rec("a2", "queued"), tenant_id: "ta" }, owner);
    w.effect("a2", "worker", owner, T0);
    w.record({ ...rec("b1", "queued"), tenant_id: "tb" }, owner);
    w.record({ ...rec("b2", "queued", T0 + 60_000), tenant_id: "tb" }, owner); // not due yet
    w.record({ ...rec("c1", "queued"), tenant_id: "tc" }, () => false); // moved away
    w.effect("unknown", "slot", owner); // no record seen: no tenant to count it for
    assert.deepEqual([...w.countByTenant(T0)].sort(), [
      ["ta", [1, 1]],
      ["tb", [1, 0]],
    ]);
    assert.deepEqual(w.count(T0), { slot: 3, worker: 1 });
  });
});
