/**
 * Finds the next local wall-clock second that a cron expression matches, with precomputed
 * tables so one step costs a few array reads: "next allowed value ≥ v" tables for second,
 * minute, hour and month, and per-month day bitmasks (bit d-1 = day d) built from the
 * day-of-month set, `L` and seven precomputed day-of-week masks (one per weekday of the 1st).
 *
 * Time zones do not exist here: the input and output are local seconds (calendar.ts). Mapping
 * wall times to instants, including the daylight-saving rule, is occurrences.ts's job.
 *
 * Day rule (Vixie cron): when both day fields are restricted a day matches if EITHER does;
 * otherwise it must match both (an unrestricted field such as `*\/2` still filters).
 */
import {
  daysFromCivil,
  daysInMonth,
  localSecondsOf,
  newCivil,
  civilFromLocalSeconds,
  weekdayOfDays,
} from "./calendar.ts";
import type { CronFields } from "./cron-fields.ts";

/** Upper bound on loop steps of one search; each step advances at least one field. */
const MAX_STEPS = 10_000;

/** `table[v]` = smallest allowed value ≥ v, or -1; `table[size]` is -1 (overflow sentinel). */
function nextTable(values: readonly number[], size: number): Int8Array {
  const table = new Int8Array(size + 1).fill(-1);
  let next = -1;
  const allowed = new Set(values);
  for (let v = size - 1; v >= 0; v--) {
    if (allowed.has(v)) next = v;
    table[v] = next;
  }
  return table;
}

/** A compiled, immutable matcher over local seconds. */
export class CronMatcher {
  private readonly nextSecond: Int8Array;
  private readonly nextMinute: Int8Array;
  private readonly nextHour: Int8Array;
  private readonly nextMonth: Int8Array;
  private readonly domBits: number;
  private readonly lastDay: boolean;
  /** dowByFirst[w] = days of a month (bit d-1) whose weekday is allowed, if the 1st is weekday w. */
  private readonly dowByFirst: Int32Array;
  private readonly either: boolean;
  private readonly scratch = newCivil();

  constructor(fields: CronFields) {
    this.nextSecond = nextTable(fields.second, 60);
    this.nextMinute = nextTable(fields.minute, 60);
    this.nextHour = nextTable(fields.hour, 24);
    this.nextMonth = nextTable(fields.month, 13);
    this.domBits = fields.dayOfMonth.reduce((bits, d) => bits | (1 << (d - 1)), 0);
    this.lastDay = fields.lastDayOfMonth;
    const dows = new Set(fields.dayOfWeek);
    this.dowByFirst = new Int32Array(7);
    for (let first = 0; first < 7; first++) {
      let bits = 0;
      for (let d = 1; d <= 31; d++) if (dows.has((first + d - 1) % 7)) bits |= 1 << (d - 1);
      this.dowByFirst[first] = bits;
    }
    this.either = fields.dayOfMonthRestricted && fields.dayOfWeekRestricted;
  }

  /** Bitmask of the matching days of month `mo` in year `y` (bit d-1 = day d). */
  dayMask(y: number, mo: number): number {
    const dim = daysInMonth(y, mo);
    const full = dim === 31 ? 0x7fff_ffff : (1 << dim) - 1;
    const dom = this.lastDay ? this.domBits | (1 << (dim - 1)) : this.domBits;
    const dow = this.dowByFirst[weekdayOfDays(daysFromCivil(y, mo, 1))] ?? 0;
    return (this.either ? dom | dow : dom & dow) & full;
  }

  /**
   * The first matching local second ≥ `fromS`, or undefined if none falls in a year up to
   * `lastYear` (inclusive).
   */
  nextMatch(fromS: number, lastYear: number): number | undefined {
    const c = civilFromLocalSeconds(fromS, this.scratch);
    let { year: y, month: mo, day: d, hour: h, minute: mi, second: s } = c;
    for (let step = 0; step < MAX_STEPS; step++) {
      if (y > lastYear) return undefined;
      const nmo = this.nextMonth[mo] ?? -1;
      if (nmo < 0) {
        y++;
        mo = 1;
        d = 1;
        h = 0;
        mi = 0;
        s = 0;
        continue;
      }
      if (nmo !== mo) {
        mo = nmo;
        d = 1;
        h = 0;
        mi = 0;
        s = 0;
      }
      const days = d <= 31 ? this.dayMask(y, mo) & (-1 << (d - 1)) : 0;
      if (days === 0) {
        mo++;
        d = 1;
        h = 0;
        mi = 0;
        s = 0;
        if (mo > 12) {
          y++;
          mo = 1;
        }
        continue;
      }
      const nd = 32 - Math.clz32(days & -days);
      if (nd !== d) {
        d = nd;
        h = 0;
        mi = 0;
        s = 0;
      }
      const nh = this.nextHour[h] ?? -1;
      if (nh < 0) {
        d++;
        h = 0;
        mi = 0;
        s = 0;
        continue;
      }
      if (nh !== h) {
        h = nh;
        mi = 0;
        s = 0;
      }
      const nmi = this.nextMinute[mi] ?? -1;
      if (nmi < 0) {
        h++;
        mi = 0;
        s = 0;
        continue;
      }
      if (nmi !== mi) {
        mi = nmi;
        s = 0;
      }
      const ns = this.nextSecond[s] ?? -1;
      if (ns < 0) {
        mi++;
        s = 0;
        continue;
      }
      return localSecondsOf(y, mo, d, h, mi, ns);
    }
    return undefined;
  }
}
