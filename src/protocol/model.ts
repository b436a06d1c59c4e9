/**
 * The jobs domain model, in the API's own shape (snake_case, RFC 3339 UTC strings), shared by the
 * job actor, the service and the HTTP layer.
 *
 * Run lifecycle (transition table in run-status.ts):
 *
 *   queued ─claim─▶ leased ─started─▶ running ─▶ succeeded | failed | timed_out | cancelled
 *     ▲               │                  │
 *     └─ retry_wait ◀─┴── retryable failure / lease expired (attempt < max) ──┘
 *   skipped (overlap), missed (misfire) and throttled (a bounded backlog) are recorded terminal
 *   at creation; a run not started within its starting deadline ends missed, and one the tenant's
 *   backlog bound refuses ends throttled, both from queued (never started).
 */

import type { TaskInput } from "./worker.ts";

export type ScheduleInput = { cron: string; time_zone: string } | { at: string };

/** The task shape is part of the worker protocol (a leaf module both jobs and workers import). */
export type { TaskInput };

export const BACKOFFS = ["exponential", "fixed"] as const;
export const OVERLAPS = ["skip", "queue", "allow", "replace"] as const;
export const MISFIRES = ["run_once", "run_all", "skip"] as const;
export type Backoff = (typeof BACKOFFS)[number];
export type Overlap = (typeof OVERLAPS)[number];
export type MisfirePolicy = (typeof MISFIRES)[number];

export interface RetryPolicy {
  max_attempts: number;
  backoff: Backoff;
  base_s: number;
  max_s: number;
}

export interface MisfireSpec {
  policy: MisfirePolicy;
  starting_deadline_s: number | null;
}

/** Everything a customer sets on a job (after defaults). */
export interface JobSpec {
  name: string | null;
  schedule: ScheduleInput;
  task: TaskInput;
  retry: RetryPolicy;
  overlap: Overlap;
  misfire: MisfireSpec;
  /** Runs may start anywhere within this many seconds after their due time (spread by job id). */
  flex_window_s: number;
  enabled: boolean;
}

/** A job's state as the jobs list filters it: `enabled`, or `paused` (`enabled: false`). */
export const JOB_STATES = ["enabled", "paused"] as const;
export type JobListState = (typeof JOB_STATES)[number];

/** The filters of a jobs list: a name substring (any case) and/or a state. */
export interface JobListFilter {
  name?: string;
  state?: JobListState;
}

/** A partial update (PATCH): any of the spec's top-level fields. */
export type JobPatch = Partial<JobSpec>;

export interface JobView extends JobSpec {
  job_id: string;
  tenant_id: string;
  version: number;
  created_at: string;
  updated_at: string;
  next_run_at: string | null;
  /** Only in single-job responses: the next 5 run times. */
  next_runs?: string[];
}

export const RUN_STATUSES = [
  "queued",
  "leased",
  "running",
  "retry_wait",
  "succeeded",
  "failed",
  "timed_out",
  "cancelled",
  "skipped",
  "missed",
  "throttled",
] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
export const TERMINAL: ReadonlySet<RunStatus> = new Set([
  "succeeded",
  "failed",
  "timed_out",
  "cancelled",
  "skipped",
  "missed",
  "throttled",
]);

/**
 * The suffixes of a lapsed attempt's `error` when the attempt does not count against max_attempts
 * (run-lifecycle.ts `lapse`): its worker said it never started (`NOT_COUNTED`), or nothing says
 * either way and it was never heard to start (`PRESUMED_NOT_STARTED`) — the case in which an
 * at-least-once re-run can hide. run-metrics.ts labels lease expiries by them.
 */
export const NOT_COUNTED = " (not counted)";
export const PRESUMED_NOT_STARTED = " (not counted: presumed never started)";

/** How a lapsed attempt counted (`kairos_lease_expiries_total{kind}`). */
export type LapseKind = "counted" | "not_started" | "presumed_not_started";

/** The kind of a lapsed attempt, from its error text. */
export function lapseKind(error: string | null): LapseKind {
  const e = error ?? "";
  return e.endsWith(PRESUMED_NOT_STARTED)
    ? "presumed_not_started"
    : e.endsWith(NOT_COUNTED)
      ? "not_started"
      : "counted";
}

export type AttemptOutcome =
  "succeeded" | "failed" | "timed_out" | "oom" | "lease_lost" | "cancelled" | "error";

export interface AttemptView {
  attempt: number;
  worker: string | null;
  started_at: string | null;
  finished_at: string | null;
  exit_code: number | null;
  outcome: AttemptOutcome | null;
  error: string | null;
  /**
   * The registry digest (`sha256:…`) of the image the attempt ran in, as its worker reported it;
   * absent when the image did not come from a registry (built or imported on the worker host) or
   * the attempt ended before its image was known.
   */
  image_digest?: string;
}

export interface RunView {
  run_id: string;
  job_id: string;
  tenant_id: string;
  scheduled_for: string;
  trigger: "schedule" | "manual" | "catch_up";
  status: RunStatus;
  attempt: number;
  attempts: AttemptView[];
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  next_attempt_at: string | null;
  result: { exit_code: number | null; output: string } | null;
  /**
   * Why a run is skipped, missed, throttled, cancelled or failed (e.g. "dead-lettered after 3
   * attempts").
   */
  reason: string | null;
}

export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}
