/**
 * Proleptic Gregorian calendar arithmetic on plain integers (no Date, no Temporal), used on
 * the hot path of `next`. A "local second" is a wall-clock time counted as if the zone were
 * UTC: days since 1970-01-01 × 86400 + seconds of the day. The day algorithms are Howard
 * Hinnant's `days_from_civil` / `civil_from_days`, exact for every year Temporal supports.
 */

export const SECONDS_PER_DAY = 86_400;
export const MS_PER_DAY = 86_400_000;

/** A calendar date and wall-clock time; month 1-12, day 1-31. */
export interface CivilDateTime {
  year: number;
  month: number;
  day: number;
  hour: number;
  minute: number;
  second: number;
}

export function isLeapYear(y: number): boolean {
  return (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
}

const DAYS_IN_MONTH = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31] as const;

/** Days in month `m` (1-12) of year `y`. */
export function daysInMonth(y: number, m: number): number {
  return m === 2 && isLeapYear(y) ? 29 : (DAYS_IN_MONTH[m] ?? 0);
}

/** Days since 1970-01-01 of the date y-m-d. */
export function daysFromCivil(y: number, m: number, d: number): number {
  const yy = m <= 2 ? y - 1 : y;
  const era = Math.floor(yy / 400);
  const yoe = yy - era * 400;
  const doy = Math.floor((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5) + d - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146_097 + doe - 719_468;
}

/** Year, month and day of a day count since 1970-01-01; `out` is reused to avoid garbage. */
export function civilFromDays(days: number, out: CivilDateTime): CivilDateTime {
  const z = days + 719_468;
  const era = Math.floor(z / 146_097);
  const doe = z - era * 146_097;
  const yoe = Math.floor(
    (doe - Math.floor(doe / 1460) + Math.floor(doe / 36_524) - Math.floor(doe / 146_096)) / 365,
  );
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const m = mp < 10 ? mp + 3 : mp - 9;
  out.year = yoe + era * 400 + (m <= 2 ? 1 : 0);
  out.month = m;
  out.day = doy - Math.floor((153 * mp + 2) / 5) + 1;
  return out;
}

/** Day of week of a day count since 1970-01-01: 0 = Sunday … 6 = Saturday. */
export function weekdayOfDays(days: number): number {
  const w = (days + 4) % 7; // 1970-01-01 was a Thursday
  return w < 0 ? w + 7 : w;
}

/** Splits a local-second count into date and time fields. */
export function civilFromLocalSeconds(localS: number, out: CivilDateTime): CivilDateTime {
  const days = Math.floor(localS / SECONDS_PER_DAY);
  const sod = localS - days * SECONDS_PER_DAY;
  civilFromDays(days, out);
  out.hour = Math.floor(sod / 3600);
  out.minute = Math.floor((sod % 3600) / 60);
  out.second = sod % 60;
  return out;
}

/** The local-second count of a date and time. */
export function localSecondsOf(
  y: number,
  mo: number,
  d: number,
  h: number,
  mi: number,
  s: number,
): number {
  return daysFromCivil(y, mo, d) * SECONDS_PER_DAY + h * 3600 + mi * 60 + s;
}

/** Calendar year of an epoch-ms instant read in UTC (or of a local-ms wall time). */
export function yearOfMs(ms: number): number {
  return civilFromDays(Math.floor(ms / MS_PER_DAY), yearScratch).year;
}

const yearScratch: CivilDateTime = { year: 0, month: 0, day: 0, hour: 0, minute: 0, second: 0 };

/** A fresh scratch record for the functions above. */
export function newCivil(): CivilDateTime {
  return { year: 0, month: 0, day: 0, hour: 0, minute: 0, second: 0 };
}
