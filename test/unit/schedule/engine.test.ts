/**
 * The engine API others code against: compileSchedule's shapes and errors, one-shot `at`,
 * assertFuture, limits, occurrencesBetween (misfire windows) and spreadOffsetMs.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  assertFuture,
  compileSchedule,
  MAX_COUNT,
  nextOccurrences,
  occurrencesBetween,
  spreadOffsetMs,
  validateTimeZone,
  type ScheduleSpec,
} from "../../../src/schedule/index.ts";
import { isKairosError } from "../../../src/lib/errors.ts";
import { assertScheduleError } from "./helpers.ts";

const ms = (iso: string): number => Date.parse(iso);
const isArgumentError = (e: unknown): boolean => isKairosError(e, "invalid_argument");

describe("compileSchedule", () => {
  it("returns a cron schedule and shares compiled schedules per (expression, zone)", () => {
    const a = compileSchedule({ cron: "0 9 * * 1-5", time_zone: "Asia/Kolkata" });
    assert.equal(a.kind, "cron");
    assert.equal(compileSchedule({ cron: "0 9 * * 1-5", time_zone: "Asia/Kolkata" }), a);
  });
  it("rejects unknown zones and non-name zones, field schedule.time_zone", () => {
    const zone = (time_zone: string, message: string | RegExp): void =>
      assertScheduleError(
        () => compileSchedule({ cron: "* * * * *", time_zone }),
        "schedule.time_zone",
        message,
      );
    zone("Mars/Base", 'unknown time zone "Mars/Base"');
    zone("", /^unknown time zone "" \(expected an IANA name/);
    zone("+05:00", /^unknown time zone "\+05:00"/);
    zone("2020-01-01T00:00Z", /^unknown time zone/);
    assertScheduleError(
      () => validateTimeZone("Europe/Atlantis"),
      "schedule.time_zone",
      'unknown time zone "Europe/Atlantis"',
    );
  });
  it("accepts IANA names case-insensitively, and UTC", () => {
    validateTimeZone("UTC");
    validateTimeZone("Etc/GMT+5");
    validateTimeZone("america/new_york");
    assert.deepEqual(
      compileSchedule({ cron: "30 2 * * *", time_zone: "america/new_york" }).next(
        ms("2026-03-07T12:00:00Z"),
        1,
      ),
      [ms("2026-03-08T07:00:00Z")],
    );
  });
  it("rejects malformed specs with the field at fault", () => {
    const spec = (s: unknown, field: string, message: string | RegExp): void =>
      assertScheduleError(() => compileSchedule(s as ScheduleSpec), field, message);
    spec({ cron: "* * * * *" }, "schedule.time_zone", "time_zone is required with cron");
    spec({ cron: "* * * * *", time_zone: 5 }, "schedule.time_zone", "time_zone must be a string");
    spec({ cron: 5, time_zone: "UTC" }, "schedule.cron", "cron must be a string");
    spec({}, "schedule", "schedule needs cron and time_zone, or at");
    spec(null, "schedule", /must be an object/);
    spec({ at: "2026-03-08T07:00:00Z", cron: "* * * * *" }, "schedule", /both at and cron/);
    spec({ at: 5 }, "schedule.at", "at must be a string");
  });
});

describe("one-shot at", () => {
  it("fires once, at the instant, keeping milliseconds", () => {
    const s = compileSchedule({ at: "2026-03-08T02:30:00.250-05:00" });
    assert.equal(s.kind, "at");
    const at = ms("2026-03-08T07:30:00.250Z");
    assert.deepEqual(s.next(at - 1, 5), [at]);
    assert.deepEqual(s.next(at, 5), []);
    assert.deepEqual(s.next(at - 1, 0), []);
    assert.deepEqual(compileSchedule({ at: "2026-03-08t07:00:00z" }).next(0, 1), [
      ms("2026-03-08T07:00:00Z"),
    ]);
  });
  it("rejects anything but an RFC 3339 instant with offset or Z", () => {
    const bad = (at: string, message: RegExp): void =>
      assertScheduleError(() => compileSchedule({ at }), "schedule.at", message);
    bad("2026-03-08T07:00:00", /^at must be an RFC 3339 instant with an offset or Z/);
    bad("2026-03-08T07:00Z", /^at must be an RFC 3339 instant/);
    bad("tomorrow", /^at must be an RFC 3339 instant/);
    bad("2026-13-08T07:00:00Z", /^at "2026-13-08T07:00:00Z" is not a valid instant/);
    bad("2026-02-30T07:00:00Z", /^at "2026-02-30T07:00:00Z" is not a valid instant/);
    bad("2026-03-08T07:00:00Z[America/New_York]", /^at must be an RFC 3339 instant/);
  });
  it("assertFuture rejects a past or present at and ignores cron", () => {
    const now = ms("2026-03-01T00:00:00Z");
    assertFuture({ at: "2026-03-01T00:00:01Z" }, now);
    assertFuture({ cron: "* * * * *", time_zone: "UTC" }, now);
    assertScheduleError(
      () => assertFuture({ at: "2026-03-01T00:00:00Z" }, now),
      "schedule.at",
      /^at is in the past/,
    );
    assertScheduleError(
      () => assertFuture({ at: "2020-01-01T00:00:00Z" }, now),
      "schedule.at",
      "at is in the past (2020-01-01T00:00:00Z is not after now, 2026-03-01T00:00:00Z)",
    );
  });
});

describe("next and its limits", () => {
  const s = compileSchedule({ cron: "*/5 * * * *", time_zone: "Europe/London" });
  it("is strictly after `after`, also for sub-second `after`", () => {
    assert.deepEqual(s.next(ms("2026-01-01T00:05:00Z"), 1), [ms("2026-01-01T00:10:00Z")]);
    assert.deepEqual(s.next(ms("2026-01-01T00:04:59.999Z"), 1), [ms("2026-01-01T00:05:00Z")]);
    assert.deepEqual(nextOccurrences(s, ms("2026-01-01T00:05:00.001Z"), 1), [
      ms("2026-01-01T00:10:00Z"),
    ]);
  });
  it("count 0 gives nothing; bad counts and instants are invalid_argument", () => {
    assert.deepEqual(s.next(0, 0), []);
    assert.equal(s.next(0, MAX_COUNT).length, MAX_COUNT);
    assert.throws(() => s.next(0, MAX_COUNT + 1), isArgumentError);
    assert.throws(() => s.next(0, -1), isArgumentError);
    assert.throws(() => s.next(0, 1.5), isArgumentError);
    assert.throws(() => s.next(Number.NaN, 1), isArgumentError);
    assert.throws(() => s.next(Infinity, 1), isArgumentError);
  });
  it("works far from now (1900, 2200) and before the epoch", () => {
    assert.deepEqual(
      compileSchedule({ cron: "0 0 1 1 *", time_zone: "UTC" }).next(ms("1899-06-01T00:00:00Z"), 1),
      [ms("1900-01-01T00:00:00Z")],
    );
    assert.deepEqual(
      compileSchedule({ cron: "0 12 29 2 *", time_zone: "UTC" }).next(
        ms("2199-01-01T00:00:00Z"),
        1,
      ),
      [ms("2204-02-29T12:00:00Z")],
    );
  });
});

