/**
 * The run lifecycle: claims, leases, completion, retries with backoff, a lapsed lease, and the
 * end of a run (`finish`: its terminal record, its slot given back or drained, its worker told to
 * stop, a dead letter, a queued occurrence started). Status changes go through the transition
 * table (run-status.ts); the other run messages are handled in run-messages.ts.
 *
 * Gotchas (ARCHITECTURE.md, "Design decisions"): a heartbeat or completion counts only with the run's current
 * fence AND the worker that claimed it (`holds`); the first one under an offer's fence claims the
 * run even before the acceptance arrives. A lease ends at the last heartbeat ARRIVAL + TTL
 * (`leaseEndMs`, arrivals recorded by the host before the mailbox): busy is not dead. An attempt
 * whose lease ran out before it started does not count against `max_attempts` (bounded).
 */
import {
  IMAGE_DIGEST,
  START_SKEW_TOLERANCE_MS,
  type Completion,
  type ProbeReply,
} from "../protocol/worker.ts";
import { retryDelayMs } from "./backoff.ts";
import { grantId } from "../protocol/ids.ts";
import type { JobMsg } from "../job-state/job-types.ts";
import { forgetProbes, terminalRunView, type ActiveRun } from "../job-state/job-state.ts";
import {
  NOT_COUNTED,
  PRESUMED_NOT_STARTED,
  type AttemptOutcome,
  type RunView,
} from "../protocol/model.ts";
import { askSlot, dispatch, drain, drained } from "./run-dispatch.ts";
import { deadlineReason, pastDeadline } from "../job-state/backlog.ts";
import { canMove, isLeased, moveRun, STOPPED } from "./run-status.ts";
import { fail, iso, type D, type Tx } from "../job-state/tx.ts";

/** Attempts that expired before they started and so do not count against max_attempts (a bound). */
export const MAX_UNSTARTED_ATTEMPTS = 10;
/**
 * Attempts given back unstarted by draining workers that do not count either, apart from the
 * bound above: a rolling restart of a large fleet inside the look-ahead window may bounce one run
 * from worker to worker many times, and each give-back comes from the worker identity that held it.
 */
export const MAX_GIVEN_BACK = 100;

/** The arrival key of a heartbeat (see ActorContext.arrivalMs). */
export const heartbeatKey = (runId: string, fence: number, worker: string): string =>
  `hb:${runId}:${fence}:${worker}`;

/** The coalesce key of a completion report (see ActorContext.pending and the job actor's `coalesceKey`). */
export const completionKey = (runId: string, fence: number, worker: string): string =>
  `complete|${heartbeatKey(runId, fence, worker)}`;

/**
 * A run waiting for a slot or a worker past its starting deadline (backlog.ts) ends `missed`
 * instead of starting late (its slot, or its place in the tenant's waiting list, goes back);
 * true when it did.
 */
export function missIfLate(tx: Tx, r: ActiveRun): boolean {
  if (!pastDeadline(r, tx.now)) return false;
  finish(tx, r, "missed", deadlineReason(r), null);
  return true;
}

/** Cancels every timer a run may have armed (a run dropped without a terminal record). */
export function cancelRunTimers(tx: Tx, runId: string): void {
  for (const t of ["slot", "dispatch", "gate", "retry", "lease"]) tx.cancelTimer(`${t}:${runId}`);
}

