/**
 * The job actor's run messages other than `complete` (run-lifecycle.ts), each in its own handler:
 * grants and slot checks, offers claimed or failed, heartbeats and their acknowledgement, lease
 * expiry and the probe of a silent lease, drains, the gate of a run prepared ahead, retries due,
 * and a run re-created over an ended record. `onRunMessage` routes them in an exhaustive `switch`.
 *
 * Pitfall: silence is not an answer — a lease whose heartbeats stopped is probed before it lapses
 * (`probeOrLapse`: MAX_UNANSWERED_PROBES unanswered in a row from a worker not advertising, or
 * MAX_PROBES_WHILE_ADVERTISING in all, lapse it).
 */
import { assertNever } from "../lib/assert.ts";
import type { HeartbeatAck } from "../protocol/worker.ts";
import { grantId, parseRunId, splitGrant } from "../protocol/ids.ts";
import type { JobMsg } from "../job-state/job-types.ts";
import {
  MAX_HANDLED_AHEAD,
  forgetProbes,
  type ActiveRun,
  type JobState,
} from "../job-state/job-state.ts";
import { firstAfter, holdOf, scheduleOf } from "../job-state/occurrence-plan.ts";
import { askSlot, dispatch, drained, onGrant } from "./run-dispatch.ts";
import {
  cancelRunTimers,
  claim,
  complete,
  completionKey,
  finish,
  holds,
  lapse,
  leaseEndMs,
  missIfLate,
} from "./run-lifecycle.ts";
import { actsOn, canMove, isLeased, moveRun } from "./run-status.ts";
import { fail, iso, type D, type Tx } from "../job-state/tx.ts";

type RunMsg<K extends JobMsg["kind"]> = Extract<JobMsg, { kind: K }>;

/** Every run message but `complete` (see `complete`), each in its own handler. */
export function onRunMessage(
  tx: Tx,
  m: Exclude<
    JobMsg,
    {
      kind:
        | "create"
        | "get"
        | "active_runs"
        | "patch"
        | "delete"
        | "run_now"
        | "fire"
        | "complete"
        | "cancel";
    }
  >,
): D {
  switch (m.kind) {
    case "slot_granted": {
      // A grant that comes past the run's starting deadline starts nothing: the run is missed.
      const { run_id, seq } = splitGrant(m.run_id);
      const r = tx.run(run_id);
      if (r && seq === (r.slot_seq ?? 0) && r.fence === 0 && missIfLate(tx, r))
        return tx.done(null);
      return onGrant(tx, m);
    }
    case "slot_audit":
      return onGrant(tx, m);
    case "slot_throttled":
      return onThrottled(tx, m);
    case "redispatch": {
      const r = tx.run(m.run_id);
      // A wake for an offer that failed: nothing if the run was offered again since.
      if (m.fence !== undefined && (r === undefined || r.fence !== m.fence)) return tx.done(null);
      return onRedispatch(tx, r);
    }
    case "slot_check": {
      const r = tx.run(m.run_id);
      if (actsOn("slot_check", r) && !r.slot && !missIfLate(tx, r)) askSlot(tx, r);
      return tx.done(null);
    }
    case "claimed":
      return onClaimed(tx, m);
    case "dispatch_failed": {
      const r = tx.run(m.run_id);
      if (actsOn("dispatch_failed", r) && r.fence === m.fence) {
        tx.timer(`dispatch:${r.run_id}`, tx.now + tx.cfg.redispatchDelayMs, {
          kind: "redispatch",
          run_id: r.run_id,
        });
      }
      return tx.done(null);
    }
    case "heartbeat":
      return onHeartbeat(tx, m);
    case "lease_expired":
      return onLeaseExpired(tx, m);
    case "probe_answer":
      return onProbeAnswer(tx, m);
    case "drained":
      drained(tx, m.run_id, m.fence);
      return tx.done(null);
    case "recall":
      return onRecall(tx, m);
    case "gate":
      return onGate(tx, tx.run(m.run_id));
    case "retry_due":
      return onRetryDue(tx, tx.run(m.run_id));
    case "already_ended":
      return onAlreadyEnded(tx, tx.run(m.run_id));
    case "run_settled":
      return onRunSettled(tx, m.run_id);
    default:
      return assertNever(m, "run message");
  }
}

