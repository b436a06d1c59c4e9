/**
 * A job's runs page, newest first by creation, in O(page) through the runs index (run-index.ts):
 * the job's index from its actor, the chunks the page spans by direct key, then the page's
 * records — about `limit + 1 + limit / 64 + 1` reads, never a listing. The cursor is a position,
 * and a position's run never changes, so each run is returned at most once while runs are created
 * or pruned.
 *
 * Records are read from any replica, and again from the stream leader when that answer is surely
 * behind (`readShown`): a replica of an R3 bucket may lag for minutes after a fault (a server
 * killed or paused and back), and its pages would lack every run created since and show ended
 * runs as queued. Chunks are read from the leader: a replica behind must not end the history.
 *
 * Pitfalls: a record missing on the leader too is skipped (pruned) unless the job actor holds it
 * (a run-now's record follows its state write); the first missing chunk ends the history. A page
 * examines at most MAX_EXAMINED positions, so a `status` filter may return a short (even empty)
 * page with a `next_cursor`. Job states without an index use the key listing (`legacyRunsPage`).
 */
import { KairosError } from "../lib/errors.ts";
import { kvKeys, REPLICA_READ, type KvEntry, type KvStore } from "../cluster/kv.ts";
import { TERMINAL, type Page, type RunStatus, type RunView } from "../protocol/model.ts";
import { orderRunKeys } from "./retention.ts";
import { runKey } from "../protocol/ids.ts";
import { RUN_INDEX_CHUNK, indexLength, runIdOfSuffix, type RunIndexState } from "./run-index.ts";
import { readRunIndexChunk } from "./run-index-store.ts";
import { runView } from "./run-record.ts";

/** Most positions (run records) one page examines; past it the page ends early with a cursor. */
export const MAX_EXAMINED = 1_000;

export interface RunsPageQuery {
  status?: RunStatus;
  /**
   * The job's active runs as its actor holds them, by run id: shown in place of their records
   * (written at creation and end only). A record that is not terminal and not here is behind.
   */
  live?: ReadonlyMap<string, RunView>;
  cursor?: string;
  limit: number;
}

export function encodeCursor(parts: string[]): string {
  return Buffer.from(parts.join("\n")).toString("base64url");
}

export function decodeCursor(c: string, n: number): string[] {
  const parts = Buffer.from(c, "base64url").toString("utf8").split("\n");
  if (parts.length !== n) throw badCursor();
  return parts;
}

const badCursor = () =>
  new KairosError("invalid_argument", "cursor: not a cursor returned by this API", {
    field: "cursor",
  });

/**
 * A value shown on a page: a replica's answer unless it is surely behind — no value, a revision
 * below `revision` (the key's latest, as a leader-consistent listing gave it), or one `behind`
 * judges superseded — and then the leader's. Null when the key has no value on the leader either.
 */
export async function readShown(
  kv: KvStore,
  key: string,
  revision?: number,
  behind?: (e: KvEntry) => boolean,
): Promise<KvEntry | null> {
  const e = await kv.get(key, REPLICA_READ);
  if (e && (revision === undefined || e.revision >= revision) && !behind?.(e)) return e;
  return kv.get(key);
}

/**
 * Reads the values of `keys` in order, a batch at a time, until `want` of them pass `pick` (null:
 * skip; a key gone meanwhile is skipped too). Without a filter that is one batch of `want` reads.
 * Each through `readShown`, against the revision the key was listed with.
 */
export async function readPage<T>(
  kv: KvStore,
  keys: readonly { key: string; revision?: number | undefined }[],
  want: number,
  pick: (e: KvEntry) => T | null,
): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < keys.length && out.length < want;) {
    const batch = keys.slice(i, i + want - out.length);
    i += batch.length;
    for (const e of await Promise.all(batch.map((k) => readShown(kv, k.key, k.revision)))) {
      const v = e ? pick(e) : null;
      if (v !== null) out.push(v);
    }
  }
  return out;
}

/** A stored record as shown: an active run's live view in place of its record. */
const shown = (stored: RunView, live: RunsPageQuery["live"]): RunView =>
  TERMINAL.has(stored.status) ? stored : (live?.get(stored.run_id) ?? stored);

/** A stored record that is not terminal while its job actor holds no such run: a replica behind. */
const behindLive =
  (live: RunsPageQuery["live"]) =>
  (e: KvEntry): boolean => {
    if (!live) return false;
    const r = runView(e.value);
    return !TERMINAL.has(r.status) && !live.has(r.run_id);
  };

