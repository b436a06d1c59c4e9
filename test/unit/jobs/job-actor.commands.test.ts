/**
 * Job actor commands on a simulated clock: create (next_run_at, idempotent replay, conflict,
 * invalid schedule), pause/resume without catch-up, If-Match, schedule change, delete, run now.
 */
import { describe, it } from "node:test";
import { START_SKEW_TOLERANCE_MS } from "../../../src/protocol/worker.ts";
import assert from "node:assert/strict";
import { compileSchedule } from "../../../src/schedule/index.ts";
import { runIdFor } from "../../../src/protocol/ids.ts";
import { RUN_INDEX_CHUNK } from "../../../src/history/run-index.ts";
import { MAX_HANDLED_AHEAD } from "../../../src/job-state/job-state.ts";
import { Driver, JOB, T0, cfg, spec } from "./driver.ts";

const every2s = compileSchedule({ cron: "*/2 * * * * *", time_zone: "UTC" });
const ms = (iso: string) => Date.parse(iso);
/** Compares instants, not their spelling ("Z" or "Z"). */
const at = (iso: string | null | undefined) =>
  iso === null || iso === undefined ? iso : Date.parse(iso);

describe("job actor: create", () => {
  it("sets next_run_at to the first occurrence strictly after now and arms the fire timer", () => {
    const d = new Driver();
    const r = d.create();
    assert.equal(r.fail, undefined);
    assert.equal(at(r.reply?.job?.next_run_at), ms("2026-01-01T00:00:02Z"));
    assert.equal(d.state.next_run_at_ms, every2s.next(T0, 1)[0]);
    assert.equal(r.reply?.job?.version, 1);
    assert.deepEqual(
      r.reply?.job?.next_runs?.map(at),
      [2, 4, 6, 8, 10].map((sec) => Date.UTC(2026, 0, 1, 0, 0, sec)),
    );
    assert.equal(d.timers.get("fire")?.atMs, ms("2026-01-01T00:00:02Z"));
  });

  it("on an exact occurrence, next_run_at is the following one", () => {
    const d = new Driver(cfg(), {}, Date.UTC(2026, 0, 1, 0, 0, 4));
    d.create();
    assert.equal(d.state.next_run_at_ms, Date.UTC(2026, 0, 1, 0, 0, 6));
  });

  it("a disabled job has no next_run_at and no fire timer", () => {
    const d = new Driver();
    const r = d.create(spec({ enabled: false }));
    assert.equal(r.reply?.job?.next_run_at, null);
    assert.equal(d.timers.has("fire"), false);
  });

  it("a one-shot `at` job fires once, then has no next_run_at", () => {
    const d = new Driver(cfg(), { autoComplete: () => ({}) });
    d.create(spec({ schedule: { at: "2026-01-01T00:00:30Z" } }));
    assert.equal(d.state.next_run_at_ms, ms("2026-01-01T00:00:30Z"));
    d.advance(60_000);
    assert.equal(d.recordsByStatus("succeeded").length, 1);
    assert.equal(d.state.next_run_at_ms, null);
    assert.equal(d.timers.has("fire"), false);
  });

  it("a replayed create with the same request hash returns the same job and changes nothing", () => {
    const d = new Driver();
    const first = d.create(spec(), "hash-a");
    const before = d.state;
    d.advance(700);
    const again = d.create(spec(), "hash-a");
    assert.equal(again.fail, undefined);
    assert.deepEqual(again.reply?.job, first.reply?.job);
    assert.equal(d.state, before, "no state write");
  });

  it("a create with a different request hash fails with conflict", () => {
    const d = new Driver();
    d.create(spec(), "hash-a");
    const r = d.create(spec({ name: "other" }), "hash-b");
    assert.equal(r.fail?.code, "conflict");
    assert.equal(d.state.job?.spec.name, null);
  });

  it("an invalid schedule fails with invalid_schedule naming the field, and creates nothing", () => {
    for (const [schedule, field] of [
      [{ cron: "61 * * * *", time_zone: "UTC" }, "schedule.cron"],
      [{ cron: "* * * * *", time_zone: "Mars/Olympus" }, "schedule.time_zone"],
      [{ at: "yesterday" }, "schedule.at"],
    ] as const) {
      const d = new Driver();
      const r = d.create(spec({ schedule }));
      assert.equal(r.fail?.code, "invalid_schedule", JSON.stringify(schedule));
      assert.equal(r.fail.field, field);
      assert.equal(d.state.job, null);
      assert.equal(d.timers.size, 0);
    }
  });

  it("messages to a job that was never created fail not_found", () => {
    const d = new Driver();
    for (const msg of [
      { kind: "get" },
      { kind: "fire" },
      { kind: "run_now" },
      { kind: "heartbeat", run_id: "x", fence: 1, worker: "w" },
    ] as const) {
      assert.equal(d.send(msg).fail?.code, "not_found", msg.kind);
    }
  });
});