/**
 * A run dropped on load (its record ended it) that was on a worker: the cancel its end would have
 * sent is sent now; its slot stays held until the drain bound.
 */
function onRecall(tx: Tx, m: RunMsg<"recall">): D {
  // A run being stopped (run-lifecycle.ts `stopBeforeStart`), read back by a new owner: its worker
  // is told again — the first cancel may have been lost with the old owner.
  const r = tx.run(m.run_id);
  if (r?.stopping !== undefined && r.fence === m.fence && r.worker !== null) {
    tx.post.push({ kind: "cancel_on_worker", worker: r.worker, run_id: r.run_id, fence: r.fence });
    return tx.done(null);
  }
  const list = tx.s.draining ?? [];
  const i = list.findIndex((x) => x.run_id === m.run_id && x.fence === m.fence);
  const d = list[i];
  if (!d?.untold) return tx.done(null);
  const { untold: _told, ...told } = d;
  list[i] = told; // (a copy: the entry is shared with the state before this turn)
  tx.changed = true;
  tx.post.push({ kind: "cancel_on_worker", worker: d.worker, run_id: d.run_id, fence: d.fence });
  return tx.done(null);
}

function onRedispatch(tx: Tx, r: ActiveRun | undefined): D {
  if (!actsOn("redispatch", r) || missIfLate(tx, r)) return tx.done(null);
  if (!r.slot) askSlot(tx, r);
  else dispatch(tx, r); // a new fence: the earlier offer (if any) is dead
  return tx.done(null);
}

/**
 * The tenant refused this run's ask: its backlog is at its bound (tenant-actor.ts). A run still
 * waiting for that very ask, never attempted, ends `throttled` — it holds no slot and is in no
 * waiting list, so it gives nothing back. Any other answer (a later ask, a run since granted or
 * attempted) is stale and changes nothing.
 */
function onThrottled(tx: Tx, m: RunMsg<"slot_throttled">): D {
  const { run_id, seq } = splitGrant(m.run_id);
  const r = tx.run(run_id);
  if (
    !r ||
    seq !== (r.slot_seq ?? 0) ||
    r.slot ||
    r.status !== "queued" ||
    r.attempt > 0 ||
    r.trigger === "manual"
  )
    return tx.done(null);
  // Prepared ahead of its due time: not refused for a backlog that may be gone by then. It asks
  // again at its due time (it is in no waiting list meanwhile), when the bound decides.
  if (r.start_at_ms > tx.now) {
    tx.timer(`slot:${r.run_id}`, r.start_at_ms, { kind: "slot_check", run_id: r.run_id });
    return tx.done(null);
  }
  finish(
    tx,
    r,
    "throttled",
    `backlog: the tenant has ${m.waiting} runs waiting for a slot (max_waiting_runs ${m.max_waiting})`,
    null,
  );
  return tx.done(null);
}

function onClaimed(tx: Tx, m: RunMsg<"claimed">): D {
  const r = tx.run(m.run_id);
  if (r && holds(tx, r, m.fence, m.worker)) {
    return tx.done(null); // already claimed implicitly by the worker's first heartbeat
  }
  if (!actsOn("claimed", r) || r.fence !== m.fence) {
    // The worker holds a claim we no longer want: tell it to stop.
    tx.post.push({ kind: "cancel_on_worker", worker: m.worker, run_id: m.run_id, fence: m.fence });
    return tx.done(null);
  }
  claim(tx, r, m.worker);
  return tx.done(null);
}

