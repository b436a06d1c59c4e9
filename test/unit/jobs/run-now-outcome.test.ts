/**
 * A run-now's record is written after the job state (`create_run`): whatever becomes of the state
 * write, no record is left `queued` with no run behind it, and a run the state holds is run.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Driver, cfg, spec } from "./driver.ts";

const hourly = { cron: "0 * * * *", time_zone: "UTC" } as const;

describe("job actor: a run-now whose state write has an unknown outcome", () => {
  it("its record is created after the state write, never before it", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(spec({ schedule: hourly }));
    const r = d.send({ kind: "run_now", request_id: "rq-1", requested_at_ms: d.now });
    assert.equal((r.pre ?? []).filter((fx) => fx.kind === "put_run").length, 0, "no record before the state write");
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
    const landed = d.crashAfterWrite({ kind: "run_now", request_id: "rq-1", requested_at_ms: d.now });
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
    assert.equal(d.stored.runs.some((x) => x.run_id === id), false, "the stored state no longer lists it");
  });
});
