/**
 * A tenant's runs page (`GET /v1/runs`), newest first by creation, in O(page) through the
 * tenant's runs log (tenant-run-log.ts): the head hint, the chunks the page spans by key (newest
 * first), then the page's records by key — about `limit + limit / 64 + 3` reads whatever the
 * tenant's number of jobs and runs, and never an actor's mailbox: a burst's job actors are not
 * asked.
 *
 * A record is written when its run is created and when it ends, so a record that has not ended
 * says `queued` whatever its run is doing: such records are shown through `live` (one request
 * per batch that has any, answered by the scheduler nodes from the job actors they hold in
 * memory — src/server/live-runs.ts — never an actor's mailbox). A run no node answers for in time
 * is shown as its record holds it. The `status` filter takes every status and matches what is
 * shown: a terminal status from the records alone (no live request), any other after the overlay.
 *
 * The cursor is a position (chunk seq, index) and a position's run never changes, so a walk
 * returns each logged run at most once while runs are created or pruned. Pitfalls: a record
 * pruned by retention (or its job deleted) is skipped; a page examines at most MAX_EXAMINED
 * positions, so a filtered page may be short (even empty) with a `next_cursor`; up to
 * GAP_TOLERANCE missing chunks in a row are stepped over (a chunk its writer gave up on), more
 * end the history (the pruned past).
 */
import { decode } from "../cluster/codec.ts";
import type { KvEntry, KvStore } from "../cluster/kv.ts";
import { partitionOf } from "../cluster/placement.ts";
import { KairosError } from "../lib/errors.ts";
import { JOB_ACTOR, jobActorId, parseRunId, runKey } from "../protocol/ids.ts";
import { TERMINAL, type Page, type RunStatus, type RunView } from "../protocol/model.ts";
import { decodeCursor, encodeCursor, readShown } from "./run-pages.ts";
import { runView } from "./run-record.ts";
import {
  CHUNK,
  decodeHead,
  tenantLogHeadKey,
  tenantLogKey,
  type LogChunk,
} from "./tenant-run-log.ts";

/** Most positions one page examines; past it the page ends early with a cursor. */
export const MAX_EXAMINED = 1_000;
/** Missing chunks in a row stepped over before the history is taken to end. */
export const GAP_TOLERANCE = 4;
/** Chunks probed past the head hint (writers put it after their chunk: it lags by a few). */
const MAX_PROBE = 64;

/** Live views of the named runs that have not ended (missing: shown as recorded). */
export type LiveRuns = (runIds: string[]) => Promise<ReadonlyMap<string, RunView>>;

export interface TenantRunsQuery {
  status?: RunStatus;
  cursor?: string;
  limit: number;
}

const badCursor = () =>
  new KairosError("invalid_argument", "cursor: not a cursor returned by this API", {
    field: "cursor",
  });

/**
 * The cursor's position [seq, index]: the next positions examined are chunk seq's ids below
 * index (CHUNK: all of them), then the older chunks'.
 */
function positionOf(cursor: string): [number, number] {
  const [kind, seq, idx] = decodeCursor(cursor, 3);
  if (kind !== "tl" || !/^\d{1,10}$/.test(seq!) || !/^\d{1,3}$/.test(idx!)) throw badCursor();
  return [Number(seq), Number(idx)];
}

/** The newest chunk's seq (-1: the tenant has no log). */
async function newestSeq(runs: KvStore, tenantId: string): Promise<number> {
  let seq = decodeHead((await runs.get(tenantLogHeadKey(tenantId)))?.value);
  for (let i = 0; i < MAX_PROBE && (await runs.get(tenantLogKey(tenantId, seq + 1))); i++) seq++;
  return seq;
}

/** The chunk's ids (oldest first), or null when it is missing. Read from the stream leader. */
async function readChunk(runs: KvStore, tenantId: string, seq: number): Promise<string[] | null> {
  const e = await runs.get(tenantLogKey(tenantId, seq));
  return e ? decode<LogChunk>(e.value).ids : null;
}

