/**
 * When the next copy of a completion report goes (outbox.ts): the waits between copies grow
 * exponentially, from the report's first wait up to a cap, each spread by a random factor — so that
 * a saturated owner is not sent the same reports again at a fixed period (a burst's 200,000
 * reports were each sent about 13 times, every 5.5 s, while their owner was still decoding the
 * earlier copies), and reports that went out together do not come back together. A report is
 * never given up here: the outbox keeps copying until its completion deadline, past which the
 * owner's probe learns the outcome (worker/core.ts `giveUp`). Pure: the clock and the randomness
 * are the caller's.
 */
import { backoffMs } from "../lib/backoff.ts";
import type { Random } from "../lib/random.ts";

/**
 * The spread of each wait: a factor in [JITTER_MIN, JITTER_MIN + 1) of the exponential wait, and
 * never under the first wait (a copy before its predecessor's own wait ended would spin).
 */
const JITTER_MIN = 0.5;

/**
 * Copies of reports due in the same span of this many ms go in one batch (one timer, one request
 * per partition), however their jitter spread them: a burst's reports cost a few hundred timers,
 * not one each.
 */
export const REPORT_DUE_GRAIN_MS = 100;

/**
 * The wait (ms) from the `copies`-th copy of a report (1: the first) to the next one: `firstMs`
 * doubled per copy sent after the first, at most `capMs` (and never under `firstMs`), times a
 * factor in [0.5, 1.5) drawn from `random`, and never under `firstMs`.
 */
export function reportCopyWaitMs(
  copies: number,
  firstMs: number,
  capMs: number,
  random: Random,
): number {
  if (!Number.isInteger(copies) || copies < 1)
    throw new RangeError(`copies must be a positive integer, got ${copies}`);
  const cap = Math.max(firstMs, capMs);
  const w = backoffMs(copies - 1, {
    baseMs: firstMs,
    maxMs: cap,
    jitter: { random, min: JITTER_MIN },
  });
  return Math.max(firstMs, Math.round(w));
}

/** The span of REPORT_DUE_GRAIN_MS holding `due` (a monotonic ms instant): the batch a copy joins. */
export function reportDueSlot(due: number): number {
  return Math.ceil(due / REPORT_DUE_GRAIN_MS) * REPORT_DUE_GRAIN_MS;
}
