/**
 * The job's commands (from the API, through the router): create, get, patch (pause, resume,
 * change), delete and run-now. Each validates, changes the job record, and settles what the change
 * leaves behind: runs prepared ahead for occurrences no longer called for are cancelled, the
 * occurrence at `next_run_at` settled, `queue`d occurrences dropped, the `fire` timer re-armed.
 *
 * Gotchas: commands are idempotent — a retried create with the same request hash is answered,
 * patch and run-now carry request ids answered with their first result (the last
 * `RECENT_REQUESTS`); resuming a paused job does not catch up (`firstAfter` from now).
 */
import { START_SKEW_TOLERANCE_MS } from "../protocol/worker.ts";
import { assertNever } from "../lib/assert.ts";
import { KairosError, type ErrorCode } from "../lib/errors.ts";
import { grantId, runIdFor } from "../protocol/ids.ts";
import type { JobMsg } from "../job-state/job-types.ts";
import {
  activeRunView,
  activeRunsReply,
  jobView,
  slotsHeld,
  MAX_HANDLED_AHEAD,
  type ActiveRun,
} from "../job-state/job-state.ts";
import type { JobSpec } from "../protocol/model.ts";
import { firstAfter, nextRuns, scheduleOf } from "../job-state/occurrence-plan.ts";
import { cancelQueuedAhead, createRun, dropQueued, settleNext } from "./occurrences.ts";
import { cancelRunTimers, finish, stopBeforeStart } from "../runs/run-lifecycle.ts";
import { fail, type D, type Tx } from "../job-state/tx.ts";

type CommandMsg = Extract<
  JobMsg,
  { kind: "create" | "get" | "active_runs" | "patch" | "delete" | "run_now" }
>;
type Command<K extends CommandMsg["kind"]> = Extract<CommandMsg, { kind: K }>;

/** Null when the spec's schedule compiles; otherwise why not (as a command failure). */
function validSchedule(spec: JobSpec): { code: ErrorCode; message: string; field?: string } | null {
  try {
    scheduleOf(spec);
    return null;
  } catch (e) {
    if (e instanceof KairosError) return fail(e.code, e.message, e.field);
    throw e;
  }
}

export function command(tx: Tx, m: CommandMsg): D {
  const s = tx.s;
  if (m.kind === "create") return create(tx, m);
  if (!s.job || s.deleted) return tx.done(null, fail("not_found", "job not found"));
  switch (m.kind) {
    case "get":
      return tx.done({ job: jobView(s, nextRuns(s, 5)) });
    case "active_runs":
      return tx.done(activeRunsReply(s));
    case "patch":
      return patch(tx, m);
    case "delete":
      return remove(tx);
    case "run_now":
      return runNow(tx, m);
    default:
      return assertNever(m, "job command");
  }
}

function create(tx: Tx, m: Command<"create">): D {
  const s = tx.s;
  if (s.job) {
    if (!s.deleted && s.job.request_hash === m.request_hash)
      return tx.done({ job: jobView(s, nextRuns(s, 5)) });
    return tx.done(null, fail("conflict", `job ${m.job_id} already exists`));
  }
  const bad = validSchedule(m.spec);
  if (bad) return tx.done(null, bad);
  s.job = {
    tenant_id: m.tenant_id,
    job_id: m.job_id,
    spec: m.spec,
    version: 1,
    created_at_ms: tx.now,
    updated_at_ms: tx.now,
    request_hash: m.request_hash,
  };
  s.next_run_at_ms = firstAfter(m.spec, tx.now);
  tx.changed = true;
  tx.armFire();
  return tx.done({ job: jobView(s, nextRuns(s, 5)) });
}

