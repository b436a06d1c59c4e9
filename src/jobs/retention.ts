/**
 * Bounded history, the pure part: which run records a job keeps, and the job actor wrapped so it
 * asks its shell to prune them and to purge a deleted job (run-retention.ts performs both).
 * A job keeps its newest `keepRuns` terminal runs (by occurrence time, read from the run id) and
 * none older than `maxAgeMs`; active runs are never pruned. So a job's records stay below
 * keepRuns + 2 × pruneEveryRuns + its active runs, which keeps a runs page cheap. A daily
 * `retention_sweep` timer applies the age limit to jobs that no longer run.
 *
 * Pitfall: a deleted job is purged (`purge_deleted`) only after the idempotency window of its
 * create, or a replayed create would find no tombstone and make the job again. Pure: no I/O, no
 * clock.
 */
import type { ActorContext, Decision, HostEffect } from "../actors/actor.ts";
import { hash32 } from "../cluster/hash.ts";
import { KairosError } from "../lib/errors.ts";
import { formatUtc } from "../schedule/index.ts";
import type { JobEffect, JobMsg, JobReply, makeJobActor } from "./job-actor.ts";
import type { JobState } from "./job-state.ts";
import { TERMINAL } from "./model.ts";
import { parseRunId } from "./ids.ts";

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
  for (const [field, [min, max]] of Object.entries(LIMITS) as [keyof RetentionConfig, [number, number]][]) {
    const v = cfg[field];
    if (!Number.isInteger(v) || v < min || v > max) {
      throw new KairosError("invalid_argument", `retention ${field}: ${v} is not a whole number ${min}-${max}`, { field });
    }
  }
  return Object.freeze(cfg);
}

/**
 * A deleted job's state is purged once its create's Idempotency-Key has expired: the idem
 * bucket's TTL (24 h, src/cluster/buckets.ts) plus a margin.
 */
const PURGE_AFTER_CREATE_MS = 24 * 3_600_000 + 10 * 60_000;
const DAY_MS = 86_400_000;

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
  return out.sort((a, b) => (a.scheduledFor === b.scheduledFor ? (a.runId < b.runId ? 1 : a.runId > b.runId ? -1 : 0) : a.scheduledFor < b.scheduledFor ? 1 : -1));
}

/** The keys retention deletes from one job's records: beyond the newest keepRuns, or too old. */
export function runsToPrune(keys: readonly string[], active: ReadonlySet<string>, cfg: RetentionConfig, nowMs: number): string[] {
  const settled = orderRunKeys(keys).filter((k) => !active.has(k.runId));
  const out: string[] = [];
  settled.forEach((k, i) => {
    if ((cfg.keepRuns > 0 && i >= cfg.keepRuns) || (cfg.maxAgeMs > 0 && k.ms < nowMs - cfg.maxAgeMs)) out.push(k.key);
  });
  return out.reverse(); // oldest first
}

export type RetentionMsg = { kind: "purge_deleted" } | { kind: "retention_sweep" };

/** Effects for the shell (performed after the state write, while the partition is held). */
export type RetentionEffect =
  /** `settled` terminal records were written; `force`: prune now (the daily sweep). */
  | { kind: "prune_runs"; settled: number; active: string[]; force: boolean }
  | { kind: "purge_job" };

export const isRetentionEffect = (fx: { kind: string }): fx is RetentionEffect => fx.kind === "prune_runs" || fx.kind === "purge_job";

type JobDefinition = ReturnType<typeof makeJobActor>;
type Msg = JobMsg | RetentionMsg;
type Fx = JobEffect | RetentionEffect;
type D = Decision<JobState, JobReply, Fx>;

const PURGE_TIMER = "retention:purge";
const SWEEP_TIMER = "retention:sweep";

function purgeTimer(s: JobState, nowMs: number, cfg: RetentionConfig): HostEffect<Msg> {
  const atMs = Math.max(nowMs + cfg.purgeDeletedAfterMs, (s.job?.created_at_ms ?? 0) + PURGE_AFTER_CREATE_MS);
  return { kind: "timer", name: PURGE_TIMER, atMs, msg: { kind: "purge_deleted" } };
}

/** The job's daily sweep: a fixed time of day per job (spread by hash), the next one after now. */
function sweepTimer(id: string, nowMs: number): HostEffect<Msg> {
  const slot = hash32(id) % DAY_MS;
  const atMs = Math.floor(nowMs / DAY_MS) * DAY_MS + slot + (nowMs % DAY_MS >= slot ? DAY_MS : 0);
  return { kind: "timer", name: SWEEP_TIMER, atMs, msg: { kind: "retention_sweep" } };
}

const prune = (s: JobState, settled: number, force: boolean): RetentionEffect => ({ kind: "prune_runs", settled, active: s.runs.map((r) => r.run_id), force });

/** The job actor with retention: the same behaviour plus the messages and effects above. */
export function withRetention(def: JobDefinition, cfg: RetentionConfig) {
  const limited = cfg.keepRuns > 0 || cfg.maxAgeMs > 0;
  return {
    ...def,
    onActivate(s: JobState, ctx: ActorContext): HostEffect<unknown>[] {
      const fx: HostEffect<unknown>[] = [...(def.onActivate?.(s, ctx) ?? [])];
      if (s.job && s.deleted) fx.push(purgeTimer(s, ctx.nowMs, cfg));
      else if (s.job && limited) fx.push(sweepTimer(ctx.id, ctx.nowMs));
      return fx;
    },
    receive(s: JobState, msg: Msg, ctx: ActorContext): D {
      if (msg.kind === "purge_deleted") return { state: s, reply: null, ...(s.job && s.deleted ? { post: [{ kind: "purge_job" }] } : {}) };
      if (msg.kind === "retention_sweep") {
        if (!s.job || s.deleted || !limited) return { state: s, reply: null };
        return { state: s, reply: null, post: [prune(s, 0, true)], effects: [sweepTimer(ctx.id, ctx.nowMs)] };
      }
      const d: D = def.receive(s, msg, ctx);
      const effects: HostEffect<unknown>[] = [];
      if (d.state.job && d.state.deleted && !s.deleted) effects.push(purgeTimer(d.state, ctx.nowMs, cfg));
      if (!s.job && d.state.job && limited) effects.push(sweepTimer(ctx.id, ctx.nowMs));
      // `settle` only rewrites a record a crash left behind, so it adds no terminal run.
      const settled = limited ? (d.pre ?? []).filter((fx) => fx.kind === "put_run" && fx.mode !== "settle" && TERMINAL.has(fx.record.status)).length : 0;
      if (effects.length === 0 && settled === 0) return d;
      return {
        ...d,
        ...(effects.length > 0 ? { effects: [...(d.effects ?? []), ...effects] } : {}),
        ...(settled > 0 ? { post: [...(d.post ?? []), prune(d.state, settled, false)] } : {}),
      };
    },
  };
}
