/**
 * Occurrence planning, as pure functions of the job state: when the job actor fires (`fireAt`,
 * with look-ahead and a deterministic spread), how far ahead it prepares runs (`lookahead`,
 * `undecided`), whether a gated run must still hold (`holdOf`) and needs its due-instant decision
 * (`needsGate`), and the schedule's next instants
 * (`nextRuns`, `firstAfter`). Nothing here changes state: occurrences.ts acts on these answers.
 *
 * Gotchas: compiled schedules are cached by their JSON (bounded, cleared past 10,000); `holdOf`
 * must stay monotone (its blocking set only shrinks) — workers start a gated run from their own
 * timer once they have heard "go", with no further round trip.
 */
import { compileSchedule, spreadOffsetMs, type CompiledSchedule } from "../schedule/index.ts";
import type { JobActorConfig } from "./job-types.ts";
import { waitingRuns, type ActiveRun, type JobState } from "./job-state.ts";
import type { JobSpec } from "../protocol/model.ts";

const schedules = new Map<string, CompiledSchedule>();
export function scheduleOf(spec: JobSpec): CompiledSchedule {
  const k = JSON.stringify(spec.schedule);
  let s = schedules.get(k);
  if (!s) {
    s = compileSchedule(
      "cron" in spec.schedule
        ? { cron: spec.schedule.cron, time_zone: spec.schedule.time_zone }
        : { at: spec.schedule.at },
    );
    if (schedules.size > 10_000) schedules.clear();
    schedules.set(k, s);
  }
  return s;
}

/**
 * Look-ahead: runs are created, given a slot and a worker before they are due.
 * - `allow`: the NEXT occurrence only (a prepared run holds a worker slot until it ends).
 * - `skip` (the default): the NEXT occurrence only, prepared with a gate (`ActiveRun.gate`): its
 *   worker starts it from its own timer at its due time only if its last heartbeat reply did not
 *   say `hold`; the owner says `hold` (from memory) while a run that blocks it is active
 *   (`holdOf`), and at the due instant skips it if one still is (`gate` timer). In the common case
 *   nothing blocks it from preparation on, and it starts on time with no round trip at the due
 *   instant. One gated run at a time: while it waits, the window is closed.
 * - `queue`, `replace`: the NEXT occurrence only, prepared gated, while the job has no active run
 *   (the common case: the last run ended long before the next is due). What they decide at the
 *   due instant about other runs is then about runs created after the preparation (a run started
 *   by hand meanwhile): `replace` cancels such a run scheduled before it at its `gate`; `queue`,
 *   like `skip`, lets a run created later not block it. With a run active at the start of the
 *   window, they fire at the due instant as without look-ahead (`aheadFor`).
 */
export function lookahead(cfg: JobActorConfig, s: JobState, now: number): number {
  return aheadFor(s, now) && !atBound(cfg, s) && undecided(s, now) === undefined
    ? windowOf(cfg, s)
    : 0;
}

/**
 * A job whose runs waiting for a slot are at its bound prepares nothing ahead: its next
 * occurrence is fired and judged at its due time (backlog.ts `jobThrottle`), not throttled
 * minutes early for a backlog that may be gone by then.
 */
function atBound(cfg: JobActorConfig, s: JobState): boolean {
  return waitingRuns(s) >= cfg.maxWaitingRuns;
}

/** The shortest look-ahead window of a job whose occurrences come close together (see `windowOf`). */
export const SHORT_LOOKAHEAD_MS = 60_000;

/**
 * How far ahead this job prepares `next_run_at`: the configured window (`lookaheadMs`, default
 * 5 min), but no longer than half the gap since the job's previous occurrence, nor shorter than
 * `SHORT_LOOKAHEAD_MS` (or the configured window, if that is shorter). A prepared run holds a tenant
 * slot and a worker slot until it ends: a job due every 2 minutes must not hold a second slot most
 * of the time, while an hourly or daily job — the top-of-the-hour crowd — gets the whole window to
 * be prepared in (a 200,000-run burst needs minutes of preparation). A one-shot job, or one with no occurrence handled yet, gets the whole window. A pure
 * function of the state, so `fireAt` and `fire` agree on it. (A `skip` job whose run is still
 * active gets no shorter window: counting `runs` here would count the run `fire` has just
 * prepared, and nothing re-arms a `skip` job's `fire` when a run ends.)
 */
export function windowOf(cfg: JobActorConfig, s: JobState): number {
  const full = cfg.lookaheadMs;
  const prev = s.last_occurrence_ms;
  const next = s.next_run_at_ms;
  if (prev === undefined || next === null || next <= prev) return full;
  return Math.min(full, Math.max(SHORT_LOOKAHEAD_MS, Math.floor((next - prev) / 2)));
}