/** Ends a run: record, release slot, stop the worker if needed, start a queued occurrence. Returns its terminal record. */
export function finish(
  tx: Tx,
  r: ActiveRun,
  status: "succeeded" | "failed" | "timed_out" | "cancelled" | "skipped" | "missed" | "throttled",
  reason: string | null,
  result: RunView["result"],
  /** Its worker has said the task is gone or never started (`endStopped`): nothing to tell or drain. */
  taskGone = false,
): RunView {
  // Ended by the scheduler, not by its attempt: a worker holding it is told to drop it.
  const stopped = STOPPED.has(status);
  tx.s.runs = tx.s.runs.filter((x) => x !== r);
  // Deferred: the terminal record (written first, `pre`) is the durable fact; a state read back
  // that still lists the run is reconciled against its record (job-shell.ts `reconcile`). What
  // else a finish does writes: a drain (below), a queued occurrence started; and its callers
  // write when they must (commands, replace, a lease expiry). A run whose record is created after
  // the state (a run-now) is written at its end: a stored state that still listed it, its record
  // later pruned, would read as "not recorded yet" on load and run it again.
  if (r.recorded_after) tx.changed = true;
  else tx.defer();
  tx.cancelTimer(`lease:${r.run_id}`);
  tx.cancelTimer(`retry:${r.run_id}`);
  tx.cancelTimer(`dispatch:${r.run_id}`);
  tx.cancelTimer(`slot:${r.run_id}`);
  if (r.gate) tx.cancelTimer(`gate:${r.run_id}`);
  const onWorker = isLeased(r) && r.worker !== null && !taskGone;
  if (onWorker && stopped) {
    tx.post.push({ kind: "cancel_on_worker", worker: r.worker!, run_id: r.run_id, fence: r.fence });
  }
  // A cancelled attempt may still be executing until its worker has killed it: its slot is held
  // until then (`drain`). A gated run skipped at its due instant never started (its worker only
  // ever heard `hold`), so its slot goes back at once.
  // Bounded by the lease's end: an attempt acknowledged ahead with a cover (`heartbeatAck`) whose
  // cancel is lost may start at start_at and run until start_at + TTL − margin. A gated run
  // skipped at its due instant too: under `skip` throughout its worker only ever heard `hold`
  // (holdOf is monotone), but a patch of the overlap policy meanwhile (skip → allow → skip) may
  // have let an acknowledgement without `hold`, and so a cover, through.
  if (r.slot && onWorker && stopped)
    drain(tx, {
      run_id: r.run_id,
      fence: r.fence,
      worker: r.worker!,
      grant: grantId(r),
      until_ms: Math.max(tx.now, r.start_at_ms) + tx.cfg.leaseTtlMs + tx.cfg.drainGraceMs,
      created_at_ms: r.created_at_ms,
      scheduled_for_ms: r.scheduled_for_ms,
    });
  else if (r.slot) tx.post.push({ kind: "release_slot", grant: grantId(r) });
  // Still asking for a slot: its place in the tenant's waiting list goes back too (the list is
  // what the tenant's backlog bound counts; a grant already on its way is released with it).
  else if (r.status === "queued" && status !== "throttled")
    tx.post.push({ kind: "release_slot", grant: grantId(r) });
  const record = terminalRunView(tx.job, r, status, tx.now, {
    attempt: r.attempt,
    attempts: r.attempts,
    started_at: r.started_at_ms === null ? null : iso(r.started_at_ms),
    result,
    reason,
  });
  tx.pre.push({ kind: "put_run", record, mode: "update" });
  if (status === "failed" || status === "timed_out") tx.post.push({ kind: "dead_letter", record });
  if (status !== "cancelled") tx.post.push({ kind: "run_ended", record });
  // (Not for a paused job: a pause drops its queue, and the runs it cancels must not start one.)
  if (tx.s.runs.length === 0 && tx.s.queued.length > 0 && !tx.s.deleted && tx.job.spec.enabled) {
    const next = tx.s.queued.shift()!;
    tx.occur(next, "schedule");
    tx.changed = true; // the queue is durable state (no record holds a queued occurrence)
  }
  // queue/replace prepare ahead only while no run is active (occurrence-plan.ts `lookahead`):
  // the last one ended, so the next occurrence's window opens now instead of at its due instant.
  const overlap = tx.job.spec.overlap;
  if (
    tx.s.runs.length === 0 &&
    (overlap === "queue" || overlap === "replace") &&
    !tx.s.deleted &&
    tx.job.spec.enabled
  )
    tx.armFire();
  return record;
}

