/**
 * The runs index, pure part: a per-job append-only list of the job's run records in creation
 * order, so a runs page reads O(page) newest first (NATS KV cannot list keys in reverse).
 * run-index-store.ts writes and reads it; run-pages.ts pages through it.
 *
 * Every record the job actor creates gets the next position. The job state holds `seq` (chunks
 * written) and `pending` (ids since); every CHUNK records the decision writes the immutable chunk
 * `ix.<p>.<tenant>.<job>.<seq>`. No extra KV operation per run: the ids ride on the job state.
 *
 * Pitfalls: the chunk is a `pre` effect, written before the state that drops its ids; a crash in
 * between rewrites it. A chunk carries its writer's epoch (a stale owner stops, `not_owner`). A
 * record `settle`d by a pause, delete or schedule change is indexed once the settle has written
 * it, or found it ended already (`run_settled`): it is the orphan of a fire whose state change
 * (and index entry) was lost. A queued occurrence a run-now sent back keeps its entry: its next
 * record is `indexed` already (JobState.requeued). Job states without `index` keep the key
 * listing (run-pages.ts). Pure: no I/O, no clock.
 */

/** Run ids per chunk record: a page of 200 reads at most 5 chunks; the state holds < CHUNK ids. */
export const RUN_INDEX_CHUNK = 64;

/** A job's runs index, kept in its state (`JobState.index`). */
export interface RunIndexState {
  /** Chunk records written so far (`ix.<p>.<tenant>.<job>.<seq>`, seq 0 … this − 1). */
  seq: number;
  /** Ids of the records created since, oldest first, without the `<job_id>-` prefix. */
  pending: string[];
}

/** Effect (pre, before the state write): write chunk `seq` holding `ids` (suffixes, oldest first). */
export interface RunIndexEffect {
  kind: "write_run_index";
  seq: number;
  ids: string[];
}

export const isRunIndexEffect = (fx: { kind: string }): fx is RunIndexEffect =>
  fx.kind === "write_run_index";

/** KV key (runs bucket) of a job's chunk `seq`; zero-padded so the keys sort by seq. */
export function runIndexKey(
  partition: number,
  tenantId: string,
  jobId: string,
  seq: number,
): string {
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
export const indexLength = (ix: RunIndexState): number =>
  ix.seq * RUN_INDEX_CHUNK + ix.pending.length;

/**
 * Run ids of the records a decision creates, in order. Not a `settle`'s: it may find nothing to
 * settle, and an entry for a record never written would stand beside the one of the same run
 * fired later (listed twice once a chunk boundary fell between); a settle that wrote is indexed
 * by its own message (`indexAppend`, `run_settled`).
 */
function createdRunIds(pre: readonly { kind: string }[] | undefined): string[] {
  const out: string[] = [];
  for (const fx of pre ?? []) {
    if (fx.kind === "create_run") {
      out.push((fx as { kind: "create_run"; record: { run_id: string } }).record.run_id);
      continue;
    }
    if (fx.kind !== "put_run") continue;
    const p = fx as { kind: "put_run"; mode: string; record: { run_id: string }; indexed?: true };
    // (`indexed`: an occurrence sent back to the queue after its record was made, JobState.requeued.)
    if ((p.mode === "create" || p.mode === "terminal") && p.indexed !== true)
      out.push(p.record.run_id);
  }
  return out;
}

/**
 * Adds the records `pre` creates to the index: appended to `pending`, and every full CHUNK moved
 * into a chunk effect. Null when nothing changes. A new job (`created`) starts with an empty index.
 */
export function indexDecision(
  prev: RunIndexState | undefined,
  jobId: string,
  pre: readonly { kind: string }[] | undefined,
  created: boolean,
): { index: RunIndexState; effects: RunIndexEffect[] } | null {
  const ids = createdRunIds(pre);
  const base = prev ?? (created ? { seq: 0, pending: [] } : undefined);
  if (!base || (ids.length === 0 && prev)) return null;
  return indexAppend(base, jobId, ids);
}

/** Appends `ids` (not already pending) to the index; every full CHUNK becomes a chunk effect. */
export function indexAppend(
  base: RunIndexState,
  jobId: string,
  ids: readonly string[],
): { index: RunIndexState; effects: RunIndexEffect[] } {
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
