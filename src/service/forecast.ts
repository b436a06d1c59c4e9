/**
 * The capacity forecast: how many runs fall due in each minute of a window, per tenant, from the
 * jobs' schedules. Pure (`nowMs` is an argument), with the DST rule of docs/schedules.md. Minute
 * 0 is the minute containing `nowMs`. A job counts its due times (before any flexible-window
 * spread) from its `next_run_at` on (plus an occurrence prepared ahead and not started,
 * `forecastJobOf`), nothing when paused, deleted or without a next run. Manual runs, retries and
 * misfire catch-ups are not forecast.
 *
 * Pitfall: bounded — at most `maxJobs` jobs and `maxOccurrences` occurrences in all; past a bound
 * the forecast is `truncated` (an undercount), never slow.
 */
import { compileSchedule, type CompiledSchedule, type ScheduleSpec } from "../schedule/index.ts";
import type { JobState } from "../job-state/job-state.ts";

/** What the forecast needs of a job. */
export interface ForecastJob {
  tenant_id: string;
  schedule: ScheduleSpec;
  enabled: boolean;
  /** The job's next due time (null: nothing due — a past one-shot, a deleted job). */
  next_run_at_ms: number | null;
}

/** `schedule` compiled, or null when the engine refuses it (a stored job fires nothing then). */
export function compiledOrNull(schedule: ScheduleSpec): CompiledSchedule | null {
  try {
    return compileSchedule(schedule);
  } catch {
    return null;
  }
}

export interface ForecastOptions {
  /** Length of the window in minutes (the metric: 60). */
  minutes: number;
  maxJobs?: number;
  maxOccurrences?: number;
}

export interface Forecast {
  /** Start of minute 0 (epoch ms). */
  startMs: number;
  /** Runs due per minute, all tenants. */
  perMinute: number[];
  /** Runs due per minute, by tenant id. */
  byTenant: Map<string, number[]>;
  jobsScanned: number;
  /** A bound was reached: the counts are a lower bound. */
  truncated: boolean;
}

export const DEFAULT_MAX_JOBS = 100_000;
export const DEFAULT_MAX_OCCURRENCES = 5_000_000;
const MINUTE_MS = 60_000;
/** Occurrences asked of `next` at a time. */
const CHUNK = 256;

/** The forecast input of a stored job actor state (undefined for a deleted or empty one). */
export function forecastJobOf(s: JobState): ForecastJob | undefined {
  if (!s.job || s.deleted) return undefined;
  // An occurrence prepared ahead (look-ahead) already has its run and `next_run_at` moved past
  // it; until it starts it is still to come, so the forecast counts from it.
  let next = s.next_run_at_ms;
  for (const r of s.runs) {
    if (
      r.trigger !== "manual" &&
      r.started_at_ms === null &&
      (next === null || r.scheduled_for_ms < next)
    )
      next = r.scheduled_for_ms;
  }
  return {
    tenant_id: s.job.tenant_id,
    schedule: s.job.spec.schedule,
    enabled: s.job.spec.enabled,
    next_run_at_ms: next,
  };
}

export function forecastRunsDue(
  jobs: Iterable<ForecastJob>,
  nowMs: number,
  o: ForecastOptions,
): Forecast {
  const startMs = Math.floor(nowMs / MINUTE_MS) * MINUTE_MS;
  const endMs = startMs + o.minutes * MINUTE_MS;
  const maxJobs = o.maxJobs ?? DEFAULT_MAX_JOBS;
  let budget = o.maxOccurrences ?? DEFAULT_MAX_OCCURRENCES;
  const f: Forecast = {
    startMs,
    perMinute: new Array<number>(o.minutes).fill(0),
    byTenant: new Map(),
    jobsScanned: 0,
    truncated: false,
  };
  for (const job of jobs) {
    if (f.jobsScanned >= maxJobs || budget <= 0) {
      f.truncated = true;
      break;
    }
    f.jobsScanned++;
    if (!job.enabled || job.next_run_at_ms === null || job.next_run_at_ms >= endMs) continue;
    // Stored jobs were validated at create; a schedule the engine now refuses fires nothing.
    const schedule = compiledOrNull(job.schedule);
    if (!schedule) continue;
    let tenant = f.byTenant.get(job.tenant_id);
    let after = Math.max(startMs, job.next_run_at_ms) - 1;
    for (;;) {
      const ask = Math.min(CHUNK, budget);
      const next = schedule.next(after, ask);
      for (const t of next) {
        if (t >= endMs) break;
        const m = Math.floor((t - startMs) / MINUTE_MS);
        f.perMinute[m]! += 1;
        if (!tenant) f.byTenant.set(job.tenant_id, (tenant = new Array<number>(o.minutes).fill(0)));
        tenant[m]! += 1;
      }
      budget -= next.length;
      const last = next[next.length - 1];
      if (last === undefined || last >= endMs || next.length < ask) break; // past the window, or no more
      if (budget <= 0) {
        f.truncated = true;
        break;
      }
      after = last;
    }
  }
  return f;
}