function mapOutcome(c: Completion): AttemptOutcome {
  switch (c.outcome) {
    case "exited":
      return c.exit_code === 0 ? "succeeded" : "failed";
    case "timed_out":
      return "timed_out";
    case "oom":
      return "oom";
    case "killed":
      return "cancelled";
    case "error":
      return "error";
  }
}

/** After a failed attempt: retry with backoff, or dead-letter. */
function failAttempt(
  tx: Tx,
  r: ActiveRun,
  outcome: AttemptOutcome,
  retryable: boolean,
  why: string,
  result: RunView["result"],
): void {
  const retry = tx.job.spec.retry;
  tx.cancelTimer(`lease:${r.run_id}`);
  forgetProbes(r);
  // A paused job begins no new attempt (job-commands.ts `patch`), nor does a run its job's change
  // stopped (`stopBeforeStart`) and whose attempt ended by itself before the stop reached it.
  if (retryable && (!tx.job.spec.enabled || r.stopping !== undefined)) {
    finish(
      tx,
      r,
      outcome === "timed_out" ? "timed_out" : "failed",
      r.stopping === undefined
        ? `not retried, the job is paused: ${why}`
        : `not retried (${r.stopping}): ${why}`,
      result,
    );
    return;
  }
  if (retryable && r.attempt - (r.unstarted ?? 0) < retry.max_attempts) {
    moveRun(r, "retry");
    r.worker = null;
    r.fence = 0;
    r.next_attempt_at_ms = tx.now + retryDelayMs(retry, r.attempt, r.run_id);
    if (r.slot) {
      tx.post.push({ kind: "release_slot", grant: grantId(r) });
      r.slot = false;
      r.slot_seq = (r.slot_seq ?? 0) + 1; // the next grant has a new name
    }
    tx.timer(`retry:${r.run_id}`, r.next_attempt_at_ms, { kind: "retry_due", run_id: r.run_id });
    tx.putRun(r);
    tx.changed = true;
    return;
  }
  const reason = retryable
    ? `dead-lettered after ${r.attempt - (r.unstarted ?? 0)} attempt(s): ${why}`
    : `not retryable: ${why}`;
  finish(tx, r, outcome === "timed_out" ? "timed_out" : "failed", reason, result);
}

/** A worker holds the attempt with the run's current fence: leased, lease timer armed. */
export function claim(tx: Tx, r: ActiveRun, worker: string): void {
  moveRun(r, "claim");
  r.attempt += 1;
  r.worker = worker;
  forgetProbes(r);
  tx.cancelTimer(`dispatch:${r.run_id}`);
  r.next_attempt_at_ms = null;
  r.attempts.push({
    attempt: r.attempt,
    worker,
    started_at: null,
    finished_at: null,
    exit_code: null,
    outcome: null,
    error: null,
  });
  if (tx.job.spec.overlap === "queue") r.no_cover = true;
  else delete r.no_cover;
  tx.putRun(r);
  tx.changed = true;
  tx.timer(`lease:${r.run_id}`, Math.max(tx.now, r.start_at_ms) + tx.cfg.leaseTtlMs, {
    kind: "lease_expired",
    run_id: r.run_id,
    fence: r.fence,
  });
}

/** The attempt with this fence is the run's current lease, and `worker` holds it. */
export function holds(tx: Tx, r: ActiveRun, fence: number, worker: string): boolean {
  if (r.fence !== fence || !isLeased(r)) return false;
  return r.worker === worker || tx.faults.fenceSharedByWorkers === true;
}

/** When the lease of `r` ends: the latest heartbeat arrival (or its start) plus the TTL. */
export function leaseEndMs(tx: Tx, r: ActiveRun, armedAtMs: number): number {
  const seen =
    r.worker === null ? undefined : tx.arrivalMs(heartbeatKey(r.run_id, r.fence, r.worker));
  return Math.max(armedAtMs, seen ?? 0, r.start_at_ms) + tx.cfg.leaseTtlMs;
}

