/**
 * A run-now's record is written after the job state (`create_run`): whatever becomes of the state
 * write, no record is left `queued` with no run behind it, and a run the state holds is run.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Driver, cfg, spec, ACTOR_ID, JOB, TENANT } from "./driver.ts";
import { makeJobActor } from "../../../src/jobs/job-actor.ts";
import { withRetention } from "../../../src/jobs/with-history.ts";
import { DEFAULT_RETENTION, runsToPrune } from "../../../src/history/retention.ts";
import { runKey } from "../../../src/protocol/ids.ts";

const hourly = { cron: "0 * * * *", time_zone: "UTC" } as const;

describe("job actor: a run-now whose state write has an unknown outcome", () => {
  it("its record is created after the state write, never before it", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(spec({ schedule: hourly }));
    const r = d.send({ kind: "run_now", request_id: "rq-1", requested_at_ms: d.now });
    assert.equal(
      (r.pre ?? []).filter((fx) => fx.kind === "put_run").length,
      0,
      "no record before the state write",
    );
    const created = (r.post ?? []).filter((fx) => fx.kind === "create_run");
    assert.equal(created.length, 1);
    assert.equal(d.records.get(r.reply!.run!.run_id)?.status, "queued");
  });

  it("a lost state write leaves nothing behind; the retry (same request, same time) makes the run once", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(spec({ schedule: hourly }));
    const msg = { kind: "run_now" as const, request_id: "rq-1", requested_at_ms: d.now };
    const lost = d.crashAfterPre(msg);
    const id = lost.reply?.run?.run_id;
    assert.ok(id);
    assert.equal(d.records.has(id), false, "no record of a run no state holds");
    d.advance(700);
    const again = d.send(msg);
    assert.equal(again.reply?.run?.run_id, id, "the retry names the same run");
    assert.equal([...d.records.values()].filter((x) => x.trigger === "manual").length, 1);
  });

  it("a state write that landed unseen: read back, the run's record is written and the run dispatched", () => {
    const d = new Driver(cfg(), { autoGrant: true, autoClaim: true, autoComplete: () => ({}) });
    d.create(spec({ schedule: hourly }));
    const landed = d.crashAfterWrite({
      kind: "run_now",
      request_id: "rq-1",
      requested_at_ms: d.now,
    });
    const id = landed.reply!.run!.run_id;
    assert.equal(d.records.has(id), false, "the post effects were lost with the actor");
    d.activate();
    assert.equal(d.records.get(id)?.status, "queued", "written on load");
    d.advance(5_000);
    assert.equal(d.records.get(id)?.status, "succeeded", "and it runs");
    assert.equal(d.dispatches.filter((x) => x.run_id === id).length, 1);
  });

  it("a run-now's end is written, not deferred (a stored state must not list it once its record can be pruned)", () => {
    const d = new Driver(cfg(), { autoComplete: () => ({}) });
    d.create(spec({ schedule: hourly }));
    const id = d.send({ kind: "run_now", request_id: "rq-1" }).reply!.run!.run_id;
    assert.equal(d.records.get(id)?.status, "succeeded");
    assert.equal(
      d.stored.runs.some((x) => x.run_id === id),
      false,
      "the stored state no longer lists it",
    );
  });

  it("one whose end was recorded but whose state write was lost is not run again once retention prunes that record", () => {
    const yearly = { cron: "0 0 1 1 *", time_zone: "UTC" } as const;
    const d = new Driver(cfg(), { autoGrant: true, autoClaim: true });
    d.create(
      spec({ schedule: yearly, retry: { max_attempts: 3, backoff: "fixed", base_s: 1, max_s: 1 } }),
    );
    const id = d.send({ kind: "run_now", request_id: "rq-1", requested_at_ms: d.now }).reply!.run!
      .run_id;
    const r = d.run(id)!;
    d.heartbeat(id, r.fence, d.now);
    // Its completion: the terminal record (pre) lands, the state write is lost (a crash, a timeout).
    d.crashAfterPre({
      kind: "complete",
      run_id: id,
      fence: r.fence,
      worker: "w1",
      outcome: "exited",
      exit_code: 0,
      output: "ok",
      error: null,
      started_at_ms: d.now,
      finished_at_ms: d.now,
    });
    assert.ok(
      d.stored.runs.some((x) => x.run_id === id),
      "the stored state still lists it",
    );
    d.activate(); // read back: dropped as ended
    assert.equal(d.run(id), undefined);
    // A month with no other decision (the next occurrence is next year), then the daily sweep.
    d.skipTime(31 * 86_400_000);
    const sweep = withRetention(makeJobActor(cfg()), DEFAULT_RETENTION).receive(
      d.state,
      { kind: "retention_sweep" },
      { id: ACTOR_ID, nowMs: d.now },
    );
    if (sweep.state !== d.state && sweep.deferWrite !== true) d.stored = sweep.state; // the host writes, then the post effects
    d.state = sweep.state;
    const prune = (sweep.post ?? []).find((fx) => fx.kind === "prune_runs");
    assert.ok(prune && prune.kind === "prune_runs");
    const keys = [...d.written.keys()].map((rid) => runKey(0, TENANT, JOB, rid));
    const pruned = runsToPrune(keys, new Set(prune.active), DEFAULT_RETENTION, d.now).map((k) =>
      k.slice(k.lastIndexOf(".") + 1),
    );
    assert.ok(pruned.includes(id), "its record is older than the age limit");
    for (const rid of pruned) {
      d.written.delete(rid);
      d.records.delete(rid);
    }
    d.activate(); // passivated and read back (the next sweep, a GET)
    d.advance(60_000);
    assert.equal(d.run(id), undefined, "not active again");
    assert.equal(
      d.dispatches.filter((x) => x.run_id === id).length,
      1,
      "offered once, never again",
    );
  });

  it("read back with such an end, the job's next decision writes its state", () => {
    const d = new Driver(cfg(), { autoGrant: true, autoClaim: true });
    d.create(spec({ schedule: hourly }));
    const id = d.send({ kind: "run_now", request_id: "rq-1", requested_at_ms: d.now }).reply!.run!
      .run_id;
    const r = d.run(id)!;
    d.crashAfterPre({
      kind: "complete",
      run_id: id,
      fence: r.fence,
      worker: "w1",
      outcome: "exited",
      exit_code: 0,
      output: "ok",
      error: null,
      started_at_ms: d.now,
      finished_at_ms: d.now,
    });
    d.activate();
    const writes = d.stateWrites;
    d.send({ kind: "get" });
    assert.equal(d.stateWrites, writes + 1);
    assert.equal(
      d.stored.runs.some((x) => x.run_id === id),
      false,
      "the stored state no longer lists it",
    );
    assert.equal(d.stored.ends_unwritten, undefined, "the mark is never stored");
  });
});
