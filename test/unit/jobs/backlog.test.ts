/**
 * Bounded backlogs in the job actor's pure core: the job's bound on runs waiting for a slot
 * (`throttled` records), the tenant's refusal (`slot_throttled`), and the starting deadline that
 * ends a run waiting too long `missed` instead of starting it late — counted from its due time
 * for a run prepared ahead.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  DEFAULT_DEADLINE_MAX_MS,
  DEFAULT_DEADLINE_MIN_MS,
  jobThrottle,
  startingDeadlineMs,
  waitingRuns,
} from "../../../src/job-state/backlog.ts";
import { grantId, runIdFor } from "../../../src/protocol/ids.ts";
import { SLOT_ASK_BEFORE_DEADLINE_MS } from "../../../src/runs/run-dispatch.ts";
import { Driver, JOB, T0, cfg, spec } from "./driver.ts";

const sec = (s: number) => Date.UTC(2026, 0, 1, 0, 0, s);
const everySecond = { cron: "* * * * * *", time_zone: "UTC" };

describe("backlog: pure decisions", () => {
  it("a cron job's default starting deadline is the gap to its next occurrence, 10 s to 5 min; an explicit one wins; none for a run-now, a catch-up or a one-shot", () => {
    const cron = (c: string) => spec({ schedule: { cron: c, time_zone: "UTC" } });
    const due = sec(0);
    assert.equal(startingDeadlineMs(cron("* * * * * *"), due, "schedule"), DEFAULT_DEADLINE_MIN_MS);
    assert.equal(startingDeadlineMs(cron("*/30 * * * * *"), due, "schedule"), 30_000);
    assert.equal(startingDeadlineMs(cron("* * * * *"), due, "schedule"), 60_000);
    assert.equal(startingDeadlineMs(cron("0 * * * *"), due, "schedule"), DEFAULT_DEADLINE_MAX_MS);
    const explicit = spec({ misfire: { policy: "run_once", starting_deadline_s: 7 } });
    assert.equal(startingDeadlineMs(explicit, due, "schedule"), 7_000);
    assert.equal(startingDeadlineMs(explicit, due, "catch_up"), 7_000);
    assert.equal(startingDeadlineMs(explicit, due, "manual"), null);
    assert.equal(startingDeadlineMs(cron("* * * * *"), due, "catch_up"), null);
    assert.equal(
      startingDeadlineMs(spec({ schedule: { at: "2026-01-01T00:00:00Z" } }), due, "schedule"),
      null,
    );
  });

  it("the job's bound counts runs queued without a slot (prepared ahead included) and judges only occurrences of the schedule", () => {
    const d = new Driver(cfg({ maxWaitingRuns: 2 }), { autoGrant: false });
    d.create(spec({ schedule: everySecond, overlap: "allow" }));
    d.advance(1_000);
    assert.equal(waitingRuns(d.state), 1);
    assert.equal(jobThrottle(d.state, "schedule", d.now, d.now, 2), undefined);
    d.advance(1_000);
    assert.equal(waitingRuns(d.state), 2);
    assert.match(
      jobThrottle(d.state, "schedule", d.now, d.now, 2) ?? "",
      /^backlog: the job has 2 runs waiting/,
    );
    assert.equal(jobThrottle(d.state, "manual", d.now, d.now, 2), undefined);
    assert.equal(jobThrottle(d.state, "catch_up", d.now, d.now, 2), undefined);
    assert.equal(
      jobThrottle(d.state, "schedule", d.now + 1, d.now, 2),
      undefined,
      "an occurrence not due yet is not judged",
    );
    d.grant();
    assert.equal(waitingRuns(d.state), 1, "a granted run no longer waits");
  });
});

