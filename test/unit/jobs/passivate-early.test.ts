/**
 * Which job actors may leave memory seconds after their last message (`passivateEarly`,
 * src/actors/actor.ts; the host adds: its `fire` further off than the warm-up window and the idle
 * time): only a job that never had a run (job-state.ts `neverRan`). One with an active run, a run
 * still draining, or any run before keeps the host's idle time — its workers' late reports, the
 * tenant's grants and audits would each read it back. Decided on the simulated shell of driver.ts.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { makeJobActor } from "../../../src/jobs/job-actor.ts";
import { withRetention, withRunIndex } from "../../../src/jobs/with-history.ts";
import { DEFAULT_RETENTION } from "../../../src/history/retention.ts";
import { neverRan, type JobState } from "../../../src/job-state/job-state.ts";
import { Driver, cfg, spec } from "./driver.ts";

const yearly = { cron: "0 0 1 1 *", time_zone: "UTC" } as const;
const BY = "API key kabcdefghijklmnop";

function early(d: Driver): boolean {
  return d.actor.passivateEarly?.(d.state) === true;
}

/** A job created for later (its first occurrence next New Year), with the runs index. */
function forLater(opts: ConstructorParameters<typeof Driver>[1] = {}): Driver {
  const d = new Driver(cfg(), { index: true, ...opts });
  d.create(spec({ schedule: yearly, overlap: "allow" }));
  return d;
}

describe("passivateEarly: a job that never had a run", () => {
  it("created for later: yes; read back, read or changed by a patch: still yes", () => {
    const d = forLater();
    assert.equal(early(d), true);
    d.activate();
    assert.equal(early(d), true, "read back from the stored state");
    d.send({ kind: "get" });
    d.send({ kind: "active_runs" });
    assert.equal(early(d), true);
    d.send({ kind: "patch", patch: { schedule: { cron: "0 0 1 7 *", time_zone: "UTC" } } });
    d.send({ kind: "patch", patch: { enabled: false } });
    assert.equal(early(d), true, "a patch is no run");
  });

  it("the definition the shell registers (with the runs index and retention) keeps the hook", () => {
    const def = withRunIndex(withRetention(makeJobActor(cfg()), DEFAULT_RETENTION));
    const s = forLater().state;
    assert.equal(def.passivateEarly?.(s), true);
    assert.equal(def.passivateEarly?.({ ...s, manual_seq: 1 }), false);
  });
});

describe("passivateEarly: a job that has or had a run keeps the host's idle time", () => {
  it("an occurrence of its schedule: while its run is active, once it ended, and read back", () => {
    const d = new Driver(cfg(), { index: true });
    d.create(spec({ schedule: { cron: "0 * * * * *", time_zone: "UTC" } }));
    assert.equal(early(d), true, "not run yet (its `fire` is near: the host keeps it)");
    d.advance(60_000);
    const r = d.state.runs[0];
    assert.ok(r && r.status === "leased", "fired, claimed");
    assert.equal(early(d), false, "an active run");
    d.heartbeat(r.run_id, r.fence, d.now);
    d.complete(r.run_id);
    assert.equal(d.state.runs.length, 0, "ended");
    assert.equal(early(d), false, "has run: its worker's retried report may still come");
    d.activate();
    assert.equal(early(d), false, "read back: the stored state says it has run");
  });

  it("occurrences that did not run (missed after downtime): it has fired", () => {
    const d = new Driver(cfg(), { index: true });
    d.create(
      spec({
        schedule: { cron: "0 * * * * *", time_zone: "UTC" },
        misfire: { policy: "skip", starting_deadline_s: null },
      }),
    );
    d.skipTime(150_000); // the :01 and :02 occurrences are past the misfire grace
    d.send({ kind: "fire" });
    assert.equal(d.state.runs.length, 0, "none ran");
    assert.equal(early(d), false);
  });

  it("a run-now: while active, once ended, read back; one cancelled on its worker while it drains", () => {
    const d = forLater();
    const id = d.send({ kind: "run_now", requested_at_ms: d.now }).reply!.run!.run_id;
    assert.equal(early(d), false, "an active run");
    const r = d.run(id)!;
    d.heartbeat(id, r.fence, d.now);
    d.complete(id);
    assert.equal(d.run(id), undefined, "ended");
    assert.equal(early(d), false);
    d.activate();
    assert.equal(early(d), false, "read back");

    const c = forLater();
    const cid = c.send({ kind: "run_now", requested_at_ms: c.now }).reply!.run!.run_id;
    c.heartbeat(cid, c.run(cid)!.fence, c.now);
    c.send({ kind: "cancel", run_id: cid, by: BY });
    assert.equal(c.state.runs.length, 0);
    assert.equal(c.state.draining?.length, 1, "its worker may still be killing it");
    assert.equal(early(c), false);
  });

  it("each mark of a run alone says no (active, draining, queued, fired, handled ahead, run-now, indexed)", () => {
    const s = forLater().state;
    assert.equal(neverRan(s), true);
    const run = forLater();
    run.send({ kind: "run_now", requested_at_ms: run.now });
    const active = run.state.runs[0]!;
    const marks: [string, Partial<JobState>][] = [
      ["an active run", { runs: [active] }],
      [
        "a run draining",
        { draining: [{ run_id: "r", fence: 1, worker: "w1", grant: "g", until_ms: 1 }] },
      ],
      ["an occurrence queued", { queued: [1] }],
      ["an occurrence handled", { last_occurrence_ms: 1 }],
      ["an occurrence handled ahead", { handled_ahead: [1] }],
      ["a run-now", { manual_seq: 1 }],
      ["a run indexed", { index: { seq: 0, pending: ["x"] } }],
      ["a chunk of runs indexed", { index: { seq: 1, pending: [] } }],
    ];
    for (const [what, mark] of marks)
      assert.equal(neverRan({ ...s, ...mark }), false, `${what}: it has had a run`);
  });
});