/** Whether the job prepares its next occurrence ahead now (see `lookahead`). */
function aheadFor(s: JobState, now: number): boolean {
  switch (s.job?.spec.overlap) {
    case "allow":
    case "skip":
      return true;
    case "queue":
    case "replace":
      // No active run but the one prepared ahead and not yet due (its window waits for it).
      return s.runs.every((r) => r.gate === true && r.scheduled_for_ms > now);
    default:
      return false;
  }
}

/**
 * The due instant of the run prepared ahead and not yet due, if any: at most one per job, since a
 * prepared run holds a worker slot until it ends (preparing a whole 60 s window of a job due every
 * 3 s took 20 worker slots per job; the ledger chaos run's fleet of 24 slots then starved the
 * other jobs).
 */
function undecided(s: JobState, now: number): number | undefined {
  let at: number | undefined;
  for (const r of s.runs)
    if (
      r.trigger !== "manual" &&
      r.scheduled_for_ms > now &&
      (at === undefined || r.scheduled_for_ms < at)
    )
      at = r.scheduled_for_ms;
  return at;
}

/**
 * Whether a gated run's worker must keep holding it (not start it) now: while a run that BLOCKS it
 * is active — one created before it (an earlier occurrence, a retry, a manual run from before it
 * was prepared), or created with it for an earlier instant (catch-up). Runs created later (the
 * next prepared occurrence, a manual run from after it was prepared) never block it. The blocking
 * set only shrinks, so the answer is monotone: once no blocking run is left — at preparation in
 * the common case — the worker may start it at its due time from its own timer with no further
 * round trip, and the `gate` reminder at the due instant (same rule) can never contradict a go.
 *
 * A blocking run ended by the scheduler while on a worker blocks until its drain ends (the worker
 * reports the attempt gone, or its lease's end has passed): a cancel its worker missed (cut off
 * from the bus) lets it start at its start_at under the claim's cover — a run cancelled ahead by
 * a reschedule, due after the new schedule's next one, would start while that one runs. Pitfall:
 * only a drain of a run created before `r` counts (it blocked `r` already while active), so the
 * blocking set still only shrinks; a drain without its creation (a state written before) counts
 * for none.
 */
export function holdOf(s: JobState, r: ActiveRun): boolean {
  if (!r.gate || s.job?.spec.overlap !== "skip") return false;
  const before = (x: { created_at_ms: number; scheduled_for_ms: number }): boolean =>
    x.created_at_ms < r.created_at_ms ||
    (x.created_at_ms === r.created_at_ms && x.scheduled_for_ms < r.scheduled_for_ms);
  return (
    s.runs.some((x) => x !== r && before(x)) ||
    (s.draining ?? []).some(
      (d) =>
        d.created_at_ms !== undefined &&
        d.scheduled_for_ms !== undefined &&
        before({ created_at_ms: d.created_at_ms, scheduled_for_ms: d.scheduled_for_ms }),
    )
  );
}

/**
 * Whether a gated run needs its `gate` timer at its due instant. `replace` always decides there
 * (it cancels runs started by hand since the preparation). `skip` only while a run blocks it:
 * `holdOf` is monotone, so a run nothing blocks now is not skipped at its due instant either, and
 * the timer would be one actor turn per run at the busiest instant for nothing. `queue` never:
 * its gate decides nothing (a run created later does not block it).
 */
export function needsGate(s: JobState, r: ActiveRun): boolean {
  if (!r.gate) return false;
  switch (s.job?.spec.overlap) {
    case "replace":
      return true;
    case "skip":
      return r.started_at_ms === null && holdOf(s, r);
    default:
      return false;
  }
}

/**
 * When to fire for `next_run_at`: the start of the look-ahead window plus a deterministic spread
 * over its first half (hash of job and occurrence), so that many jobs due at the same instant
 * prepare their runs across the window instead of all at once.
 */
export function fireAt(cfg: JobActorConfig, s: JobState, now: number): number {
  const due = s.next_run_at_ms!;
  if (!s.job) return due;
  // A run prepared ahead closes the window until its due instant (one ahead at a time).
  const la = aheadFor(s, now) && !atBound(cfg, s) ? windowOf(cfg, s) : 0;
  if (la <= 0) return due;
  const at = due - la + spreadOffsetMs(s.job.job_id, due, Math.floor(la / 2000));
  const waitFor = undecided(s, now);
  return waitFor === undefined ? at : Math.min(due, Math.max(at, waitFor));
}

/** The next `count` occurrences from `next_run_at` (for the job view). */
export function nextRuns(s: JobState, count: number): number[] {
  if (!s.job || s.next_run_at_ms === null) return [];
  const sched = scheduleOf(s.job.spec);
  return [s.next_run_at_ms, ...sched.next(s.next_run_at_ms, count - 1)];
}

/** The next occurrence after now that has not been handled yet (never re-fires an old one). */
export function firstAfter(spec: JobSpec, nowMs: number, s?: JobState): number | null {
  return spec.enabled
    ? (scheduleOf(spec).next(Math.max(nowMs, s?.last_occurrence_ms ?? 0), 1)[0] ?? null)
    : null;
}