describe("backlog: the job's bound", () => {
  it("an occurrence beyond the job's bound gets a terminal throttled record with its reason, asks for no slot, and the next under the bound runs again", () => {
    const d = new Driver(cfg({ maxWaitingRuns: 3 }), { autoGrant: false });
    d.create(spec({ schedule: everySecond, overlap: "allow" }));
    d.advance(3_000); // :01, :02, :03 wait for slots
    assert.equal(waitingRuns(d.state), 3);
    d.advance(1_000); // :04 is beyond the bound
    const id = runIdFor(JOB, sec(4));
    const rec = d.records.get(id);
    assert.equal(rec?.status, "throttled");
    assert.equal(rec?.reason, "backlog: the job has 3 runs waiting for a slot (at most 3)");
    assert.equal(rec?.attempts.length, 0);
    assert.equal(rec?.finished_at !== null, true, "terminal: it has its end");
    assert.equal(d.run(id), undefined, "no active run for it");
    assert.ok(!d.pendingSlots.includes(id), "it asked for no slot");
    d.grant(); // :01 gets its slot: two wait
    d.advance(1_000);
    assert.equal(d.run(runIdFor(JOB, sec(5)))?.status, "queued", ":05 is under the bound again");
  });

  it("with look-ahead: a job at its bound prepares nothing ahead, and judges each occurrence as it falls due (not the next minute's at once)", () => {
    const d = new Driver(cfg({ maxWaitingRuns: 2, lookaheadMs: 60_000 }), { autoGrant: false });
    d.create(spec({ schedule: everySecond, overlap: "allow" }));
    d.advance(5_000);
    const throttled = () => [...d.records.values()].filter((r) => r.status === "throttled");
    const ahead = d.state.runs.filter((r) => r.scheduled_for_ms > d.now);
    assert.equal(ahead.length, 0, "nothing prepared ahead at the bound");
    const n = throttled().length;
    assert.ok(n >= 2 && n <= 4, `only occurrences due so far are throttled (${n})`);
    assert.ok(throttled().every((r) => Date.parse(r.scheduled_for) <= d.now));
    d.grant();
    d.advance(1_000);
    assert.equal(throttled().length, n, "under the bound again: the next occurrence runs");
  });

  it("a run-now is not throttled by the job's bound (it counts towards it)", () => {
    const d = new Driver(cfg({ maxWaitingRuns: 1 }), { autoGrant: false });
    d.create(spec({ schedule: everySecond, overlap: "allow" }));
    d.advance(1_000);
    const r = d.send({ kind: "run_now" });
    assert.equal(r.fail, undefined);
    assert.equal(r.reply?.run?.status, "queued");
    assert.equal(waitingRuns(d.state), 2);
  });

  it("without the bound (the control), the same backlog keeps every occurrence queued", () => {
    const d = new Driver(cfg({ maxWaitingRuns: 100 }), { autoGrant: false });
    d.create(spec({ schedule: everySecond, overlap: "allow" }));
    d.advance(4_000);
    assert.equal(waitingRuns(d.state), 4);
    assert.equal([...d.records.values()].filter((r) => r.status === "throttled").length, 0);
  });
});

