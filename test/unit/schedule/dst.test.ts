/**
 * The daylight-saving rule on real zones: a wall time occurring once → that instant; twice
 * (fall back) → only the first; not at all (spring forward) → the transition instant; wall
 * times mapping to one instant → one occurrence. 60-minute changes (New York, London),
 * 30-minute (Lord Howe), a 45-minute offset (Chatham), and midnight transitions (Santiago,
 * Beirut). Expected instants are worked out by hand from the zones' published rules.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { nextIso } from "./helpers.ts";

describe("America/New_York 2026 (EST -5 / EDT -4)", () => {
  const NY = "America/New_York";
  it("spring forward: 02:30 on 2026-03-08 does not exist and fires at 03:00 EDT = 07:00Z", () => {
    assert.deepEqual(nextIso("30 2 * * *", NY, "2026-03-07T12:00:00Z", 2), [
      "2026-03-08T07:00:00Z",
      "2026-03-09T06:30:00Z",
    ]);
  });
  it("every wall time in the gap collapses to one occurrence", () => {
    assert.deepEqual(nextIso("*/15 2 * * *", NY, "2026-03-07T12:00:00Z", 3), [
      "2026-03-08T07:00:00Z",
      "2026-03-09T06:00:00Z",
      "2026-03-09T06:15:00Z",
    ]);
    assert.deepEqual(nextIso("*/20 30 2 * * *", NY, "2026-03-08T06:00:00Z", 2), [
      "2026-03-08T07:00:00Z",
      "2026-03-09T06:30:00Z",
    ]);
  });
  it("gap wall times and the real 03:00 that follows map to the same instant once", () => {
    assert.deepEqual(nextIso("0,30 2,3 * * *", NY, "2026-03-08T05:00:00Z", 3), [
      "2026-03-08T07:00:00Z",
      "2026-03-08T07:30:00Z",
      "2026-03-09T06:00:00Z",
    ]);
  });
  it("fall back: 01:30 on 2026-11-01 occurs twice and fires once, at the first (EDT)", () => {
    assert.deepEqual(nextIso("30 1 * * *", NY, "2026-10-31T12:00:00Z", 2), [
      "2026-11-01T05:30:00Z",
      "2026-11-02T06:30:00Z",
    ]);
  });
  it("hourly skips the repeated hour", () => {
    assert.deepEqual(nextIso("0 * * * *", NY, "2026-11-01T04:30:00Z", 3), [
      "2026-11-01T05:00:00Z",
      "2026-11-01T07:00:00Z",
      "2026-11-01T08:00:00Z",
    ]);
  });
  it("from inside the repeated hour, the repeats are not fired", () => {
    // 06:10Z is 01:10 EST (second pass); 01:20 and 01:40 already fired in the first pass.
    assert.deepEqual(nextIso("*/20 * * * *", NY, "2026-11-01T06:10:00Z", 2), [
      "2026-11-01T07:00:00Z",
      "2026-11-01T07:20:00Z",
    ]);
    // 05:50Z is 01:50 EDT (first pass); the next wall time not yet passed is 02:00 EST.
    assert.deepEqual(nextIso("*/20 * * * *", NY, "2026-11-01T05:50:00Z", 1), [
      "2026-11-01T07:00:00Z",
    ]);
  });
});

describe("Europe/London 2026 (GMT +0 / BST +1)", () => {
  it("spring forward at 01:00 GMT on 2026-03-29", () => {
    assert.deepEqual(nextIso("30 1 * * *", "Europe/London", "2026-03-28T12:00:00Z", 2), [
      "2026-03-29T01:00:00Z",
      "2026-03-30T00:30:00Z",
    ]);
  });
  it("fall back at 01:00 GMT on 2026-10-25", () => {
    assert.deepEqual(nextIso("30 1 * * *", "Europe/London", "2026-10-24T12:00:00Z", 2), [
      "2026-10-25T00:30:00Z",
      "2026-10-26T01:30:00Z",
    ]);
  });
});

