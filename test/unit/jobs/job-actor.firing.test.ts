/**
 * Firing, overlap and misfire on a simulated clock: one run per occurrence with fresh fences,
 * crash re-fires without duplicates, the four overlap policies, and the misfire policies after
 * simulated downtime (the clock moves, no timer fires, then `fire` is delivered).
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { splitGrant } from "../../../src/protocol/ids.ts";
import { runIdFor } from "../../../src/protocol/ids.ts";
import { compileSchedule } from "../../../src/schedule/index.ts";
import { DEFAULT_JOB_CONFIG, type JobEffect } from "../../../src/job-state/job-types.ts";
import { emptyJobState, type JobState } from "../../../src/job-state/job-state.ts";
import { SHORT_LOOKAHEAD_MS, windowOf } from "../../../src/job-state/occurrence-plan.ts";
import { Driver, JOB, T0, cfg, spec } from "./driver.ts";

const sec = (s: number) => Date.UTC(2026, 0, 1, 0, 0, s);
/** The gate timers a re-activation of the job actor would arm now: [name, atMs]. */
const gatesOnActivate = (d: Driver): [string, number][] =>
  d.actor.onActivate!(d.state, { id: "t1.j1", nowMs: d.now }).flatMap((e) =>
    e.kind === "timer" && e.name.startsWith("gate:") ? [[e.name, e.atMs] as [string, number]] : [],
  );
const every2s = compileSchedule({ cron: "*/2 * * * * *", time_zone: "UTC" });
const at = (iso: string) => Date.parse(iso);
/** A go for an attempt not started yet: covered until its start + the lease TTL (run-lifecycle.ts `heartbeatAck`). */
const go = (d: Driver, r: { start_at_ms: number }) => ({
  ok: true,
  cover_ms: r.start_at_ms - d.now + cfg().leaseTtlMs,
});