describe("backlog: the tenant's refusal", () => {
  it("slot_throttled ends a waiting run throttled with the tenant's figures, gives nothing back, and a stale answer changes nothing", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(spec({ schedule: everySecond, overlap: "allow" }));
    d.advance(2_000);
    const a = d.run(runIdFor(JOB, sec(1)))!;
    const b = d.run(runIdFor(JOB, sec(2)))!;
    const asked = d.posts.filter((p) => p.kind === "acquire_slot");
    assert.ok(
      asked.every((p) => p.kind === "acquire_slot" && p.throttle === true),
      "asks of never-attempted runs may be refused",
    );
    const releases = d.postsOf("release_slot").length;
    d.send({ kind: "slot_throttled", run_id: grantId(a), waiting: 7, max_waiting: 7 });
    const rec = d.records.get(a.run_id);
    assert.equal(rec?.status, "throttled");
    assert.equal(
      rec?.reason,
      "backlog: the tenant has 7 runs waiting for a slot (max_waiting_runs 7)",
    );
    assert.equal(d.run(a.run_id), undefined);
    assert.equal(d.postsOf("release_slot").length, releases, "it held nothing: nothing released");
    // Stale: an answer naming another grant of b, and one for b once granted.
    d.send({ kind: "slot_throttled", run_id: `${b.run_id}_999`, waiting: 7, max_waiting: 7 });
    assert.equal(d.run(b.run_id)?.status, "queued");
    d.grant(b.run_id);
    d.send({
      kind: "slot_throttled",
      run_id: grantId(d.run(b.run_id)!),
      waiting: 7,
      max_waiting: 7,
    });
    assert.notEqual(d.records.get(b.run_id)?.status, "throttled", "a granted run is not throttled");
  });

  it("a refusal of a run prepared ahead does not throttle it: it asks again at its due time, when the bound decides", () => {
    const d = new Driver(cfg({ lookaheadMs: 60_000 }), { autoGrant: false });
    d.create(spec({ schedule: { cron: "*/5 * * * *", time_zone: "UTC" }, overlap: "allow" }));
    const due = Date.UTC(2026, 0, 1, 0, 5, 0);
    d.advance(due - 30_000 - T0);
    const r = d.run(runIdFor(JOB, due))!;
    d.send({ kind: "slot_throttled", run_id: grantId(r), waiting: 5, max_waiting: 5 });
    assert.equal(d.run(r.run_id)?.status, "queued", "not throttled ahead of its due time");
    assert.equal(d.timers.get(`slot:${r.run_id}`)?.atMs, due, "asks again at its due time");
    const asks = d.postsOf("acquire_slot").length;
    d.advance(due - d.now);
    assert.equal(d.postsOf("acquire_slot").length, asks + 1);
    d.send({ kind: "slot_throttled", run_id: grantId(r), waiting: 5, max_waiting: 5 });
    assert.equal(d.records.get(r.run_id)?.status, "throttled", "due, and refused: throttled");
  });

  it("a run-now's ask is never marked throttle-able, nor is a run's ask after an attempt", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" } }));
    const id = d.send({ kind: "run_now" }).reply!.run!.run_id;
    const ask = d.posts.find((p) => p.kind === "acquire_slot" && p.run_id === id);
    assert.ok(ask && ask.kind === "acquire_slot" && ask.throttle === undefined);
    d.send({ kind: "slot_throttled", run_id: grantId(d.run(id)!), waiting: 1, max_waiting: 1 });
    assert.equal(d.run(id)?.status, "queued", "a run-now is not throttled");
  });
});

