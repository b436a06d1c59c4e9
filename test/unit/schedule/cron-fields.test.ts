/**
 * Cron syntax: every element of the grammar, every error (field, token, why), and
 * cron-parser as an oracle on the part of the grammar where its sets are right.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { CronExpressionParser } from "cron-parser";
import { parseCronFields } from "../../../src/schedule/cron-fields.ts";
import { assertScheduleError, compileSchedule, nextIso } from "./helpers.ts";

const range = (a: number, b: number, step = 1): number[] => {
  const out: number[] = [];
  for (let v = a; v <= b; v += step) out.push(v);
  return out;
};
const fields = (expr: string) => parseCronFields(expr);

describe("cron syntax", () => {
  it("numbers, with leading zeros", () => {
    const f = fields("05 4 9 7 3");
    assert.deepEqual(
      [f.minute, f.hour, f.dayOfMonth, f.month, f.dayOfWeek],
      [[5], [4], [9], [7], [3]],
    );
    assert.deepEqual(f.second, [0]);
    assert.equal(f.hasSeconds, false);
  });
  it("ranges and lists", () => {
    assert.deepEqual(fields("1-3,10,20-21 * * * *").minute, [1, 2, 3, 10, 20, 21]);
  });
  it("overlapping list items are merged", () => {
    assert.deepEqual(fields("*/20,0,5-6,6 * * * *").minute, [0, 5, 6, 20, 40]);
  });
  it("steps: */n, a-b/n and a/n (a through the field maximum)", () => {
    assert.deepEqual(fields("*/15 * * * *").minute, [0, 15, 30, 45]);
    assert.deepEqual(fields("0 1-10/4 * * *").hour, [1, 5, 9]);
    assert.deepEqual(fields("0 0 5/10 * *").dayOfMonth, [5, 15, 25]);
    assert.deepEqual(fields("0 0 * 2/5 *").month, [2, 7, 12]);
    assert.deepEqual(fields("0 20/1 * * *").hour, [20, 21, 22, 23]);
  });
  it("day-of-week: */n runs to Saturday, a/n through 7 = Sunday (cronie, cron-parser)", () => {
    assert.deepEqual(fields("0 0 * * */2").dayOfWeek, [0, 2, 4, 6]);
    assert.deepEqual(fields("0 0 * * 1/2").dayOfWeek, [0, 1, 3, 5]);
    assert.deepEqual(fields("0 0 * * 2/5").dayOfWeek, [0, 2]);
    assert.deepEqual(fields("0 0 * * 0/2").dayOfWeek, [0, 2, 4, 6]);
    assert.deepEqual(fields("0 0 * * 7/3").dayOfWeek, [0]);
  });
  it("month and weekday names, case-insensitive, mixed with numbers in ranges", () => {
    assert.deepEqual(fields("0 0 * jan,Mar,DEC *").month, [1, 3, 12]);
    assert.deepEqual(fields("0 0 * 2-JUL *").month, range(2, 7));
    assert.deepEqual(fields("0 0 * feb-5 *").month, range(2, 5));
    assert.deepEqual(fields("0 0 * * mon-FRI").dayOfWeek, range(1, 5));
    assert.deepEqual(fields("0 0 * * 1-fri").dayOfWeek, range(1, 5));
    assert.deepEqual(fields("0 0 * * sun,Sat").dayOfWeek, [0, 6]);
  });
  it("Sunday is 0 or 7", () => {
    assert.deepEqual(fields("0 0 * * 7").dayOfWeek, [0]);
    assert.deepEqual(fields("0 0 * * 0").dayOfWeek, [0]);
    assert.deepEqual(fields("0 0 * * 5-7").dayOfWeek, [0, 5, 6]);
    assert.deepEqual(fields("0 0 * * 0-7").dayOfWeek, range(0, 6));
    assert.deepEqual(fields("0 0 * * SAT-7").dayOfWeek, [0, 6]);
  });
  it("L in day-of-month, alone or in a list", () => {
    const alone = fields("0 0 L * *");
    assert.equal(alone.lastDayOfMonth, true);
    assert.deepEqual(alone.dayOfMonth, []);
    const list = fields("0 0 1,L * *");
    assert.deepEqual([list.dayOfMonth, list.lastDayOfMonth], [[1], true]);
    assert.deepEqual(nextIso("0 0 1,L * *", "UTC", "2026-02-01T12:00:00Z", 4), [
      "2026-02-28T00:00:00Z",
      "2026-03-01T00:00:00Z",
      "2026-03-31T00:00:00Z",
      "2026-04-01T00:00:00Z",
    ]);
    assert.deepEqual(nextIso("0 0 l * *", "UTC", "2028-02-01T00:00:00Z", 1), [
      "2028-02-29T00:00:00Z",
    ]);
  });
  it("? means *, also in both day fields at once", () => {
    const f = fields("0 0 ? * ?");
    assert.deepEqual([f.dayOfMonthRestricted, f.dayOfWeekRestricted], [false, false]);
    assert.deepEqual(f.dayOfMonth, range(1, 31));
    assert.deepEqual(f.dayOfWeek, range(0, 6));
    assert.deepEqual(nextIso("0 12 ? * ?", "UTC", "2026-01-01T00:00:00Z", 2), [
      "2026-01-01T12:00:00Z",
      "2026-01-02T12:00:00Z",
    ]);
  });
  it("macros", () => {
    const same = (macro: string, expr: string): void =>
      assert.deepEqual(fields(macro), fields(expr), macro);
    same("@yearly", "0 0 1 1 *");
    same("@annually", "0 0 1 1 *");
    same("@monthly", "0 0 1 * *");
    same("@weekly", "0 0 * * 0");
    same("@daily", "0 0 * * *");
    same("@midnight", "0 0 * * *");
    same("@hourly", "0 * * * *");
    same("@DAILY", "0 0 * * *");
    assert.deepEqual(nextIso("@weekly", "UTC", "2026-03-04T00:00:00Z", 1), [
      "2026-03-08T00:00:00Z",
    ]);
  });
  it("6 fields: a leading seconds field", () => {
    const f = fields("*/20 0 0 * * *");
    assert.equal(f.hasSeconds, true);
    assert.deepEqual(f.second, [0, 20, 40]);
    assert.deepEqual(nextIso("*/20 * * * * *", "UTC", "2026-01-01T00:00:05.500Z", 3), [
      "2026-01-01T00:00:20Z",
      "2026-01-01T00:00:40Z",
      "2026-01-01T00:01:00Z",
    ]);
  });
  it("surrounding and repeated whitespace is ignored", () => {
    assert.deepEqual(fields("  0\t9 *  * 1-5 "), fields("0 9 * * 1-5"));
  });
});