describe("job actor: firing", () => {
  it("a */2 6-field job over 20 s makes exactly one run per occurrence, each with a fresh increasing fence", () => {
    const d = new Driver(cfg(), { autoComplete: () => ({}) });
    d.create(spec());
    d.advance(20_000); // to 00:00:20.5
    const expected = every2s.next(T0, 10);
    assert.equal(expected.at(-1), sec(20));
    const runs = [...d.records.values()].sort((a, b) => at(a.scheduled_for) - at(b.scheduled_for));
    assert.deepEqual(
      runs.map((r) => at(r.scheduled_for)),
      expected,
      "no occurrence skipped or doubled",
    );
    assert.deepEqual(
      runs.map((r) => r.run_id),
      expected.map((o) => runIdFor(JOB, o)),
    );
    assert.ok(
      runs.every((r) => r.status === "succeeded" && r.trigger === "schedule" && r.attempt === 1),
    );
    assert.equal(d.dispatches.length, 10);
    assert.deepEqual(
      d.dispatches.map((x) => x.run_id),
      runs.map((r) => r.run_id),
    );
    d.dispatches.forEach((x, i) => {
      if (i > 0) assert.ok(x.fence > d.dispatches[i - 1]!.fence, "fences strictly increase");
      assert.equal(x.scheduled_for_ms, expected[i]);
      assert.equal(x.attempt, 1);
    });
    assert.equal(d.state.fence_seq, d.dispatches.at(-1)!.fence);
    assert.equal(d.state.next_run_at_ms, sec(22));
    assert.equal(d.timers.get("fire")?.atMs, sec(22));
    assert.deepEqual(d.violations, []);
  });

  it("skip with look-ahead: the next occurrence is prepared ahead under a gate; with nothing blocking it, its worker may start it at its due time (no hold, no round trip then)", () => {
    const d = new Driver(cfg({ lookaheadMs: 5_000 }));
    d.create(spec());
    d.advance(0);
    assert.deepEqual(
      d.state.runs.map((r) => r.scheduled_for_ms),
      [sec(2)],
      "one occurrence prepared ahead, not the whole window",
    );
    const r = d.state.runs[0]!;
    assert.equal(r.gate, true);
    assert.equal(r.status, "leased", "slot and worker matched before it is due");
    assert.equal(
      d.dispatches[0]?.start_at_ms,
      sec(2),
      "the worker starts it from its own timer at scheduled_for",
    );
    assert.deepEqual(
      d.heartbeat(r.run_id).reply,
      go(d, r),
      "nothing blocks it: no hold, and covered through its start (no round trip as it nears)",
    );
    const fast = d.actor.query!(
      d.state,
      { kind: "heartbeat", run_id: r.run_id, fence: r.fence, worker: "w1" },
      { id: "t1.j1", nowMs: d.now },
    );
    assert.deepEqual(
      fast && "reply" in fast ? fast.reply : fast,
      go(d, r),
      "the fast path answers the same",
    );
    assert.ok(
      d.timers.get(`lease:${r.run_id}`)!.atMs >= r.start_at_ms + cfg().leaseTtlMs,
      "the owner's lease outlasts the cover it gave",
    );
    d.advance(sec(2) - d.now);
    assert.deepEqual(
      d.heartbeat(r.run_id, r.fence, d.now).reply,
      { ok: true },
      "started at the due time: no cover (the lease runs from each heartbeat)",
    );
    assert.equal(d.records.get(r.run_id)?.status, "running");
    // The window reopened at the due instant: the following occurrence is prepared ahead, held
    // while this one runs (the earlier run blocks it).
    assert.deepEqual(
      d.state.runs.map((x) => x.scheduled_for_ms),
      [sec(2), sec(4)],
    );
    const next = d.state.runs[1]!;
    assert.deepEqual(d.heartbeat(next.run_id).reply, { ok: true, hold: true });
    const query = d.actor.query!(
      d.state,
      { kind: "heartbeat", run_id: next.run_id, fence: next.fence, worker: "w1" },
      { id: "t1.j1", nowMs: d.now },
    );
    assert.deepEqual(
      query && "reply" in query ? query.reply : query,
      { ok: true, hold: true },
      "the fast path (no mailbox) answers the same",
    );
    d.complete(r.run_id);
    assert.deepEqual(
      d.heartbeat(next.run_id).reply,
      go(d, next),
      "the blocking run ended before the due time: go",
    );
    d.advance(sec(4) - d.now);
    assert.notEqual(d.records.get(next.run_id)?.status, "skipped");
  });

  it("look-ahead: a prepared attempt cancelled before its start keeps its slot drained until start_at + TTL + grace (its cover lets a worker that missed the cancel start it then)", () => {
    const c = cfg({ lookaheadMs: 30_000 });
    const d = new Driver(c);
    d.create(spec({ schedule: { cron: "0 * * * * *", time_zone: "UTC" } }));
    d.advance(45_000); // the :00 occurrence is prepared in the window's first half (30 s to 15 s before)
    const r = d.state.runs[0]!;
    assert.equal(r.status, "leased");
    assert.ok(r.start_at_ms - d.now > c.leaseTtlMs, "prepared more than a lease TTL ahead");
    // Its grant lives from its start, not from the ask (else a long look-ahead's grants expire before their runs start).
    const ask = d.postsOf("acquire_slot").find((p) => p.run_id === r.run_id)!;
    assert.ok(
      ask.starts_in_ms >= 15_000 && ask.starts_in_ms <= 30_000,
      `starts_in_ms ${ask.starts_in_ms}: asked in the window's first half`,
    );
    assert.deepEqual(d.heartbeat(r.run_id).reply, go(d, r));
    d.send({ kind: "delete" });
    assert.deepEqual(
      d.postsOf("cancel_on_worker").map((p) => p.run_id),
      [r.run_id],
      "its worker is told to drop it",
    );
    assert.deepEqual(
      d.state.draining?.map((x) => [x.run_id, x.until_ms]),
      [[r.run_id, r.start_at_ms + c.leaseTtlMs + c.drainGraceMs]],
    );
    assert.equal(
      d.postsOf("release_slot").length,
      0,
      "the slot is not given back before the cover ran out",
    );
  });

  it("skip with look-ahead: a run cancelled ahead whose worker may not have heard it (a lost cancel: its cover lets it start) blocks the occurrences due before its drain ends — never two at once", () => {
    // The sim's seed 5600439: a reschedule cancels the prepared run of an isolated worker, which
    // starts it at its start_at under the claim's cover while the new schedule's run still runs.
    const c = cfg({ lookaheadMs: 30_000 });
    const d = new Driver(c);
    d.create(spec({ schedule: { cron: "0 * * * * *", time_zone: "UTC" } }));
    d.advance(45_000);
    const old = d.state.runs[0]!;
    assert.equal(old.scheduled_for_ms, sec(60));
    assert.deepEqual(d.heartbeat(old.run_id).reply, go(d, old), "covered through its start");
    d.send({ kind: "patch", patch: { schedule: { cron: "*/10 * * * * *", time_zone: "UTC" } } });
    assert.equal(d.records.get(old.run_id)?.status, "cancelled");
    assert.deepEqual(
      d.state.draining?.map((x) => x.run_id),
      [old.run_id],
      "its cancel (cancel_on_worker) is never answered: it may still start at :60",
    );
    d.advance(sec(48) - d.now);
    const next = d.state.runs.find((x) => x.scheduled_for_ms === sec(50))!;
    assert.ok(next?.gate, "the new schedule's :50 is prepared ahead");
    assert.deepEqual(d.heartbeat(next.run_id).reply, { ok: true, hold: true }, "never a go");
    d.advance(sec(50) - d.now);
    assert.equal(
      d.records.get(next.run_id)?.status,
      "skipped",
      "it could still run when the cancelled one starts at :60",
    );
    // Once their workers report the cancelled attempts gone (as a worker that hears a cancel
    // does, worker/outbox.ts `reportCancelled`), nothing blocks the next occurrence.
    d.complete(old.run_id, { outcome: "killed", exit_code: null }, old.fence);
    d.complete(next.run_id, { outcome: "killed", exit_code: null }, next.fence);
    assert.equal(d.state.draining, undefined);
    d.advance(sec(68) - d.now);
    const later = d.state.runs.find((x) => x.scheduled_for_ms === sec(70))!;
    assert.deepEqual(d.heartbeat(later.run_id).reply, go(d, later));
  });

  /** A skip job with its next occurrence prepared ahead and told go, then a run-now 100 ms later. */
  const preparedThenRunNow = () => {
    const d = new Driver(cfg({ lookaheadMs: 5_000 }));
    d.create(spec());
    d.advance(0);
    const r = d.state.runs[0]!;
    assert.deepEqual(d.heartbeat(r.run_id).reply, go(d, r));
    d.advance(100);
    d.send({ kind: "run_now" });
    return { d, r };
  };

  it("skip with look-ahead: a run cancelled ahead blocks only the runs created after it (the answer stays monotone)", () => {
    const { d, r } = preparedThenRunNow();
    const manual = d.state.runs.find((x) => x.trigger === "manual")!;
    d.heartbeat(manual.run_id, manual.fence, d.now);
    d.send({ kind: "cancel", run_id: manual.run_id, by: "u1" });
    assert.deepEqual(
      d.state.draining?.map((x) => x.run_id),
      [manual.run_id],
      "the manual run is being killed",
    );
    assert.deepEqual(d.heartbeat(r.run_id).reply, go(d, r), "a later run's drain never holds it");
  });

  it("skip with look-ahead: a manual run started after an occurrence was prepared does not block it (the rule that keeps the answer monotone)", () => {
    const { d, r } = preparedThenRunNow();
    assert.equal(d.state.runs.length, 2);
    assert.deepEqual(
      d.heartbeat(r.run_id).reply,
      go(d, r),
      "still go: a later run never blocks it",
    );
    d.advance(sec(2) - d.now);
    assert.notEqual(d.records.get(r.run_id)?.status, "skipped");
  });

  it("skip with look-ahead: a prepared occurrence falling due while an earlier run is active is skipped at the due instant; its worker never heard go", () => {
    const d = new Driver(cfg({ lookaheadMs: 5_000 }));
    d.create(spec());
    d.advance(sec(2) - d.now);
    const first = d.state.runs[0]!;
    d.heartbeat(first.run_id, first.fence, d.now); // started, and keeps running past :04
    const next = d.state.runs.find((x) => x.scheduled_for_ms === sec(4))!;
    assert.ok(next?.gate, "the :04 occurrence is prepared ahead");
    const replies: unknown[] = [];
    for (let t = d.now; t < sec(4); t += 500) {
      d.advance(Math.min(500, sec(4) - d.now - 1));
      d.heartbeat(first.run_id, first.fence);
      replies.push(d.heartbeat(next.run_id).reply);
    }
    assert.ok(
      replies.every((x) => JSON.stringify(x) === JSON.stringify({ ok: true, hold: true })),
      JSON.stringify(replies),
    );
    d.advance(sec(4) - d.now);
    const rec = d.records.get(next.run_id);
    assert.equal(rec?.status, "skipped");
    assert.equal(rec.reason, "overlap: an earlier run is still active");
    assert.deepEqual(
      d.postsOf("cancel_on_worker").map((p) => [p.run_id, p.fence]),
      [[next.run_id, next.fence]],
      "its worker is told to drop it",
    );
    // Drained, not released at once: a patch of the overlap policy meanwhile could have let a cover through.
    assert.equal(
      d.postsOf("release_slot").some((p) => splitGrant(p.grant).run_id === next.run_id),
      false,
      "its slot is not given back at once",
    );
    assert.deepEqual(
      d.state.draining?.map((x) => [x.run_id, x.until_ms]),
      [[next.run_id, next.start_at_ms + cfg().leaseTtlMs + cfg().drainGraceMs]],
      "it is held until its lease's end",
    );
    assert.equal(d.heartbeat(next.run_id).fail?.code, "lease_lost");
    assert.equal(d.records.get(first.run_id)?.status, "running", "the earlier run is untouched");
  });

  it("skip with look-ahead: a prepared run nothing blocks gets no gate timer, at preparation or on re-activation (the answer is monotone: nothing to decide at the due instant)", () => {
    const d = new Driver(cfg({ lookaheadMs: 5_000 }));
    d.create(spec());
    d.advance(0);
    const r = d.state.runs[0]!;
    assert.equal(r.gate, true);
    assert.equal(d.timers.has(`gate:${r.run_id}`), false, "no turn at the due instant");
    assert.deepEqual(gatesOnActivate(d), []);
    d.advance(sec(2) - d.now);
    d.heartbeat(r.run_id, r.fence, d.now);
    assert.equal(d.records.get(r.run_id)?.status, "running", "it starts on time without the gate");
  });

  it("skip with look-ahead: a prepared run an earlier run blocks has its gate armed, and re-activation re-arms it (the decision is a reminder, not a one-shot)", () => {
    const d = new Driver(cfg({ lookaheadMs: 5_000 }));
    d.create(spec());
    d.advance(sec(2) - d.now);
    const first = d.state.runs[0]!;
    d.heartbeat(first.run_id, first.fence, d.now); // started, still running when :04 is prepared
    const next = d.state.runs.find((x) => x.scheduled_for_ms === sec(4))!;
    assert.ok(next?.gate);
    assert.equal(
      d.timers.get(`gate:${next.run_id}`)?.atMs,
      sec(4),
      "armed at preparation: a run blocks it",
    );
    assert.deepEqual(gatesOnActivate(d), [[`gate:${next.run_id}`, sec(4)]]);
    d.complete(first.run_id);
    assert.deepEqual(gatesOnActivate(d), [], "once nothing blocks it, re-activation arms none");
  });

  it("queue with look-ahead: the prepared run gets no gate timer (its gate decides nothing)", () => {
    const d = new Driver(cfg({ lookaheadMs: 5_000 }));
    d.create(spec({ overlap: "queue" }));
    d.advance(0);
    const r = d.state.runs[0]!;
    assert.equal(r.gate, true);
    assert.equal(d.timers.has(`gate:${r.run_id}`), false);
    assert.deepEqual(gatesOnActivate(d), []);
  });

  it("re-delivering fire creates no duplicate and skips nothing", () => {
    const d = new Driver(cfg(), { autoComplete: () => ({}) });
    d.create(spec());
    for (let i = 0; i < 10; i++) {
      d.advance(2_000);
      d.send({ kind: "fire" });
      d.send({ kind: "fire" });
    }
    assert.deepEqual(
      [...d.records.keys()].sort(),
      every2s
        .next(T0, 10)
        .map((o) => runIdFor(JOB, o))
        .sort(),
    );
    assert.equal(d.dispatches.length, 10);
  });

  it("a crash after the run record write and before the state write re-fires the same occurrence: one record, next_run_at advances", () => {
    const d = new Driver(cfg(), { autoComplete: () => ({}) });
    d.create(spec());
    d.skipTime(1_500); // 00:00:02
    const lost = d.crashAfterPre({ kind: "fire" });
    assert.deepEqual(
      lost.pre?.map((p) => p.kind),
      ["put_run"],
    );
    assert.equal(d.records.size, 1);
    assert.equal(d.state.next_run_at_ms, sec(2), "the state write was lost");
    d.advance(0); // the fire timer is still armed: the re-fire
    assert.equal(d.records.size, 1);
    assert.equal(d.records.get(runIdFor(JOB, sec(2)))?.status, "succeeded");
    assert.equal(d.state.next_run_at_ms, sec(4));
    assert.deepEqual(d.violations, []);
  });
});

