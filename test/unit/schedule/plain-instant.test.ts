/**
 * `plainInstantMs` (at.ts), the arithmetic reading of an `at` in its plain form, against
 * Temporal's: equal whenever it answers, and answering for every in-range plain instant; anything
 * else (a day the month lacks, a leap second, more than milliseconds, a year before 1000, an offset
 * out of range) left to Temporal.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { Temporal } from "@js-temporal/polyfill";
import { parseAt, plainInstantMs } from "../../../src/schedule/at.ts";

const two = (n: number) => String(n).padStart(2, "0");

/** Plain-form texts with every field drawn a little past its range. */
const plainText = fc
  .record({
    y: fc.integer({ min: 900, max: 9999 }),
    mo: fc.integer({ min: 0, max: 13 }),
    d: fc.integer({ min: 0, max: 32 }),
    h: fc.integer({ min: 0, max: 24 }),
    mi: fc.integer({ min: 0, max: 60 }),
    s: fc.integer({ min: 0, max: 60 }),
    frac: fc.option(fc.stringMatching(/^\d{1,4}$/), { nil: undefined }),
    off: fc.option(
      fc.record({
        sign: fc.constantFrom("+", "-"),
        h: fc.integer({ min: 0, max: 24 }),
        m: fc.integer({ min: 0, max: 60 }),
      }),
      { nil: undefined },
    ),
  })
  .map(
    (v) =>
      `${String(v.y).padStart(4, "0")}-${two(v.mo)}-${two(v.d)}T${two(v.h)}:${two(v.mi)}:${two(v.s)}` +
      (v.frac === undefined ? "" : `.${v.frac}`) +
      (v.off === undefined ? "Z" : `${v.off.sign}${two(v.off.h)}:${two(v.off.m)}`),
  );

function temporalMs(text: string): number | "invalid" {
  try {
    return Temporal.Instant.from(text).epochMilliseconds;
  } catch {
    return "invalid";
  }
}

describe("plainInstantMs", () => {
  it("equals Temporal whenever it answers", () => {
    fc.assert(
      fc.property(plainText, (text) => {
        const fast = plainInstantMs(text);
        if (fast !== undefined) assert.equal(fast, temporalMs(text), text);
      }),
      { numRuns: 20_000 },
    );
  });

  it("answers every in-range plain instant", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: Date.UTC(1000, 0, 1), max: Date.UTC(9999, 11, 31, 23, 59, 59, 999) }),
        fc.integer({ min: -23 * 60 - 59, max: 23 * 60 + 59 }),
        (ms, offsetMin) => {
          const local = new Date(ms + offsetMin * 60_000);
          if (local.getUTCFullYear() < 1000 || local.getUTCFullYear() > 9999) return;
          const abs = Math.abs(offsetMin);
          const off =
            offsetMin === 0
              ? "Z"
              : `${offsetMin < 0 ? "-" : "+"}${two(Math.floor(abs / 60))}:${two(abs % 60)}`;
          const text = local.toISOString().replace("Z", off);
          assert.equal(plainInstantMs(text), ms, text);
          assert.equal(parseAt(text), ms, text);
        },
      ),
      { numRuns: 5_000 },
    );
  });

  it("leaves the other forms to Temporal", () => {
    for (const text of [
      "2026-02-29T00:00:00Z", // no such day
      "2026-06-30T23:59:60Z", // a leap second
      "2026-03-08T07:00:00.1234Z", // more than milliseconds
      "2026-03-08t07:00:00z", // lower case
      "2026-03-08 07:00:00Z", // a space
      "0999-03-08T07:00:00Z",
      "2026-03-08T07:00:00+24:00",
    ])
      assert.equal(plainInstantMs(text), undefined, text);
    assert.equal(parseAt("2026-03-08T07:00:00.1234Z"), Date.UTC(2026, 2, 8, 7, 0, 0, 123));
  });
});
