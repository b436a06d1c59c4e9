/**
 * Bounded history, the pure part: which run records a job keeps, and what the job actor wrapped
 * for it (`withRetention`, with-history.ts) asks its shell: to prune them and to purge a deleted
 * job (run-retention.ts performs both).
 * A job keeps its newest `keepRuns` terminal runs (by occurrence time, read from the run id) and
 * none older than `maxAgeMs`; active runs are never pruned. So a job's records stay below
 * keepRuns + 2 × pruneEveryRuns + its active runs, which keeps a runs page cheap. A daily
 * `retention_sweep` timer applies the age limit to jobs that no longer run.
 *
 * Pitfall: a deleted job is purged (`purge_deleted`) only after the idempotency window of its
 * create, or a replayed create would find no tombstone and make the job again. Pure: no I/O, no
 * clock.
 */
import { KairosError } from "../lib/errors.ts";
import { formatUtc } from "../schedule/index.ts";
import { parseRunId } from "../protocol/ids.ts";

export interface RetentionConfig {
  /** Newest terminal runs kept per job; 0: no count limit. */
  readonly keepRuns: number;
  /** Runs whose occurrence is older than this are deleted; 0: no age limit. */
  readonly maxAgeMs: number;
  /** A job's history is pruned after this many terminal records (the slack above keepRuns). */
  readonly pruneEveryRuns: number;
  /** A deleted job is purged this long after the delete (never within a day of its create). */
  readonly purgeDeletedAfterMs: number;
  /**
   * Most dropped records one pass deletes one by one (those written after the oldest record kept;
   * the rest go in one purge, run-retention.ts); the remainder waits for the next pass.
   */
  readonly maxDeletesPerPass: number;
}

export const DEFAULT_RETENTION: RetentionConfig = Object.freeze({
  keepRuns: 1_000,
  maxAgeMs: 30 * 86_400_000,
  pruneEveryRuns: 100,
  purgeDeletedAfterMs: 60_000,
  maxDeletesPerPass: 5_000,
});

const LIMITS: Record<keyof RetentionConfig, [number, number]> = {
  keepRuns: [0, 1_000_000],
  maxAgeMs: [0, 10 * 365 * 86_400_000],
  pruneEveryRuns: [1, 100_000],
  purgeDeletedAfterMs: [0, 30 * 86_400_000],
  maxDeletesPerPass: [1, 1_000_000],
};

/** Defaults, overridden and validated (whole numbers within LIMITS), frozen. */
export function retentionConfig(opts: Partial<RetentionConfig> = {}): RetentionConfig {
  const cfg = { ...DEFAULT_RETENTION, ...opts };
  for (const [field, [min, max]] of Object.entries(LIMITS) as [
    keyof RetentionConfig,
    [number, number],
  ][]) {
    const v = cfg[field];
    if (!Number.isInteger(v) || v < min || v > max) {
      throw new KairosError(
        "invalid_argument",
        `retention ${field}: ${v} is not a whole number ${min}-${max}`,
        { field },
      );
    }
  }
  return Object.freeze(cfg);
}

/** Occurrence time and manual sequence of a run id (ids.ts `parseRunId`), or null. */
export function runTime(runId: string): { ms: number; seq: number } | null {
  const p = parseRunId(runId);
  return p ? { ms: p.ms, seq: p.seq } : null;
}

/** A run key with its order fields: runs pages sort by (scheduled_for, run_id), newest first. */
export interface RunKeyOrder {
  readonly key: string;
  readonly runId: string;
  readonly ms: number;
  /** The record's `scheduled_for` (whole seconds, as stored). */
  readonly scheduledFor: string;
}

/** Keys of one job's run records, newest first, as a runs page orders them; bad keys dropped. */
export function orderRunKeys(keys: readonly string[]): RunKeyOrder[] {
  const out: RunKeyOrder[] = [];
  for (const key of keys) {
    const runId = key.slice(key.lastIndexOf(".") + 1);
    const t = runTime(runId);
    if (t) out.push({ key, runId, ms: t.ms, scheduledFor: formatUtc(t.ms) });
  }
  return out.sort((a, b) =>
    a.scheduledFor === b.scheduledFor
      ? a.runId < b.runId
        ? 1
        : a.runId > b.runId
          ? -1
          : 0
      : a.scheduledFor < b.scheduledFor
        ? 1
        : -1,
  );
}

/** The keys retention deletes from one job's records: beyond the newest keepRuns, or too old. */
export function runsToPrune(
  keys: readonly string[],
  active: ReadonlySet<string>,
  cfg: RetentionConfig,
  nowMs: number,
): string[] {
  const settled = orderRunKeys(keys).filter((k) => !active.has(k.runId));
  const out: string[] = [];
  settled.forEach((k, i) => {
    if (
      (cfg.keepRuns > 0 && i >= cfg.keepRuns) ||
      (cfg.maxAgeMs > 0 && k.ms < nowMs - cfg.maxAgeMs)
    )
      out.push(k.key);
  });
  return out.reverse(); // oldest first
}

export type RetentionMsg = { kind: "purge_deleted" } | { kind: "retention_sweep" };

/** Effects for the shell (performed after the state write, while the partition is held). */
export type RetentionEffect =
  /** `settled` terminal records were written; `force`: prune now (the daily sweep). */
  { kind: "prune_runs"; settled: number; active: string[]; force: boolean } | { kind: "purge_job" };

export const isRetentionEffect = (fx: { kind: string }): fx is RetentionEffect =>
  fx.kind === "prune_runs" || fx.kind === "purge_job";