describe("job actor: overlap", () => {
  it("skip: while a run is active, later occurrences are recorded skipped with the reason", () => {
    const d = new Driver();
    d.create(spec({ overlap: "skip" }));
    d.advance(7_600); // 00:00:08.1 — the :02 run never completes
    const first = runIdFor(JOB, sec(2));
    assert.equal(d.records.get(first)?.status, "leased");
    const skipped = d.recordsByStatus("skipped");
    assert.deepEqual(
      skipped.map((r) => at(r.scheduled_for)),
      [sec(4), sec(6), sec(8)],
    );
    assert.ok(
      skipped.every(
        (r) =>
          r.reason === "overlap: an earlier run is still active" &&
          r.run_id === runIdFor(JOB, at(r.scheduled_for)),
      ),
    );
    assert.equal(d.dispatches.length, 1);
    d.complete(first);
    d.advance(2_000);
    assert.equal(
      d.records.get(runIdFor(JOB, sec(10)))?.status,
      "leased",
      "runs again once the active run ended",
    );
  });

  it("skip: an occurrence falling due while a cancelled run's task may still be dying is skipped; once its kill is reported, the next runs", () => {
    const d = new Driver();
    d.create(spec({ overlap: "skip" }));
    d.advance(sec(2) - d.now);
    const first = d.state.runs[0]!;
    d.heartbeat(first.run_id, first.fence, d.now); // running
    d.send({ kind: "cancel", run_id: first.run_id, by: "u1" });
    assert.deepEqual(
      d.state.draining?.map((x) => x.run_id),
      [first.run_id],
      "its kill is not reported yet",
    );
    d.advance(sec(4) - d.now);
    assert.equal(d.records.get(runIdFor(JOB, sec(4)))?.status, "skipped");
    d.complete(first.run_id, { outcome: "killed", exit_code: null }, first.fence);
    d.advance(sec(6) - d.now);
    assert.equal(d.records.get(runIdFor(JOB, sec(6)))?.status, "leased");
  });

  it("queue: occurrences are held (bounded by queueLimit) and started one by one as the previous run ends", () => {
    const d = new Driver(cfg({ queueLimit: 2 }));
    d.create(spec({ overlap: "queue" }));
    d.advance(7_600); // :02 runs; :04, :06 queued; :08 queue full
    assert.deepEqual(d.state.queued, [sec(4), sec(6)]);
    assert.equal(
      d.records.has(runIdFor(JOB, sec(4))),
      false,
      "a queued occurrence has no record yet",
    );
    const full = d.records.get(runIdFor(JOB, sec(8)));
    assert.equal(full?.status, "skipped");
    assert.equal(full.reason, "overlap: queue full (2)");
    d.complete(runIdFor(JOB, sec(2)));
    assert.equal(d.records.get(runIdFor(JOB, sec(2)))?.status, "succeeded");
    assert.equal(
      d.records.get(runIdFor(JOB, sec(4)))?.status,
      "leased",
      "the next queued occurrence starts at once",
    );
    assert.deepEqual(d.state.queued, [sec(6)]);
    d.complete(runIdFor(JOB, sec(4)));
    assert.equal(d.records.get(runIdFor(JOB, sec(6)))?.status, "leased");
    assert.deepEqual(d.state.queued, []);
    assert.deepEqual(
      d.dispatches.map((x) => x.scheduled_for_ms),
      [sec(2), sec(4), sec(6)],
    );
  });

  it("queue with look-ahead: with no run active the next occurrence is prepared gated; one falling due while a run is active waits in the queue and starts when it ends — never two at once", () => {
    const d = new Driver(cfg({ lookaheadMs: 5_000 }));
    d.create(spec({ overlap: "queue" }));
    d.advance(0);
    const first = d.state.runs[0]!;
    assert.equal(first.scheduled_for_ms, sec(2), "prepared ahead");
    assert.equal(first.gate, true);
    assert.equal(first.status, "leased", "slot and worker matched before it is due");
    assert.equal(d.dispatches[0]?.start_at_ms, sec(2), "its worker starts it at scheduled_for");
    assert.deepEqual(
      d.heartbeat(first.run_id).reply,
      { ok: true },
      "claimed under queue: no cover (a run started by hand may still send it back)",
    );
    d.advance(sec(2) - d.now);
    d.heartbeat(first.run_id, first.fence, d.now); // started, and runs past :04
    assert.deepEqual(
      d.state.runs.map((r) => r.run_id),
      [first.run_id],
      "a run is active: nothing prepared ahead",
    );
    assert.ok((d.timers.get("fire")?.atMs ?? 0) >= sec(4), "the next fires at its due instant");
    d.advance(sec(4) - d.now);
    assert.deepEqual(d.state.queued, [sec(4)], ":04 fell due while :02 runs: queued");
    assert.equal(d.state.runs.length, 1);
    d.complete(first.run_id);
    const next = d.state.runs[0]!;
    assert.equal(next.scheduled_for_ms, sec(4));
    assert.equal(next.status, "leased", "the queued occurrence starts when the earlier run ends");
    d.complete(next.run_id);
    // Idle again: :06 is prepared ahead once more.
    d.advance(sec(6) - 1 - d.now);
    assert.deepEqual(
      d.state.runs.map((r) => [r.scheduled_for_ms, r.gate]),
      [[sec(6), true]],
    );
    assert.deepEqual(d.violations, []);
  });

  it("queue with look-ahead: a run started by hand before a prepared occurrence sends it back to the queue; it starts when the manual run ends — never two at once", () => {
    // Sent back only more than TTL + the start tolerance (1 s) ahead of it: 1.5 s here.
    const d = new Driver(cfg({ lookaheadMs: 5_000, leaseTtlMs: 400 }));
    d.create(spec({ overlap: "queue" }));
    d.advance(0);
    const prepared = d.state.runs[0]!;
    assert.equal(prepared.gate, true);
    const fence = prepared.fence;
    assert.deepEqual(
      d.heartbeat(prepared.run_id, fence).reply,
      { ok: true },
      "claimed under queue: no cover (its worker asks again as its start nears)",
    );
    d.send({ kind: "run_now" });
    const manual = d.state.runs.find((x) => x.trigger === "manual")!;
    assert.deepEqual(
      d.state.runs.map((x) => x.run_id),
      [manual.run_id],
      "the prepared occurrence left the active runs",
    );
    assert.deepEqual(d.state.queued, [sec(2)], "and waits in the queue");
    assert.deepEqual(
      d.postsOf("cancel_on_worker").map((p) => [p.run_id, p.fence]),
      [[prepared.run_id, fence]],
      "its worker drops the attempt",
    );
    assert.ok(
      d.postsOf("release_slot").some((p) => splitGrant(p.grant).run_id === prepared.run_id),
      "its slot goes back",
    );
    assert.equal(d.heartbeat(prepared.run_id, fence).fail?.code, "lease_lost");
    d.heartbeat(manual.run_id, manual.fence, d.now); // the manual run starts and runs past :02
    d.advance(sec(2) + 500 - d.now);
    assert.equal(d.state.runs.length, 1, "nothing else started at :02");
    d.complete(manual.run_id);
    const next = d.state.runs[0]!;
    assert.equal(next.run_id, prepared.run_id, "the occurrence starts when the manual run ends");
    assert.equal(next.status, "leased");
    assert.ok(next.fence > fence);
    assert.deepEqual(d.violations, []);
  });

  it("queue with look-ahead: an occurrence claimed under another policy (a cover given) is not sent back by a run started by hand after a patch to queue — it could run twice", () => {
    const d = new Driver(cfg({ lookaheadMs: 5_000, leaseTtlMs: 1_000 }));
    d.create(spec({ overlap: "allow" }));
    d.advance(0);
    const prepared = d.state.runs[0]!;
    assert.equal(prepared.status, "leased");
    assert.ok(
      d.heartbeat(prepared.run_id, prepared.fence).reply?.cover_ms !== undefined,
      "covered through its start",
    );
    d.send({ kind: "patch", patch: { overlap: "queue" } });
    d.send({ kind: "run_now" });
    assert.ok(
      d.state.runs.some((x) => x.run_id === prepared.run_id),
      "left to run as prepared",
    );
    assert.deepEqual(d.postsOf("cancel_on_worker"), [], "its worker is not told to drop it");
    assert.equal(
      d.postsOf("release_slot").some((p) => splitGrant(p.grant).run_id === prepared.run_id),
      false,
      "its slot is kept",
    );
    assert.deepEqual(
      d.state.queued,
      [],
      "the occurrence is not queued again (it would be re-created under the same run id)",
    );
  });

  it("replace with look-ahead: prepared gated with no run active; a run started by hand after the preparation is cancelled at the due instant, and the prepared one was never held", () => {
    const d = new Driver(cfg({ lookaheadMs: 5_000 }));
    d.create(spec({ overlap: "replace" }));
    d.advance(0);
    const r = d.state.runs[0]!;
    assert.equal(r.gate, true);
    assert.equal(r.status, "leased");
    d.advance(100);
    d.send({ kind: "run_now" });
    const manual = d.state.runs.find((x) => x.trigger === "manual")!;
    d.heartbeat(manual.run_id, manual.fence, d.now); // started
    assert.deepEqual(
      d.heartbeat(r.run_id).reply,
      go(d, r),
      "go: replace never holds its own occurrence",
    );
    d.advance(sec(2) - d.now);
    const rec = d.records.get(manual.run_id);
    assert.equal(rec?.status, "cancelled");
    assert.equal(rec.reason, "replaced by a newer occurrence");
    assert.deepEqual(
      d.postsOf("cancel_on_worker").map((p) => p.run_id),
      [manual.run_id],
    );
    assert.deepEqual(
      d.state.runs
        .map((x) => x.run_id)
        .filter((id) => id !== r.run_id && id !== runIdFor(JOB, sec(4))),
      [],
      "only the occurrence (and the next prepared) remain",
    );
    assert.notEqual(d.records.get(r.run_id)?.status, "cancelled");
    assert.equal(
      d.state.runs.find((x) => x.run_id === r.run_id)?.gate,
      undefined,
      "decided: the gate is not re-armed",
    );
    const fx = d.actor.onActivate!(d.state, { id: "t1.j1", nowMs: d.now });
    assert.ok(!fx.some((e) => e.kind === "timer" && e.name === `gate:${r.run_id}`));
  });

  it("replace with look-ahead: a prepared run that started before its gate was decided still has its gate re-armed on activation", () => {
    const d = new Driver(cfg({ lookaheadMs: 5_000 }));
    d.create(spec({ overlap: "replace" }));
    d.advance(0);
    const r = d.state.runs[0]!;
    d.heartbeat(r.run_id, r.fence, d.now); // its worker's clock ran ahead: started early
    const started = d.state.runs.find((x) => x.run_id === r.run_id)!;
    assert.ok(started.started_at_ms !== null && started.gate, JSON.stringify(started));
    const fx = d.actor.onActivate!(d.state, { id: "t1.j1", nowMs: d.now });
    assert.ok(
      fx.some((e) => e.kind === "timer" && e.name === `gate:${r.run_id}`),
      "a replace is decided even when the run started",
    );
  });

  it("replace with look-ahead: a run active at the window's start is replaced at the due instant, as without look-ahead", () => {
    const d = new Driver(cfg({ lookaheadMs: 5_000 }));
    d.create(spec({ overlap: "replace" }));
    d.advance(sec(2) - d.now);
    const old = d.state.runs[0]!;
    d.heartbeat(old.run_id, old.fence, d.now); // started, runs long
    d.advance(sec(4) - 1 - d.now);
    assert.deepEqual(
      d.state.runs.map((x) => x.run_id),
      [old.run_id],
      "nothing prepared while a run is active",
    );
    d.advance(1);
    assert.equal(d.records.get(old.run_id)?.status, "cancelled");
    assert.deepEqual(
      d.state.runs.map((x) => x.scheduled_for_ms),
      [sec(4)],
    );
    assert.equal(d.state.runs[0]?.status, "leased");
  });

  it("allow: runs overlap, and are created look-ahead before they are due with start_at = scheduled_for", () => {
    const d = new Driver(cfg({ lookaheadMs: 5_000 }));
    d.create(spec({ overlap: "allow" }));
    const fireAt = d.timers.get("fire")?.atMs ?? Number.NaN;
    assert.ok(
      fireAt >= sec(2) - 5_000 && fireAt < sec(2) - 2_500,
      `fire timer armed look-ahead, spread over the window's first half: ${fireAt - sec(2)}`,
    );
    d.advance(0);
    assert.deepEqual(
      [...d.records.values()].map((r) => at(r.scheduled_for)).sort(),
      [sec(2)],
      "the next occurrence only: a prepared run holds a worker slot",
    );
    d.advance(6_000); // 00:00:06.5
    assert.equal(d.state.runs.length, d.records.size);
    assert.deepEqual(
      d.state.runs.map((r) => r.scheduled_for_ms),
      [sec(2), sec(4), sec(6), sec(8)],
      "runs overlap (none completes here); one prepared ahead (:08)",
    );
    assert.ok(d.state.runs.every((r) => r.status === "leased"));
    for (const x of d.dispatches) assert.equal(x.start_at_ms, x.scheduled_for_ms);
    assert.equal(new Set(d.dispatches.map((x) => x.fence)).size, d.dispatches.length);
  });

  it("replace: the active run is cancelled on its worker with its fence, its slot released, and the new one started", () => {
    const d = new Driver();
    d.create(spec({ overlap: "replace" }));
    d.advance(1_500); // :02
    const old = d.state.runs[0]!;
    d.heartbeat(old.run_id, old.fence, d.now);
    d.advance(2_000); // :04
    assert.deepEqual(d.postsOf("cancel_on_worker"), [
      { kind: "cancel_on_worker", worker: "w1", run_id: old.run_id, fence: old.fence },
    ]);
    // Its slot is held until the worker reports the kill (a cap never exceeded during it).
    assert.ok(!d.postsOf("release_slot").some((p) => splitGrant(p.grant).run_id === old.run_id));
    const rec = d.records.get(old.run_id);
    assert.equal(rec?.status, "cancelled");
    assert.equal(rec.reason, "replaced by a newer occurrence");
    assert.deepEqual(
      d.state.runs.map((r) => r.run_id),
      [runIdFor(JOB, sec(4))],
    );
    assert.equal(d.state.runs[0]?.status, "leased");
    assert.ok(d.state.runs[0].fence > old.fence);
    assert.equal(d.heartbeat(old.run_id, old.fence).fail?.code, "lease_lost");
    assert.deepEqual([...d.slots].sort(), [old.run_id, runIdFor(JOB, sec(4))].sort());
    assert.deepEqual(
      d.complete(old.run_id, { outcome: "killed", exit_code: null }, old.fence).reply,
      { ok: true },
      "the kill, reported: the drain ends",
    );
    assert.ok(d.postsOf("release_slot").some((p) => splitGrant(p.grant).run_id === old.run_id));
    assert.equal(d.complete(old.run_id, {}, old.fence).fail?.code, "stale_fence");
    assert.deepEqual([...d.slots], [runIdFor(JOB, sec(4))]);
  });

  it("maxActiveRuns bounds even overlap=allow: extra occurrences are skipped", () => {
    const d = new Driver(cfg({ maxActiveRuns: 2, lookaheadMs: 0 }));
    d.create(spec({ overlap: "allow" }));
    d.advance(6_000);
    assert.equal(d.state.runs.length, 2);
    assert.equal(
      d.recordsByStatus("skipped")[0]?.reason,
      "too many active runs (2, counting those still being stopped)",
    );
  });
});