describe("backlog: the starting deadline", () => {
  it("a run waiting for a slot past its default deadline (a job every 2 s: 10 s) ends missed, its place in the tenant's list given back, and a late grant starts nothing", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(spec()); // */2 s, skip
    d.advance(1_500); // :02 due, waits
    const id = runIdFor(JOB, sec(2));
    const r = d.run(id)!;
    assert.equal(r.deadline_ms, sec(2) + 10_000);
    d.advance(sec(12) - d.now - 1);
    assert.equal(d.run(id)?.status, "queued", "not before its deadline");
    d.advance(1);
    const rec = d.records.get(id);
    assert.equal(rec?.status, "missed");
    assert.equal(rec?.reason, "starting deadline: not started within 10 s of its due time");
    assert.deepEqual(
      d.postsOf("release_slot").map((p) => p.kind === "release_slot" && p.grant),
      [grantId(r)],
      "its ask leaves the tenant's waiting list",
    );
    assert.ok(!d.pendingSlots.includes(id));
    d.send({ kind: "slot_granted", run_id: grantId(r) }); // a grant that crossed the release
    assert.equal(d.dispatches.filter((x) => x.run_id === id).length, 0, "never offered");
    assert.equal(d.postsOf("release_slot").length, 2, "the late grant is released");
  });

  it("a run whose ask was lost (its tenant actor's node died) asks once more before its deadline, and a grant then starts it", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(spec()); // */2 s, skip: the default deadline is 10 s, the first re-ask interval too
    d.advance(1_500); // :02 due, asks, waits
    const id = runIdFor(JOB, sec(2));
    const asks = () => d.postsOf("acquire_slot").filter((p) => p.run_id === id).length;
    assert.equal(asks(), 1);
    d.pendingSlots.splice(0); // the tenant's soft waiting list is lost with its node
    d.advance(sec(2) + 10_000 - SLOT_ASK_BEFORE_DEADLINE_MS - d.now - 1);
    assert.equal(asks(), 1, "not before the last ask's instant");
    d.advance(1);
    assert.equal(asks(), 2, "asked again, 5 s before its deadline");
    d.grant(id);
    assert.equal(d.dispatches.filter((x) => x.run_id === id).length, 1, "offered");
    d.advance(sec(12) - d.now);
    assert.equal(d.records.get(id)?.status, "leased", "not missed at its deadline");
  });

  it("a run asks once more before its deadline, not again: unanswered, it ends missed at the deadline", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(spec());
    d.advance(1_500);
    const id = runIdFor(JOB, sec(2));
    const asks = () => d.postsOf("acquire_slot").filter((p) => p.run_id === id).length;
    d.advance(sec(12) - d.now - 1);
    assert.equal(asks(), 2, "the first ask and the one before the deadline");
    d.advance(1);
    assert.equal(d.records.get(id)?.status, "missed");
    assert.equal(asks(), 2);
  });

  it("a grant that arrives at the deadline (before the check) does not start the run: missed, the slot released", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(
      spec({
        schedule: { cron: "0 * * * *", time_zone: "UTC" },
        misfire: { policy: "run_once", starting_deadline_s: 30 },
      }),
    );
    d.advance(3_600_000); // 01:00:00 due
    const id = runIdFor(JOB, Date.UTC(2026, 0, 1, 1, 0, 0));
    const r = d.run(id)!;
    assert.equal(r.deadline_ms, Date.UTC(2026, 0, 1, 1, 0, 30));
    d.now = r.deadline_ms!;
    d.grant(id);
    assert.equal(d.records.get(id)?.status, "missed");
    assert.equal(d.dispatches.length, 0);
    assert.equal(d.slots.size, 0, "the slot went back");
  });

  it("a run prepared ahead waits from its due time, not from its creation", () => {
    const d = new Driver(cfg({ lookaheadMs: 60_000 }), { autoGrant: false });
    d.create(
      spec({
        schedule: { cron: "*/5 * * * *", time_zone: "UTC" },
        overlap: "allow",
        misfire: { policy: "run_once", starting_deadline_s: 20 },
      }),
    );
    const due = Date.UTC(2026, 0, 1, 0, 5, 0);
    d.advance(due - 30_000 - T0); // prepared within the window
    const id = runIdFor(JOB, due);
    assert.equal(d.run(id)?.status, "queued");
    assert.equal(d.run(id)?.deadline_ms, due + 20_000);
    d.advance(due + 19_999 - d.now);
    assert.equal(
      d.run(id)?.status,
      "queued",
      "waited 50 s since its creation, 20 s since its due time: not yet",
    );
    d.advance(1);
    assert.equal(d.records.get(id)?.status, "missed");
  });

  it("a retry waiting for a slot past the deadline (its first attempt ran) is never missed, and its slot checks keep their interval", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(
      spec({
        schedule: { cron: "0 * * * *", time_zone: "UTC" },
        retry: { max_attempts: 2, backoff: "fixed", base_s: 1, max_s: 1 },
        misfire: { policy: "run_once", starting_deadline_s: 5 },
      }),
    );
    d.advance(3_600_000);
    const id = runIdFor(JOB, Date.UTC(2026, 0, 1, 1, 0, 0));
    d.grant(id);
    const r = d.run(id)!;
    d.send({ kind: "heartbeat", run_id: id, fence: r.fence, worker: "w1", started_at_ms: d.now });
    d.send({
      kind: "complete",
      run_id: id,
      fence: r.fence,
      worker: "w1",
      outcome: "exited",
      exit_code: 1,
      output: "",
      error: null,
      started_at_ms: d.now,
      finished_at_ms: d.now,
    });
    d.advance(10_000); // past the deadline: the retry asks for a slot
    assert.equal(d.run(id)?.status, "queued");
    const checks = () => d.decisions.filter((x) => x.msg.kind === "slot_check").length;
    const before = checks();
    d.advance(60_000);
    assert.equal(d.run(id)?.status, "queued", "a run that ran once is not missed");
    assert.ok(
      checks() - before <= 6,
      `slot checks every 10 s or more, not at once (${checks() - before})`,
    );
  });

  it("a run heard to start is never missed (its retry past the deadline is offered); a run-now has no deadline", () => {
    const d = new Driver(cfg());
    d.create(
      spec({
        schedule: { cron: "0 * * * *", time_zone: "UTC" },
        retry: { max_attempts: 2, backoff: "fixed", base_s: 1, max_s: 1 },
        misfire: { policy: "run_once", starting_deadline_s: 5 },
      }),
    );
    d.advance(3_600_000);
    const id = runIdFor(JOB, Date.UTC(2026, 0, 1, 1, 0, 0));
    const r = d.run(id)!;
    assert.equal(r.status, "leased");
    d.send({ kind: "heartbeat", run_id: id, fence: r.fence, worker: "w1", started_at_ms: d.now });
    assert.equal(d.run(id)?.status, "running");
    d.advance(30_000); // its worker falls silent: the lease lapses past the deadline
    assert.ok((d.run(id)?.attempt ?? 0) >= 2, "offered again (and claimed) after the lapse");
    assert.notEqual(d.records.get(id)?.status, "missed");
    const m = new Driver(cfg(), { autoGrant: false });
    m.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" } }));
    const run = m.send({ kind: "run_now" }).reply!.run!.run_id;
    assert.equal(m.run(run)?.deadline_ms, undefined);
    m.advance(600_000);
    assert.equal(m.run(run)?.status, "queued", "a run-now waits for its slot however long");
  });
});