function onHeartbeat(tx: Tx, m: RunMsg<"heartbeat">): D {
  const r = tx.run(m.run_id);
  // The worker may start (and heartbeat) before its acceptance reaches us as `claimed`:
  // the current fence proves the claim.
  if (r && r.fence === m.fence && canMove(r, "claim") && r.fence > 0) claim(tx, r, m.worker);
  // A run being stopped is answered as an ended one (its worker stops the attempt at once); its
  // end waits for the worker's report or the probe of its lease (run-lifecycle.ts `endStopped`).
  if (!r || !holds(tx, r, m.fence, m.worker) || r.stopping !== undefined) {
    return tx.done(
      null,
      fail(
        "lease_lost",
        `run ${m.run_id}: lease with fence ${m.fence} of worker ${m.worker} is gone`,
      ),
    );
  }
  tx.timer(`lease:${r.run_id}`, leaseEndMs(tx, r, tx.now), {
    kind: "lease_expired",
    run_id: r.run_id,
    fence: r.fence,
  });
  heard(tx, r);
  const ack = heartbeatAck(tx.s, r, m.started_at_ms, tx.now, tx.cfg.leaseTtlMs);
  if (ack.hold) return tx.done(ack);
  if (canMove(r, "start") && m.started_at_ms !== undefined) {
    moveRun(r, "start");
    r.started_at_ms ??= m.started_at_ms;
    const a = r.attempts[r.attempts.length - 1];
    if (a) a.started_at = iso(m.started_at_ms);
    tx.putRun(r);
    // Deferred: the claim (written) is what lets the worker start; a lost start is learnt again
    // from the completion (it carries started_at) and, at worst, an expired lease counts it unstarted.
    tx.defer();
  }
  return tx.done(ack);
}

/**
 * The acknowledgement of a heartbeat from the holder of a lease (protocol/worker.ts `HeartbeatAck`):
 * `hold` for a gated run an earlier run still blocks; for an attempt not started yet, `cover_ms`
 * up to its lease's end at start_at + TTL (`leaseEndMs`; the lease timer armed at the claim never
 * fires before it), so a run prepared minutes ahead needs no acknowledgement as its start nears.
 * A `hold` carries no cover: a held attempt keeps asking, and `holdOf` being monotone, an attempt
 * acknowledged without `hold` is never held later (its cover cannot outlive a skip decision).
 */
export function heartbeatAck(
  s: JobState,
  r: ActiveRun,
  startedAtMs: number | undefined,
  nowMs: number,
  leaseTtlMs: number,
): HeartbeatAck {
  if (r.status !== "leased" || startedAtMs !== undefined) return { ok: true };
  if (holdOf(s, r)) return { ok: true, hold: true };
  if (r.no_cover) return { ok: true };
  return r.start_at_ms > nowMs
    ? { ok: true, cover_ms: r.start_at_ms - nowMs + leaseTtlMs }
    : { ok: true };
}

function onLeaseExpired(tx: Tx, m: RunMsg<"lease_expired">): D {
  const r = tx.run(m.run_id);
  if (!actsOn("lease_expired", r) || r.fence !== m.fence) return tx.done(null);
  if (m.after_probe === true) {
    // The fallback of a probe answered since (delivered before the answer re-armed the timer,
    // then queued behind it: mailboxes are first in, first out): the answer decided.
    if (r.probe_open !== true || (m.probe !== undefined && m.probe !== r.probes))
      return tx.done(null);
    // Its answer never came in: counted as a silent worker's.
    delete r.probe_open;
    r.silent_probes = (r.silent_probes ?? 0) + 1;
  }
  // Busy is not dead: a heartbeat or completion report that arrived (even if still queued behind
  // this timer) extends the lease; re-arm for its end instead of expiring. A completion report of
  // the holder still waiting in the mailbox keeps it however long it waits: its attempt has ended
  // (nothing can overlap), and its turn will settle the run — expiring now would throw its result
  // away and run it again. (Its worker does not heartbeat it while the report is on the wire.)
  const end =
    r.worker !== null && tx.pending(completionKey(r.run_id, r.fence, r.worker))
      ? tx.now + tx.cfg.leaseTtlMs
      : leaseEndMs(tx, r, 0);
  if (end > tx.now) {
    tx.timer(`lease:${r.run_id}`, end, { kind: "lease_expired", run_id: r.run_id, fence: r.fence });
    heard(tx, r);
    return tx.done(null);
  }
  // Silence is not an answer: the attempt may have run and its report be stuck behind a burst
  // (offered again, it would run twice — a fifth of a 200,000-run burst). Ask its worker
  // what became of it; the lease stands until the answer (`onProbeAnswer`), or until the fallback
  // (`after_probe`: the answer never came in — the actor moved, its mailbox was full, a stall),
  // which asks again. Only so many unanswered probes lapse it (`probeOrLapse`).
  return probeOrLapse(tx, r);
}