function patch(tx: Tx, m: Command<"patch">): D {
  const s = tx.s;
  const job = s.job!;
  if (tx.recalled(m.request_id)) return tx.done({ job: jobView(s, nextRuns(s, 5)) }); // a retry of a patch that applied
  if (m.if_match !== undefined && m.if_match !== job.version) {
    return tx.done(
      null,
      fail(
        "precondition_failed",
        `If-Match: job is at version ${job.version}, not ${m.if_match}`,
        "If-Match",
      ),
    );
  }
  const before = job.spec;
  const spec: JobSpec = { ...before, ...m.patch };
  const bad = validSchedule(spec);
  if (bad) return tx.done(null, bad);
  s.job = { ...job, spec, version: job.version + 1, updated_at_ms: tx.now };
  const scheduleChanged = JSON.stringify(before.schedule) !== JSON.stringify(spec.schedule);
  if (!spec.enabled || scheduleChanged) {
    // A pause stops every run not heard to start — waiting for a slot or a retry, granted, offered
    // or prepared on a worker, due or ahead — so the paused job starts nothing once the PATCH is
    // answered: one no worker holds, or too far from its start to have started, is cancelled now;
    // one a worker holds is told to stop (cancel_on_worker, published before the reply) and ended
    // by the worker's answer, since it may have started unheard (run-lifecycle.ts `stopBeforeStart`). Runs heard to start go on. A
    // new schedule stops only the runs prepared ahead for occurrences it no longer calls for.
    for (const r of [...s.runs]) {
      if (
        !spec.enabled
          ? notStarted(r)
          : r.trigger !== "manual" &&
            r.scheduled_for_ms > tx.now &&
            (r.status === "queued" || r.status === "leased")
      ) {
        stopBeforeStart(tx, r, spec.enabled ? "schedule changed" : "job paused");
      }
    }
    // An occurrence prepared ahead that a run-now sent back to the queue is stopped alike (a
    // pause drops the whole queue below).
    if (spec.enabled) cancelQueuedAhead(tx, "schedule changed");
    // A new schedule: what was handled ahead of now is no longer, beyond the runs still active.
    // The cancelled ones' records stay (a schedule that calls for one again meets it: "stay
    // cancelled"), but `firstAfter` starts after the last handled occurrence, and the prepared one
    // it named skipped every occurrence of the new schedule before it — up to a look-ahead window
    // of them (5 min). (A pause keeps it: the schedule has no occurrence before the prepared one,
    // which is the next, and a resume's next run is then the one after it, as the job view says.)
    // (A run being stopped by this change counts as cancelled here: its occurrence is handled.)
    const ahead = Math.max(
      tx.now,
      ...s.runs
        .filter((r) => r.trigger !== "manual" && r.stopping === undefined)
        .map((r) => r.scheduled_for_ms),
    );
    if (scheduleChanged && s.last_occurrence_ms !== undefined && s.last_occurrence_ms > ahead) {
      // Every occurrence the old schedule fired above it stays handled (the runs just cancelled,
      // a run cancelled by hand before): fired again, each would meet its record and be put in
      // the runs index a second time (`fire` passes over them). Those an earlier change kept stay
      // too (a run prepared between is below them).
      const last = s.last_occurrence_ms;
      const handled = (s.handled_ahead ?? []).filter((o) => o > ahead);
      const old = scheduleOf(before);
      for (let o = old.next(ahead, 1)[0]; o !== undefined && o <= last; o = old.next(o, 1)[0]) {
        if (handled.length >= MAX_HANDLED_AHEAD) break;
        handled.push(o);
      }
      if (handled.length > 0)
        s.handled_ahead = [...new Set(handled)].sort((a, b) => a - b).slice(0, MAX_HANDLED_AHEAD);
      else delete s.handled_ahead;
      s.last_occurrence_ms = ahead;
    }
  }
  if ((!spec.enabled && before.enabled) || scheduleChanged)
    settleNext(tx, spec.enabled ? "schedule changed" : "job paused", before);
  if (!spec.enabled) s.next_run_at_ms = null;
  else if (scheduleChanged || !before.enabled) s.next_run_at_ms = firstAfter(spec, tx.now, s); // resume: no catch-up
  if (!spec.enabled || spec.overlap !== "queue")
    dropQueued(tx, spec.enabled ? "overlap policy changed" : "job paused");
  if (m.request_id !== undefined) tx.remember({ id: m.request_id, version: s.job.version });
  tx.changed = true;
  tx.armFire();
  return tx.done({ job: jobView(s, nextRuns(s, 5)) });
}

/** Its current attempt not heard to start: waiting (for a slot, a retry), granted, offered or prepared on a worker. */
function notStarted(r: ActiveRun): boolean {
  return r.status !== "running";
}

function remove(tx: Tx): D {
  const s = tx.s;
  s.deleted = true;
  dropQueued(tx, "job deleted");
  settleNext(tx, "job deleted");
  for (const r of [...s.runs]) finish(tx, r, "cancelled", "job deleted", null);
  s.next_run_at_ms = null;
  tx.changed = true;
  tx.armFire();
  return tx.done({ ok: true });
}

