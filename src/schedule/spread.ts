/**
 * Deterministic spread of runs inside a flexible window (README, "Flexible window"): a job
 * that may start up to W seconds late gets an offset derived from a stable hash of its id and
 * the occurrence, so a burst of jobs due at :00 spreads evenly and every node computes the
 * same offset without coordination.
 *
 * The hash is frozen: 32-bit FNV-1a over the UTF-8 bytes of `${jobId}\n${occurrenceMs}`,
 * reduced modulo the window in ms. Changing it moves every flexible run: treat it as a
 * migration.
 */
import { argumentError } from "./errors.ts";

/** Largest window whose ms fit in the 32-bit hash (about 49.7 days). */
export const MAX_SPREAD_WINDOW_S = 4_294_967;

const encoder = new TextEncoder();

/** 32-bit FNV-1a of `bytes`, unsigned. */
export function fnv1a32(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (const b of bytes) {
    h ^= b;
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** Offset in [0, windowS × 1000) ms for this job's run at `occurrenceMs`; 0 when windowS is 0. */
export function spreadOffsetMs(jobId: string, occurrenceMs: number, windowS: number): number {
  if (!Number.isFinite(windowS) || windowS < 0 || windowS > MAX_SPREAD_WINDOW_S) {
    throw argumentError(`flexible window must be 0-${MAX_SPREAD_WINDOW_S} seconds, got ${windowS}`);
  }
  if (!Number.isFinite(occurrenceMs))
    throw argumentError(`occurrence must be an epoch-ms instant, got ${occurrenceMs}`);
  const windowMs = Math.floor(windowS * 1000);
  if (windowMs === 0) return 0;
  return fnv1a32(encoder.encode(`${jobId}\n${occurrenceMs}`)) % windowMs;
}
