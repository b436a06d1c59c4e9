/**
 * A lease that falls silent is resolved by asking its worker, not guessed (run-lifecycle.ts
 * `onLeaseExpired`, `onProbeAnswer`): under a 200,000-run burst, reports of attempts that ran
 * wait behind the burst; an owner that took their silence for a lost lease would offer them
 * again and run them twice with no worker lost.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { runIdFor } from "../../../src/protocol/ids.ts";
import { heartbeatKey } from "../../../src/jobs/job-actor.ts";
import { type JobEffect } from "../../../src/job-state/job-types.ts";
import { MAX_GIVEN_BACK, MAX_UNSTARTED_ATTEMPTS } from "../../../src/runs/run-lifecycle.ts";
import {
  MAX_PROBES_WHILE_ADVERTISING,
  MAX_UNANSWERED_PROBES,
} from "../../../src/runs/run-messages.ts";
import { loadJobState } from "../../../src/job-state/job-state.ts";
import type { ProbeReply } from "../../../src/protocol/worker.ts";
import { Driver, JOB, cfg, spec } from "./driver.ts";

const sec = (s: number) => Date.UTC(2026, 0, 1, 0, 0, s);
const RUN = runIdFor(JOB, sec(2));
const hourly = { cron: "0 * * * *", time_zone: "UTC" };
type ProbeFx = Extract<JobEffect, { kind: "probe_worker" }>;

/** A job whose first run (:02) is leased to w1 (claimed at :01.5, lease end :12); probes answered by `probe`. */
function leased(
  probe: (fx: ProbeFx) => ProbeReply | null | "gone" | "advertising" | undefined,
  maxAttempts = 3,
) {
  const d = new Driver(cfg(), { probe });
  d.create(
    spec({ retry: { max_attempts: maxAttempts, backoff: "exponential", base_s: 1, max_s: 60 } }),
  );
  d.advance(1_500);
  d.send({ kind: "patch", patch: { schedule: hourly } });
  assert.equal(d.run(RUN)?.status, "leased");
  return d;
}

