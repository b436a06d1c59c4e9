/**
 * Bounded backlogs, the job actor's pure decisions: how many of a job's runs wait for a tenant
 * slot (`waitingRuns`) and whether a new occurrence is beyond the job's bound (`jobThrottle`), a
 * run's starting deadline (`startingDeadlineMs`, `deadlineOf`) and whether a run waiting for a
 * slot or a worker has passed it (`pastDeadline`). The tenant's bound is the tenant actor's
 * (src/slots/tenant-actor.ts): it knows the tenant's waiting runs across its jobs.
 *
 * Gotchas: a run prepared ahead (look-ahead) waits from its due time, not from its creation, and
 * an occurrence held by overlap `queue` from when it leaves the queue; only a run none of whose
 * attempts was heard to start can miss its deadline (a started run is never ended for lateness).
 * A job at its bound prepares nothing ahead (occurrence-plan.ts `lookahead`), so its occurrences
 * are judged as they fall due, not minutes early. An attempt presumed unstarted (no answer) may
 * have run: its run is never missed, only offered again. Run-now runs are never throttled and have no
 * deadline; a misfire's catch-up runs (`run_all`) are bounded by `catchUpLimit`, not by the job's
 * waiting bound, but count towards it.
 */
import type { JobSpec, RunView } from "../protocol/model.ts";
import { waitingRuns, type ActiveRun, type JobState } from "./job-state.ts";
import { scheduleOf } from "./occurrence-plan.ts";

export { waitingRuns };

/** The shortest default starting deadline of a cron job (as the misfire grace). */
export const DEFAULT_DEADLINE_MIN_MS = 10_000;
/** The longest default starting deadline of a cron job. */
export const DEFAULT_DEADLINE_MAX_MS = 300_000;

/**
 * Why an occurrence is not made a run because the job's backlog is at its bound, or undefined
 * when it may be. Only occurrences of the schedule that are due are judged: one ahead of its due
 * time is not throttled for a backlog that may be gone by then (a job at its bound prepares
 * nothing ahead, occurrence-plan.ts `lookahead`; one prepared in the fire that filled it may
 * exceed it by one).
 */
export function jobThrottle(
  s: JobState,
  trigger: RunView["trigger"],
  scheduledForMs: number,
  nowMs: number,
  maxWaiting: number,
): string | undefined {
  if (trigger !== "schedule" || scheduledForMs > nowMs) return undefined;
  const waiting = waitingRuns(s);
  return waiting >= maxWaiting
    ? `backlog: the job has ${waiting} runs waiting for a slot (at most ${maxWaiting})`
    : undefined;
}

/**
 * How long after its due time a run may start (null: no deadline): the job's
 * `misfire.starting_deadline_s`; without it, for an occurrence of a cron schedule, the gap to the
 * schedule's next occurrence, at least DEFAULT_DEADLINE_MIN_MS and at most DEFAULT_DEADLINE_MAX_MS
 * (a run not started when the next one is due is late by a whole period). None for a run-now, a
 * catch-up run without an explicit deadline (its occurrence is late by definition), or a one-shot.
 */
export function startingDeadlineMs(
  spec: JobSpec,
  scheduledForMs: number,
  trigger: RunView["trigger"],
): number | null {
  if (trigger === "manual") return null;
  const explicit = spec.misfire.starting_deadline_s;
  if (explicit !== null) return explicit * 1000;
  if (trigger !== "schedule" || !("cron" in spec.schedule)) return null;
  const next = scheduleOf(spec).next(scheduledForMs, 1)[0];
  const gap = next === undefined ? DEFAULT_DEADLINE_MAX_MS : next - scheduledForMs;
  return Math.min(DEFAULT_DEADLINE_MAX_MS, Math.max(DEFAULT_DEADLINE_MIN_MS, gap));
}

/**
 * The instant a new run's deadline passes (undefined: none): its deadline counted from its start
 * time (the due time plus its flexible-window spread), or from its creation if that is later (an
 * occurrence that waited in the overlap queue). A run prepared ahead counts from its due time.
 */
export function deadlineOf(
  spec: JobSpec,
  r: Pick<ActiveRun, "scheduled_for_ms" | "start_at_ms" | "trigger" | "created_at_ms">,
): number | undefined {
  const ms = startingDeadlineMs(spec, r.scheduled_for_ms, r.trigger);
  return ms === null ? undefined : Math.max(r.start_at_ms, r.created_at_ms) + ms;
}

/**
 * Whether `r` may still end `missed`: it has a deadline and waits, and every attempt is known not
 * to have started. One presumed unstarted (its lease lapsed unanswered) may have run — a worker
 * cut off with a cover starts it and cannot tell — so the run is offered again instead.
 */
export function canMiss(r: ActiveRun): boolean {
  return (
    r.deadline_ms !== undefined &&
    r.status === "queued" &&
    r.started_at_ms === null &&
    r.attempt === (r.unstarted ?? 0) &&
    (r.presumed ?? 0) === 0
  );
}

/** Whether `r` waits (queued: for a slot or a worker), never started, past its deadline. */
export function pastDeadline(r: ActiveRun, nowMs: number): boolean {
  return canMiss(r) && nowMs >= r.deadline_ms!;
}

/** The reason of a run that missed its starting deadline. */
export function deadlineReason(r: ActiveRun): string {
  const from = Math.max(r.start_at_ms, r.created_at_ms);
  const s = Math.round(((r.deadline_ms ?? from) - from) / 1000);
  return `starting deadline: not started within ${s} s of its due time`;
}
