/**
 * Retry delays. Attempt n+1 (after n failures) waits `base × 2^(n−1)` (exponential) or `base`
 * (fixed), plus a random extra of up to the same again, capped at `max_s`. The "random" extra is
 * a deterministic hash of (run id, attempt), so the pure core needs no random source, retries of
 * many runs do not synchronise, and a replay decides the same.
 */
import { hash32 } from "../cluster/hash.ts";
import type { RetryPolicy } from "../protocol/model.ts";

export function retryDelayMs(policy: RetryPolicy, failedAttempt: number, runId: string): number {
  const baseMs = policy.base_s * 1000;
  const core = policy.backoff === "fixed" ? baseMs : baseMs * 2 ** Math.min(failedAttempt - 1, 30);
  const jitter = (hash32(`${runId}#${failedAttempt}`) / 2 ** 32) * core;
  return Math.floor(Math.min(core + jitter, policy.max_s * 1000));
}