describe("occurrencesBetween", () => {
  const hourly = compileSchedule({ cron: "0 * * * *", time_zone: "UTC" });
  it("returns (from, to], ascending", () => {
    const r = occurrencesBetween(
      hourly,
      ms("2026-01-01T00:00:00Z"),
      ms("2026-01-01T03:00:00Z"),
      10,
    );
    assert.deepEqual(r, {
      times: [1, 2, 3].map((h) => ms(`2026-01-01T0${h}:00:00Z`)),
      truncated: false,
    });
  });
  it("truncates at the limit and says so", () => {
    const r = occurrencesBetween(
      hourly,
      ms("2026-01-01T00:00:00Z"),
      ms("2026-01-11T00:00:00Z"),
      100,
    );
    assert.equal(r.times.length, 100);
    assert.equal(r.truncated, true);
    assert.equal(r.times[99], ms("2026-01-05T04:00:00Z"));
    assert.deepEqual(occurrencesBetween(hourly, 0, ms("2026-01-01T00:00:00Z"), 0).truncated, true);
    const exact = occurrencesBetween(
      hourly,
      ms("2026-01-01T00:00:00Z"),
      ms("2026-01-01T05:00:00Z"),
      5,
    );
    assert.deepEqual([exact.times.length, exact.truncated], [5, false]);
  });
  it("empty windows, one-shots, and bad arguments", () => {
    assert.deepEqual(
      occurrencesBetween(hourly, ms("2026-01-01T00:10:00Z"), ms("2026-01-01T00:50:00Z"), 5),
      { times: [], truncated: false },
    );
    const at = compileSchedule({ at: "2026-01-01T00:30:00Z" });
    assert.deepEqual(
      occurrencesBetween(at, ms("2026-01-01T00:00:00Z"), ms("2026-01-01T01:00:00Z"), 5),
      { times: [ms("2026-01-01T00:30:00Z")], truncated: false },
    );
    assert.throws(() => occurrencesBetween(hourly, 10, 5, 5), isArgumentError);
    assert.throws(() => occurrencesBetween(hourly, 0, 5, -1), isArgumentError);
  });
});

describe("spreadOffsetMs", () => {
  it("is deterministic, inside the window, and 0 for a zero window", () => {
    const t = ms("2026-01-01T00:00:00Z");
    assert.equal(spreadOffsetMs("job-1", t, 60), spreadOffsetMs("job-1", t, 60));
    assert.equal(spreadOffsetMs("job-1", t, 0), 0);
    for (let i = 0; i < 1000; i++) {
      const o = spreadOffsetMs(`job-${i}`, t, 30);
      assert.ok(Number.isInteger(o) && o >= 0 && o < 30_000);
    }
  });
  it("is frozen (FNV-1a of `${jobId}\\n${occurrenceMs}`): changing it moves every flexible run", () => {
    assert.equal(spreadOffsetMs("job-1", 1767225600000, 3600), FROZEN_JOB1);
  });
  it("spreads many jobs roughly evenly across the window", () => {
    const buckets = new Array<number>(10).fill(0);
    for (let i = 0; i < 10_000; i++) {
      const o = spreadOffsetMs(`tenant-a/job-${i}`, 1767225600000, 10);
      buckets[Math.floor(o / 1000)]! += 1;
    }
    for (const b of buckets) assert.ok(b > 850 && b < 1150, `bucket ${b}`);
  });
  it("varies with the occurrence, and rejects bad windows", () => {
    const offsets = new Set(
      [0, 1, 2, 3, 4].map((h) => spreadOffsetMs("job-1", h * 3_600_000, 600)),
    );
    assert.ok(offsets.size > 1);
    assert.throws(() => spreadOffsetMs("j", 0, -1), isArgumentError);
    assert.throws(() => spreadOffsetMs("j", 0, Number.NaN), isArgumentError);
    assert.throws(() => spreadOffsetMs("j", 0, 5_000_000), isArgumentError);
  });
});

/** Computed independently (Python FNV-1a) when the hash was frozen. */
const FROZEN_JOB1 = 1_249_168;
