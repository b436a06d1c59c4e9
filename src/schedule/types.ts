/**
 * The schedule engine's public shapes. `ScheduleSpec` is the API shape (snake_case, as in
 * HTTP bodies and stored jobs); `CompiledSchedule` is what the scheduler keeps per job.
 */

/** A cron expression in an IANA zone, or a one-shot RFC 3339 instant. */
export type ScheduleSpec = { cron: string; time_zone: string } | { at: string };

/** A validated, immutable schedule; safe to share between jobs. */
export interface CompiledSchedule {
  readonly kind: "cron" | "at";
  /**
   * First `count` occurrences strictly after `afterMs` (epoch ms), ascending, epoch ms
   * (whole seconds for cron). Fewer if a one-shot is past.
   */
  next(afterMs: number, count: number): number[];
}
