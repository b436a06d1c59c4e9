/**
 * The job actor's writes per run (issue "Top of the hour": fewer KV operations per run). A run's
 * record is written at its creation and at its end only (transitions in between are `note_run`
 * effects: metrics, and the API reads active runs from the actor); the grant, the offer and the
 * start change the state without a write (`deferWrite`), each recoverable if lost: these tests
 * count the writes and show the recovery after a takeover that lost them.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { runIdFor } from "../../../src/jobs/ids.ts";
import { makeJobActor } from "../../../src/jobs/job-actor.ts";
import { FENCE_BLOCK, loadJobState } from "../../../src/jobs/job-state.ts";
import { ACTOR_ID, Driver, JOB, cfg, spec } from "./driver.ts";

const sec = (s: number) => Date.UTC(2026, 0, 1, 0, 0, s);
const RUN = runIdFor(JOB, sec(2));

/** A job whose :02 run was offered to w1 and claimed; writes counted from here. */
function claimed(): Driver {
  const d = new Driver(cfg(), { autoClaim: false });
  d.create(spec());
  d.advance(1_500); // :02 fired, slot granted, offered
  d.claim();
  return d;
}

describe("deferred writes: what one run costs", () => {
  it("a run from its occurrence to success writes its record twice (created, ended) and the job state three times (fire, claim, end)", () => {
    const d = new Driver(cfg(), { autoClaim: false });
    d.create(spec());
    const [records, states] = [d.recordWrites, d.stateWrites];
    d.advance(1_500); // fire: record created + state; grant and offer deferred
    assert.equal(d.recordWrites - records, 1, "the record is created");
    assert.equal(d.stateWrites - states, 1, "fire writes the state; the grant and the offer do not");
    d.claim(); // the claim is written: only then may the worker start
    assert.equal(d.stateWrites - states, 2);
    d.heartbeat(RUN, undefined, d.now); // the start: deferred
    assert.equal(d.run(RUN)?.status, "running");
    assert.equal(d.stateWrites - states, 2, "the start is not written");
    assert.equal(d.recordWrites - records, 1, "neither the claim nor the start writes the record");
    assert.equal(d.written.get(RUN)?.status, "queued", "the stored record still says queued");
    assert.equal(d.records.get(RUN)?.status, "running", "what the API shows comes from the actor");
    d.complete(RUN);
    assert.equal(d.recordWrites - records, 2, "the record is written at the end");
    assert.equal(d.stateWrites - states, 3);
    assert.equal(d.written.get(RUN)?.status, "succeeded");
    assert.deepEqual(d.violations, []);
  });

  it("active_runs answers the live view of every active run, from memory and without a write (also as a query)", () => {
    const d = claimed();
    d.heartbeat(RUN, undefined, d.now);
    const writes = d.stateWrites;
    const reply = d.send({ kind: "active_runs" }).reply;
    assert.equal(reply?.runs?.length, 1);
    assert.equal(reply?.runs?.[0]?.status, "running");
    assert.equal(reply?.runs?.[0]?.attempts[0]?.worker, "w1");
    assert.equal(d.stateWrites, writes);
    const q = makeJobActor(cfg()).query!(d.state, { kind: "active_runs" }, { id: ACTOR_ID, nowMs: d.now });
    assert.deepEqual(q, { reply: { runs: reply.runs }, alsoQueue: false });
  });

  it("a takeover that lost a deferred start learns it again from the worker's next heartbeat (it carries started_at)", () => {
    const d = claimed();
    d.heartbeat(RUN, undefined, d.now);
    d.activate(); // the start was not written
    assert.equal(d.run(RUN)?.status, "leased");
    const reply = d.heartbeat(RUN, undefined, sec(2) + 100).reply;
    assert.deepEqual(reply, { ok: true });
    assert.equal(d.run(RUN)?.status, "running");
    d.complete(RUN);
    assert.equal(d.written.get(RUN)?.status, "succeeded");
    assert.equal(d.written.get(RUN)?.attempts.length, 1, "one attempt, not a retry");
  });

  it("a takeover that lost a deferred grant asks the tenant again and runs once", () => {
    const d = new Driver(cfg(), { autoClaim: false });
    d.create(spec());
    d.advance(1_500); // granted and offered, neither written
    assert.equal(d.stored.runs[0]?.slot, false);
    d.activate();
    d.advance(0);
    assert.ok(d.postsOf("acquire_slot").length >= 2, "the slot is asked for again (same grant name)");
    assert.equal(new Set(d.postsOf("acquire_slot").map((a) => a.grant)).size, 1);
    d.claim(); // the first offer's worker is too late…
    d.claim(); // …the second one's claim counts
    d.complete(RUN);
    assert.equal([...d.written.values()].filter((r) => r.status === "succeeded").length, 1);
    assert.deepEqual(d.violations, []);
  });

  it("offers within the reserved block are not written; the offer beyond it writes and reserves the next block; a state read back starts above the block", () => {
    const d = new Driver(cfg(), { autoClaim: false });
    d.create(spec());
    assert.equal(d.stored.fence_reserved, FENCE_BLOCK, "the create's write reserved the first block");
    d.advance(1_500);
    d.send({ kind: "patch", patch: { schedule: { cron: "0 * * * *", time_zone: "UTC" } } }); // nothing else fires
    const reserved = d.stored.fence_reserved;
    const writes = d.stateWrites;
    // Offers that die (no answer) are made again under new fences: none is written until the block is used up.
    for (let i = 0; d.state.fence_seq < reserved; i++) {
      d.send({ kind: "dispatch_failed", run_id: RUN, fence: d.run(RUN)!.fence, reason: "test" });
      d.advance(cfg().redispatchDelayMs);
      assert.ok(i < 2 * FENCE_BLOCK, "bounded");
    }
    assert.equal(d.stateWrites, writes, `${reserved} offers, no state write`);
    d.send({ kind: "dispatch_failed", run_id: RUN, fence: d.run(RUN)!.fence, reason: "test" });
    d.advance(cfg().redispatchDelayMs);
    assert.equal(d.stateWrites, writes + 1, "the offer past the block writes");
    assert.ok(d.stored.fence_reserved >= reserved + FENCE_BLOCK);
    const loaded = loadJobState({ ...d.stored, fence_seq: 3 });
    assert.equal(loaded.fence_seq, d.stored.fence_reserved, "fences continue above everything reserved");
  });
});
