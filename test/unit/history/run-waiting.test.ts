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