describe("Vixie day rule", () => {
  it("restricted unless the field starts with * or ?", () => {
    const f = (e: string) => {
      const x = fields(e);
      return [x.dayOfMonthRestricted, x.dayOfWeekRestricted];
    };
    assert.deepEqual(f("0 0 1-31 * 1-5"), [true, true]);
    assert.deepEqual(f("0 0 */2 * ?"), [false, false]);
    assert.deepEqual(f("0 0 *,5 * 7"), [false, true]);
    assert.deepEqual(f("0 0 L * *"), [true, false]);
  });
  it("both restricted: a day matches when either matches", () => {
    // 2026-03: the 13th is a Friday; Fridays are 6, 13, 20, 27.
    assert.deepEqual(nextIso("0 0 13 * 5", "UTC", "2026-03-01T00:00:00Z", 4), [
      "2026-03-06T00:00:00Z",
      "2026-03-13T00:00:00Z",
      "2026-03-20T00:00:00Z",
      "2026-03-27T00:00:00Z",
    ]);
  });
  it("0 0 1-31 * 1-5 matches every day (day-of-month 1-31 is restricted and matches all)", () => {
    assert.deepEqual(nextIso("0 0 1-31 * 1-5", "UTC", "2026-03-06T12:00:00Z", 3), [
      "2026-03-07T00:00:00Z",
      "2026-03-08T00:00:00Z",
      "2026-03-09T00:00:00Z",
    ]);
  });
  it("*/2 day-of-month with 1-5 day-of-week: odd days that are weekdays", () => {
    // March 2026: Sun 1, Tue 3, Thu 5, Sat 7, Mon 9, Wed 11, Fri 13.
    assert.deepEqual(nextIso("0 0 */2 * 1-5", "UTC", "2026-02-28T12:00:00Z", 4), [
      "2026-03-03T00:00:00Z",
      "2026-03-05T00:00:00Z",
      "2026-03-09T00:00:00Z",
      "2026-03-11T00:00:00Z",
    ]);
  });
  it("* day-of-month with restricted day-of-week: only the weekdays", () => {
    assert.deepEqual(nextIso("0 9 * * MON", "UTC", "2026-03-03T00:00:00Z", 2), [
      "2026-03-09T09:00:00Z",
      "2026-03-16T09:00:00Z",
    ]);
  });
});

