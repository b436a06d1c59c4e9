/**
 * A user's cancel of one run, decided by the job actor's pure core (src/runs/run-cancel.ts), on
 * the simulated shell of driver.ts: a run waiting for its slot, one prepared on a worker ahead of
 * its due time, one running — each ends `cancelled` with who asked and nothing of it runs after;
 * a cancel racing with the completion leaves exactly one end; repeated cancels change nothing;
 * an orphaned record (a fire whose state change was lost) is settled so a re-fire drops it.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { cancelReason, MAX_CANCEL_NOTE_CHARS } from "../../../src/runs/run-cancel.ts";
import { grantId, runIdFor } from "../../../src/protocol/ids.ts";
import { Driver, JOB, T0, cfg, spec } from "./driver.ts";

const yearly = { cron: "0 0 1 1 *", time_zone: "UTC" } as const;
const BY = "API key kabcdefghijklmnop";

/** A job that fires nothing by itself (a run-now makes its runs). */
function manual(opts: ConstructorParameters<typeof Driver>[1] = {}): Driver {
  const d = new Driver(cfg(), opts);
  d.create(spec({ schedule: yearly, overlap: "allow" }));
  return d;
}

function runNow(d: Driver): string {
  return d.send({ kind: "run_now", requested_at_ms: d.now }).reply!.run!.run_id;
}

function cancel(d: Driver, runId: string, note?: string) {
  return d.send({ kind: "cancel", run_id: runId, by: BY, ...(note ? { note } : {}) });
}

describe("run cancel: the reason", () => {
  it("names who asked, then their reason, bounded", () => {
    assert.equal(cancelReason(BY), `cancelled by request of ${BY}`);
    assert.equal(
      cancelReason("the NATS API", "freeze"),
      "cancelled by request of the NATS API: freeze",
    );
    const long = cancelReason("x".repeat(500), "y".repeat(500));
    assert.ok(long.length <= 100 + MAX_CANCEL_NOTE_CHARS + 40, `bounded: ${long.length}`);
  });
});

describe("run cancel: each kind of run not yet ended", () => {
  it("a run waiting for its slot is dropped: cancelled, its place in the tenant's waiting list given back (and a grant that crossed that), never offered", () => {
    const d = manual({ autoGrant: false });
    const id = runNow(d);
    assert.equal(d.run(id)?.status, "queued");
    const grant = grantId(d.run(id)!);
    const writes = d.stateWrites;
    const r = cancel(d, id, "not needed");
    assert.equal(r.fail, undefined);
    assert.equal(r.reply?.run?.status, "cancelled");
    assert.equal(r.reply?.run?.reason, `cancelled by request of ${BY}: not needed`);
    assert.equal(d.records.get(id)?.status, "cancelled");
    assert.equal(d.run(id), undefined, "no longer active");
    assert.ok(d.stateWrites > writes, "the state is written before the answer");
    assert.deepEqual(
      [...d.timers.keys()].filter((t) => t.includes(id)),
      [],
      "its timers are gone",
    );
    const released = () => d.postsOf("release_slot").filter((p) => p.grant === grant).length;
    assert.equal(released(), 1, "its ask leaves the tenant's waiting list");
    d.send({ kind: "slot_granted", run_id: grant }); // a grant that crossed the release
    assert.equal(d.dispatches.length, 0, "never offered");
    assert.equal(released(), 2, "the late grant is given back");
    d.advance(120_000);
    assert.equal(d.dispatches.length, 0);
    assert.deepEqual(d.violations, []);
  });

  it("a run prepared on a worker ahead of its due time: the worker is told, its slot drains, it never starts", () => {
    const c = cfg({ lookaheadMs: 30_000 });
    const d = new Driver(c);
    d.create(spec({ schedule: { cron: "0 * * * * *", time_zone: "UTC" } }));
    d.advance(45_000); // the :00 occurrence is prepared ahead (gated under `skip`)
    const r = d.state.runs[0]!;
    assert.equal(r.status, "leased");
    assert.ok(r.start_at_ms > d.now, "not due yet");
    const out = cancel(d, r.run_id);
    assert.equal(out.reply?.run?.status, "cancelled");
    assert.deepEqual(
      d.postsOf("cancel_on_worker").map((p) => [p.run_id, p.fence]),
      [[r.run_id, r.fence]],
      "its worker is told to drop it",
    );
    assert.deepEqual(
      d.state.draining?.map((x) => x.run_id),
      [r.run_id],
      "its slot is held until the worker has dropped it",
    );
    // The worker, had it missed the cancel, heartbeats to start it: refused.
    const hb = d.heartbeat(r.run_id, r.fence, r.start_at_ms);
    assert.equal(hb.fail?.code, "lease_lost");
    // Its report that the attempt ended unstarted gives the slot back; the record stays cancelled.
    d.complete(r.run_id, { outcome: "killed", exit_code: null, not_started: true }, r.fence);
    assert.equal(d.state.draining, undefined);
    assert.equal(d.records.get(r.run_id)?.status, "cancelled");
    assert.equal(
      d.dispatches.filter((x) => x.run_id === r.run_id).length,
      1,
      "never offered again",
    );
    assert.deepEqual(d.violations, []);
  });

  it("a running run: its worker is told to stop it; its killed attempt's report only gives the slot back", () => {
    const d = manual();
    const id = runNow(d);
    const fence = d.run(id)!.fence;
    d.heartbeat(id, fence, d.now);
    assert.equal(d.run(id)?.status, "running");
    d.advance(5_000);
    const out = cancel(d, id);
    assert.equal(out.reply?.run?.status, "cancelled");
    assert.equal(out.reply?.run?.reason, `cancelled by request of ${BY}`);
    assert.notEqual(out.reply?.run?.started_at, null, "it did start");
    assert.deepEqual(
      out.reply?.run?.attempts.map((a) => [a.outcome, a.error]),
      [["cancelled", `cancelled by request of ${BY}`]],
      "its attempt ends cancelled",
    );
    assert.deepEqual(
      d.postsOf("cancel_on_worker").map((p) => p.run_id),
      [id],
    );
    assert.equal(d.postsOf("release_slot").length, 0, "the slot is held while the task dies");
    d.complete(id, { outcome: "killed", exit_code: null }, fence);
    assert.deepEqual(d.state.draining, undefined);
    assert.equal(d.postsOf("release_slot").length, 1, "given back once its attempt ended");
    assert.equal(d.records.get(id)?.status, "cancelled", "the kill is not a failure");
    assert.equal(d.postsOf("dead_letter").length, 0);
    d.advance(300_000);
    assert.equal(d.dispatches.filter((x) => x.run_id === id).length, 1, "no retry");
    assert.deepEqual(d.violations, []);
  });

  it("a run waiting for its retry is dropped: no further attempt", () => {
    const d = new Driver(cfg());
    d.create(
      spec({
        schedule: yearly,
        retry: { max_attempts: 3, backoff: "fixed", base_s: 30, max_s: 30 },
      }),
    );
    const id = runNow(d);
    d.complete(id, { outcome: "exited", exit_code: 1 });
    assert.equal(d.run(id)?.status, "retry_wait");
    assert.equal(cancel(d, id).reply?.run?.status, "cancelled");
    d.advance(120_000);
    assert.equal(d.dispatches.filter((x) => x.run_id === id).length, 1);
    assert.deepEqual(d.violations, []);
  });
});

