/**
 * The job actor's writes per run (few KV operations per run). A run's
 * record is written at its creation and at its end only (transitions in between are `note_run`
 * effects: metrics, and the API reads active runs from the actor); the grant, the offer and the
 * start change the state without a write (`deferWrite`), each recoverable if lost: these tests
 * count the writes and show the recovery after a takeover that lost them.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { runIdFor } from "../../../src/protocol/ids.ts";
import { makeJobActor } from "../../../src/jobs/job-actor.ts";
import { FENCE_BLOCK, loadJobState } from "../../../src/job-state/job-state.ts";
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
  it("a run from its occurrence to success writes its record twice (created, ended) and the job state once (the claim)", () => {
    const d = new Driver(cfg(), { autoClaim: false });
    d.create(spec());
    const [records, states] = [d.recordWrites, d.stateWrites];
    d.advance(1_500); // fire: record created; the state change, the grant and the offer deferred
    assert.equal(d.recordWrites - records, 1, "the record is created");
    assert.equal(
      d.stateWrites - states,
      0,
      "neither the fire nor the grant nor the offer writes the state",
    );
    d.claim(); // the claim is written (carrying the deferred changes): only then may the worker start
    assert.equal(d.stateWrites - states, 1);
    assert.equal(d.stored.runs[0]?.status, "leased");
    d.heartbeat(RUN, undefined, d.now); // the start: deferred
    assert.equal(d.run(RUN)?.status, "running");
    assert.equal(d.stateWrites - states, 1, "the start is not written");
    assert.equal(d.recordWrites - records, 1, "neither the claim nor the start writes the record");
    assert.equal(d.written.get(RUN)?.status, "queued", "the stored record still says queued");
    assert.equal(d.records.get(RUN)?.status, "running", "what the API shows comes from the actor");
    d.complete(RUN);
    assert.equal(d.recordWrites - records, 2, "the record is written at the end");
    assert.equal(
      d.stateWrites - states,
      1,
      "the end is deferred: the terminal record is the durable fact",
    );
    assert.equal(d.stored.runs.length, 1, "the state written last still lists the run");
    assert.equal(d.written.get(RUN)?.status, "succeeded");
    assert.deepEqual(d.violations, []);
  });

  it("the job actor stays loaded (keepLoaded) from its run's creation to its end: its grant, offer and start live in memory only", () => {
    const actor = makeJobActor(cfg());
    const d = new Driver(cfg(), { autoClaim: false });
    const keep = (s: typeof d.state) => actor.keepLoaded!(s);
    d.create(spec());
    assert.equal(keep(d.state), false, "no run: it may passivate");
    d.advance(1_500); // fired, granted, offered: nothing of it written
    assert.equal(d.stored.runs[0]?.fence ?? 0, 0, "the offer is in memory only");
    assert.equal(keep(d.state), true, "a prepared run: kept");
    d.claim();
    d.heartbeat(RUN, undefined, d.now);
    assert.equal(keep(d.state), true, "a running run: kept");
    d.complete(RUN);
    assert.equal(keep(d.state), false, "ended: it may passivate again");
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
    const q = makeJobActor(cfg()).query!(
      d.state,
      { kind: "active_runs" },
      { id: ACTOR_ID, nowMs: d.now },
    );
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

  it("a takeover that lost a deferred grant (the fire written) asks the tenant again under the same grant name and runs once", () => {
    const d = new Driver(cfg(), { autoClaim: false, autoGrant: false });
    d.create(spec());
    d.advance(1_500); // fired (deferred) and asked for a slot
    d.flush(); // the fire was written by a later write…
    d.grant(); // …the grant and the offer were not
    assert.equal(d.stored.runs[0]?.slot, false);
    d.activate();
    d.advance(0);
    const asks = d.postsOf("acquire_slot").map((a) => a.grant);
    assert.ok(asks.length >= 2, "the slot is asked for again");
    assert.equal(
      new Set(asks).size,
      1,
      "under the same name: the tenant's durable grant answers it",
    );
    d.send({ kind: "slot_granted", run_id: asks[0]! }); // the tenant holds it: granted again at once
    d.claim(); // the first offer's worker is too late…
    d.claim(); // …the second one's claim counts
    d.complete(RUN);
    assert.equal([...d.written.values()].filter((r) => r.status === "succeeded").length, 1);
    assert.deepEqual(d.violations, []);
  });

  it("a takeover that lost a deferred fire fires the occurrence again: its record is found, the run re-created under a new grant name (the lost one's grant is released), and runs once", () => {
    const d = new Driver(cfg(), { autoClaim: false });
    d.create(spec({ schedule: { at: "2026-01-01T00:00:02Z" } }));
    d.advance(1_500); // fired, granted, offered: nothing written but the record
    assert.equal(d.stored.runs.length, 0, "the fire was not written");
    const lostGrant = d.postsOf("acquire_slot")[0]!.grant;
    d.activate();
    d.advance(0); // the fire timer re-armed from the stored state fires at once
    assert.equal(d.dupCreates, 1, "the re-fire met the record (a KV create of an existing key)");
    const newGrant = d.postsOf("acquire_slot").at(-1)!.grant;
    assert.notEqual(newGrant, lostGrant, "a new grant name");
    d.send({ kind: "slot_granted", run_id: lostGrant }); // the lost run's grant, late
    assert.ok(
      d.postsOf("release_slot").some((r) => r.grant === lostGrant),
      "is given back",
    );
    assert.equal(d.run(RUN)?.slot, true, "the new run keeps its own slot");
    d.claim(); // the lost offer's worker: its fence was never handed out again…
    assert.equal(d.run(RUN)?.status, "queued");
    d.claim(); // …the new offer's claim counts
    d.complete(RUN);
    assert.equal([...d.written.values()].filter((r) => r.status === "succeeded").length, 1);
    assert.equal(d.written.size, 1, "one record");
    assert.deepEqual(d.violations, []);
  });

  it("a takeover after a deferred end drops the ended run on load (its record says it ended): no new lease, no second execution", () => {
    const d = claimed();
    d.heartbeat(RUN, undefined, d.now);
    d.complete(RUN); // acknowledged to the worker; only the record is written
    assert.equal(d.stored.runs[0]?.status, "leased");
    d.activate(); // the new owner reconciles the state it reads with the run records
    assert.equal(d.run(RUN), undefined, "dropped on load");
    d.advance(60_000); // well past any lease
    assert.equal(d.dispatches.filter((x) => x.run_id === RUN).length, 1, "never offered again");
    assert.equal(d.written.get(RUN)?.status, "succeeded");
    assert.deepEqual(d.violations, []);
  });

  it("a one-shot job whose ended run's record retention pruned (the stored state still lists the run): a reload drops the run, never leases it again", () => {
    const d = new Driver(cfg(), { autoClaim: false });
    d.create(spec({ schedule: { at: "2026-01-01T00:00:02Z" } }));
    d.advance(1_500);
    d.claim();
    d.heartbeat(RUN, undefined, d.now);
    d.complete(RUN); // the end is deferred; a one-shot job never writes its state again
    assert.equal(d.stored.runs[0]?.run_id, RUN, "the stored state still lists the run");
    d.activate(); // the daily sweep reloads it: dropped in memory only
    d.written.delete(RUN); // 30 days later retention prunes the terminal record
    d.records.delete(RUN);
    d.activate(); // the next reload: no record at all
    assert.equal(d.run(RUN), undefined, "a missing record means the run ended");
    d.advance(60_000);
    assert.equal(d.dispatches.filter((x) => x.run_id === RUN).length, 1, "never offered again");
  });

  it("a re-fire that meets a record that already ended (the fire and the end both lost) drops the re-created run before it is offered", () => {
    const d = new Driver(cfg(), { autoClaim: false });
    d.create(spec({ schedule: { at: "2026-01-01T00:00:02Z" } }));
    d.advance(1_500); // fired, granted, offered: deferred
    // The run ends without a claim being written (a gated skip at its due instant ends it so):
    // here its terminal record is written directly, as such a decision's pre effect would.
    const r = d.run(RUN)!;
    d.crashAfterPre({ kind: "delete" }); // a decision that wrote the run's terminal record, then the node died
    assert.equal(d.written.get(RUN)?.status, "cancelled");
    assert.equal(d.stored.runs.length, 0, "the fire was never written");
    const offers = d.dispatches.length;
    d.activate();
    d.advance(0); // the re-fire meets the ended record
    assert.equal(d.run(RUN), undefined, "the re-created run is dropped");
    assert.equal(d.dispatches.length, offers, "and never offered");
    assert.equal(d.written.get(RUN)?.status, "cancelled", "the terminal record stands");
    assert.ok(r.run_id === RUN);
    assert.deepEqual(d.violations, []);
  });

  it("offers within the reserved block are not written; the offer beyond it writes and reserves the next block; a state read back starts above the block", () => {
    const d = new Driver(cfg(), { autoClaim: false });
    // A starting deadline longer than the ~1,000 offers take (1 s apart), so the run keeps waiting.
    d.create(spec({ misfire: { policy: "run_once", starting_deadline_s: 86_400 } }));
    assert.equal(
      d.stored.fence_reserved,
      FENCE_BLOCK,
      "the create's write reserved the first block",
    );
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
    assert.equal(
      loaded.fence_seq,
      d.stored.fence_reserved,
      "fences continue above everything reserved",
    );
  });
});