/** A worker reports an attempt ended: success, a retry, a dead letter — or the end of a drain. */
export function complete(tx: Tx, m: Extract<JobMsg, { kind: "complete" }>): D {
  // The end of a cancelled attempt: its slot goes back now (the record is already terminal).
  if (
    tx.s.draining?.some(
      (d) => d.run_id === m.run_id && d.fence === m.fence && d.worker === m.worker,
    )
  ) {
    drained(tx, m.run_id, m.fence);
    return tx.done({ ok: true });
  }
  const r = tx.run(m.run_id);
  if (r && r.fence === m.fence && canMove(r, "claim") && r.fence > 0) claim(tx, r, m.worker);
  if (!r || !holds(tx, r, m.fence, m.worker)) {
    return tx.done(
      null,
      fail(
        "stale_fence",
        `run ${m.run_id}: fence ${m.fence} of worker ${m.worker} is not the current lease`,
      ),
    );
  }
  // Stopped by its job's change: the worker's answer decides its record (`endStopped`). An attempt
  // that ended by itself before the stop reached it ends as it ended (below, never retried).
  if (r.stopping !== undefined && (m.not_started === true || m.outcome === "killed")) {
    endStopped(
      tx,
      r,
      m.not_started === true || unstartedCancel(m)
        ? { said: "not_started" }
        : { said: "killed", completion: m },
    );
    return tx.done({ ok: true });
  }
  // Given back unstarted (a draining worker): offered again at once, not counted (bounded). A
  // start already heard for it (it cannot have one: the worker gives back only attempts it never
  // started) would make it a lapse like any other.
  if (m.not_started === true) {
    tx.cancelTimer(`lease:${r.run_id}`);
    lapse(
      tx,
      r,
      r.status === "leased" ? { state: "not_started" } : { state: "started" },
      r.status === "leased" ? "given back" : "expired",
    );
    return tx.done({ ok: true });
  }
  const outcome = mapOutcome(m);
  const a = r.attempts[r.attempts.length - 1];
  const errorText =
    m.error?.message ??
    (outcome === "oom" ? "killed: out of memory" : outcome === "timed_out" ? "timed out" : null);
  if (a) {
    a.started_at ??= iso(m.started_at_ms);
    a.finished_at = iso(m.finished_at_ms);
    a.exit_code = m.exit_code;
    a.outcome = outcome;
    a.error = outcome === "succeeded" ? null : (errorText ?? `exit code ${m.exit_code}`);
    if (typeof m.image_digest === "string" && IMAGE_DIGEST.test(m.image_digest))
      a.image_digest = m.image_digest;
  }
  r.started_at_ms ??= m.started_at_ms;
  const result = { exit_code: m.exit_code, output: m.output };
  if (outcome === "succeeded") finish(tx, r, "succeeded", null, result);
  else {
    const retryable = m.error ? m.error.retryable : outcome !== "cancelled";
    failAttempt(tx, r, outcome, retryable, a?.error ?? outcome, result);
  }
  return tx.done({ ok: true });
}

/**
 * A lease that lapsed: the attempt ends `lease_lost` and the run is offered again (or
 * dead-lettered). `reply`: what its worker said of it (null: nothing). An attempt its worker says
 * never started does not count against max_attempts (up to a bound); with no answer, one never
 * heard to start is presumed not started (a burst's unacknowledged offers; a worker that died
 * before starting it).
 */