/**
 * Unanswered probes (timeouts from a worker not advertising, or answers that never came) in a row
 * after which a silent lease lapses anyway.
 */
export const MAX_UNANSWERED_PROBES = 3;
/**
 * Unanswered probes in all after which a silent lease lapses though its worker still advertises
 * (its probes time out, its adverts come: a worker swamped by a burst, its event loop seconds
 * behind). Such a probe is asked again after half a lease TTL, so ~5 min at the default TTL (a
 * 5 s timeout and a 5 s pause each). Lapsed after three, an attempt never heard to start is
 * presumed not started and offered again — and a swamped worker that had run it runs it twice
 * (a 200,000-run burst: 91 runs).
 */
export const MAX_PROBES_WHILE_ADVERTISING = 30;

/** The lease was heard from (a heartbeat, a report, an answer): unanswered probes start again from 0. */
function heard(tx: Tx, r: ActiveRun): void {
  if (r.probes === undefined) return;
  forgetProbes(r);
  tx.defer();
}

/**
 * Probes the worker again, or lapses the lease: after MAX_UNANSWERED_PROBES unanswered in a row
 * while the worker did not advertise (or their answers never came), or MAX_PROBES_WHILE_ADVERTISING
 * unanswered in all. Counted apart, so a swamped worker whose adverts now and then come later than
 * the directory's expiry is not cut off by one such gap, and a stopped one lapses as soon as ever.
 */
function probeOrLapse(tx: Tx, r: ActiveRun): D {
  if (tx.faults.lapseWithoutProbe === true) return lapse(tx, r, null);
  if (
    r.worker === null ||
    (r.silent_probes ?? 0) >= MAX_UNANSWERED_PROBES ||
    (r.probes ?? 0) >= MAX_PROBES_WHILE_ADVERTISING
  )
    return lapse(tx, r, null);
  r.probes = (r.probes ?? 0) + 1;
  r.probe_open = true;
  tx.defer(); // counts in memory: lost with the actor, they only allow a few more probes
  tx.post.push({
    kind: "probe_worker",
    worker: r.worker,
    run_id: r.run_id,
    attempt: r.attempt,
    fence: r.fence,
  });
  tx.timer(`lease:${r.run_id}`, tx.now + tx.cfg.leaseTtlMs, {
    kind: "lease_expired",
    run_id: r.run_id,
    fence: r.fence,
    after_probe: true,
    probe: r.probes,
  });
  return tx.done(null);
}

/**
 * The worker's answer to a probe of a silent lease (protocol/worker.ts `ProbeReply`): it runs —
 * the lease goes on; it ended — its completion settles the run as its report would have;
 * `not_started` — the probe dropped it (or it was dropped before): the lease lapses at once.
 * `started`/`unknown` (gone from the worker) and no answer lapse it only once the lease is silent
 * still: a heartbeat acknowledged since the probe went covers its worker for a while, so the
 * owner waits that lease out (a TTL from the arrival, ≥ the worker's send + TTL − margin) before
 * a re-offer. No answer in time from a frozen or cut-off worker (not advertising) asks again at
 * once (a probe already waited its time), from a swamped one (advertising) after half a TTL, up
 * to the bounds of `probeOrLapse`; `gone` (no responder, and
 * the worker no longer advertises: its process is gone, job-shell.ts `probe`) lapses it.
 */
