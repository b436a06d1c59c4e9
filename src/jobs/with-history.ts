/**
 * The job actor with its history kept: the runs index (`withRunIndex`: the index kept in the
 * state, its chunk writes as `pre` effects; run-index.ts) and retention (`withRetention`: the
 * `prune_runs` / `purge_job` effects and their timers; retention.ts, performed by
 * run-retention.ts). The same behaviour otherwise: wrappers around the definition.
 *
 * Pure: no I/O, no clock (times come from the actor context).
 */
import type { ActorContext, ActorDefinition, Decision, HostEffect } from "../actors/actor.ts";
import { hash32 } from "../cluster/hash.ts";
import type { makeJobActor } from "./job-actor.ts";
import type { JobEffect, JobMsg, JobReply } from "../job-state/job-types.ts";
import type { JobState } from "../job-state/job-state.ts";
import { TERMINAL } from "../protocol/model.ts";
import type { RetentionConfig, RetentionEffect, RetentionMsg } from "../history/retention.ts";
import { indexAppend, indexDecision, type RunIndexEffect } from "../history/run-index.ts";

/**
 * The job actor with the runs index: the same behaviour, plus `index` kept in the state and the
 * chunk writes appended to the decision's `pre` effects (after its run records).
 */
export function withRunIndex<M, E extends { kind: string }>(
  def: ActorDefinition<JobState, M, JobReply, E>,
): ActorDefinition<JobState, M, JobReply, E | RunIndexEffect> {
  return {
    ...def,
    receive(s, msg, ctx) {
      const d = def.receive(s, msg, ctx);
      const job = d.state.job;
      if (!job) return d;
      const settled = (msg as { kind?: string; run_id?: string }).kind === "run_settled";
      if (settled && d.state.index) {
        const next = indexAppend(d.state.index, job.job_id, [(msg as { run_id: string }).run_id]);
        return {
          ...d,
          state: { ...d.state, index: next.index },
          ...(next.effects.length > 0 ? { pre: [...(d.pre ?? []), ...next.effects] } : {}),
        };
      }
      // A run-now's record is a post effect (`create_run`): indexed all the same.
      const next = indexDecision(
        d.state.index,
        job.job_id,
        d.post && d.post.length > 0 ? [...(d.pre ?? []), ...d.post] : d.pre,
        !s.job,
      );
      if (!next) return d;
      return {
        ...d,
        state: { ...d.state, index: next.index },
        ...(next.effects.length > 0 ? { pre: [...(d.pre ?? []), ...next.effects] } : {}),
      };
    },
  };
}

/**
 * A deleted job's state is purged once its create's Idempotency-Key has expired: the idem
 * bucket's TTL (24 h, src/cluster/buckets.ts) plus a margin.
 */
const PURGE_AFTER_CREATE_MS = 24 * 3_600_000 + 10 * 60_000;
const DAY_MS = 86_400_000;

type JobDefinition = ReturnType<typeof makeJobActor>;
type Msg = JobMsg | RetentionMsg;
type Fx = JobEffect | RetentionEffect;
type D = Decision<JobState, JobReply, Fx>;

const PURGE_TIMER = "retention:purge";
const SWEEP_TIMER = "retention:sweep";

function purgeTimer(s: JobState, nowMs: number, cfg: RetentionConfig): HostEffect<Msg> {
  const atMs = Math.max(
    nowMs + cfg.purgeDeletedAfterMs,
    (s.job?.created_at_ms ?? 0) + PURGE_AFTER_CREATE_MS,
  );
  return { kind: "timer", name: PURGE_TIMER, atMs, msg: { kind: "purge_deleted" } };
}

/** The job's daily sweep: a fixed time of day per job (spread by hash), the next one after now. */
function sweepTimer(id: string, nowMs: number): HostEffect<Msg> {
  const slot = hash32(id) % DAY_MS;
  const atMs = Math.floor(nowMs / DAY_MS) * DAY_MS + slot + (nowMs % DAY_MS >= slot ? DAY_MS : 0);
  return { kind: "timer", name: SWEEP_TIMER, atMs, msg: { kind: "retention_sweep" } };
}

const prune = (s: JobState, settled: number, force: boolean): RetentionEffect => ({
  kind: "prune_runs",
  settled,
  active: s.runs.map((r) => r.run_id),
  force,
});

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
      if (msg.kind === "purge_deleted")
        return {
          state: s,
          reply: null,
          ...(s.job && s.deleted ? { post: [{ kind: "purge_job" }] } : {}),
        };
      if (msg.kind === "retention_sweep") {
        if (!s.job || s.deleted || !limited) return { state: s, reply: null };
        // A run-now's end not written yet (JobState.ends_unwritten): the state is written before
        // the prune (a post effect), which may take that run's record.
        const { ends_unwritten: unwritten, ...written } = s;
        return {
          state: unwritten ? written : s,
          reply: null,
          post: [prune(s, 0, true)],
          effects: [sweepTimer(ctx.id, ctx.nowMs)],
        };
      }
      const d: D = def.receive(s, msg, ctx);
      const effects: HostEffect<unknown>[] = [];
      if (d.state.job && d.state.deleted && !s.deleted)
        effects.push(purgeTimer(d.state, ctx.nowMs, cfg));
      if (!s.job && d.state.job && limited) effects.push(sweepTimer(ctx.id, ctx.nowMs));
      // `settle` only rewrites a record a crash left behind, so it adds no terminal run.
      const settled = limited
        ? (d.pre ?? []).filter(
            (fx) => fx.kind === "put_run" && fx.mode !== "settle" && TERMINAL.has(fx.record.status),
          ).length
        : 0;
      if (effects.length === 0 && settled === 0) return d;
      return {
        ...d,
        ...(effects.length > 0 ? { effects: [...(d.effects ?? []), ...effects] } : {}),
        ...(settled > 0 ? { post: [...(d.post ?? []), prune(d.state, settled, false)] } : {}),
      };
    },
  };
}
