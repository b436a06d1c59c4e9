/**
 * Occurrences become runs: `fire` enumerates the due occurrences (and, with look-ahead, the next
 * one ahead), applies the misfire policy with bounded catch-up, and hands each to `occur`, which
 * applies the overlap policy — a new run (`createRun`, which asks for a slot at once), a terminal
 * `skipped`/`missed` record (`recordTerminal`), a place in the `queue`, or, for `replace`, the end
 * of the active runs; beyond the job's backlog bound, a `throttled` record (backlog.ts).
 * `settleNext`, `cancelQueuedAhead` and `dropQueued` record occurrences that will now never run.
 *
 * Gotchas: records are `pre` effects, written before the job state (crash-safe order: a re-fire
 * finds the record and advances); the state change of a `fire` is deferred (not written until the
 * next write, e.g. the claim; tx.ts), since a re-fire redoes it; a run id is derived from job and occurrence, so `occur` on an
 * occurrence already active is a no-op; `last_occurrence_ms` is a high-water mark, never lowered.
 */
import { spreadOffsetMs } from "../schedule/index.ts";
import { runIdFor } from "../protocol/ids.ts";
import { slotsHeld, terminalRunView, type ActiveRun } from "../job-state/job-state.ts";
import type { JobSpec, RunView } from "../protocol/model.ts";
import { lookahead, needsGate, scheduleOf } from "../job-state/occurrence-plan.ts";
import { askSlot } from "../runs/run-dispatch.ts";
import { deadlineOf, jobThrottle } from "../job-state/backlog.ts";
import { finish } from "../runs/run-lifecycle.ts";
import type { Tx } from "../job-state/tx.ts";

/** A new active run for an occurrence (or a manual run): its record created first, then a slot asked for. */
export function createRun(
  tx: Tx,
  scheduledForMs: number,
  trigger: RunView["trigger"],
  runId: string,
  gate = false,
  startFromMs = scheduledForMs,
): void {
  const spec = tx.job.spec;
  const r: ActiveRun = {
    run_id: runId,
    scheduled_for_ms: scheduledForMs,
    start_at_ms: startFromMs + spreadOffsetMs(tx.job.job_id, scheduledForMs, spec.flex_window_s),
    trigger,
    status: "queued",
    attempt: 0,
    fence: 0,
    worker: null,
    slot: false,
    // A grant name never used before (fences are never handed out twice): a run re-created after
    // its deferred creation was lost asks for a new grant, so a late grant or release of the lost
    // one cannot be mistaken for the new one's.
    slot_seq: tx.nextFence(),
    created_at_ms: tx.now,
    started_at_ms: null,
    next_attempt_at_ms: null,
    attempts: [],
    ...(gate ? { gate: true as const } : {}),
    // A run-now has no occurrence a re-fire could find again: its state write comes first.
    ...(trigger === "manual" ? { recorded_after: true as const } : {}),
  };
  const deadline = deadlineOf(spec, r);
  if (deadline !== undefined) r.deadline_ms = deadline;
  tx.s.runs.push(r);
  tx.putRun(r, true, trigger !== "manual" && leavesRequeue(tx, scheduledForMs));
  // The decision at the due instant (skip if a blocking run is still active then; replace the
  // runs started since): only when there is one to take (`needsGate`).
  if (needsGate(tx.s, r))
    tx.timer(`gate:${runId}`, scheduledForMs, { kind: "gate", run_id: runId });
  askSlot(tx, r);
  // Deferred when nothing else in the decision must be written (a run-now remembers its request
  // id, a replace finishes runs: those write): lost, the record stays and the re-fire of the
  // occurrence (the state's next_run_at was not advanced either) finds it and re-creates the run.
  tx.defer();
}

/** A terminal record for an occurrence that does not run. */
function recordTerminal(
  tx: Tx,
  scheduledForMs: number,
  trigger: RunView["trigger"],
  status: "skipped" | "missed" | "throttled" | "cancelled",
  reason: string,
): void {
  const run_id = runIdFor(tx.job.job_id, scheduledForMs);
  const record = terminalRunView(
    tx.job,
    { run_id, scheduled_for_ms: scheduledForMs, trigger, created_at_ms: tx.now },
    status,
    tx.now,
    { reason },
  );
  const indexed = leavesRequeue(tx, scheduledForMs);
  tx.pre.push({ kind: "put_run", mode: "terminal", record, ...(indexed ? { indexed } : {}) });
  // As for `finish`: every end but a cancel is a run event.
  if (status !== "cancelled") tx.post.push({ kind: "run_ended", record });
}

/**
 * Whether this occurrence was sent back to the queue after its record was made (JobState.requeued):
 * its new record is then not indexed again. The mark goes with the record written.
 */
function leavesRequeue(tx: Tx, scheduledForMs: number): boolean {
  const marked = tx.s.requeued;
  if (!marked?.includes(scheduledForMs)) return false;
  const rest = marked.filter((o) => o !== scheduledForMs);
  if (rest.length > 0) tx.s.requeued = rest;
  else delete tx.s.requeued;
  return true;
}