describe("run cancel: one end only", () => {
  it("cancel, then the completion: the run stays cancelled, the report ends the drain", () => {
    const d = manual();
    const id = runNow(d);
    const fence = d.run(id)!.fence;
    d.heartbeat(id, fence, d.now);
    cancel(d, id);
    const late = d.complete(id, { outcome: "exited", exit_code: 0 }, fence);
    assert.deepEqual(late.reply, { ok: true });
    assert.equal(d.records.get(id)?.status, "cancelled");
    assert.equal(
      d.decisions
        .flatMap((x) => x.d.pre ?? [])
        .filter((fx) => fx.kind === "put_run" && fx.record.run_id === id && fx.mode === "update")
        .length,
      1,
      "one terminal write",
    );
    assert.deepEqual(d.violations, []);
  });

  it("the completion, then cancel: the answer leaves the decision to the record (succeeded), nothing is rewritten", () => {
    const d = manual();
    const id = runNow(d);
    d.complete(id);
    assert.equal(d.records.get(id)?.status, "succeeded");
    const writes = d.recordWrites;
    const out = cancel(d, id);
    assert.equal(out.fail, undefined);
    assert.deepEqual(out.reply, { ok: true }, "not active: the caller reads the record");
    assert.deepEqual(
      out.pre?.map((fx) => fx.kind === "put_run" && fx.mode),
      ["settle"],
      "a settle: never over an ended record",
    );
    assert.equal(d.recordWrites, writes);
    assert.equal(d.records.get(id)?.status, "succeeded");
    assert.equal(d.postsOf("cancel_on_worker").length, 0);
  });

  it("cancel twice: the second changes nothing and writes nothing", () => {
    const d = manual();
    const id = runNow(d);
    const first = cancel(d, id).reply!.run!;
    const writes = d.recordWrites;
    const stateWrites = d.stateWrites;
    const again = cancel(d, id, "again");
    assert.deepEqual(again.reply, { ok: true });
    assert.equal(d.recordWrites, writes);
    assert.equal(d.stateWrites, stateWrites);
    assert.deepEqual(d.records.get(id), first);
  });
});

describe("run cancel: what the actor does not hold", () => {
  it("a record left queued by a fire whose state change was lost is settled cancelled; the re-fire drops its run", () => {
    const d = new Driver(cfg());
    d.create(spec());
    d.skipTime(1_500); // 00:00:02 is due
    d.crashAfterPre({ kind: "fire" }); // its record is written, the state change is lost
    const id = runIdFor(JOB, T0 - 500 + 2_000);
    assert.equal(d.records.get(id)?.status, "queued");
    assert.equal(d.run(id), undefined, "not in the state");
    const out = cancel(d, id);
    assert.deepEqual(out.reply, { ok: true });
    assert.equal(d.records.get(id)?.status, "cancelled");
    assert.equal(d.records.get(id)?.reason, `cancelled by request of ${BY}`);
    d.advance(0); // the re-fire of the occurrence meets the ended record
    assert.equal(d.run(id), undefined);
    assert.equal(d.dispatches.filter((x) => x.run_id === id).length, 0, "never offered");
    assert.equal(d.records.get(id)?.status, "cancelled");
  });

  it("an unknown run of the job settles nothing (no record made); another job's run, a malformed id or a deleted job is not_found", () => {
    const d = manual();
    const future = runIdFor(JOB, T0 + 3_600_000);
    const out = cancel(d, future);
    assert.deepEqual(out.reply, { ok: true });
    assert.equal(d.records.has(future), false, "a settle never creates");
    for (const id of [runIdFor("j0000000000000000", T0), "nope", `${JOB}-`]) {
      assert.equal(cancel(d, id).fail?.code, "not_found", id);
    }
    const id = runNow(d);
    d.send({ kind: "delete" });
    assert.equal(d.records.get(id)?.reason, "job deleted");
    assert.equal(cancel(d, id).fail?.code, "not_found");
    const none = new Driver(cfg());
    assert.equal(cancel(none, id).fail?.code, "not_found", "no such job");
  });
});
