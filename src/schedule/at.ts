/**
 * One-shot `at` instants and instant parsing. `at` must be an RFC 3339 date-time with an
 * offset or `Z` (a local time without offset is ambiguous and rejected); its one occurrence
 * is that instant, millisecond precision kept. Whether a past `at` is an error depends on the
 * caller (creating a job: yes; replaying a stored one: no), hence `assertFuture`.
 */
import { Temporal } from "@js-temporal/polyfill";
import { FIELD_AT, scheduleError } from "./errors.ts";

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$/;

/** Epoch ms of an RFC 3339 instant; throws `invalid_schedule` with field `schedule.at`. */
export function parseAt(text: string): number {
  if (typeof text !== "string" || !RFC3339.test(text)) {
    throw scheduleError(
      FIELD_AT,
      `at must be an RFC 3339 instant with an offset or Z, e.g. 2026-03-08T07:00:00Z (got ${JSON.stringify(text)})`,
    );
  }
  const fast = plainInstantMs(text);
  if (fast !== undefined) return fast;
  try {
    return Temporal.Instant.from(text).epochMilliseconds;
  } catch (e) {
    throw scheduleError(
      FIELD_AT,
      `at ${JSON.stringify(text)} is not a valid instant (${e instanceof Error ? e.message : String(e)})`,
      e,
    );
  }
}

const PLAIN =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?(?:Z|([+-])(\d{2}):(\d{2}))$/;

/**
 * Epoch ms of the plain form of an instant — `T`, at most milliseconds, `Z` or an offset, every
 * field in range (no leap second, a day the month has, a year from 1000) — as Temporal reads it;
 * undefined for anything else, left to Temporal (a create's `at` read by Temporal was a visible
 * share of the API's create; the property test holds the two equal).
 */
export function plainInstantMs(text: string): number | undefined {
  const m = PLAIN.exec(text);
  if (m === null) return undefined;
  const [y, mo, d, h, mi, sec] = [m[1], m[2], m[3], m[4], m[5], m[6]].map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  if (y < 1000 || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 59) return undefined;
  if (d > new Date(Date.UTC(y, mo, 0)).getUTCDate()) return undefined;
  const ms = m[7] === undefined ? 0 : Number(m[7].padEnd(3, "0"));
  let offsetMin = 0;
  if (m[8] !== undefined) {
    const oh = Number(m[9]);
    const om = Number(m[10]);
    if (oh > 23 || om > 59) return undefined;
    offsetMin = (m[8] === "-" ? -1 : 1) * (oh * 60 + om);
  }
  return Date.UTC(y, mo - 1, d, h, mi, sec, ms) - offsetMin * 60_000;
}

/**
 * Epoch ms of an ISO 8601 instant with an offset or Z (seconds optional), as the CLI's
 * `--from` takes it; throws `invalid_schedule` naming `field`.
 */
export function parseInstant(text: string, field: string): number {
  try {
    return Temporal.Instant.from(text).epochMilliseconds;
  } catch (e) {
    throw scheduleError(
      field,
      `${JSON.stringify(text)} is not an ISO 8601 instant with an offset or Z, e.g. 2026-03-07T12:00:00Z`,
      e,
    );
  }
}

/**
 * An occurrence's instant in UTC ISO form with Z: whole seconds as `formatUtc` gives them
 * (2026-03-08T07:00:00Z), milliseconds kept when there are any (2026-03-08T07:00:00.250Z) — an
 * `at` may name them, and a run's `scheduled_for` cut to the second claimed it was due earlier than
 * it was (the sustained benchmark's lag read up to 1 s too high for that alone).
 */
export function formatInstant(ms: number): string {
  return new Date(ms).toISOString().replace(/\.000Z$/, "Z");
}

/** The second `formatUtc` formatted last, and its text: a burst formats one instant 200,000 times. */
let lastUtcSecond = Number.NaN;
let lastUtcText = "";

/**
 * UTC ISO form with whole seconds and Z, e.g. 2026-03-08T07:00:00Z (sub-seconds dropped). The last
 * second's text is kept: a worker starting a burst's attempts formats the same instant for each
 * (a Date, an ISO string and a regexp replace each time are a visible share of its start loop).
 */
export function formatUtc(ms: number): string {
  const second = Math.floor(ms / 1000);
  if (second !== lastUtcSecond) {
    lastUtcText = new Date(second * 1000).toISOString().replace(/\.000Z$/, "Z");
    lastUtcSecond = second;
  }
  return lastUtcText;
}
