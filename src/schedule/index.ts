/**
 * The schedule engine: compiles a `ScheduleSpec` (cron in an IANA zone, or a one-shot `at`)
 * into a `CompiledSchedule` whose `next` the scheduler calls to arm timers. Pure: time is
 * always an argument (epoch ms). See docs/schedules.md for the syntax and the DST rule.
 *
 * Compiled cron schedules are immutable and cached by (expression, zone) in a bounded map,
 * so a million jobs sharing a handful of expressions share a handful of compiled matchers.
 */
import { formatUtc, parseAt } from "./at.ts";
import { parseCronFields } from "./cron-fields.ts";
import { FIELD_AT, FIELD_CRON, FIELD_SCHEDULE, FIELD_TIME_ZONE, scheduleError } from "./errors.ts";
import { CronMatcher } from "./matcher.ts";
import { AtSchedule, CronSchedule, NEVER_FIRES_PROBE_S, SEARCH_YEARS } from "./occurrences.ts";
import type { CompiledSchedule, ScheduleSpec } from "./types.ts";
import { zoneFor } from "./zone.ts";
import { yearOfMs } from "./calendar.ts";

export type { CompiledSchedule, ScheduleSpec } from "./types.ts";
export {
  nextOccurrences,
  occurrencesBetween,
  MAX_COUNT,
  MAX_WINDOW_LIMIT,
  MAX_INSTANT_MS,
} from "./occurrences.ts";
import { OrderedMap } from "../lib/ordered-map.ts";
export { spreadOffsetMs, MAX_SPREAD_WINDOW_S } from "./spread.ts";
export { validateTimeZone } from "./zone.ts";
export { formatInstant, formatUtc, parseInstant } from "./at.ts";
export { FIELD_AT, FIELD_CRON, FIELD_TIME_ZONE } from "./errors.ts";

/** Compiled cron schedules kept for reuse; oldest evicted first. */
const CACHE_LIMIT = 4096;
const cache = new OrderedMap<string, CompiledSchedule>();

/** Validates and compiles a schedule; throws `KairosError` `invalid_schedule` with `field`. */
export function compileSchedule(spec: ScheduleSpec): CompiledSchedule {
  const raw = spec as Partial<Record<"cron" | "time_zone" | "at", unknown>>;
  if (typeof raw !== "object" || raw === null)
    throw scheduleError(
      FIELD_SCHEDULE,
      "schedule must be an object with cron and time_zone, or at",
    );
  if (raw.at !== undefined) {
    if (raw.cron !== undefined || raw.time_zone !== undefined)
      throw scheduleError(FIELD_SCHEDULE, "schedule has both at and cron/time_zone; give one");
    if (typeof raw.at !== "string") throw scheduleError(FIELD_AT, "at must be a string");
    return new AtSchedule(parseAt(raw.at));
  }
  if (typeof raw.cron !== "string")
    throw scheduleError(
      raw.cron === undefined ? FIELD_SCHEDULE : FIELD_CRON,
      raw.cron === undefined ? "schedule needs cron and time_zone, or at" : "cron must be a string",
    );
  if (typeof raw.time_zone !== "string")
    throw scheduleError(
      FIELD_TIME_ZONE,
      raw.time_zone === undefined
        ? "time_zone is required with cron"
        : "time_zone must be a string",
    );
  return compileCron(raw.cron, raw.time_zone);
}

function compileCron(expr: string, tz: string): CompiledSchedule {
  const key = `${tz}\u0000${expr}`;
  const hit = cache.get(key);
  if (hit !== undefined) return hit;
  const matcher = new CronMatcher(parseCronFields(expr));
  const zone = zoneFor(tz);
  // Calendar-only question (every local date exists in some form): the worst start is just
  // after a Feb 29 whose next one is 8 years later (2096 → 2104).
  if (
    matcher.nextMatch(NEVER_FIRES_PROBE_S, yearOfMs(NEVER_FIRES_PROBE_S * 1000) + SEARCH_YEARS) ===
    undefined
  ) {
    throw scheduleError(FIELD_CRON, `schedule never fires (searched ${SEARCH_YEARS} years ahead)`);
  }
  const compiled = new CronSchedule(matcher, zone);
  if (cache.size >= CACHE_LIMIT) {
    const oldest = cache.oldest();
    if (oldest !== undefined) cache.delete(oldest);
  }
  cache.set(key, compiled);
  return compiled;
}

/** Throws `invalid_schedule` (field `schedule.at`) when a one-shot is not after `nowMs`; cron passes. */
export function assertFuture(spec: ScheduleSpec, nowMs: number): void {
  if (!("at" in spec)) return;
  const atMs = parseAt(spec.at);
  if (atMs <= nowMs)
    throw scheduleError(
      FIELD_AT,
      `at is in the past (${spec.at} is not after now, ${formatUtc(nowMs)})`,
    );
}