/**
 * overlap=queue: an occurrence prepared ahead (look-ahead, occurrence-plan.ts) goes back into the
 * queue when a run is started by hand before it, so it waits for that run as it would have
 * without look-ahead (it starts when the manual run ends, or at its due time if that is later).
 * Its record stays `queued`; its worker is told to drop the attempt and its slot goes back. Only
 * one more than a lease TTL from its due time (a worker's clock running ahead cannot have started
 * it; closer than that it is left to run as prepared), and only one no worker may hold a cover
 * for: not claimed yet, or claimed under `queue` (`no_cover`). One claimed under another policy
 * (the job patched to `queue` since) is left to run as prepared: its worker may start it at its
 * start under the claim's cover without asking again, and the occurrence, sent back and
 * re-created under the same run id, could then run twice.
 */
function unprepareQueued(tx: Tx): void {
  const s = tx.s;
  for (const r of [...s.runs]) {
    // Sent back only while its worker cannot start it before its fence is dead: a queue attempt has
    // no cover, so it needs an acknowledgement fresher than TTL − margin, and its start may come up
    // to START_SKEW_TOLERANCE_MS early by this clock.
    // A run being stopped (a pause or schedule change: `stopBeforeStart`) is no occurrence to run.
    if (
      !r.gate ||
      r.trigger === "manual" ||
      r.stopping !== undefined ||
      r.started_at_ms !== null ||
      r.scheduled_for_ms - tx.now <= tx.cfg.leaseTtlMs + START_SKEW_TOLERANCE_MS
    )
      continue;
    if (r.worker !== null && r.status !== "queued" && !r.no_cover) continue;
    s.runs = s.runs.filter((x) => x !== r);
    cancelRunTimers(tx, r.run_id);
    if (r.worker !== null && r.fence > 0)
      tx.post.push({
        kind: "cancel_on_worker",
        worker: r.worker,
        run_id: r.run_id,
        fence: r.fence,
      });
    if (r.slot) tx.post.push({ kind: "release_slot", grant: grantId(r) });
    if (!s.queued.includes(r.scheduled_for_ms))
      s.queued = [r.scheduled_for_ms, ...s.queued].sort((a, b) => a - b);
    // Its record and runs-index entry stay: it is not indexed again when it leaves the queue.
    if (!s.requeued?.includes(r.scheduled_for_ms))
      s.requeued = [...(s.requeued ?? []), r.scheduled_for_ms];
  }
}

/** How far a run-now's `requested_at_ms` may be from the owner's clock and still name its run. */
export const REQUESTED_AT_BOUND_MS = 60_000;

function runNow(tx: Tx, m: Command<"run_now">): D {
  const s = tx.s;
  const job = s.job!;
  const prior = tx.recalled(m.request_id);
  if (prior?.run_id !== undefined) {
    // A retry of a run-now that was applied (its reply was lost): answer with that run.
    const active = tx.run(prior.run_id);
    return tx.done(active ? { run: activeRunView(job, active) } : { run_id: prior.run_id });
  }
  if (slotsHeld(s) >= tx.cfg.maxActiveRuns)
    return tx.done(
      null,
      fail(
        "quota_exceeded",
        `job has ${s.runs.length} active runs and ${slotsHeld(s) - s.runs.length} still being stopped (at most ${tx.cfg.maxActiveRuns} together)`,
      ),
    );
  if (job.spec.overlap === "queue") unprepareQueued(tx);
  const seq = ++s.manual_seq;
  // Named by the request's time, not this owner's now, so that every try of one request (the same
  // message, the same manual_seq read back after a lost write) names the same run. Its record is
  // written after the state (`recorded_after`). Bounded: a time far from this clock is not taken.
  const at =
    m.requested_at_ms !== undefined &&
    Number.isSafeInteger(m.requested_at_ms) &&
    Math.abs(m.requested_at_ms - tx.now) <= REQUESTED_AT_BOUND_MS
      ? m.requested_at_ms
      : tx.now;
  const runId = runIdFor(job.job_id, at, seq);
  createRun(tx, at, "manual", runId, false, Math.min(at, tx.now)); // it starts now, whatever the API node's clock said
  tx.changed = true; // written: manual_seq names the next manual run (a fire's creation is deferred, this is not)
  if (m.request_id !== undefined) tx.remember({ id: m.request_id, run_id: runId });
  return tx.done({ run: activeRunView(job, tx.run(runId)!) });
}