export function lapse(
  tx: Tx,
  r: ActiveRun,
  reply: ProbeReply | null,
  how: "expired" | "given back" = "expired",
): D {
  const w = r.worker ?? "?";
  const said = reply?.state;
  if (r.stopping !== undefined) {
    // Stopped by its job's change: never offered again; what its worker said decides the record.
    endStopped(
      tx,
      r,
      said === "not_started"
        ? { said: "not_started" }
        : said === "started" || said === "ended"
          ? { said: "started" }
          : { said: "unknown" },
    );
    tx.changed = true;
    return tx.done(null);
  }
  // Never heard to start, and its worker does not say it did: a worker restarted under the same
  // id (a rolling deploy) answers `unknown` for the attempts its earlier process held ahead of
  // their start — counted, they dead-lettered runs that never executed. Presumed not started, as
  // with no answer; the at-least-once exception (a process killed after the start and before its
  // first heartbeat arrived) hides among these, bounded by MAX_UNSTARTED_ATTEMPTS and counted
  // apart (kairos_lease_expiries_total{kind="presumed_not_started"}).
  const givenBack = how === "given back" && said === "not_started";
  const presumed =
    said !== "not_started" && (reply === null || said === "unknown") && r.status === "leased";
  const bounded = givenBack
    ? (r.given_back ?? 0) < MAX_GIVEN_BACK
    : (r.unstarted ?? 0) - (r.given_back ?? 0) < MAX_UNSTARTED_ATTEMPTS;
  const neverStarted = (said === "not_started" || presumed) && bounded;
  const a = r.attempts[r.attempts.length - 1];
  if (a) {
    a.finished_at = iso(tx.now);
    a.outcome = "lease_lost";
    const why =
      how === "given back"
        ? `given back unstarted by worker ${w} (draining)`
        : said === "not_started"
          ? `lease expired on worker ${w}, which had not started the attempt`
          : said === "started" || said === "ended"
            ? `lease expired on worker ${w}; the attempt started there and its result was lost`
            : said === "unknown" && r.status === "leased"
              ? `lease expired on worker ${w}, which no longer knows the attempt (restarted), before the attempt was heard to start`
              : said === "unknown"
                ? `lease expired on worker ${w}, which no longer knows the attempt`
                : r.status === "leased"
                  ? `lease expired on worker ${w}, which did not answer, before the attempt was heard to start`
                  : `lease expired on worker ${w}, which did not answer`;
    a.error = !neverStarted
      ? why
      : presumed
        ? `${why}${PRESUMED_NOT_STARTED}`
        : `${why}${NOT_COUNTED}`;
  }
  if (neverStarted) r.unstarted = (r.unstarted ?? 0) + 1;
  if (neverStarted && givenBack) r.given_back = (r.given_back ?? 0) + 1;
  if (neverStarted && presumed) r.presumed = (r.presumed ?? 0) + 1;
  forgetProbes(r);
  if (!tx.job.spec.enabled && !neverStarted) {
    // A paused job begins no new attempt of a run that started (job-commands.ts `patch`). One
    // never started is a run-now sent while paused (the pause cancelled every other): it runs,
    // offered again as on an enabled job — cancelled, it would be lost to a worker's restart.
    finish(tx, r, "failed", "not retried, the job is paused: lease lost", null);
    tx.changed = true;
  } else if (r.attempt - (r.unstarted ?? 0) < tx.job.spec.retry.max_attempts) {
    // Re-queue at once with a new fence (the old worker's heartbeat now gets lease_lost).
    moveRun(r, "requeue");
    r.worker = null;
    r.fence = 0; // the lost lease's fence is dead; the next offer gets a new one
    tx.putRun(r);
    if (r.slot) dispatch(tx, r);
    else askSlot(tx, r);
    tx.changed = true;
  } else {
    finish(
      tx,
      r,
      "failed",
      `dead-lettered after ${r.attempt - (r.unstarted ?? 0)} attempt(s): lease lost`,
      null,
    );
    tx.changed = true;
  }
  return tx.done(null);
}

/**
 * The report of a cancelled attempt that never started, from a worker that predates `not_started`
 * (workers upgrade after schedulers, or in any order): `killed` with no exit code, no output, and
 * its start and end both stamped at the report. An execution killed leaves a duration or an exit.
 */
function unstartedCancel(m: Completion): boolean {
  return (
    m.outcome === "killed" &&
    m.exit_code === null &&
    m.output === "" &&
    m.error === null &&
    m.started_at_ms === m.finished_at_ms
  );
}

/** The change of a job that stops a run on its worker before its start was heard (`stopBeforeStart`). */
export type StopCause = NonNullable<ActiveRun["stopping"]>;

