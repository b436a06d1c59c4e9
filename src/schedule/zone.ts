/**
 * IANA time zones: validation, UTC offsets and the wall-time → instant rule. The Temporal
 * polyfill is correct but slow, so each zone caches its transitions per UTC year, filled lazily
 * (`getTimeZoneTransition`); later queries are integer arithmetic.
 *
 * The daylight-saving rule (docs/schedules.md): a wall time that occurs once maps to that
 * instant; twice (clocks set back) to the FIRST; not at all (clocks set forward) to the first
 * instant after the gap, i.e. the transition.
 *
 * Pitfalls: the caches are module state shared by all schedules (they only grow: one entry per
 * valid zone and UTC year queried). Offsets are assumed to change by less than a day at a time
 * and less than 2 days apart — true of tzdb except Samoa's skipped 2011-12-30, which the general
 * path still handles.
 */
import { Temporal } from "@js-temporal/polyfill";
import { daysFromCivil, MS_PER_DAY, yearOfMs } from "./calendar.ts";
import { FIELD_TIME_ZONE, scheduleError } from "./errors.ts";
import { KairosError } from "../lib/errors.ts";

/** Half-width of the window searched for transitions around a wall time. */
const WINDOW_MS = 2 * MS_PER_DAY;
/** Longest zone id accepted (tzdb's longest is 32 characters). */
const MAX_ZONE_LENGTH = 64;

/** Offsets and transitions of one UTC year. `offsets[i]` applies from `transitions[i]`. */
interface YearInfo {
  readonly startMs: number;
  readonly endMs: number;
  readonly startOffsetMs: number;
  readonly transitions: readonly number[];
  readonly offsets: readonly number[];
}

/** Throws `invalid_schedule` (field `schedule.time_zone`) unless `tz` is an IANA zone name Temporal knows. */
export function validateTimeZone(tz: string): void {
  zoneFor(tz);
}

const zones = new Map<string, ZoneOffsets>();

/** The shared offset cache of zone `tz`, validating it on first use. */
export function zoneFor(tz: string): ZoneOffsets {
  const cached = zones.get(tz);
  if (cached !== undefined) return cached;
  const id = canonicalZoneId(tz);
  const zone = zones.get(id) ?? new ZoneOffsets(id);
  zones.set(id, zone);
  zones.set(tz, zone);
  return zone;
}

function canonicalZoneId(tz: string): string {
  // Temporal also accepts offsets ("+05:00") and whole ISO strings as zones; only names are time zones here.
  if (
    typeof tz !== "string" ||
    tz.length === 0 ||
    tz.length > MAX_ZONE_LENGTH ||
    !/^[A-Za-z][A-Za-z0-9_+\-/]*$/.test(tz)
  ) {
    throw scheduleError(
      FIELD_TIME_ZONE,
      `unknown time zone ${JSON.stringify(tz)} (expected an IANA name such as "Europe/London")`,
    );
  }
  try {
    return Temporal.Instant.fromEpochMilliseconds(0).toZonedDateTimeISO(tz).timeZoneId;
  } catch (e) {
    throw scheduleError(FIELD_TIME_ZONE, `unknown time zone "${tz}"`, e);
  }
}

/** UTC offsets of one zone, with a lazily filled per-year transition cache. */
export class ZoneOffsets {
  readonly id: string;
  private readonly years = new Map<number, YearInfo>();
  private hint: YearInfo;

  constructor(id: string) {
    this.id = id;
    this.hint = { startMs: 0, endMs: 0, startOffsetMs: 0, transitions: [], offsets: [] };
  }

  /** Offset (local − UTC) in ms at instant `utcMs`. */
  offsetAt(utcMs: number): number {
    const info = this.yearInfoFor(utcMs);
    let offset = info.startOffsetMs;
    const ts = info.transitions;
    for (let i = 0; i < ts.length; i++) {
      if (utcMs < (ts[i] ?? 0)) break;
      offset = info.offsets[i] ?? offset;
    }
    return offset;
  }