/** Applies the overlap policy to one occurrence that is due to run (or, gated, prepared ahead). */
export function occur(tx: Tx, scheduledForMs: number, trigger: RunView["trigger"]): void {
  const active = tx.s.runs.length > 0;
  const runId = runIdFor(tx.job.job_id, scheduledForMs);
  if (tx.s.runs.some((r) => r.run_id === runId)) return; // re-fired after a crash: already there
  if (slotsHeld(tx.s) >= tx.cfg.maxActiveRuns) {
    recordTerminal(
      tx,
      scheduledForMs,
      trigger,
      "skipped",
      `too many active runs (${tx.cfg.maxActiveRuns}, counting those still being stopped)`,
    );
    return;
  }
  const throttled = jobThrottle(tx.s, trigger, scheduledForMs, tx.now, tx.cfg.maxWaitingRuns);
  if (throttled !== undefined)
    return recordTerminal(tx, scheduledForMs, trigger, "throttled", throttled);
  switch (tx.job.spec.overlap) {
    case "allow":
      return createRun(tx, scheduledForMs, trigger, runId);
    case "skip":
      // Not due yet (look-ahead): prepared under a gate, decided at the due instant.
      if (scheduledForMs > tx.now) return createRun(tx, scheduledForMs, trigger, runId, true);
      // A run ended by the scheduler may still execute until its drain ends (killed, or a lost
      // cancel of one prepared ahead: it starts under its cover), as for the gate (`holdOf`).
      if (active || (tx.s.draining?.length ?? 0) > 0)
        return recordTerminal(
          tx,
          scheduledForMs,
          trigger,
          "skipped",
          "overlap: an earlier run is still active",
        );
      return createRun(tx, scheduledForMs, trigger, runId);
    case "queue":
      // Not due yet (look-ahead, only with no run active — occurrence-plan.ts `lookahead`; or an
      // occurrence sent back to the queue by a run-now, job-commands.ts): prepared gated.
      if (!active) return createRun(tx, scheduledForMs, trigger, runId, scheduledForMs > tx.now);
      if (tx.s.queued.length >= tx.cfg.queueLimit) {
        return recordTerminal(
          tx,
          scheduledForMs,
          trigger,
          "skipped",
          `overlap: queue full (${tx.cfg.queueLimit})`,
        );
      }
      tx.s.queued.push(scheduledForMs);
      tx.changed = true;
      return;
    case "replace":
      // Not due yet (look-ahead, only with no run active): prepared gated; at its due instant its
      // `gate` cancels any run scheduled before it that is still active (run-lifecycle.ts onGate).
      if (scheduledForMs > tx.now && !active)
        return createRun(tx, scheduledForMs, trigger, runId, true);
      // Written (not deferred): the replaced runs' workers are told to stop and their slots drain.
      if (tx.s.runs.length > 0) tx.changed = true;
      for (const r of [...tx.s.runs])
        finish(tx, r, "cancelled", "replaced by a newer occurrence", null);
      return createRun(tx, scheduledForMs, trigger, runId);
  }
}

/** Most due occurrences one `fire` enumerates; older ones beyond it are dropped (logged by count). */
export const MAX_ENUMERATED = 100_000;

