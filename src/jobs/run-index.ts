/**
 * The runs index, the pure part: a per-job, append-only list of the job's run records in the order
 * they were created, so a runs page reads O(page) newest first (NATS KV cannot list keys in
 * reverse, and a key listing of the job costs O(retained history)). run-index-store.ts writes and
 * reads it; run-pages.ts pages through it.
 *
 * Shape. Every run record the job actor creates (a `put_run` effect in mode `create` or
 * `terminal`: runs, manual runs, skipped and missed occurrences) gets the next POSITION in the job's
 * sequence. The job state (`JobState.index`) holds `seq`, the number of chunks written, and
 * `pending`, the ids of the records created since (fewer than CHUNK after every decision). When
 * CHUNK have accumulated, the decision also writes the immutable chunk record `seq` (runs bucket,
 * key `ix.<p>.<tenant>.<job>.<seq, 10 digits>`) listing them, and the state keeps only the counter:
 * position = seq · CHUNK + offset, and a position's run never changes, so a cursor (a position)
 * stays valid while pending ids move into a chunk between two pages.
 *
 * Cost on the run path: NO extra KV operation per run — the ids ride on the job state (a few
 * bytes each: the run id without its job id), written with the job's next state write (a `fire`'s
 * own change is deferred: tx.ts; readers therefore ask the job actor for its index, which it
 * answers from memory) — plus one chunk write per CHUNK records. A fire lost with its deferred
 * state fires again and re-adds the ids of the records it meets.
 *
 * Crash safety: the chunk is a `pre` effect, written before the state write that drops its ids
 * from `pending`. A crash (or a lost CAS) in between leaves the state at the same `seq` with the
 * ids still pending; the next decision writes chunk `seq` again (over the orphan, with the ids the
 * state then holds). A chunk carries its writer's epoch: a stale owner finding a later epoch's chunk
 * stops (`not_owner`), as with run records. Records are created before the chunk naming them.
 *
 * Not indexed: a record `settle`d by a pause, delete or schedule change (the orphan of a crash
 * between a record's create and the state write, never fired again): indexing it could list it
 * twice if its occurrence fires later. It stays readable by id and is pruned by retention.
 *
 * Jobs created before the index (state without `index`) are never indexed and keep the key listing
 * (run-pages.ts), bounded by retention: no migration.
 *
 * Pure: no I/O, no clock.
 */
import type { ActorDefinition } from "../actors/actor.ts";
import type { JobReply } from "./job-actor.ts";
import type { JobState, RunIndexState } from "./job-state.ts";

/** Run ids per chunk record: a page of 200 reads at most 5 chunks; the state holds < CHUNK ids. */
export const RUN_INDEX_CHUNK = 64;

export type { RunIndexState };

/** Effect (pre, before the state write): write chunk `seq` holding `ids` (suffixes, oldest first). */
export interface RunIndexEffect {
  kind: "write_run_index";
  seq: number;
  ids: string[];
}

export const isRunIndexEffect = (fx: { kind: string }): fx is RunIndexEffect => fx.kind === "write_run_index";

/** KV key (runs bucket) of a job's chunk `seq`; zero-padded so the keys sort by seq. */
export function runIndexKey(partition: number, tenantId: string, jobId: string, seq: number): string {
  return `${runIndexPrefix(partition, tenantId, jobId)}.${String(seq).padStart(10, "0")}`;
}

/** The chunk keys of one job are `<this>.<seq>`. */
export function runIndexPrefix(partition: number, tenantId: string, jobId: string): string {
  return `ix.${partition}.${tenantId}.${jobId}`;
}

/** The seq of a chunk key, or null. */
export function runIndexSeq(key: string): number | null {
  const n = Number(key.slice(key.lastIndexOf(".") + 1));
  return Number.isSafeInteger(n) && n >= 0 ? n : null;
}

/** Stored suffix of a run id of `jobId` (its id is `<job_id>-<suffix>`). */
export function runIdSuffix(jobId: string, runId: string): string {
  return runId.startsWith(`${jobId}-`) ? runId.slice(jobId.length + 1) : runId;
}

export const runIdOfSuffix = (jobId: string, suffix: string): string => `${jobId}-${suffix}`;

/** Number of indexed positions (the newest is this − 1). */
export const indexLength = (ix: RunIndexState): number => ix.seq * RUN_INDEX_CHUNK + ix.pending.length;

/** Run ids of the records a decision creates, in order (see the module header for `settle`). */
function createdRunIds(pre: readonly { kind: string }[] | undefined): string[] {
  const out: string[] = [];
  for (const fx of pre ?? []) {
    if (fx.kind !== "put_run") continue;
    const p = fx as { kind: "put_run"; mode: string; record: { run_id: string } };
    if (p.mode === "create" || p.mode === "terminal") out.push(p.record.run_id);
  }
  return out;
}

/**
 * Adds the records `pre` creates to the index: appended to `pending`, and every full CHUNK moved
 * into a chunk effect. Null when nothing changes. A new job (`created`) starts with an empty index.
 */
export function indexDecision(prev: RunIndexState | undefined, jobId: string, pre: readonly { kind: string }[] | undefined, created: boolean): { index: RunIndexState; effects: RunIndexEffect[] } | null {
  const ids = createdRunIds(pre);
  const base = prev ?? (created ? { seq: 0, pending: [] } : undefined);
  if (!base || (ids.length === 0 && prev)) return null;
  let pending = [...base.pending];
  for (const id of ids) {
    const sfx = runIdSuffix(jobId, id);
    if (!pending.includes(sfx)) pending.push(sfx); // one decision names a record once; be sure
  }
  let seq = base.seq;
  const effects: RunIndexEffect[] = [];
  while (pending.length >= RUN_INDEX_CHUNK) {
    effects.push({ kind: "write_run_index", seq, ids: pending.slice(0, RUN_INDEX_CHUNK) });
    pending = pending.slice(RUN_INDEX_CHUNK);
    seq++;
  }
  return { index: { seq, pending }, effects };
}

/**
 * The job actor with the runs index: the same behaviour, plus `index` kept in the state and the
 * chunk writes appended to the decision's `pre` effects (after its run records).
 */
export function withRunIndex<M, E extends { kind: string }>(def: ActorDefinition<JobState, M, JobReply, E>): ActorDefinition<JobState, M, JobReply, E | RunIndexEffect> {
  return {
    ...def,
    receive(s, msg, ctx) {
      const d = def.receive(s, msg, ctx);
      const job = d.state.job;
      if (!job) return d;
      const next = indexDecision(d.state.index, job.job_id, d.pre, !s.job);
      if (!next) return d;
      return {
        ...d,
        state: { ...d.state, index: next.index },
        ...(next.effects.length > 0 ? { pre: [...(d.pre ?? []), ...next.effects] } : {}),
      };
    },
  };
}