  /** The instant a local wall time (local ms, see calendar.ts) stands for, by the DST rule above. */
  localToUtc(localMs: number): number {
    const from = localMs - WINDOW_MS;
    if (this.firstTransitionIn(from, localMs + WINDOW_MS) === undefined)
      return localMs - this.offsetAt(from);
    return this.localToUtcNearTransition(localMs);
  }

  /** General case: some transition lies within ±2 days of the wall time. */
  private localToUtcNearTransition(localMs: number): number {
    const from = localMs - WINDOW_MS;
    const to = localMs + WINDOW_MS;
    const bounds: number[] = [];
    const offsets: number[] = [this.offsetAt(from)];
    for (
      let t = this.firstTransitionIn(from, to);
      t !== undefined;
      t = this.firstTransitionIn(t, to)
    ) {
      bounds.push(t);
      offsets.push(this.offsetAt(t));
    }
    // Candidate k: the wall time read with offsets[k], valid if it lands inside interval k.
    for (let k = 0; k < offsets.length; k++) {
      const utc = localMs - (offsets[k] ?? 0);
      const start = k === 0 ? -Infinity : (bounds[k - 1] ?? 0);
      const end = k === bounds.length ? Infinity : (bounds[k] ?? 0);
      if (utc >= start && utc < end) return utc; // intervals ascend: the first valid is the earliest
    }
    // In a gap: the transition whose wall-clock jump skips over localMs.
    for (let k = 0; k < bounds.length; k++) {
      const t = bounds[k] ?? 0;
      if (t + (offsets[k] ?? 0) <= localMs && localMs < t + (offsets[k + 1] ?? 0)) return t;
    }
    throw new KairosError(
      "internal",
      `time zone ${this.id}: cannot map local time ${localMs} to an instant`,
    );
  }

  /** The first transition instant in (afterMs, toMs], or undefined. */
  private firstTransitionIn(afterMs: number, toMs: number): number | undefined {
    let info = this.yearInfoFor(afterMs);
    for (;;) {
      for (const t of info.transitions) {
        if (t > toMs) return undefined;
        if (t > afterMs) return t;
      }
      if (info.endMs > toMs) return undefined;
      info = this.yearInfoFor(info.endMs);
    }
  }

  private yearInfoFor(utcMs: number): YearInfo {
    const hint = this.hint;
    if (utcMs >= hint.startMs && utcMs < hint.endMs) return hint;
    const year = yearOfMs(utcMs);
    const info = this.years.get(year) ?? this.loadYear(year);
    this.hint = info;
    return info;
  }

  /** Asks Temporal for a year's transitions; also records the following transition-free years. */
  private loadYear(year: number): YearInfo {
    const startMs = daysFromCivil(year, 1, 1) * MS_PER_DAY;
    const endMs = daysFromCivil(year + 1, 1, 1) * MS_PER_DAY;
    let zdt = Temporal.Instant.fromEpochMilliseconds(startMs).toZonedDateTimeISO(this.id);
    const startOffsetMs = zdt.offsetNanoseconds / 1e6;
    const transitions: number[] = [];
    const offsets: number[] = [];
    let nextMs = Infinity;
    for (let i = 0; i < 64; i++) {
      const t = zdt.getTimeZoneTransition("next");
      if (t === null) break;
      if (t.epochMilliseconds >= endMs) {
        nextMs = t.epochMilliseconds;
        break;
      }
      transitions.push(t.epochMilliseconds);
      offsets.push(t.offsetNanoseconds / 1e6);
      zdt = t;
    }
    const info: YearInfo = { startMs, endMs, startOffsetMs, transitions, offsets };
    this.years.set(year, info);
    // No transition before nextMs: fill the quiet years after this one (bounded) without Temporal.
    const lastOffset = offsets[offsets.length - 1] ?? startOffsetMs;
    const quietUntil = Math.min(nextMs === Infinity ? Infinity : yearOfMs(nextMs), year + 51);
    for (let y = year + 1; y < quietUntil && !this.years.has(y); y++) {
      const s = daysFromCivil(y, 1, 1) * MS_PER_DAY;
      this.years.set(y, {
        startMs: s,
        endMs: daysFromCivil(y + 1, 1, 1) * MS_PER_DAY,
        startOffsetMs: lastOffset,
        transitions: [],
        offsets: [],
      });
    }
    return info;
  }
}
