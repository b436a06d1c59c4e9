/**
 * The waits between copies of a completion report (src/worker/report-backoff.ts): they double from
 * the first up to the cap, each spread by a factor in [0.5, 1.5) of the injected randomness, never
 * under the first; copies group by their 100 ms span.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { seededRandom, type Random } from "../../../src/lib/random.ts";
import {
  REPORT_DUE_GRAIN_MS,
  reportCopyWaitMs,
  reportDueSlot,
} from "../../../src/worker/report-backoff.ts";

const fixed = (v: number): Random => ({ next: () => v });

describe("report back-off: the wait before a report's next copy", () => {
  it("doubles per copy from the first wait up to the cap (factor 1: a draw of 0.5)", () => {
    const waits = [1, 2, 3, 4, 5, 6, 7].map((n) => reportCopyWaitMs(n, 2_000, 30_000, fixed(0.5)));
    assert.deepEqual(waits, [2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]);
  });

  it("is spread by a factor in [0.5, 1.5) of the draw, and never under the first wait", () => {
    assert.equal(reportCopyWaitMs(1, 2_000, 30_000, fixed(0)), 2_000, "0.5 × 2 s: held at 2 s");
    assert.equal(reportCopyWaitMs(1, 2_000, 30_000, fixed(0.99)), 2_980);
    assert.equal(reportCopyWaitMs(3, 2_000, 30_000, fixed(0)), 4_000, "0.5 × 8 s");
    assert.equal(reportCopyWaitMs(9, 2_000, 30_000, fixed(0.99)), 44_700, "1.49 × the cap");
  });

  it("spreads reports that went together: many draws give many different waits, all in range", () => {
    const random = seededRandom(7);
    const waits = Array.from({ length: 1_000 }, () => reportCopyWaitMs(2, 5_000, 30_000, random));
    for (const w of waits) assert.ok(w >= 5_000 && w < 15_000, `wait ${w}`);
    assert.ok(new Set(waits).size > 900, "spread, not one period");
    const mean = waits.reduce((a, b) => a + b, 0) / waits.length;
    assert.ok(mean > 9_000 && mean < 11_000, `mean ${mean} about 2 × 5 s`);
  });

  it("a cap under the first wait is the first wait", () => {
    assert.equal(reportCopyWaitMs(5, 15_000, 1_000, fixed(0.5)), 15_000);
  });

  it("refuses a copy count that is not a positive integer", () => {
    for (const n of [0, -1, 1.5, Number.NaN])
      assert.throws(() => reportCopyWaitMs(n, 1_000, 2_000, fixed(0.5)), RangeError);
  });
});

describe("report back-off: copies due together go together", () => {
  it("a due instant's span is the next multiple of the grain", () => {
    assert.equal(REPORT_DUE_GRAIN_MS, 100);
    assert.equal(reportDueSlot(1_000), 1_000);
    assert.equal(reportDueSlot(1_001), 1_100);
    assert.equal(reportDueSlot(1_099), 1_100);
    assert.equal(reportDueSlot(1_100.5), 1_200);
  });
});