describe("job actor: misfire after downtime", () => {
  /** Created at 00:00:00.5, down until 00:01:01.5: occurrences :02 … 1:00 (30) are all late. */
  function downFor(
    policy: "run_once" | "run_all" | "skip",
    over: { deadline?: number; catchUpLimit?: number } = {},
  ) {
    const d = new Driver(
      cfg({
        misfireGraceMs: 1_000,
        lookaheadMs: 0,
        maxActiveRuns: 1_000,
        ...(over.catchUpLimit === undefined ? {} : { catchUpLimit: over.catchUpLimit }),
      }),
    );
    d.create(
      spec({ overlap: "allow", misfire: { policy, starting_deadline_s: over.deadline ?? null } }),
    );
    d.skipTime(61_000);
    d.send({ kind: "fire" });
    return d;
  }
  const missed = every2s.next(T0, 30);

  it("run_once: one catch_up run for the latest missed occurrence, the rest recorded missed", () => {
    const d = downFor("run_once");
    const runs = d.state.runs;
    assert.deepEqual(
      runs.map((r) => [r.scheduled_for_ms, r.trigger]),
      [[sec(60), "catch_up"]],
    );
    const m = d.recordsByStatus("missed");
    assert.deepEqual(
      m.map((r) => at(r.scheduled_for)),
      missed.slice(0, 29),
    );
    assert.ok(m.every((r) => r.reason === "misfire (run_once)" && r.trigger === "catch_up"));
    assert.equal(d.records.size, 30);
    assert.equal(d.state.next_run_at_ms, sec(62));
  });

  it("run_all: every missed occurrence runs (trigger catch_up)", () => {
    const d = downFor("run_all");
    assert.deepEqual(
      d.state.runs.map((r) => r.scheduled_for_ms).sort((a, b) => a - b),
      missed,
    );
    assert.ok(d.state.runs.every((r) => r.trigger === "catch_up"));
    assert.equal(d.recordsByStatus("missed").length, 0);
    assert.equal(d.state.next_run_at_ms, sec(62));
  });

  it("run_all is bounded by catchUpLimit; next_run_at moves past now", () => {
    const d = downFor("run_all", { catchUpLimit: 5 });
    assert.equal(d.state.runs.length, 5);
    assert.ok(d.state.runs.every((r) => r.trigger === "catch_up"));
    assert.equal(d.state.next_run_at_ms, sec(62));
  });

  it("skip: every missed occurrence is recorded missed, none runs, the job waits for the next", () => {
    const d = downFor("skip");
    assert.equal(d.state.runs.length, 0);
    assert.deepEqual(
      d.recordsByStatus("missed").map((r) => at(r.scheduled_for)),
      missed,
    );
    assert.ok(d.recordsByStatus("missed").every((r) => r.reason === "misfire (skip)"));
    assert.equal(d.dispatches.length, 0);
    assert.equal(d.state.next_run_at_ms, sec(62));
    d.advance(1_000);
    assert.equal(d.state.runs[0]?.scheduled_for_ms, sec(62));
    assert.equal(d.state.runs[0]?.trigger, "schedule");
  });

  it("starting_deadline_s: occurrences older than the deadline are missed, younger ones caught up", () => {
    const d = downFor("run_all", { deadline: 20 }); // now 1:01.5 → older than 0:41.5 is past the deadline
    assert.deepEqual(
      d.state.runs.map((r) => r.scheduled_for_ms).sort((a, b) => a - b),
      missed.filter((o) => o >= sec(42)),
    );
    const m = d.recordsByStatus("missed");
    assert.deepEqual(
      m.map((r) => at(r.scheduled_for)),
      missed.filter((o) => o < sec(42)),
    );
    assert.ok(m.every((r) => r.reason === "misfire: past starting deadline (20 s)"));
  });

  it("run_once with the latest missed occurrence past the deadline runs nothing", () => {
    const d = new Driver(cfg({ misfireGraceMs: 1_000 }));
    d.create(spec({ misfire: { policy: "run_once", starting_deadline_s: 5 } }));
    d.skipTime(9_000); // 00:00:09.5; :08 is 1.5 s late (> grace), within the deadline
    d.send({ kind: "fire" });
    assert.deepEqual(
      d.state.runs.map((r) => r.scheduled_for_ms),
      [sec(8)],
    );
    const d2 = new Driver(cfg({ misfireGraceMs: 1_000 }));
    d2.create(spec({ misfire: { policy: "run_once", starting_deadline_s: 1 } }));
    d2.skipTime(9_000);
    d2.send({ kind: "fire" });
    assert.equal(d2.state.runs.length, 0);
    assert.equal(d2.recordsByStatus("missed").length, 4);
  });

  it("a delay within misfireGraceMs is not a misfire: the occurrence runs with trigger schedule", () => {
    const d = new Driver(cfg({ misfireGraceMs: 10_000 }));
    d.create(spec({ misfire: { policy: "skip", starting_deadline_s: null } }));
    d.skipTime(5_000); // :02 and :04 are up to 3.5 s late
    d.send({ kind: "fire" });
    assert.equal(d.recordsByStatus("missed").length, 0);
    assert.equal(d.records.get(runIdFor(JOB, sec(2)))?.trigger, "schedule");
    assert.equal(
      d.records.get(runIdFor(JOB, sec(4)))?.status,
      "skipped",
      "overlap=skip still applies",
    );
  });
});