describe("job actor: pause, resume, patch", () => {
  it("a pause of an overlap=queue job with occurrences queued creates no run from the queue as it cancels", () => {
    const d = new Driver(cfg(), { autoGrant: false, autoClaim: false });
    d.create(spec({ schedule: { cron: "* * * * * *", time_zone: "UTC" }, overlap: "queue" }));
    d.advance(5_000);
    assert.ok(d.state.queued.length > 0, "occurrences wait in the queue");
    const records = d.records.size;
    const r = d.send({ kind: "patch", patch: { enabled: false } });
    assert.deepEqual(d.state.runs, []);
    assert.equal(
      (r.pre ?? []).filter((fx) => fx.kind === "put_run" && fx.mode === "create").length,
      0,
      "no run made from the queue",
    );
    assert.ok(d.records.size >= records);
    assert.equal(d.recordsByStatus("queued").length, 0);
  });

  it("a pause under a backlog cancels every run not heard to start — waiting, granted, offered, claimed, awaiting a retry — and nothing starts after it", () => {
    // The claimed ones are ended by their worker's report that they had not started.
    const d = new Driver(cfg(), {
      autoGrant: false,
      autoClaim: false,
      cancelReport: () => ({ not_started: true }),
    });
    d.create(
      spec({
        schedule: { cron: "* * * * * *", time_zone: "UTC" },
        overlap: "allow",
        retry: { max_attempts: 3, backoff: "fixed", base_s: 30, max_s: 30 },
      }),
    );
    d.advance(12_000);
    assert.ok(d.pendingSlots.length >= 10, `a backlog waits for slots (${d.pendingSlots.length})`);
    d.grant(); // granted, offered, not claimed
    d.grant();
    d.claim(); // claimed (leased), not heard to start
    d.grant();
    d.claim();
    const running = d.state.runs.find((r) => r.status === "leased")!;
    d.heartbeat(running.run_id, running.fence, d.now); // heard to start: running
    d.grant();
    d.claim();
    const failing = d.state.runs.filter((r) => r.status === "leased").at(-1)!;
    d.complete(failing.run_id, { outcome: "exited", exit_code: 1 }); // attempt 1 failed: a retry waits
    assert.equal(d.run(failing.run_id)?.status, "retry_wait");
    const dispatchesBefore = d.dispatches.length;
    const before = d.state.runs.length;
    d.send({ kind: "patch", patch: { enabled: false } });
    assert.deepEqual(
      d.state.runs.map((r) => [r.run_id, r.status]),
      [[running.run_id, "running"]],
      "only the running run is left",
    );
    const cancelled = d.recordsByStatus("cancelled");
    assert.equal(cancelled.length, before - 1);
    assert.ok(cancelled.every((r) => r.reason === "job paused before it started"));
    assert.ok(
      d.postsOf("cancel_on_worker").length >= 1,
      "the worker holding a claim is told (an offer not yet claimed dies with its fence)",
    );
    d.advance(120_000);
    for (const x of d.pendingSlots.slice()) d.grant(x);
    assert.equal(d.dispatches.length, dispatchesBefore, "nothing is offered after the pause");
  });

  it("a run-now of a paused job whose attempt never started (given back by a draining worker, or its worker gone) is offered again, not cancelled", () => {
    const yearly = { cron: "0 0 1 1 *", time_zone: "UTC" } as const;
    for (const lapse of ["given back", "worker gone"] as const) {
      const d = new Driver(cfg(), { autoGrant: true, autoClaim: true });
      d.create(spec({ schedule: yearly }));
      d.send({ kind: "patch", patch: { enabled: false } });
      const id = d.send({ kind: "run_now", request_id: "rq-1", requested_at_ms: d.now }).reply!.run!
        .run_id;
      const r = d.run(id)!;
      assert.equal(r.status, "leased");
      if (lapse === "given back")
        d.send({
          kind: "complete",
          run_id: id,
          fence: r.fence,
          worker: "w1",
          outcome: "exited",
          exit_code: 0,
          output: "",
          error: null,
          started_at_ms: d.now,
          finished_at_ms: d.now,
          not_started: true,
        });
      else d.advance(cfg().leaseTtlMs + 1_000); // no heartbeat: the lease runs out, the probe finds the worker gone
      assert.notEqual(
        d.records.get(id)?.status,
        "cancelled",
        `${lapse}: ${d.records.get(id)?.reason ?? ""}`,
      );
      assert.equal(
        d.dispatches.filter((x) => x.run_id === id).length,
        2,
        `${lapse}: offered again`,
      );
    }
  });

  it("a paused job's run-now that started and lost its lease is not retried", () => {
    const d = new Driver(cfg(), {
      autoGrant: true,
      autoClaim: true,
      probe: () => ({ state: "started" }),
    });
    d.create(
      spec({
        schedule: { cron: "0 0 1 1 *", time_zone: "UTC" },
        retry: { max_attempts: 3, backoff: "fixed", base_s: 1, max_s: 1 },
      }),
    );
    d.send({ kind: "patch", patch: { enabled: false } });
    const id = d.send({ kind: "run_now", request_id: "rq-1", requested_at_ms: d.now }).reply!.run!
      .run_id;
    d.heartbeat(id, d.run(id)!.fence, d.now);
    d.advance(5 * cfg().leaseTtlMs);
    assert.equal(d.records.get(id)?.status, "failed");
    assert.equal(d.records.get(id)?.reason, "not retried, the job is paused: lease lost");
    assert.equal(d.dispatches.filter((x) => x.run_id === id).length, 1);
  });

  it("pause clears next_run_at and creates no run while paused; resume starts after the resume time without catch-up", () => {
    const d = new Driver(cfg(), { autoComplete: () => ({}) });
    d.create();
    d.advance(5_000); // 00:00:05.5 → runs at :02 and :04
    assert.equal(d.records.size, 2);
    const paused = d.send({ kind: "patch", patch: { enabled: false } });
    assert.equal(paused.reply?.job?.next_run_at, null);
    assert.equal(d.timers.has("fire"), false);
    d.advance(60_000);
    assert.equal(d.records.size, 2, "nothing while paused");
    assert.equal(d.send({ kind: "fire" }).fail, undefined);
    assert.equal(d.records.size, 2, "a stray fire while paused does nothing");
    const resumeAt = d.now; // 00:01:05.5
    const resumed = d.send({ kind: "patch", patch: { enabled: true } });
    assert.equal(at(resumed.reply?.job?.next_run_at), ms("2026-01-01T00:01:06Z"));
    assert.equal(d.state.next_run_at_ms, every2s.next(resumeAt, 1)[0]);
    d.advance(1_000); // 00:01:06.5
    const runs = [...d.records.values()];
    assert.equal(runs.length, 3, "one new run, no catch-up of the paused minute");
    assert.ok(runs.every((r) => r.status === "succeeded" && r.trigger === "schedule"));
    assert.equal(d.recordsByStatus("missed").length, 0);
  });

  it("a stale If-Match fails precondition_failed on field If-Match; the current version passes and bumps it", () => {
    const d = new Driver();
    d.create();
    const ok = d.send({ kind: "patch", patch: { name: "a" }, if_match: 1 });
    assert.equal(ok.reply?.job?.version, 2);
    const stale = d.send({ kind: "patch", patch: { name: "b" }, if_match: 1 });
    assert.equal(stale.fail?.code, "precondition_failed");
    assert.equal(stale.fail.field, "If-Match");
    assert.equal(d.state.job?.spec.name, "a");
    assert.equal(
      d.send({ kind: "patch", patch: { name: "c" } }).reply?.job?.version,
      3,
      "If-Match is optional",
    );
  });

  it("a schedule change recomputes next_run_at from now; an invalid one is refused with its field", () => {
    const d = new Driver();
    d.create();
    d.advance(1_000);
    const r = d.send({
      kind: "patch",
      patch: { schedule: { cron: "*/15 * * * * *", time_zone: "UTC" } },
    });
    assert.equal(at(r.reply?.job?.next_run_at), ms("2026-01-01T00:00:15Z"));
    assert.equal(d.timers.get("fire")?.atMs, ms("2026-01-01T00:00:15Z"));
    const bad = d.send({
      kind: "patch",
      patch: { schedule: { cron: "* * * * *", time_zone: "Nowhere/City" } },
    });
    assert.equal(bad.fail?.code, "invalid_schedule");
    assert.equal(bad.fail.field, "schedule.time_zone");
    assert.equal(d.state.job?.version, 2);
  });

  // Found by the simulation at production settings (a schedule change during its fault window,
  // seed 11): the hourly job's 12:00 run, prepared at 11:57, was cancelled by a change to every
  // 10 s at 11:57:05.5 — and the new schedule's occurrences up to 12:00 were never fired either:
  // the job's last handled occurrence (12:00) stood, and `firstAfter` starts after it.
  it("a schedule change inside the look-ahead window fires the new schedule from now, not from the cancelled prepared occurrence", () => {
    const start = Date.UTC(2026, 0, 1, 0, 58, 0) + 500; // inside the window however the job's spread falls
    const d = new Driver(
      cfg({ lookaheadMs: 300_000 }),
      { cancelReport: () => ({ not_started: true }) }, // its worker had not started it
      start,
    );
    d.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" }, overlap: "allow" }));
    d.advance(4_000); // 00:58:04.5: the 01:00 run is prepared
    const prepared = runIdFor(JOB, ms("2026-01-01T01:00:00Z"));
    assert.ok(
      d.state.runs.some((r) => r.run_id === prepared),
      "the hourly run is prepared ahead",
    );
    const r = d.send({
      kind: "patch",
      patch: { schedule: { cron: "*/10 * * * * *", time_zone: "UTC" } },
    });
    assert.equal(at(r.reply?.job?.next_run_at), ms("2026-01-01T00:58:10Z"));
    assert.equal(
      d.records.get(prepared)?.status,
      "cancelled",
      "the prepared run stays cancelled (README)",
    );
    d.advance(30_000); // 00:58:34.5
    const created = [...d.records.values()]
      .filter((x) => x.status !== "cancelled")
      .map((x) => at(x.scheduled_for))
      .sort();
    assert.deepEqual(
      created,
      [10, 20, 30, 40].map((sec) => Date.UTC(2026, 0, 1, 0, 58, sec)),
      "the new schedule's occurrences from now (:40 prepared ahead)",
    );
  });

  // Found by the simulation (seed 2100028): an hourly `replace` job's 12:00 run, prepared ahead,
  // was cancelled by a change to every 10 s (12:00 handled ahead); a second change, to every 3 s,
  // came before 12:00 fired. Its settle of the old schedule's next occurrence — 12:00, ended by the
  // first change — met the cancelled record and reported it settled, as if the orphan of a lost
  // fire: the occurrence was indexed twice and the job's next run moved past it, so 11:59:54 and
  // 11:59:57 got no record.
  it("a second schedule change before an occurrence handled ahead by the first fires the new schedule from now, and lists that occurrence once", () => {
    const start = Date.UTC(2026, 0, 1, 0, 58, 0) + 500;
    // The 01:00 run is claimed by w1 when the first change stops it: w1 answers at once that it had
    // not started, so it is cancelled before the second change (as in the seed).
    const d = new Driver(
      cfg({ lookaheadMs: 300_000 }),
      { index: true, cancelReport: () => ({ not_started: true }) },
      start,
    );
    d.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" }, overlap: "replace" }));
    // The runs index one entry short of a full chunk: the 01:00 run's entry closes it, so a second
    // entry for it is not merged with the first (pending ids are).
    const fill = Array.from({ length: RUN_INDEX_CHUNK - 1 }, (_, i) => `x${i}`);
    d.state = { ...d.state, index: { seq: 0, pending: fill } };
    d.advance(4_000); // 00:58:04.5: the 01:00 run is prepared
    const hour = ms("2026-01-01T01:00:00Z");
    assert.equal(d.state.index?.seq, 1, "the 01:00 run's entry closed the chunk");
    assert.ok(d.state.runs.some((r) => r.run_id === runIdFor(JOB, hour)));
    d.skipTime(ms("2026-01-01T00:59:51.300Z") - d.now);
    d.send({ kind: "patch", patch: { schedule: { cron: "*/10 * * * * *", time_zone: "UTC" } } });
    assert.equal(d.records.get(runIdFor(JOB, hour))?.status, "cancelled");
    assert.equal(d.state.next_run_at_ms, hour, "the new schedule's next is the occurrence handled");
    d.skipTime(50); // 01:00 not fired yet (here: no timer runs; in the seed, a run still active)
    const r = d.send({
      kind: "patch",
      patch: { schedule: { cron: "*/3 * * * * *", time_zone: "UTC" } },
    });
    assert.equal(at(r.reply?.job?.next_run_at), ms("2026-01-01T00:59:54Z"));
    d.advance(ms("2026-01-01T01:00:04Z") - d.now);
    for (const due of ["00:59:54", "00:59:57", "01:00:03"])
      assert.ok(
        d.records.has(runIdFor(JOB, ms(`2026-01-01T${due}Z`))),
        `the occurrence ${due} has a record`,
      );
    assert.deepEqual(d.listingProblems(), [], "each record listed once");
    assert.deepEqual(d.violations, []);
  });

  /** An hourly job whose 01:00 fire prepared a run ahead and then lost its state change. */
  const lostFireOrphan = () => {
    const start = Date.UTC(2026, 0, 1, 0, 58, 0) + 500;
    const d = new Driver(cfg({ lookaheadMs: 300_000 }), { index: true }, start);
    d.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" }, overlap: "allow" }));
    d.skipTime(4_000);
    const hour = runIdFor(JOB, ms("2026-01-01T01:00:00Z"));
    d.crashAfterPre({ kind: "fire" }); // 01:00 prepared: its record written, the state change lost
    return { d, hour };
  };

  // The orphan of a fire whose state change was lost (a takeover) is settled by a schedule change
  // that reaches the new owner before its re-fire: it stays cancelled, like a prepared run the
  // change cancels (the test before last), and the new schedule fires from now — not from after
  // the orphan's occurrence, which `run_settled` once made the job's last handled one.
  it("a schedule change that settles a lost fire's orphan prepared ahead fires the new schedule from now", () => {
    const { d, hour } = lostFireOrphan();
    assert.equal(d.written.get(hour)?.status, "queued");
    d.activate();
    d.send({ kind: "patch", patch: { schedule: { cron: "*/10 * * * * *", time_zone: "UTC" } } });
    assert.equal(d.written.get(hour)?.status, "cancelled", "the orphan settled");
    assert.equal(d.state.next_run_at_ms, ms("2026-01-01T00:58:10Z"));
    d.advance(ms("2026-01-01T01:00:05Z") - d.now);
    const fired = [...d.records.values()]
      .filter((x) => x.status !== "cancelled")
      .map((x) => at(x.scheduled_for));
    for (let t = ms("2026-01-01T00:58:10Z"); t < ms("2026-01-01T01:00:00Z"); t += 10_000)
      assert.ok(fired.includes(t), `the occurrence ${new Date(t).toISOString()} has a run`);
    assert.equal(d.written.get(hour)?.status, "cancelled", "the orphan stays cancelled");
    assert.deepEqual(d.listingProblems(), [], "each record listed once");
    assert.deepEqual(d.violations, []);
  });

  // As the test before, with the pause in the same PATCH: the job has no next run when the settle
  // is answered, but the new schedule has occurrences before the orphan all the same.
  it("a PATCH that pauses and changes the schedule, settling a lost fire's orphan: a resume fires the new schedule from now", () => {
    const { d, hour } = lostFireOrphan();
    d.activate();
    d.send({
      kind: "patch",
      patch: { enabled: false, schedule: { cron: "*/10 * * * * *", time_zone: "UTC" } },
    });
    assert.equal(d.written.get(hour)?.status, "cancelled", "the orphan settled");
    d.advance(20_000);
    const r = d.send({ kind: "patch", patch: { enabled: true } });
    assert.equal(at(r.reply?.job?.next_run_at), ms("2026-01-01T00:58:30Z"));
    d.advance(ms("2026-01-01T01:00:05Z") - d.now);
    for (let t = ms("2026-01-01T00:58:30Z"); t < ms("2026-01-01T01:00:00Z"); t += 10_000)
      assert.ok(
        d.records.has(runIdFor(JOB, t)),
        `the occurrence ${new Date(t).toISOString()} has a run`,
      );
    assert.equal(d.written.get(hour)?.status, "cancelled", "the orphan stays cancelled");
    assert.deepEqual(d.listingProblems(), [], "each record listed once");
    assert.deepEqual(d.violations, []);
  });

  it("a patch that leaves the schedule alone keeps next_run_at", () => {
    const d = new Driver();
    d.create();
    d.advance(300);
    const before = d.state.next_run_at_ms;
    d.send({ kind: "patch", patch: { task: { image: "x", args: [], env: {}, timeout_s: 5 } } });
    assert.equal(d.state.next_run_at_ms, before);
  });
});