describe("a silent lease is resolved by probing its worker", () => {
  it("asks the holder about its attempt and keeps the lease (same fence, no new offer) until the answer", () => {
    const d = leased(() => undefined); // the answer is held back
    const f = d.run(RUN)!.fence;
    const offers = d.dispatches.length;
    d.advance(10_000); // :12, nothing heard
    assert.deepEqual(d.postsOf("probe_worker"), [
      { kind: "probe_worker", worker: "w1", run_id: RUN, attempt: 1, fence: f },
    ]);
    assert.equal(d.run(RUN)?.status, "leased");
    assert.equal(d.run(RUN)?.fence, f);
    assert.equal(d.dispatches.length, offers, "not offered again while the answer is out");
    assert.deepEqual(d.timers.get(`lease:${RUN}`)?.msg, {
      kind: "lease_expired",
      run_id: RUN,
      fence: f,
      after_probe: true,
      probe: 1,
    });
    // The answer never comes in (the actor moved, its mailbox was full): the fallback asks again,
    // and only MAX_UNANSWERED_PROBES unanswered ones in a row lapse the lease.
    d.advance(10_000);
    assert.equal(d.postsOf("probe_worker").length, 2);
    assert.equal(d.run(RUN)?.fence, f);
    d.advance(10_000);
    assert.equal(d.postsOf("probe_worker").length, MAX_UNANSWERED_PROBES);
    assert.equal(d.run(RUN)?.attempt, 1);
    d.advance(10_000);
    assert.equal(
      d.postsOf("probe_worker").filter((p) => p.fence === f).length,
      MAX_UNANSWERED_PROBES,
      "no fourth probe of that lease",
    );
    assert.equal(d.run(RUN)?.attempt, 2);
    assert.equal(d.run(RUN)?.attempts[0]?.outcome, "lease_lost");
  });

  it("no answer in time (a swamped worker) asks again; an answer after that decides; no responder (gone) lapses at once", () => {
    let answers: (ProbeReply | null | "gone")[] = [
      null,
      null,
      {
        state: "ended",
        completion: {
          outcome: "exited",
          exit_code: 0,
          output: "",
          error: null,
          started_at_ms: sec(2),
          finished_at_ms: sec(3),
        },
      },
    ];
    const d = leased(() => answers.shift());
    d.advance(10_000);
    assert.equal(d.postsOf("probe_worker").length, 3, "two timeouts, then the answer");
    assert.equal(d.records.get(RUN)?.status, "succeeded");
    answers = ["gone"];
    const g = leased(() => answers.shift());
    g.advance(10_000);
    assert.equal(g.postsOf("probe_worker").length, 1);
    assert.equal(g.run(RUN)?.attempt, 2);
    assert.equal(
      g.run(RUN)?.attempts[0]?.error,
      "lease expired on worker w1, which did not answer, before the attempt was heard to start (not counted: presumed never started)",
    );
  });

  it("no answer from a worker that still advertises (swamped): asked again after half a TTL, up to a larger bound, before its lease lapses", () => {
    // Taken for dead after three, an attempt never heard to start is presumed not started and
    // offered again — and a swamped worker that ran it runs it twice. (Each probe here is
    // answered at once; a real one waits PROBE_TIMEOUT_MS for its answer.)
    const d = leased(() => "advertising");
    const f = d.run(RUN)!.fence;
    const asked = () => d.postsOf("probe_worker").filter((p) => p.fence === f).length;
    d.advance(10_000); // :12, the first silence
    assert.equal(asked(), 1, "not asked again at once: each probe adds to the worker's backlog");
    d.advance(5_000 * 10);
    assert.equal(asked(), 11, "asked every half TTL");
    assert.equal(d.run(RUN)?.attempt, 1, "the lease stands while its worker advertises");
    d.advance(5_000 * (MAX_PROBES_WHILE_ADVERTISING - 11));
    assert.equal(asked(), MAX_PROBES_WHILE_ADVERTISING);
    assert.equal(d.run(RUN)?.attempt, 1);
    d.advance(5_000);
    assert.equal(asked(), MAX_PROBES_WHILE_ADVERTISING, "and no further");
    assert.equal(
      d.run(RUN)?.attempt,
      2,
      "a worker that advertises yet never answers lapses in the end",
    );
    assert.ok(MAX_PROBES_WHILE_ADVERTISING > MAX_UNANSWERED_PROBES);
  });

  it("a worker that stops advertising is counted from then: MAX_UNANSWERED_PROBES silent ones in a row lapse it; one gap in its adverts does not", () => {
    let n = 0;
    const s = leased(() => (++n <= 4 ? "advertising" : null));
    s.advance(10_000 + 4 * 5_000);
    assert.equal(s.postsOf("probe_worker").length, 4 + MAX_UNANSWERED_PROBES);
    assert.equal(s.run(RUN)?.attempt, 2);
    // Advertising, now and then a timeout while its adverts came late: not cut off.
    let k = 0;
    const g = leased(() => (++k % 3 === 0 ? null : "advertising"));
    g.advance(10_000 + 12 * 5_000);
    assert.ok(g.postsOf("probe_worker").length > 10);
    assert.equal(g.run(RUN)?.attempt, 1);
  });

  it("a probe's fallback that comes after its answer (queued behind it) changes nothing; one whose answer never came counts", () => {
    const d = leased(() => undefined); // answers held back: sent by hand below
    const f = d.run(RUN)!.fence;
    const advertising = () =>
      d.send({
        kind: "probe_answer",
        run_id: RUN,
        fence: f,
        worker: "w1",
        reply: null,
        advertising: true,
      });
    d.advance(10_000); // probe 1 out
    for (let i = 0; i < MAX_UNANSWERED_PROBES; i++) {
      advertising(); // answered: asked again after half a TTL
      const sent = d.postsOf("probe_worker").length;
      d.send({ kind: "lease_expired", run_id: RUN, fence: f, after_probe: true, probe: i + 1 });
      assert.equal(d.postsOf("probe_worker").length, sent, "the stale fallback asks nothing");
      assert.equal(d.run(RUN)?.attempt, 1);
      d.advance(5_000); // the next probe goes
    }
    assert.equal(d.postsOf("probe_worker").length, MAX_UNANSWERED_PROBES + 1);
    // From now on no answer comes: each fallback counts, and the third lapses the lease.
    d.advance(10_000 * MAX_UNANSWERED_PROBES);
    assert.equal(d.run(RUN)?.attempt, 2);
  });

  it("started (self-fenced just now) while a heartbeat was acknowledged since the probe went: the owner waits that lease out before offering again", () => {
    let reply: ProbeReply | undefined = undefined; // held back, then answered
    const d = leased(() => reply);
    const f = d.run(RUN)!.fence;
    d.advance(10_000); // :12, probe out
    d.arrivals.set(heartbeatKey(RUN, f, "w1"), sec(12) + 500); // a late heartbeat, acknowledged: covers w1 for a while
    d.advance(1_000);
    d.send({
      kind: "probe_answer",
      run_id: RUN,
      fence: f,
      worker: "w1",
      reply: { state: "started" },
    });
    assert.equal(
      d.run(RUN)?.attempt,
      1,
      "not offered again while that acknowledgement may still cover the worker",
    );
    assert.equal(d.run(RUN)?.fence, f);
    assert.equal(d.timers.get(`lease:${RUN}`)?.atMs, sec(22) + 500);
    reply = { state: "started" };
    d.advance(10_000);
    assert.equal(d.run(RUN)?.attempt, 2);
    assert.equal(
      d.run(RUN)?.attempts[0]?.error,
      "lease expired on worker w1; the attempt started there and its result was lost",
    );
  });

  it("an attempt that ran: its completion in the answer settles the run; it is not offered again", () => {
    const d = leased(() => ({
      state: "ended",
      completion: {
        outcome: "exited",
        exit_code: 0,
        output: "done",
        error: null,
        started_at_ms: sec(2),
        finished_at_ms: sec(3),
      },
    }));
    const offers = d.dispatches.length;
    d.advance(10_000);
    assert.equal(d.run(RUN), undefined);
    const rec = d.records.get(RUN)!;
    assert.equal(rec.status, "succeeded");
    assert.deepEqual(
      rec.attempts.map((a) => a.outcome),
      ["succeeded"],
    );
    assert.equal(rec.result?.output, "done");
    assert.equal(d.dispatches.length, offers, "one execution, one offer");
  });

  it("a failed attempt in the answer is retried as its report would have been (counted)", () => {
    const d = leased(() => ({
      state: "ended",
      completion: {
        outcome: "exited",
        exit_code: 3,
        output: "",
        error: null,
        started_at_ms: sec(2),
        finished_at_ms: sec(3),
      },
    }));
    d.advance(10_000);
    assert.equal(d.run(RUN)?.status, "retry_wait");
    assert.equal(d.run(RUN)?.attempts[0]?.outcome, "failed");
    assert.equal(d.run(RUN)?.unstarted ?? 0, 0);
  });

  it("a running attempt keeps its lease: re-armed a TTL from the answer, asked again at the next silence", () => {
    const d = leased(() => ({ state: "running" }));
    const f = d.run(RUN)!.fence;
    d.advance(10_000); // :12
    assert.equal(d.run(RUN)?.fence, f);
    assert.equal(d.run(RUN)?.attempt, 1);
    assert.equal(d.timers.get(`lease:${RUN}`)?.atMs, sec(22));
    assert.deepEqual(d.timers.get(`lease:${RUN}`)?.msg, {
      kind: "lease_expired",
      run_id: RUN,
      fence: f,
    });
    d.advance(10_000); // :22: silent again, asked again
    assert.equal(d.postsOf("probe_worker").length, 2);
    assert.equal(d.run(RUN)?.fence, f);
  });

  it("never started (dropped by the probe): offered again under a new fence, not counted", () => {
    const d = leased(() => ({ state: "not_started" }), 1);
    const f = d.run(RUN)!.fence;
    d.advance(10_000);
    const r = d.run(RUN)!;
    assert.equal(r.attempt, 2);
    assert.ok(r.fence > f);
    assert.equal(r.unstarted, 1);
    assert.equal(
      r.attempts[0]?.error,
      "lease expired on worker w1, which had not started the attempt (not counted)",
    );
    assert.equal(d.heartbeat(RUN, f).fail?.code, "lease_lost", "the old fence is dead");
  });

  it("started and gone, or forgotten after it was heard to start: offered again and counted (the last attempt dead-letters)", () => {
    for (const [state, why] of [
      ["started", "lease expired on worker w1; the attempt started there and its result was lost"],
      ["unknown", "lease expired on worker w1, which no longer knows the attempt"],
    ] as const) {
      const d = leased(() => ({ state }), 1);
      if (state === "unknown") {
        d.advance(500); // :02, due
        d.heartbeat(RUN, undefined, sec(2)); // heard to start: it ran, whatever its worker remembers now
        assert.equal(d.run(RUN)?.status, "running");
        d.advance(10_000);
      } else d.advance(10_000);
      assert.equal(d.run(RUN), undefined, state);
      const rec = d.records.get(RUN)!;
      assert.equal(rec.status, "failed", state);
      assert.equal(rec.attempts[0]?.error, why);
    }
  });

  it("a worker restarted under the same id (`unknown`) before the attempt was heard to start: offered again, not counted", () => {
    const d = leased(() => ({ state: "unknown" }), 1);
    const f = d.run(RUN)!.fence;
    d.advance(10_000);
    const r = d.run(RUN)!;
    assert.equal(
      r.status,
      "leased",
      "max_attempts 1, yet not dead-lettered (it never executed): offered again and claimed",
    );
    assert.equal(r.attempt, 2);
    assert.ok(r.fence > f, "offered again under a new fence");
    assert.equal(r.unstarted, 1);
    assert.equal(
      r.attempts[0]?.error,
      "lease expired on worker w1, which no longer knows the attempt (restarted), before the attempt was heard to start (not counted: presumed never started)",
    );
  });

  it("given back by more workers than the lapse bound (a rolling restart of a large fleet): still not counted, up to its own bound", () => {
    const d = leased(() => undefined, 1);
    for (let i = 0; i < MAX_UNSTARTED_ATTEMPTS + 5; i++) {
      const r = d.run(RUN)!;
      assert.deepEqual(
        d.complete(
          RUN,
          {
            outcome: "error",
            exit_code: null,
            output: "",
            error: { class: "not_started", message: "given back", retryable: true },
            not_started: true,
          },
          r.fence,
        ).reply,
        { ok: true },
      );
    }
    assert.equal(d.run(RUN)?.status, "leased", "never dead-lettered: it never executed");
    assert.equal(d.run(RUN)?.given_back, MAX_UNSTARTED_ATTEMPTS + 5);
    assert.ok(MAX_GIVEN_BACK > MAX_UNSTARTED_ATTEMPTS);
  });

  it("an attempt given back unstarted (a draining worker): offered again at once under a new fence, not counted", () => {
    const d = leased(() => undefined, 1);
    const f = d.run(RUN)!.fence;
    const offers = d.dispatches.length;
    assert.deepEqual(
      d.complete(RUN, {
        outcome: "error",
        exit_code: null,
        output: "",
        error: { class: "not_started", message: "given back", retryable: true },
        not_started: true,
      }).reply,
      { ok: true },
    );
    const r = d.run(RUN)!;
    assert.equal(
      d.records.get(RUN)?.status,
      "leased",
      "not dead-lettered: offered again and claimed",
    );
    assert.ok(r.fence > f, "offered again at once");
    assert.equal(d.dispatches.length, offers + 1);
    assert.equal(r.unstarted, 1);
    assert.equal(r.attempts[0]?.outcome, "lease_lost");
    assert.equal(
      r.attempts[0]?.error,
      "given back unstarted by worker w1 (draining) (not counted)",
    );
    assert.equal(d.heartbeat(RUN, f).fail?.code, "lease_lost", "the old fence is dead");
    assert.equal(d.postsOf("probe_worker").length, 0, "no probe needed");
  });

  it("no answer, but heard from since the probe went: not silent after all — the lease goes on", () => {
    let answer: ProbeReply | null | "gone" | undefined = undefined; // held back, then gone
    const d = leased(() => answer);
    const f = d.run(RUN)!.fence;
    d.advance(10_000); // :12, probe out (held back)
    d.arrivals.set(heartbeatKey(RUN, f, "w1"), sec(13));
    d.advance(1_000); // :13
    d.send({ kind: "probe_answer", run_id: RUN, fence: f, worker: "w1", reply: null });
    assert.equal(d.run(RUN)?.attempt, 1);
    assert.equal(d.timers.get(`lease:${RUN}`)?.atMs, sec(23));
    assert.deepEqual(d.timers.get(`lease:${RUN}`)?.msg, {
      kind: "lease_expired",
      run_id: RUN,
      fence: f,
    });
    answer = "gone"; // and at the next silence, no responder at all: it lapses
    d.advance(10_000);
    assert.equal(d.run(RUN)?.attempt, 2);
    assert.equal(
      d.run(RUN)?.attempts[0]?.error,
      "lease expired on worker w1, which did not answer, before the attempt was heard to start (not counted: presumed never started)",
    );
  });

  it("an answer for another fence or worker, or after the run moved on, changes nothing", () => {
    const d = leased(() => undefined);
    const f = d.run(RUN)!.fence;
    d.advance(10_000);
    const ended: ProbeReply = {
      state: "ended",
      completion: {
        outcome: "exited",
        exit_code: 0,
        output: "",
        error: null,
        started_at_ms: sec(2),
        finished_at_ms: sec(3),
      },
    };
    for (const m of [
      { fence: f - 1, worker: "w1" },
      { fence: f, worker: "w2" },
    ]) {
      const before = d.state;
      d.send({ kind: "probe_answer", run_id: RUN, ...m, reply: ended });
      assert.equal(d.state, before, JSON.stringify(m));
    }
    assert.deepEqual(d.complete(RUN).reply, { ok: true }); // its own report came after all
    assert.equal(d.records.get(RUN)?.status, "succeeded");
    d.send({
      kind: "probe_answer",
      run_id: RUN,
      fence: f,
      worker: "w1",
      reply: { state: "not_started" },
    });
    assert.equal(d.records.get(RUN)?.status, "succeeded");
    assert.deepEqual(
      d.records.get(RUN)?.attempts.map((a) => a.outcome),
      ["succeeded"],
    );
  });
});