describe("Australia/Lord_Howe 2026 (+10:30 / +11, a 30-minute change)", () => {
  it("spring forward 02:00 → 02:30 on 2026-10-04: 02:15 fires at the transition", () => {
    assert.deepEqual(nextIso("15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z", 2), [
      "2026-10-03T15:30:00Z",
      "2026-10-04T15:15:00Z",
    ]);
  });
  it("fall back 02:00 → 01:30 on 2026-04-05: 01:45 fires once, at +11", () => {
    assert.deepEqual(nextIso("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z", 2), [
      "2026-04-04T14:45:00Z",
      "2026-04-05T15:15:00Z",
    ]);
  });
});

describe("Pacific/Chatham 2026 (+12:45 / +13:45)", () => {
  it("spring forward 02:45 → 03:45 on 2026-09-27: 03:00 fires at the transition", () => {
    assert.deepEqual(nextIso("0 3 * * *", "Pacific/Chatham", "2026-09-26T00:00:00Z", 2), [
      "2026-09-26T14:00:00Z",
      "2026-09-27T13:15:00Z",
    ]);
  });
  it("fall back 03:45 → 02:45 on 2026-04-05: 03:00 fires once, at +13:45", () => {
    assert.deepEqual(nextIso("0 3 * * *", "Pacific/Chatham", "2026-04-04T00:00:00Z", 2), [
      "2026-04-04T13:15:00Z",
      "2026-04-05T14:15:00Z",
    ]);
  });
});

describe("transitions at midnight", () => {
  it("America/Santiago: midnight of 2026-09-06 does not exist; 0 0 * * * fires at the first instant after the gap", () => {
    assert.deepEqual(nextIso("0 0 * * *", "America/Santiago", "2026-09-05T00:00:00Z", 3), [
      "2026-09-05T04:00:00Z",
      "2026-09-06T04:00:00Z",
      "2026-09-07T03:00:00Z",
    ]);
  });
  it("America/Santiago: 23:30 on 2026-04-04 occurs twice (00:00 → 23:00) and fires at the first", () => {
    assert.deepEqual(nextIso("30 23 * * *", "America/Santiago", "2026-04-04T12:00:00Z", 2), [
      "2026-04-05T02:30:00Z",
      "2026-04-06T03:30:00Z",
    ]);
  });
  it("Asia/Beirut: midnight of 2026-03-29 does not exist", () => {
    assert.deepEqual(nextIso("0 0 * * *", "Asia/Beirut", "2026-03-27T00:00:00Z", 3), [
      "2026-03-27T22:00:00Z",
      "2026-03-28T22:00:00Z",
      "2026-03-29T21:00:00Z",
    ]);
  });
  it("Asia/Beirut: 23:30 on 2026-10-24 occurs twice and fires at the first (+3)", () => {
    assert.deepEqual(nextIso("30 23 * * *", "Asia/Beirut", "2026-10-24T12:00:00Z", 2), [
      "2026-10-24T20:30:00Z",
      "2026-10-25T21:30:00Z",
    ]);
  });
  it("a day-of-month schedule on the skipped midnight still fires that day", () => {
    assert.deepEqual(nextIso("0 0 6 9 *", "America/Santiago", "2026-01-01T00:00:00Z", 1), [
      "2026-09-06T04:00:00Z",
    ]);
  });
});

describe("zones without daylight saving", () => {
  it("Asia/Kolkata +05:30", () => {
    assert.deepEqual(nextIso("0 9 * * 1-5", "Asia/Kolkata", "2026-03-06T00:00:00Z", 2), [
      "2026-03-06T03:30:00Z",
      "2026-03-09T03:30:00Z",
    ]);
  });
  it("UTC", () => {
    assert.deepEqual(nextIso("0 0 1 * *", "UTC", "2026-12-15T00:00:00Z", 2), [
      "2027-01-01T00:00:00Z",
      "2027-02-01T00:00:00Z",
    ]);
  });
});
