/**
 * The dashboard's schedule in words (src/dashboard/cron-words.js, plain JS the browser loads):
 * the common shapes read as a person would say them, and anything else falls back to the
 * expression itself rather than to wrong words.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { cronInWords, listWords, scheduleInWords } from "../../../src/dashboard/cron-words.js";

describe("schedule in words", () => {
  it("says the common shapes plainly", () => {
    const cases: [string, string][] = [
      ["0 9 * * 1-5", "at 09:00 on Monday to Friday"],
      ["0 9 * * *", "at 09:00 every day"],
      ["30 9,17 * * *", "at 09:30 and 17:30 every day"],
      ["* * * * *", "every minute"],
      ["*/5 * * * *", "every 5 minutes"],
      ["@hourly", "at minute 0 of every hour"],
      ["@daily", "at 00:00 every day"],
      ["@weekly", "at 00:00 on Sunday"],
      ["0 0 1 * *", "at 00:00 on day 1 of the month"],
      ["0 0 L * *", "at 00:00 on the last day of the month"],
      ["0 0 1,15 * 1", "at 00:00 on days 1 and 15 of the month or on Monday"],
      [
        "15 8 * JAN-MAR MON,WED,FRI",
        "at 08:15 on Monday, Wednesday and Friday in January to March",
      ],
      ["0 12 * * 7", "at 12:00 on Sunday"],
      ["* * * * * *", "every second"],
      ["*/10 * * * * *", "every 10 seconds"],
      ["30 0 9 * * *", "at 09:00:30 every day"],
      ["0-30/10 9-17 * * *", "minute every 10 from 0 to 30 past hours 9 to 17"],
    ];
    for (const [expr, words] of cases) assert.equal(cronInWords(expr), words, expr);
  });

  it("falls back to the expression when it cannot read it", () => {
    assert.equal(cronInWords("bad"), 'cron "bad"');
    assert.equal(cronInWords("0 9 * * FOO"), 'cron "0 9 * * FOO"');
  });

  it("adds the time zone, or says a one-off time in UTC", () => {
    assert.equal(
      scheduleInWords({ cron: "0 9 * * 1-5", time_zone: "Asia/Kolkata" }),
      "at 09:00 on Monday to Friday, Asia/Kolkata",
    );
    assert.equal(
      scheduleInWords({ at: "2026-12-06T09:00:00+05:30" }),
      "once, at 2026-12-06 03:30:00 UTC",
    );
  });

  it("joins lists as a sentence", () => {
    assert.equal(listWords([]), "");
    assert.equal(listWords(["a"]), "a");
    assert.equal(listWords(["a", "b", "c"]), "a, b and c");
  });
});