function onProbeAnswer(tx: Tx, m: RunMsg<"probe_answer">): D {
  const r = tx.run(m.run_id);
  if (!actsOn("probe_answer", r) || r.fence !== m.fence || r.worker !== m.worker)
    return tx.done(null);
  const reply = m.reply;
  if (r.probe_open === true) {
    delete r.probe_open; // answered: its fallback, should it still come, is stale
    tx.defer();
  }
  if (reply !== null) heard(tx, r);
  if (reply?.state === "running") {
    // Still running though stopped: the cancel may have been lost on the way; told again.
    if (r.stopping !== undefined)
      tx.post.push({
        kind: "cancel_on_worker",
        worker: m.worker,
        run_id: r.run_id,
        fence: r.fence,
      });
    tx.timer(`lease:${r.run_id}`, tx.now + tx.cfg.leaseTtlMs, {
      kind: "lease_expired",
      run_id: r.run_id,
      fence: r.fence,
    });
    return tx.done(null);
  }
  if (reply?.state === "ended" && reply.completion) {
    // The identity is the lease's own, never the wire reply's.
    return complete(tx, {
      ...reply.completion,
      kind: "complete",
      run_id: r.run_id,
      fence: r.fence,
      worker: m.worker,
    });
  }
  if (reply?.state !== "not_started") {
    // Heard from since the probe went (a heartbeat, a report waiting here): not silent after all.
    const end = tx.pending(completionKey(r.run_id, r.fence, m.worker))
      ? tx.now + tx.cfg.leaseTtlMs
      : leaseEndMs(tx, r, 0);
    if (end > tx.now) {
      tx.timer(`lease:${r.run_id}`, end, {
        kind: "lease_expired",
        run_id: r.run_id,
        fence: r.fence,
      });
      heard(tx, r);
      return tx.done(null);
    }
    if (reply === null && !m.gone && m.advertising === true) {
      // Alive but silent (swamped): asked again after a pause, not at once — each probe is one
      // more request in the backlog that keeps it from answering.
      delete r.silent_probes;
      tx.defer();
      tx.timer(`lease:${r.run_id}`, tx.now + tx.cfg.leaseTtlMs / 2, {
        kind: "lease_expired",
        run_id: r.run_id,
        fence: r.fence,
      });
      return tx.done(null);
    }
    if (reply === null && !m.gone) {
      r.silent_probes = (r.silent_probes ?? 0) + 1;
      return probeOrLapse(tx, r);
    }
  }
  return lapse(tx, r, reply);
}

/**
 * The due instant of a gated run. A blocking run still active: skip this occurrence (its worker
 * has only ever heard `hold`, so it never started). Otherwise it goes (or went).
 */
function onGate(tx: Tx, r: ActiveRun | undefined): D {
  // Being stopped: its worker's answer ends it; it neither is skipped nor replaces older runs.
  if (r?.stopping !== undefined) return tx.done(null);
  if (actsOn("gate", r) && r.gate && r.started_at_ms === null && holdOf(tx.s, r)) {
    finish(tx, r, "skipped", "overlap: an earlier run is still active", null);
  }
  // overlap=replace prepared ahead: the due occurrence replaces every run scheduled before it
  // that is still active (one started by hand since the preparation). Written, as a replace is.
  if (r?.gate && tx.job.spec.overlap === "replace" && tx.run(r.run_id)) {
    const older = tx.s.runs.filter((x) => x !== r && x.scheduled_for_ms < r.scheduled_for_ms);
    for (const x of older) finish(tx, x, "cancelled", "replaced by a newer occurrence", null);
    // Decided: the gate is not re-armed on a later activation (job-actor.ts onActivate re-arms a
    // replace gate until then, even once the run has started).
    delete r.gate;
    // Written when it replaced runs (as a replace at the due instant is); else deferred — lost,
    // the gate is re-armed on activation and decides the same again.
    if (older.length > 0) tx.changed = true;
    else tx.defer();
  }
  return tx.done(null);
}