const matches =
  (q: RunsPageQuery) =>
  (e: KvEntry): RunView | null => {
    const r = shown(runView(e.value), q.live);
    return q.status === undefined || r.status === q.status ? r : null;
  };

/** A page of an indexed job (see the module header). */
export async function indexedRunsPage(
  runs: KvStore,
  partition: number,
  job: { tenantId: string; jobId: string; index: RunIndexState },
  q: RunsPageQuery,
): Promise<Page<RunView>> {
  const { tenantId, jobId } = job;
  const ix = job.index;
  let next = indexLength(ix) - 1; // the next position to examine
  if (q.cursor !== undefined) {
    const [kind, pos] = decodeCursor(q.cursor, 2);
    const n = Number(pos);
    if (kind !== "ix" || !/^\d{1,15}$/.test(pos!) || !Number.isSafeInteger(n)) throw badCursor();
    next = Math.min(next, n - 1);
  }
  const chunks = new Map<number, string[] | null>();
  /** The run id at a position; null: the history ends here (a chunk is gone). */
  const idAt = async (pos: number): Promise<string | null> => {
    const seq = Math.floor(pos / RUN_INDEX_CHUNK);
    if (seq >= ix.seq) return runIdOfSuffix(jobId, ix.pending[pos - ix.seq * RUN_INDEX_CHUNK]!);
    if (!chunks.has(seq))
      chunks.set(seq, await readRunIndexChunk(runs, partition, tenantId, jobId, seq));
    return chunks.get(seq)?.[pos % RUN_INDEX_CHUNK] ?? null;
  };
  const want = q.limit + 1;
  const pick = matches(q);
  const behind = behindLive(q.live);
  const found: { run: RunView; pos: number }[] = [];
  let examined = 0;
  let ended = next < 0;
  while (!ended && found.length < want && examined < MAX_EXAMINED) {
    const batch: { pos: number; id: string }[] = [];
    const size = Math.min(want - found.length, MAX_EXAMINED - examined);
    while (batch.length < size && next >= 0) {
      const id = await idAt(next);
      if (id === null) {
        next = -1;
        break;
      }
      batch.push({ pos: next--, id });
    }
    if (next < 0) ended = true;
    examined += batch.length;
    const entries = await Promise.all(
      batch.map((b) =>
        readShown(runs, runKey(partition, tenantId, jobId, b.id), undefined, behind),
      ),
    );
    entries.forEach((e, i) => {
      // No record anywhere: pruned — or a run-now whose record its actor has not written yet.
      const held = e ? undefined : q.live?.get(batch[i]!.id);
      const run = e
        ? pick(e)
        : held && (q.status === undefined || held.status === q.status)
          ? held
          : null;
      if (run) found.push({ run, pos: batch[i]!.pos });
    });
  }
  const page = found.slice(0, q.limit);
  let cursor: number | null = null;
  if (found.length > q.limit) cursor = page[page.length - 1]!.pos;
  else if (!ended) cursor = next + 1; // the bound was hit: continue below the last position examined
  return {
    items: page.map((f) => f.run),
    next_cursor: cursor === null ? null : encodeCursor(["ix", String(cursor)]),
  };
}

/** A page of a job created before the index: its keys listed and ordered (module header). */
export async function legacyRunsPage(
  runs: KvStore,
  partition: number,
  tenantId: string,
  jobId: string,
  q: RunsPageQuery,
): Promise<Page<RunView>> {
  let cur: [string, string] | undefined;
  if (q.cursor !== undefined) {
    const [a, b] = decodeCursor(q.cursor, 2);
    if (a === "ix") throw badCursor();
    cur = [a!, b!];
  }
  // Newest first by (scheduled_for, run_id), both read from the keys (ids.ts runIdFor).
  const listed = await kvKeys(runs, `${partition}.${tenantId}.${jobId}.*`);
  const revisions = new Map(listed.map((k) => [k.key, k.revision]));
  const keys = orderRunKeys(listed.map((k) => k.key))
    .map((k) => ({ ...k, revision: revisions.get(k.key) }))
    .filter(
      (k) => !cur || k.scheduledFor < cur[0] || (k.scheduledFor === cur[0] && k.runId < cur[1]),
    );
  const found = await readPage(runs, keys, q.limit + 1, matches(q));
  const page = found.slice(0, q.limit);
  const last = page[page.length - 1];
  return {
    items: page,
    next_cursor:
      found.length > q.limit && last ? encodeCursor([last.scheduled_for, last.run_id]) : null,
  };
}