describe("the count of unanswered probes", () => {
  it("starts again from 0 once the lease is heard from: three unanswered probes in a row lapse it, not three over its life", () => {
    const d = leased(() => undefined); // never answered
    const f = d.run(RUN)!.fence;
    d.advance(10_000); // :12 probe 1
    d.advance(10_000); // :22 probe 2
    d.arrivals.set(heartbeatKey(RUN, f, "w1"), sec(25)); // heard again
    d.advance(10_000); // :32: not silent (lease to :35): re-armed, count reset
    assert.equal(d.postsOf("probe_worker").length, 2);
    d.advance(3_000); // :35 probe 1 of a new silence
    d.advance(10_000); // :45 probe 2
    d.advance(10_000); // :55 probe 3
    assert.equal(d.postsOf("probe_worker").length, 5);
    assert.equal(d.run(RUN)?.attempt, 1, "three in a row, not three over the lease's life");
    d.advance(10_000); // :65: the third went unanswered: lapsed
    assert.equal(d.run(RUN)?.attempt, 2);
  });

  it("is memory only: a state read back (an owner that moved) carries none", () => {
    const d = leased(() => undefined);
    d.advance(10_000);
    const r = d.run(RUN)!;
    assert.equal(r.probes, 1);
    const back = loadJobState({ ...d.state, runs: [{ ...r, probes: MAX_UNANSWERED_PROBES }] });
    assert.equal(back.runs[0]!.probes, undefined);
    assert.equal(back.runs[0]!.fence, r.fence);
  });
});
