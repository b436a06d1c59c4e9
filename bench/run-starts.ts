/**
 * When a run executed, read from its record the same way by every benchmark: an attempt whose
 * lease expired before it started (not counted against max_attempts) never executed, so a run
 * starts at its first attempt that started, and executed twice only if two attempts started.
 * (Reading attempts[0] alone would leave such runs out of "started" and count them as
 * duplicates.)
 */
import type { RunView } from "../src/protocol/model.ts";

/** The start of the run's first attempt that started, if any did. */
export function firstStartedAt(r: RunView): string | undefined {
  return r.attempts.find((a) => a.started_at !== null)?.started_at ?? undefined;
}

/** How many of the run's attempts started (executions). */
export function executions(r: RunView): number {
  return r.attempts.filter((a) => a.started_at !== null).length;
}