describe("backlog: a deadline and an attempt of unknown fate", () => {
  /** An hourly job with a 5 s starting deadline, its first run (01:00) claimed by a worker. */
  const claimedHourly = () => {
    const d = new Driver(cfg(), { autoClaim: false });
    d.create(
      spec({
        schedule: { cron: "0 * * * *", time_zone: "UTC" },
        misfire: { policy: "run_once", starting_deadline_s: 5 },
      }),
    );
    d.advance(3_600_000);
    const id = runIdFor(JOB, Date.UTC(2026, 0, 1, 1, 0, 0));
    d.claim();
    return { d, id };
  };

  it("a run whose attempt lapsed unanswered (it may have run) is not missed past its deadline: it is offered again", () => {
    // A worker cut off with a cover starts and ends the attempt, but cannot tell: the owner
    // presumes it unstarted. Recording `missed` would then deny a run that executed
    // (simulation seed 2000272).
    const { d, id } = claimedHourly();
    assert.equal(d.run(id)?.status, "leased");
    d.advance(30_000); // silent worker: the lease lapses, no probe answered, past the deadline
    const again = d.pendingClaims.find((x) => x.run_id === id);
    assert.ok(again, "offered again after the lapse");
    d.send({ kind: "dispatch_failed", run_id: id, fence: again.fence, reason: "no worker" });
    d.advance(10_000); // the redispatch, past the deadline
    assert.notEqual(d.records.get(id)?.status, "missed");
    assert.equal(d.run(id)?.status, "queued");
    assert.ok(d.pendingClaims.some((x) => x.run_id === id && x.fence > again.fence));
  });

  it("a run whose worker said it never started its attempt still misses its deadline", () => {
    const { d, id } = claimedHourly();
    const fence = d.run(id)!.fence;
    d.send({ kind: "lease_expired", run_id: id, fence });
    d.send({
      kind: "probe_answer",
      run_id: id,
      fence,
      worker: "w1",
      reply: { state: "not_started" },
    });
    const again = d.pendingClaims.find((x) => x.run_id === id);
    assert.ok(again, "offered again after the lapse");
    d.advance(10_000);
    d.send({ kind: "dispatch_failed", run_id: id, fence: again.fence, reason: "no worker" });
    d.advance(10_000);
    assert.equal(d.records.get(id)?.status, "missed");
  });
});

