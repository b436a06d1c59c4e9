/** The capped exponential backoff: doubling from the base, the cap, and the jitter's range. */
import { it } from "node:test";
import assert from "node:assert/strict";
import { backoffMs } from "../../../src/lib/backoff.ts";
import { seededRandom, type Random } from "../../../src/lib/random.ts";

it("doubles from the base after each failure and stays at the cap", () => {
  const p = { baseMs: 250, maxMs: 5_000 };
  const waits = [0, 1, 2, 3, 4, 5, 6, 50, 2_000].map((f) => backoffMs(f, p));
  assert.deepEqual(waits, [250, 500, 1_000, 2_000, 4_000, 5_000, 5_000, 5_000, 5_000]);
});

it("reaches a cap that is not a power of two of the base exactly", () => {
  assert.deepEqual(
    [0, 1, 2, 3, 4, 5, 6].map((f) => backoffMs(f, { baseMs: 20, maxMs: 1_000 })),
    [20, 40, 80, 160, 320, 640, 1_000],
  );
});

it("spreads each wait by a factor in [min, min + 1) drawn once per call", () => {
  let draws = 0;
  const fixed = (v: number): Random => ({ next: () => (draws++, v) });
  assert.equal(
    backoffMs(2, { baseMs: 100, maxMs: 1_000, jitter: { random: fixed(0), min: 0.5 } }),
    200,
  );
  assert.equal(
    backoffMs(2, { baseMs: 100, maxMs: 1_000, jitter: { random: fixed(0.5), min: 1 } }),
    600,
  );
  assert.equal(
    backoffMs(9, { baseMs: 100, maxMs: 1_000, jitter: { random: fixed(0.25), min: 0.5 } }),
    750,
  );
  assert.equal(draws, 3);
  const random = seededRandom(7);
  for (let f = 0; f < 12; f++) {
    const capped = Math.min(1_000, 20 * 2 ** f);
    const w = backoffMs(f, { baseMs: 20, maxMs: 1_000, jitter: { random, min: 0.5 } });
    assert.ok(
      w >= capped * 0.5 && w < capped * 1.5,
      `failure ${f}: ${w} outside [${capped * 0.5}, ${capped * 1.5})`,
    );
  }
});