describe("job actor: delete and run now", () => {
  it("deleting a job with 80 running tasks keeps all 80 slots until each task is gone (none given back early: the tenant's cap holds)", () => {
    const d = new Driver(cfg(), { autoClaim: true });
    d.create(spec({ overlap: "allow", schedule: { at: "2030-01-01T00:00:00Z" } }));
    for (let i = 0; i < 80; i++) assert.equal(d.send({ kind: "run_now" }).fail, undefined);
    d.advance(10);
    const active = d.state.runs.map((r) => ({ id: r.run_id, fence: r.fence }));
    assert.equal(active.length, 80);
    for (const a of active) d.heartbeat(a.id, a.fence, d.now); // all 80 running
    assert.deepEqual(d.send({ kind: "delete" }).reply, { ok: true });
    assert.equal(d.state.draining?.length, 80);
    assert.equal(
      d.postsOf("release_slot").length,
      0,
      "no slot released while its task may still be dying",
    );
    assert.equal(d.slots.size, 80);
    for (const a of active.slice(0, 79))
      d.complete(a.id, { outcome: "killed", exit_code: null }, a.fence);
    assert.equal(d.slots.size, 1, "each slot back once its kill is reported");
  });

  it("a new owner keeps a dying run's slot past the old owner's drain bound by the start tolerance (their clocks may differ)", () => {
    const d = new Driver(cfg(), { autoClaim: true });
    d.create(spec({ overlap: "allow", schedule: { at: "2030-01-01T00:00:00Z" } }));
    d.send({ kind: "run_now" });
    d.advance(10);
    const r = d.state.runs[0]!;
    d.heartbeat(r.run_id, r.fence, d.now);
    d.send({ kind: "delete" });
    const until = d.state.draining![0]!.until_ms;
    d.activate(); // a takeover: the state read back by another node
    assert.equal(d.timers.get(`drain:${r.run_id}`)?.atMs, until + START_SKEW_TOLERANCE_MS);
  });

  it("active and dying runs together are bounded by maxActiveRuns: an occurrence beyond it is skipped", () => {
    const d = new Driver(cfg({ maxActiveRuns: 2, lookaheadMs: 0 }), { autoClaim: true });
    d.create(spec({ overlap: "replace" }));
    for (let i = 0; i < 8; i++) {
      d.advance(1_000);
      for (const r of d.state.runs)
        if (r.status === "leased") d.heartbeat(r.run_id, r.fence, d.now); // started; their kills never reported
    }
    assert.ok(
      d.state.runs.length + (d.state.draining?.length ?? 0) <= 2,
      "slots held within maxActiveRuns",
    );
    assert.ok(d.slots.size <= 2, `tenant slots held: ${d.slots.size}`);
    assert.match(
      d.recordsByStatus("skipped")[0]?.reason ?? "",
      /counting those still being stopped/,
    );
  });

  it("delete cancels active runs (cancel_on_worker with the fence; each slot held until its worker reports the kill or the drain bound passes) and later messages are not_found", () => {
    const d = new Driver(cfg(), { autoClaim: true });
    d.create(spec({ overlap: "allow" }));
    d.advance(2_000);
    d.send({ kind: "run_now" });
    d.advance(10);
    const active = d.state.runs.map((r) => ({ id: r.run_id, fence: r.fence }));
    assert.ok(active.length >= 2 && d.state.runs.every((r) => r.status === "leased"));
    const r = d.send({ kind: "delete" });
    assert.deepEqual(r.reply, { ok: true });
    for (const a of active) {
      assert.ok(
        d
          .postsOf("cancel_on_worker")
          .some((c) => c.run_id === a.id && c.fence === a.fence && c.worker === "w1"),
      );
      assert.equal(d.records.get(a.id)?.status, "cancelled");
      assert.equal(d.records.get(a.id)?.reason, "job deleted");
    }
    assert.equal(d.state.runs.length, 0);
    // The tasks may still be executing until their worker has killed them: slots stay taken.
    assert.equal(d.postsOf("release_slot").length, 0);
    assert.equal(d.slots.size, active.length);
    // The worker reports the first kill: its slot goes back at once (the record stays cancelled).
    assert.deepEqual(
      d.complete(active[0]!.id, { outcome: "killed", exit_code: null }, active[0]!.fence).reply,
      { ok: true },
    );
    assert.equal(d.records.get(active[0]!.id)?.status, "cancelled");
    assert.ok(!d.slots.has(active[0]!.id));
    assert.equal(
      d.complete(active[0]!.id, { outcome: "killed", exit_code: null }, active[0]!.fence).fail
        ?.code,
      "stale_fence",
      "once",
    );
    // The others' reports are lost: their slots come back at the drain bound (lease TTL + kill grace).
    d.advance(cfg().leaseTtlMs + cfg().drainGraceMs + 1);
    assert.equal(d.slots.size, 0);
    assert.equal(d.timers.size, 0, "fire, lease and drain timers done");
    for (const msg of [
      { kind: "get" },
      { kind: "patch", patch: { enabled: true } },
      { kind: "delete" },
      { kind: "run_now" },
    ] as const) {
      assert.equal(d.send(msg).fail?.code, "not_found", msg.kind);
    }
    const count = d.records.size;
    d.send({ kind: "fire" });
    d.advance(60_000);
    assert.equal(d.records.size, count, "a deleted job never fires");
    const hb = d.heartbeat(active[0]!.id, active[0]!.fence);
    assert.equal(hb.fail?.code, "lease_lost");
    assert.equal(d.create().fail?.code, "conflict", "a deleted job id is not re-created");
  });

  it("run_now creates a manual run with a distinct id that is dispatched, without touching next_run_at", () => {
    const d = new Driver();
    d.create(spec({ schedule: { cron: "0 0 * * *", time_zone: "UTC" } }));
    const next = d.state.next_run_at_ms;
    const a = d.send({ kind: "run_now" });
    const b = d.send({ kind: "run_now" });
    const ra = a.reply?.run;
    const rb = b.reply?.run;
    assert.ok(ra && rb);
    assert.equal(ra.trigger, "manual");
    assert.notEqual(ra.run_id, rb.run_id);
    assert.notEqual(
      ra.run_id,
      runIdFor(JOB, T0),
      "distinct from a scheduled occurrence at the same instant",
    );
    assert.equal(ra.run_id, runIdFor(JOB, T0, 1));
    assert.equal(d.records.get(ra.run_id)?.status, "leased");
    assert.equal(d.state.next_run_at_ms, next);
    assert.equal(d.dispatches.length, 2);
  });

  it("run_now refuses past maxActiveRuns with quota_exceeded", () => {
    const d = new Driver(cfg({ maxActiveRuns: 2 }));
    d.create(spec({ schedule: { cron: "0 0 * * *", time_zone: "UTC" } }));
    d.send({ kind: "run_now" });
    d.send({ kind: "run_now" });
    assert.equal(d.send({ kind: "run_now" }).fail?.code, "quota_exceeded");
  });

  it("get answers the job with next_runs and does not write state", () => {
    const d = new Driver();
    d.create();
    const s = d.state;
    const r = d.send({ kind: "get" });
    assert.equal(r.reply?.job?.next_runs?.length, 5);
    assert.equal(d.state, s);
  });
});

describe("run_settled: an orphan handled ahead with the list full", () => {
  it("keeps the latest occurrences, the settled orphan among them", () => {
    const d = new Driver();
    d.create(); // every 2 s: next at 00:00:02
    const o = Date.UTC(2026, 0, 1, 0, 10, 0);
    const full = Array.from({ length: MAX_HANDLED_AHEAD }, (_, i) =>
      Date.UTC(2026, 0, 1, 0, 5, 2 * i),
    );
    d.state = { ...d.state, handled_ahead: full };
    d.send({ kind: "run_settled", run_id: runIdFor(JOB, o) });
    assert.equal(d.state.handled_ahead?.length, MAX_HANDLED_AHEAD);
    assert.ok(d.state.handled_ahead?.includes(o), "the orphan just settled is kept");
    assert.ok(!d.state.handled_ahead?.includes(full[0]!), "the earliest gives way");
  });
});