describe("cron errors name the field, the token and why", () => {
  const bad = (expr: string, message: string | RegExp): void =>
    assertScheduleError(() => parseCronFields(expr), "schedule.cron", message);
  it("out of range, per field", () => {
    bad("60 * * * * *", "second: 60 is out of range 0-59");
    bad("60 * * * *", "minute: 60 is out of range 0-59");
    bad("0 24 * * *", "hour: 24 is out of range 0-23");
    bad("0 0 32 * *", "day-of-month: 32 is out of range 1-31");
    bad("0 0 0 * *", "day-of-month: 0 is out of range 1-31");
    bad("0 0 * 13 *", "month: 13 is out of range 1-12");
    bad("0 0 * 0 *", "month: 0 is out of range 1-12");
    bad("0 0 * * 8", "day-of-week: 8 is out of range 0-7");
    bad("0 0 1-40 * *", "day-of-month: 40 is out of range 1-31");
    bad("99999999999999999999 * * * *", /^minute: .* is out of range 0-59$/);
  });
  it("bad steps", () => {
    bad("*/0 * * * *", 'minute: step 0 in "*/0" is out of range 1-60');
    bad("*/61 * * * *", 'minute: step 61 in "*/61" is out of range 1-60');
    bad("0 0 * * */8", 'day-of-week: step 8 in "*/8" is out of range 1-7');
    bad("*/x * * * *", 'minute: step "x" in "*/x" is not a whole number');
    bad("*/ * * * *", 'minute: step "" in "*/" is not a whole number');
    bad("1/2/3 * * * *", 'minute: "1/2/3" has more than one "/"');
    bad("0 0 ?/2 * *", 'day-of-month: "?" cannot take a step in "?/2"');
    bad("0 0 L/2 * *", 'day-of-month: "L" cannot take a step in "L/2"');
  });
  it("bad ranges", () => {
    bad("0 0 10-2 * *", 'day-of-month: range "10-2" is reversed (10 > 2)');
    bad("0 0 * * FRI-MON", 'day-of-week: range "FRI-MON" is reversed (5 > 1)');
    bad("1- * * * *", 'minute: invalid range "1-" (expected a-b)');
    bad("1-2-3 * * * *", 'minute: invalid range "1-2-3" (expected a-b)');
    bad("0 0 L-5 * *", 'day-of-month: "L" cannot be used in a range');
  });
  it("unknown names and names where numbers are required", () => {
    bad("0 0 * FOO *", /^month: unknown name "FOO" \(expected one of JAN FEB/);
    bad("0 0 * * funday", /^day-of-week: unknown name "funday"/);
    bad("0 0 * * MONDAY", /^day-of-week: unknown name "MONDAY"/);
    bad("0 MON * * *", 'hour: invalid value "MON" (expected a number 0-23)');
    bad("1x * * * *", 'minute: invalid value "1x" (expected a number 0-59)');
    bad("-1 * * * *", 'minute: invalid range "-1" (expected a-b)');
  });
  it("? and L only where they belong", () => {
    bad("? * * * *", 'minute: "?" is only allowed in day-of-month and day-of-week');
    bad("0 0 * ? *", 'month: "?" is only allowed in day-of-month and day-of-week');
    bad("0 L * * *", 'hour: "L" is only allowed in day-of-month');
    bad("0 0 * * L", 'day-of-week: "L" is only allowed in day-of-month');
    bad("0 0 * * 5L", 'day-of-week: invalid value "5L" (expected a number 0-7 or a name)');
    bad("0 0 * * 1#2", 'day-of-week: invalid value "1#2" (expected a number 0-7 or a name)');
    bad("0 0 H * *", 'day-of-month: invalid value "H" (expected a number 1-31)');
  });
  it("empty list items", () => {
    bad("1,,2 * * * *", 'minute: empty item in list "1,,2"');
    bad("0 0 1, * *", 'day-of-month: empty item in list "1,"');
  });
  it("wrong field count and empty expressions", () => {
    bad(
      "* * * *",
      /^expected 5 fields \(minute hour day-of-month month day-of-week\) or 6 with a leading second field, got 4$/,
    );
    bad("* * * * * * *", /got 7$/);
    bad("", "cron expression is empty");
    bad("   ", "cron expression is empty");
    bad("*".repeat(1001), /^cron expression is too long \(1001 characters, max 1000\)$/);
  });
  it("unknown macros and macros with fields", () => {
    bad(
      "@every",
      /^unknown macro "@every" \(expected one of @yearly @annually @monthly @weekly @daily @midnight @hourly\)$/,
    );
    bad("@reboot", /^unknown macro "@reboot"/);
    bad("@daily 5", 'macro "@daily" must stand alone, got 1 more field(s)');
  });
  it("never-firing schedules are rejected at compile time", () => {
    const never = (cron: string): void =>
      assertScheduleError(
        () => compileSchedule({ cron, time_zone: "UTC" }),
        "schedule.cron",
        "schedule never fires (searched 8 years ahead)",
      );
    never("0 0 30 2 *");
    never("0 0 31 4,6,9,11 *");
    never("0 0 30,31 FEB *");
    // ... but Feb 29 fires (every 4 years; 8 across 2100), and so does L in February.
    assert.deepEqual(nextIso("0 0 29 2 *", "UTC", "2096-03-01T00:00:00Z", 1), [
      "2104-02-29T00:00:00Z",
    ]);
    assert.deepEqual(nextIso("0 0 30 2 1", "UTC", "2026-01-01T00:00:00Z", 1), [
      "2026-02-02T00:00:00Z",
    ]);
  });
});

describe("cron-parser agrees on the grammar both support", () => {
  it("day-of-week a/n for every a and n, Sunday folded", () => {
    for (let a = 0; a <= 7; a++)
      for (let n = 1; n <= 7; n++) {
        const e = `0 0 * * ${a}/${n}`;
        const theirs = CronExpressionParser.parse(e, { tz: "UTC" }).fields.dayOfWeek.values;
        const folded = [...new Set(theirs.map((v) => (Number(v) === 7 ? 0 : Number(v))))].sort(
          (x, y) => x - y,
        );
        assert.deepEqual(fields(e).dayOfWeek, folded, e);
      }
  });

  it("single-item fields of numbers, ranges and */n steps", () => {
    const item = (min: number, max: number, stepMax: number) =>
      fc.oneof(
        fc.constant("*"),
        fc.integer({ min, max }).map(String),
        fc
          .tuple(fc.integer({ min, max }), fc.integer({ min, max }))
          .map(([a, b]) => `${Math.min(a, b)}-${Math.max(a, b)}`),
        fc
          .tuple(
            fc.integer({ min, max }),
            fc.integer({ min, max }),
            fc.integer({ min: 1, max: stepMax - min + 1 }),
          )
          .map(([a, b, s]) => `${Math.min(a, b)}-${Math.max(a, b)}/${s}`),
        fc.integer({ min: 1, max: stepMax - min + 1 }).map((s) => `*/${s}`),
      );
    const expr = fc
      .tuple(
        item(0, 59, 59),
        item(0, 59, 59),
        item(0, 23, 23),
        item(1, 31, 31),
        item(1, 12, 12),
        fc.oneof(fc.constant("*"), fc.integer({ min: 0, max: 7 }).map(String)),
      )
      .map((parts) => parts.join(" "));
    fc.assert(
      fc.property(expr, (e) => {
        const ours = parseCronFields(e);
        const theirs = CronExpressionParser.parse(e, { tz: "UTC" }).fields;
        const nums = (vs: readonly (number | string)[], fold7 = false) =>
          [...new Set(vs.map((v) => (fold7 && v === 7 ? 0 : Number(v))))].sort((a, b) => a - b);
        assert.deepEqual(ours.second, nums(theirs.second.values));
        assert.deepEqual(ours.minute, nums(theirs.minute.values));
        assert.deepEqual(ours.hour, nums(theirs.hour.values));
        // cron-parser drops days no allowed month has (`*/1` with month 2 stops at 29); the
        // matcher masks those days by month length anyway, so compare only days that exist.
        const maxDay = Math.max(
          ...ours.month.map((m) => [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][m - 1] ?? 31),
        );
        assert.deepEqual(
          ours.dayOfMonth.filter((d) => d <= maxDay),
          nums(theirs.dayOfMonth.values).filter((d) => d <= maxDay),
        );
        assert.deepEqual(ours.month, nums(theirs.month.values));
        assert.deepEqual(ours.dayOfWeek, nums(theirs.dayOfWeek.values, true));
      }),
      { seed: 7, numRuns: 300 },
    );
  });
});