describe("backlog: a waiting run's place", () => {
  const retryOnce = { max_attempts: 2, backoff: "fixed" as const, base_s: 1, max_s: 1 };

  it("a run due since long asks with its own start, not the time of its ask: the tenant grants the longest waiting first", () => {
    const d = new Driver(cfg(), { autoGrant: false });
    d.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" }, overlap: "allow" }));
    d.advance(3_600_000);
    const due = Date.UTC(2026, 0, 1, 1, 0, 0);
    const id = runIdFor(JOB, due);
    d.advance(25_000); // it asks again (slot checks)
    const asks = d.postsOf("acquire_slot").filter((p) => p.run_id === id);
    assert.ok(asks.length >= 2, `asked again while waiting (${asks.length})`);
    assert.deepEqual(
      asks.map((p) => p.start_at_ms),
      asks.map(() => due),
      "every ask names its due time",
    );
  });

  it("a retry that fell due while the owner's clock ran ahead keeps its place once the clock steps back: its ask names its occurrence's start, and its worker may start it at once", () => {
    const d = new Driver(cfg(), { autoGrant: false, autoClaim: false });
    d.create(spec({ schedule: { at: "2026-01-01T00:00:02Z" }, retry: retryOnce }));
    const id = runIdFor(JOB, sec(2));
    d.advance(1_500);
    d.grant(id);
    d.claim();
    d.complete(id, { exit_code: 1 }); // retry_wait, due 1 s on
    assert.equal(d.run(id)?.status, "retry_wait");
    d.skipTime(28_000); // the owner's clock steps 28 s ahead
    d.advance(1_000); // its retry falls due by that clock
    assert.equal(d.run(id)?.status, "queued");
    d.now -= 28_000; // and steps back
    const ask = d.postsOf("acquire_slot").at(-1)!;
    assert.equal(ask.run_id, id);
    assert.equal(ask.start_at_ms, sec(2), "ranked at its occurrence, ahead of any run due later");
    assert.ok(ask.start_at_ms <= d.now, "not a start in the future");
    d.grant(id);
    const offer = d.dispatches.at(-1)!;
    assert.equal(offer.run_id, id);
    assert.ok(
      offer.start_at_ms <= d.now,
      `its worker may start it now (offer start ${offer.start_at_ms - d.now} ms from now)`,
    );
  });

  it("a retry waiting for a slot asks again 10 s after it fell due, not 30 s as a run waiting since its occurrence a minute ago", () => {
    const d = new Driver(cfg(), { autoGrant: false, autoClaim: false });
    const minute = { max_attempts: 2, backoff: "fixed" as const, base_s: 60, max_s: 60 };
    d.create(spec({ schedule: { at: "2026-01-01T00:00:02Z" }, retry: minute }));
    const id = runIdFor(JOB, sec(2));
    d.advance(1_500);
    d.grant(id);
    d.claim();
    d.complete(id, { exit_code: 1 }); // its retry is due a minute later
    d.advance(60_000);
    assert.equal(d.run(id)?.status, "queued", "its retry fell due and asks");
    assert.equal(d.timers.get(`slot:${id}`)?.atMs, d.now + 10_000);
  });
});