describe("job actor: the look-ahead window of each job (occurrence-plan.ts windowOf)", () => {
  const min = (m: number) => T0 - 500 + m * 60_000;
  const state = (next: number | null, last?: number): JobState => ({
    ...emptyJobState(),
    next_run_at_ms: next,
    ...(last === undefined ? {} : { last_occurrence_ms: last }),
  });
  const product = cfg({ lookaheadMs: DEFAULT_JOB_CONFIG.lookaheadMs });

  it("the product default is 5 minutes; a job gets at most half the gap since its previous occurrence, at least a minute, never more than configured", () => {
    assert.equal(DEFAULT_JOB_CONFIG.lookaheadMs, 300_000);
    assert.equal(
      windowOf(product, state(min(60))),
      300_000,
      "no occurrence handled yet (a one-shot job, a new one): the whole window",
    );
    assert.equal(windowOf(product, state(min(120), min(60))), 300_000, "hourly: the whole window");
    assert.equal(
      windowOf(product, state(min(8), min(4))),
      120_000,
      "every 4 minutes: half its gap",
    );
    assert.equal(
      windowOf(product, state(min(4), min(2))),
      SHORT_LOOKAHEAD_MS,
      "every 2 minutes: a minute, as before the window grew",
    );
    assert.equal(
      windowOf(product, state(sec(2), sec(1))),
      SHORT_LOOKAHEAD_MS,
      "every second: a minute",
    );
    assert.equal(
      windowOf(cfg({ lookaheadMs: 5_000 }), state(sec(4), sec(2))),
      5_000,
      "a configured window shorter than a minute is kept",
    );
    assert.equal(
      windowOf(product, state(min(4), min(4))),
      300_000,
      "no gap to read: the whole window",
    );
  });

  it("a run prepared ahead that waits for a slot asks again less often the longer it waits, counted from its preparation; its ask names its start (the tenant grants earliest start first)", () => {
    const d = new Driver(product, { autoGrant: false });
    d.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" }, overlap: "allow" }));
    const fireAt = d.timers.get("fire")!.atMs;
    d.advance(fireAt - d.now);
    const asks = () => d.posts.filter((p) => p.kind === "acquire_slot");
    assert.equal(asks().length, 1);
    assert.equal(
      (asks()[0] as Extract<JobEffect, { kind: "acquire_slot" }>).start_at_ms,
      min(60),
      "the ask names the run's start",
    );
    d.advance(min(60) - d.now - 1);
    const waitedS = (min(60) - fireAt) / 1000;
    // 10, 10, 20, 30, 30, … s apart (slotRecheckMs of the wait so far): at most 2 + waited/30 asks; 1 every 10 s would be waited/10.
    assert.ok(
      asks().length <= 2 + Math.ceil(waitedS / 30),
      `${asks().length} asks in ${waitedS} s of waiting before the due time`,
    );
    assert.ok(
      asks().length >= Math.floor(waitedS / 30),
      "it still asks again (a lost ask is not waited out)",
    );
  });

  for (const overlap of ["allow", "skip"] as const) {
    it(`an hourly ${overlap} job is prepared up to 5 minutes ahead, each hour (its runs end at once)`, () => {
      const hourly = new Driver(product, { autoComplete: () => ({}) });
      hourly.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" }, overlap }));
      for (const due of [min(60), min(120), min(180)]) {
        const fireAt = hourly.timers.get("fire")?.atMs ?? Number.NaN;
        assert.ok(
          fireAt >= due - 300_000 && fireAt < due - 150_000,
          `fire armed in the first half of a 5 min window: ${(fireAt - due) / 1000} s`,
        );
        hourly.advance(fireAt - hourly.now - 1);
        assert.equal(
          hourly.records.has(runIdFor(JOB, due)),
          false,
          "not prepared before its window",
        );
        hourly.advance(1);
        assert.ok(hourly.records.has(runIdFor(JOB, due)), "prepared at its fire");
        hourly.advance(due - hourly.now + 1_000);
        assert.equal(hourly.records.get(runIdFor(JOB, due))?.status, "succeeded");
      }
    });
  }

  it("an hourly job is prepared up to 5 minutes ahead, each hour; a job due every 2 minutes only a minute ahead once it has run", () => {
    const hourly = new Driver(product);
    hourly.create(spec({ schedule: { cron: "0 * * * *", time_zone: "UTC" }, overlap: "allow" }));
    for (const due of [min(60), min(120)]) {
      const fireAt = hourly.timers.get("fire")?.atMs ?? Number.NaN;
      assert.ok(
        fireAt >= due - 300_000 && fireAt < due - 150_000,
        `fire armed in the first half of a 5 min window: ${(fireAt - due) / 1000} s`,
      );
      hourly.advance(fireAt - hourly.now);
      assert.ok(
        hourly.state.runs.some((r) => r.scheduled_for_ms === due && r.status === "leased"),
        "prepared: slot and worker matched ahead",
      );
      hourly.advance(due - hourly.now + 1);
    }
    const often = new Driver(product);
    often.create(spec({ schedule: { cron: "*/2 * * * *", time_zone: "UTC" }, overlap: "allow" }));
    often.advance(min(2) - often.now + 1);
    assert.equal(often.state.next_run_at_ms, min(4));
    const fireAt = often.timers.get("fire")?.atMs ?? Number.NaN;
    assert.ok(
      fireAt >= min(4) - 60_000 && fireAt < min(4) - 30_000,
      `fire armed in the first half of a 1 min window: ${(fireAt - min(4)) / 1000} s`,
    );
    often.advance(fireAt - often.now - 1);
    assert.ok(
      !often.state.runs.some((r) => r.scheduled_for_ms === min(4)),
      "not prepared before its window",
    );
    often.advance(1);
    assert.ok(
      often.state.runs.some((r) => r.scheduled_for_ms === min(4)),
      "prepared at its window",
    );
  });
});