/**
 * A run re-created over a record that had already ended (see `already_ended`): dropped before it
 * goes anywhere — no record written (the terminal one stands), its slot or slot request given
 * back, its timers cancelled. Only a run not yet offered (the follow-up comes before any other
 * message); one already claimed is left to its lifecycle.
 */
function onAlreadyEnded(tx: Tx, r: ActiveRun | undefined): D {
  if (!r || r.attempt > 0 || isLeased(r)) return tx.done(null);
  tx.s.runs = tx.s.runs.filter((x) => x !== r);
  cancelRunTimers(tx, r.run_id);
  // Its slot, or its place in the tenant's waiting list (a queued run still asking).
  if (r.slot || r.status === "queued") tx.post.push({ kind: "release_slot", grant: grantId(r) });
  tx.defer();
  return tx.done(null);
}

function onRetryDue(tx: Tx, r: ActiveRun | undefined): D {
  if (!actsOn("retry_due", r)) return tx.done(null);
  moveRun(r, "retry_due");
  r.next_attempt_at_ms = null;
  // Its start stays its occurrence's (past): a start read from this clock outlives a step of it.
  // Stamped "now" by an owner whose clock ran 28 s ahead, a retry was 28 s in the future once the
  // clock stepped back: its workers held each offer that long (its probes dropped them as not
  // started, again and again, its slot held throughout) and its asks ranked it behind runs
  // prepared ahead, which took the tenant's slots until after their due times (simulation seed
  // 7062). Only its re-ask cadence counts from now.
  r.waiting_since_ms = tx.now;
  r.fence = 0;
  tx.putRun(r);
  // A grant may have arrived during retry_wait: then the slot is held and the run goes now.
  if (r.slot) dispatch(tx, r);
  else askSlot(tx, r);
  tx.changed = true;
  return tx.done(null);
}

/**
 * A settle wrote over an orphan (a run prepared by a fire whose state change was lost): that
 * occurrence was prepared, so it stays cancelled like any run prepared before a pause or change
 * (job-commands.ts): handled — `last_occurrence_ms` reaches it, and a `next_run_at` at or before
 * it moves past it. Without this a resume or a schedule still calling for it fired it again, and
 * its `create` (meeting the settled record) put it in the runs index a second time. The index
 * entry itself is added by the wrapper (with-history.ts).
 *
 * Pitfall: after a schedule change the orphan is the old schedule's, and the new one may call for
 * occurrences before it (`next_run_at` is earlier): those must still fire, so it is handled ahead
 * instead (`handled_ahead`, as `patch` keeps the prepared runs it cancels; `fire` passes over it).
 * Raising `last_occurrence_ms` to it would move `next_run_at` past them: no record, ever. A paused
 * job (no `next_run_at`) is judged by its schedule's next occurrence, which a resume fires first.
 */
function onRunSettled(tx: Tx, runId: string): D {
  const s = tx.s;
  const o = parseRunId(runId);
  if (!o || o.seq !== 0 || !s.job || (s.last_occurrence_ms ?? 0) >= o.ms) return tx.done(null);
  // The schedule's first occurrence not handled yet: paused, the job has no `next_run_at`, but a
  // resume fires from there (a PATCH may pause and change the schedule at once).
  const first =
    s.next_run_at_ms ??
    scheduleOf(s.job.spec).next(Math.max(tx.now, s.last_occurrence_ms ?? 0), 1)[0] ??
    null;
  if (first !== null && first < o.ms) {
    const handled = new Set([...(s.handled_ahead ?? []), o.ms]);
    // Full: the latest are kept, this one among them (it would fire again otherwise).
    s.handled_ahead = [...handled].sort((a, b) => a - b).slice(-MAX_HANDLED_AHEAD);
    tx.changed = true;
    return tx.done(null);
  }
  s.last_occurrence_ms = o.ms;
  if (s.next_run_at_ms !== null && s.next_run_at_ms <= o.ms) {
    s.next_run_at_ms = firstAfter(s.job.spec, tx.now, s);
    tx.armFire();
  }
  tx.changed = true;
  return tx.done(null);
}
