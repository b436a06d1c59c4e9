/**
 * The runs index, the I/O part (the pure part and the layout: run-index.ts). Chunk records live in
 * the runs bucket under `ix.<p>.<tenant>.<job>.<seq>`, value `{ids, e}` (run id suffixes, oldest
 * first; the writer's partition epoch).
 *
 * - `writeRunIndexChunk` (the job shell's `write_run_index` pre effect): `create`; if the key exists
 *   it is the orphan of a decision whose state write was lost (the state still holds `seq`), so it
 *   is replaced with CAS — unless a later epoch wrote it (this owner is stale: `not_owner`), or a
 *   writer whose job state was newer than this one's (`r`: this owner loaded an old state, say from
 *   a deposed stream leader; its state write will fail too: `conflict`, and it reloads). Replaced,
 *   that chunk's runs would leave the list and the re-fired ones be listed twice.
 * - `listRunIndex` / `pruneRunIndex` (retention, run-retention.ts): the oldest chunks whose runs are
 *   all gone are removed in one purge below the oldest revision kept, so chunks stay a suffix of
 *   the sequence and a reader may stop at the first missing one (run-pages.ts).
 * - `purgeRunIndex`: a deleted job's chunks.
 */
import type { ShellContext } from "../actors/host.ts";
import { decode, encode } from "../cluster/codec.ts";
import { kvKeys, kvPurge, type KvKey, type KvStore } from "../cluster/kv.ts";
import { casUpdate } from "../lib/cas-update.ts";
import { KairosError } from "../lib/errors.ts";
import { splitJobActorId } from "../protocol/ids.ts";
import {
  runIdOfSuffix,
  runIndexKey,
  runIndexPrefix,
  runIndexSeq,
  type RunIndexEffect,
} from "./run-index.ts";

interface StoredChunk {
  ids: string[];
  e: number;
  /** The KV revision of the writer's job state when it wrote (absent: written before it was kept). */
  r?: number;
}

const sameIds = (a: readonly string[], b: readonly string[]) =>
  a.length === b.length && a.every((x, i) => x === b[i]);

/** Writes one chunk of the job's index (see the module header); idempotent per (seq, ids). */
export async function writeRunIndexChunk(
  runs: KvStore,
  ctx: Pick<ShellContext, "address" | "partition" | "epoch" | "stateRevision">,
  fx: RunIndexEffect,
): Promise<void> {
  const { tenantId, jobId } = splitJobActorId(ctx.address.id);
  const key = runIndexKey(ctx.partition, tenantId, jobId, fx.seq);
  const base = ctx.stateRevision?.();
  const chunk: StoredChunk = {
    ids: fx.ids,
    e: ctx.epoch,
    ...(base === undefined ? {} : { r: base }),
  };
  const value = encode(chunk);
  if ((await runs.create(key, value)).ok) return;
  await casUpdate<StoredChunk, void>(
    runs,
    key,
    (stored) => {
      if (stored === null) return { write: chunk, result: undefined };
      if (stored.e > ctx.epoch)
        throw new KairosError(
          "not_owner",
          `run index chunk ${fx.seq} of ${ctx.address.id} was written under a later epoch (${stored.e} > ${ctx.epoch})`,
        );
      if (stored.e === ctx.epoch && sameIds(stored.ids, fx.ids)) return { done: undefined };
      if (base !== undefined && stored.r !== undefined && stored.r > base)
        throw new KairosError(
          "conflict",
          `run index chunk ${fx.seq} of ${ctx.address.id} was written from a newer job state (revision ${stored.r} > ${base}): this owner's state is stale`,
        );
      return { write: chunk, result: undefined };
    },
    {
      attempts: 3,
      encode: () => value, // only `chunk` is ever written: encoded once, above
      decode: (b) => decode<StoredChunk>(b),
      conflictMessage: `run index chunk ${fx.seq} of ${ctx.address.id} keeps changing under this owner`,
    },
  );
}

/** The run ids of chunk `seq` (oldest first), or null when it is gone (pruned, purged). */
export async function readRunIndexChunk(
  runs: KvStore,
  partition: number,
  tenantId: string,
  jobId: string,
  seq: number,
): Promise<string[] | null> {
  const e = await runs.get(runIndexKey(partition, tenantId, jobId, seq));
  return e ? decode<StoredChunk>(e.value).ids.map((s) => runIdOfSuffix(jobId, s)) : null;
}

/** The job's chunk keys with their revisions, oldest seq first (headers only). */
export async function listRunIndex(
  runs: KvStore,
  partition: number,
  tenantId: string,
  jobId: string,
): Promise<(KvKey & { seq: number })[]> {
  const out: (KvKey & { seq: number })[] = [];
  for (const k of await kvKeys(runs, `${runIndexPrefix(partition, tenantId, jobId)}.*`)) {
    const seq = runIndexSeq(k.key);
    if (seq !== null) out.push({ ...k, seq });
  }
  return out.sort((a, b) => a.seq - b.seq);
}

/**
 * Removes the oldest chunks none of whose runs `remains` (retention has pruned them all), in one
 * purge below the oldest revision of a chunk kept. `chunks` must be listed BEFORE the run keys
 * that `remains` answers from: a chunk written after that listing may name records the listing
 * missed. Reads the chunks it removes plus one. Resolves to how many chunks were removed.
 */
export async function pruneRunIndex(
  runs: KvStore,
  partition: number,
  tenantId: string,
  jobId: string,
  chunks: readonly (KvKey & { seq: number })[],
  remains: (runId: string) => boolean,
): Promise<number> {
  let doomed = 0;
  for (const c of chunks) {
    const ids = await readRunIndexChunk(runs, partition, tenantId, jobId, c.seq);
    if (ids && ids.some(remains)) break;
    doomed++;
  }
  if (doomed === 0) return 0;
  const kept = chunks.slice(doomed);
  // Chunks are written in seq order, so revisions grow with seq; a doomed chunk at or above the
  // oldest kept revision (never expected) simply stays.
  const floor =
    kept.length > 0
      ? Math.min(...kept.map((c) => c.revision))
      : Math.max(...chunks.map((c) => c.revision)) + 1;
  const removed = chunks.slice(0, doomed).filter((c) => c.revision < floor).length;
  if (removed > 0) await kvPurge(runs, `${runIndexPrefix(partition, tenantId, jobId)}.*`, floor);
  return removed;
}

/** A deleted job's chunks, all of them (one purge). */
export async function purgeRunIndex(
  runs: KvStore,
  partition: number,
  tenantId: string,
  jobId: string,
): Promise<void> {
  await kvPurge(runs, `${runIndexPrefix(partition, tenantId, jobId)}.*`);
}