/** A page of the tenant's runs (see the module header). */
export async function tenantRunsPage(
  runs: KvStore,
  partitions: number,
  tenantId: string,
  q: TenantRunsQuery,
  live?: LiveRuns,
): Promise<Page<RunView>> {
  // A terminal filter cannot match a run that has not ended: no live view is needed for it.
  const overlay = q.status === undefined || !TERMINAL.has(q.status) ? live : undefined;
  let [seq, idx] =
    q.cursor === undefined ? [await newestSeq(runs, tenantId), CHUNK] : positionOf(q.cursor);
  let ids: string[] | null = null;
  let gaps = 0;
  const found: { run: RunView; seq: number; idx: number }[] = [];
  let examined = 0;
  let ended = false;
  const want = q.limit + 1;
  while (found.length < want && examined < MAX_EXAMINED) {
    // The next batch of positions, newest first.
    const batch: { id: string; seq: number; idx: number }[] = [];
    const size = Math.min(want - found.length, MAX_EXAMINED - examined);
    while (batch.length < size && !ended) {
      if (ids === null) {
        if (seq < 0) {
          ended = true;
          break;
        }
        ids = await readChunk(runs, tenantId, seq);
        if (ids === null) {
          if (++gaps > GAP_TOLERANCE) ended = true;
          else {
            seq--;
            idx = CHUNK;
          }
          continue;
        }
        gaps = 0;
        idx = Math.min(idx, ids.length);
      }
      if (idx === 0) {
        ids = null;
        seq--;
        idx = CHUNK;
        continue;
      }
      idx--;
      batch.push({ id: ids[idx]!, seq, idx });
    }
    if (batch.length === 0) break;
    examined += batch.length;
    // Without live views a record not ended is read again from the leader at once (a replica
    // may have missed its end); with them, only those no owner holds live.
    const records = await Promise.all(
      batch.map((b) => readRecord(runs, partitions, tenantId, b.id, overlay === undefined)),
    );
    const active = records.filter((r): r is RunView => r !== null && !TERMINAL.has(r.status));
    const views =
      overlay && active.length > 0 ? await overlay(active.map((r) => r.run_id)) : undefined;
    const entries = await Promise.all(
      records.map(async (r) => {
        if (r === null || TERMINAL.has(r.status) || views === undefined) return r;
        return views.get(r.run_id) ?? (await readLeader(runs, partitions, r));
      }),
    );
    entries.forEach((run, i) => {
      if (run && (q.status === undefined || run.status === q.status))
        found.push({ run, seq: batch[i]!.seq, idx: batch[i]!.idx });
    });
  }
  const page = found.slice(0, q.limit);
  let cursor: [number, number] | null = null;
  const last = page[page.length - 1];
  if (found.length > q.limit && last) cursor = [last.seq, last.idx];
  else if (!ended) cursor = ids === null ? [seq, CHUNK] : [seq, idx]; // the examination bound was hit
  return {
    items: page.map((f) => f.run),
    next_cursor:
      cursor === null ? null : encodeCursor(["tl", String(cursor[0]), String(cursor[1])]),
  };
}

/** A record that has not ended may be a replica's that missed its end: read from the leader. */
const notEnded = (e: KvEntry): boolean => !TERMINAL.has(runView(e.value).status);

/** The record's key (null: not a run id). */
function recordKey(partitions: number, tenantId: string, runId: string): string | null {
  const id = parseRunId(runId);
  if (!id) return null;
  const p = partitionOf({ type: JOB_ACTOR, id: jobActorId(tenantId, id.jobId) }, partitions);
  return runKey(p, tenantId, id.jobId, runId);
}

/**
 * A logged run's record, or null when it is gone or is not the tenant's. `leaderIfNotEnded`: a
 * replica's answer that has not ended is checked on the leader at once.
 */
async function readRecord(
  runs: KvStore,
  partitions: number,
  tenantId: string,
  runId: string,
  leaderIfNotEnded: boolean,
): Promise<RunView | null> {
  const key = recordKey(partitions, tenantId, runId);
  if (key === null) return null;
  const e = await readShown(runs, key, undefined, leaderIfNotEnded ? notEnded : undefined);
  if (!e) return null;
  const r = runView(e.value);
  return r.tenant_id === tenantId ? r : null;
}

/** A replica's record not ended that no owner holds live, from the leader (gone: as it was). */
async function readLeader(runs: KvStore, partitions: number, r: RunView): Promise<RunView> {
  const key = recordKey(partitions, r.tenant_id, r.run_id);
  const e = key === null ? null : await runs.get(key);
  return e ? runView(e.value) : r;
}