/**
 * A pause or a schedule change ends a run not heard to start. One no worker holds (waiting for a
 * slot or a retry, granted, offered: a worker starts only under an acknowledged claim) ends
 * `cancelled` "… before it started" at once. One a worker holds (claimed) may have started all
 * the same: its owner may have lost a start it had heard only in memory (read back after a move;
 * the start's write is deferred), and the worker's later heartbeats, answered from memory, do not
 * tell it again. That run is not recorded on a guess: its worker is told to stop it now
 * (`cancel_on_worker`, published before the command's answer, so nothing of it starts after), its
 * slot stays held, and the worker's answer ends it (`endStopped`): the cancelled attempt's report
 * (not started, or killed), its completion if it ended first, or the probe of its lease once it
 * falls silent (heartbeats of a stopping run are answered `lease_lost`, as for an ended run).
 */
export function stopBeforeStart(tx: Tx, r: ActiveRun, cause: StopCause): void {
  if (r.stopping !== undefined) return; // told already; its answer is awaited
  // A worker starts an attempt no earlier than its start less the tolerance, by this clock: one
  // further ahead than that (and than a lease TTL, as `unprepareQueued` asks) has not started. It
  // ends now, its worker told to drop it (`finish`). A worker that missed that cancel may still
  // start it under its claim's cover: its drain holds later `skip` runs (`holdOf`) until the
  // worker reports it gone (at once, as a rule) or the drain's bound.
  const cannotHaveStarted = r.start_at_ms - tx.now > tx.cfg.leaseTtlMs + START_SKEW_TOLERANCE_MS;
  if (r.status !== "leased" || r.worker === null || cannotHaveStarted) {
    finish(tx, r, "cancelled", `${cause} before it started`, null);
    return;
  }
  r.stopping = cause;
  tx.post.push({ kind: "cancel_on_worker", worker: r.worker, run_id: r.run_id, fence: r.fence });
  tx.putRun(r);
  tx.changed = true; // the stop outlives a move: the next owner tells the worker again (`recall`)
}

/** What a stopped run's worker said of its attempt (see `endStopped`). */
type StopAnswer =
  | { said: "not_started" }
  | { said: "killed"; completion: Completion }
  | { said: "started" }
  | { said: "unknown" };

/**
 * The end of a run stopped by its job's change, as its worker told it: never started — `cancelled`
 * "… before it started"; killed by the stop (or gone after a start, its result lost) — `cancelled`
 * with the attempt's start as reported; no word (the worker gone, or its probes unanswered: its
 * lease has lapsed, so it has fenced itself) — `cancelled`, saying that whether it started is not
 * known. The task is gone when the worker says so (its report, or a probe answered `not_started`,
 * `started`, `ended`): the slot goes back at once. When it cannot say (no responder, no answer,
 * `unknown`: its lease lapsed, so it fenced itself, but a kill's grace may still be running), the
 * slot drains as a cancel's does (`finish`), until the lease's end + drain grace or the report.
 */
function endStopped(tx: Tx, r: ActiveRun, answer: StopAnswer): void {
  const cause = r.stopping!;
  const w = r.worker ?? "?";
  const reason =
    answer.said === "not_started"
      ? `${cause} before it started`
      : answer.said === "unknown"
        ? `${cause}; worker ${w} did not say whether the attempt had started`
        : `${cause} after it started: stopped on worker ${w}`;
  tx.cancelTimer(`lease:${r.run_id}`);
  forgetProbes(r);
  const c = answer.said === "killed" ? answer.completion : null;
  const a = r.attempts[r.attempts.length - 1];
  if (a && a.outcome === null) {
    if (c) a.started_at ??= iso(c.started_at_ms);
    a.finished_at = iso(c ? c.finished_at_ms : tx.now);
    if (c) a.exit_code = c.exit_code;
    a.outcome = "cancelled";
    a.error = reason;
  }
  if (c) r.started_at_ms ??= c.started_at_ms;
  const taskGone = answer.said !== "unknown";
  finish(
    tx,
    r,
    "cancelled",
    reason,
    c ? { exit_code: c.exit_code, output: c.output } : null,
    taskGone,
  );
}
