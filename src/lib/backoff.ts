/**
 * The one capped exponential backoff: the wait before the next try after `failures` failed ones
 * is `baseMs × 2^failures`, at most `maxMs`, optionally spread by a random factor. Every retry
 * loop of the shell takes its pause from here, with its own base and cap.
 */
import type { Random } from "./random.ts";

export interface BackoffPolicy {
  /** The wait after the first failure (`failures` = 0). */
  readonly baseMs: number;
  /** The longest wait (before the jitter). */
  readonly maxMs: number;
  /**
   * Spreads each wait by a factor in [`min`, `min` + 1) drawn from `random`, so that many
   * callers failing together do not retry together.
   */
  readonly jitter?: { readonly random: Random; readonly min: number };
}

/**
 * The wait after `failures` failed tries (0, 1, 2, …): `min(maxMs, baseMs × 2^failures)`, jittered.
 */
export function backoffMs(failures: number, p: BackoffPolicy): number {
  const capped = Math.min(p.maxMs, p.baseMs * 2 ** failures);
  return p.jitter === undefined ? capped : capped * (p.jitter.min + p.jitter.random.next());
}
