/**
 * The schedule engine's error constructors. Every validation failure is a `KairosError` with
 * code `invalid_schedule` and a `field` naming the offending part of the API shape, so HTTP
 * and the CLI can point at it; misuse of the engine API itself is `invalid_argument`.
 */
import { KairosError } from "../lib/errors.ts";

export const FIELD_CRON = "schedule.cron";
export const FIELD_TIME_ZONE = "schedule.time_zone";
export const FIELD_AT = "schedule.at";
export const FIELD_SCHEDULE = "schedule";

/** An `invalid_schedule` error for `field`. */
export function scheduleError(field: string, message: string, cause?: unknown): KairosError {
  return new KairosError(
    "invalid_schedule",
    message,
    cause === undefined ? { field } : { field, cause },
  );
}

/** An `invalid_argument` error for a caller's misuse (bad count, non-finite time). */
export function argumentError(message: string): KairosError {
  return new KairosError("invalid_argument", message);
}