/** The `fire` timer: the due occurrences (and one ahead) through misfire and overlap; `next_run_at` advanced. */
export function fire(tx: Tx): void {
  const s = tx.s;
  if (!s.job || s.deleted || !s.job.spec.enabled || s.next_run_at_ms === null) return;
  const sched = scheduleOf(s.job.spec);
  const horizon = tx.now + lookahead(tx.cfg, s, tx.now);
  // Look-ahead prepares only the next occurrence ahead of time (see `undecided`).
  const due: number[] = [];
  let cursor = s.next_run_at_ms;
  let dropped = 0;
  // queue/replace act on the runs active at a due instant: one prepared ahead never rides with
  // occurrences due now (they may start runs it would then have to queue behind or replace).
  const aheadWithDue = s.job.spec.overlap === "allow" || s.job.spec.overlap === "skip";
  while (
    cursor <= horizon &&
    !(due.length > 0 && due[due.length - 1]! > tx.now) &&
    !(cursor > tx.now && due.length > 0 && !aheadWithDue)
  ) {
    if (due.length >= MAX_ENUMERATED) {
      due.shift();
      dropped++;
    }
    due.push(cursor);
    cursor = sched.next(cursor, 1)[0] ?? Number.POSITIVE_INFINITY;
  }
  if (due.length === 0) return tx.armFire();
  const { policy, starting_deadline_s } = s.job.spec.misfire;
  const pastDeadline = (o: number) =>
    starting_deadline_s !== null && tx.now - o > starting_deadline_s * 1000;
  const isLate = (o: number) => tx.now - o > tx.cfg.misfireGraceMs;
  const late = due.filter((o) => isLate(o) && !pastDeadline(o));
  // Bounded catch-up: at most `catchUpLimit` records for occurrences that will not run (the
  // newest ones), and with run_all at most `catchUpLimit` runs (the newest ones).
  const toRun = new Set(
    policy === "run_all"
      ? late.slice(-tx.cfg.catchUpLimit)
      : policy === "run_once"
        ? late.slice(-1)
        : [],
  );
  const notRun = due.filter((o) => (isLate(o) || pastDeadline(o)) && !toRun.has(o));
  const recorded = new Set(notRun.slice(-tx.cfg.catchUpLimit));
  const unrecorded = notRun.length - recorded.size + dropped;
  const handled = s.handled_ahead;
  if (handled) {
    const rest = handled.filter((o) => o > due[due.length - 1]!);
    if (rest.length > 0) s.handled_ahead = rest;
    else delete s.handled_ahead;
  }
  for (const o of due) {
    if (handled?.includes(o)) continue; // prepared, then cancelled by a schedule change
    if (toRun.has(o)) occur(tx, o, "catch_up");
    else if (recorded.has(o)) {
      const why = pastDeadline(o)
        ? `misfire: past starting deadline (${starting_deadline_s} s)`
        : `misfire (${policy})`;
      const extra =
        o === notRun[notRun.length - recorded.size] && unrecorded > 0
          ? `; ${unrecorded} earlier occurrence(s) not recorded (limit ${tx.cfg.catchUpLimit})`
          : "";
      recordTerminal(tx, o, "catch_up", "missed", why + extra);
    } else if (!isLate(o) && !pastDeadline(o)) occur(tx, o, "schedule");
  }
  s.last_occurrence_ms = Math.max(s.last_occurrence_ms ?? 0, due[due.length - 1]!);
  s.next_run_at_ms = Number.isFinite(cursor) ? cursor : null;
  // Deferred (unless an occurrence queued or a run finished: those write). Lost with its state,
  // the same occurrences fire again from the state written last, before which nothing of this
  // decision was claimed (a claim writes and would have carried it): their records exist, a run
  // is re-created over its `queued` record, a `skipped`/`missed` decision written over it.
  tx.defer();
  tx.armFire();
}

/** Most occurrences one `settleNext` looks at (a read each where a record is left). */
export const MAX_SETTLED = 100;

/**
 * The occurrences from `next_run_at` on will not fire now (a pause, a schedule change, a delete).
 * A fire whose state change was lost — a crash between creating the run record and advancing the
 * job state, or fires decided without a write (deferred) before a takeover — left their records
 * `queued`: settle each (one read), from `next_run_at` through the occurrences due by now and the
 * next one (the one a look-ahead may have prepared), at most MAX_SETTLED. Runs this state holds
 * are not touched (their callers end them), nor occurrences handled ahead (`handled_ahead`: their
 * records ended with an earlier change). `spec`: the schedule the records were made under
 * (a patch has already set the new one).
 */
export function settleNext(tx: Tx, why: string, spec: JobSpec = tx.job.spec): void {
  const first = tx.s.next_run_at_ms;
  if (first === null || !tx.s.job) return;
  const sched = scheduleOf(spec);
  let o: number | undefined = first;
  for (let n = 0; o !== undefined && n < MAX_SETTLED; n++) {
    const run_id = runIdFor(tx.job.job_id, o);
    // An occurrence handled ahead (cancelled by an earlier schedule change) is no orphan: its
    // record ended and was indexed then. Settled again, the store finds it ended and answers
    // `run_settled` as for an orphan — a second index entry, and a `next_run_at` moved past it
    // that skips the new schedule's occurrences before it.
    if (!tx.run(run_id) && !tx.s.handled_ahead?.includes(o)) {
      tx.pre.push({
        kind: "put_run",
        mode: "settle",
        record: terminalRunView(
          tx.job,
          { run_id, scheduled_for_ms: o, trigger: "schedule", created_at_ms: tx.now },
          "cancelled",
          tx.now,
          { reason: `${why} before the occurrence started` },
        ),
      });
    }
    if (o > tx.now) break;
    o = sched.next(o, 1)[0];
  }
}

/**
 * A schedule change: the queued occurrences not yet due — prepared ahead and sent back to the
 * queue by a run-now (job-commands.ts `unprepareQueued`), their records `queued` — are cancelled
 * like the runs prepared ahead it stops ("stay cancelled"); left queued, the old schedule's
 * occurrence would run when the manual run ends. Those due by now stay: their schedule called
 * for them.
 */
export function cancelQueuedAhead(tx: Tx, why: string): void {
  const ahead = tx.s.queued.filter((o) => o > tx.now);
  if (ahead.length === 0) return;
  for (const o of ahead)
    recordTerminal(tx, o, "schedule", "cancelled", `${why} before the occurrence started`);
  tx.s.queued = tx.s.queued.filter((o) => o <= tx.now);
  tx.changed = true;
}

/** Occurrences held by overlap=queue that will now never run get a `skipped` record each. */
export function dropQueued(tx: Tx, why: string): void {
  for (const o of tx.s.queued)
    recordTerminal(tx, o, "schedule", "skipped", `overlap queue dropped: ${why}`);
  if (tx.s.queued.length > 0) tx.changed = true;
  tx.s.queued = [];
}
