/**
 * Occurrences of compiled schedules: cron iteration over local wall times with the daylight-saving
 * mapping, one-shot `at` schedules, and the window query used for misfire catch-up.
 *
 * Cron iteration starts at the first whole local second after the local time of `after` (the
 * wall → instant mapping of zone.ts never decreases), asks the matcher for the next matching wall
 * time, maps it to an instant and keeps it if it is after `after` and differs from the previous
 * one (wall times in one gap all map to the transition). Repeated wall times map to their first
 * instant, so inside a repeated hour they are skipped, not repeated.
 *
 * Limits: the matcher searches at most 8 years past the last occurrence (compile rejects schedules
 * that never fire within 8 years); the loop is bounded by `count` (≤ MAX_COUNT) plus the skips one
 * gap or repeat can cause.
 */
import { localSecondsOf, yearOfMs } from "./calendar.ts";
import { argumentError } from "./errors.ts";
import type { CronMatcher } from "./matcher.ts";
import type { CompiledSchedule } from "./types.ts";
import type { ZoneOffsets } from "./zone.ts";
import { KairosError } from "../lib/errors.ts";

/** Most occurrences one `next` call may ask for. */
export const MAX_COUNT = 10_000;
/** Most occurrences `occurrencesBetween` may return. */
export const MAX_WINDOW_LIMIT = 100_000;
/** Years searched past the last occurrence (Feb 29 across 2100 recurs after 8 years). */
export const SEARCH_YEARS = 8;
/** Extra matcher steps allowed per call for wall times skipped in gaps and repeats. */
const MAX_SKIPS = 200_000;
/** Instants Temporal can represent: ±8.64e15 ms around the epoch. */
export const MAX_INSTANT_MS = 8.64e15;

function checkArgs(afterMs: number, count: number): void {
  if (!Number.isFinite(afterMs) || Math.abs(afterMs) > MAX_INSTANT_MS)
    throw argumentError(`after must be an epoch-ms instant, got ${afterMs}`);
  if (!Number.isInteger(count) || count < 0 || count > MAX_COUNT)
    throw argumentError(`count must be an integer 0-${MAX_COUNT}, got ${count}`);
}

/** A cron expression in a zone. */
export class CronSchedule implements CompiledSchedule {
  readonly kind = "cron";
  constructor(
    private readonly matcher: CronMatcher,
    private readonly zone: ZoneOffsets,
  ) {}

  next(afterMs: number, count: number): number[] {
    checkArgs(afterMs, count);
    const out: number[] = [];
    if (count === 0) return out;
    let fromS = Math.floor((afterMs + this.zone.offsetAt(afterMs)) / 1000) + 1;
    let lastYear = yearOfMs(fromS * 1000) + SEARCH_YEARS;
    let previous = afterMs;
    for (let steps = 0; out.length < count; steps++) {
      if (steps > count + MAX_SKIPS)
        throw new KairosError("internal", `cron search exceeded ${count + MAX_SKIPS} steps`);
      const wallS = this.matcher.nextMatch(fromS, lastYear);
      if (wallS === undefined) break;
      const utc = this.zone.localToUtc(wallS * 1000);
      if (utc > previous) {
        out.push(utc);
        previous = utc;
        lastYear = yearOfMs(wallS * 1000) + SEARCH_YEARS;
      }
      fromS = wallS + 1;
    }
    return out;
  }
}

/** A one-shot instant. */
export class AtSchedule implements CompiledSchedule {
  readonly kind = "at";
  constructor(readonly atMs: number) {}

  next(afterMs: number, count: number): number[] {
    checkArgs(afterMs, count);
    return count > 0 && this.atMs > afterMs ? [this.atMs] : [];
  }
}

/** First `count` occurrences strictly after `afterMs`, ascending (same as `s.next`). */
export function nextOccurrences(s: CompiledSchedule, afterMs: number, count: number): number[] {
  return s.next(afterMs, count);
}

/**
 * Occurrences in (fromMs, toMs], ascending, at most `limit`; `truncated` says more exist in
 * the window. For misfire catch-up (`run_all` is bounded by `limit`).
 */
export function occurrencesBetween(
  s: CompiledSchedule,
  fromMs: number,
  toMs: number,
  limit: number,
): { times: number[]; truncated: boolean } {
  if (!Number.isInteger(limit) || limit < 0 || limit > MAX_WINDOW_LIMIT)
    throw argumentError(`limit must be an integer 0-${MAX_WINDOW_LIMIT}, got ${limit}`);
  if (!(toMs >= fromMs)) throw argumentError(`window end ${toMs} is before its start ${fromMs}`);
  const times: number[] = [];
  let cursor = fromMs;
  for (;;) {
    const want = Math.min(64, limit + 1 - times.length);
    const chunk = s.next(cursor, want);
    for (const t of chunk) {
      if (t > toMs) return { times, truncated: false };
      if (times.length === limit) return { times, truncated: true };
      times.push(t);
    }
    const last = chunk[chunk.length - 1];
    if (last === undefined || chunk.length < want) return { times, truncated: false };
    cursor = last;
  }
}

/** Local seconds of 2096-03-01 00:00, the start of the longest gap between Feb 29ths. */
export const NEVER_FIRES_PROBE_S = localSecondsOf(2096, 3, 1, 0, 0, 0);
