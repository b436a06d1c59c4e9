/**
 * A tenant's runs page (`GET /v1/runs`), newest first by creation, in O(page) through the
 * tenant's runs log (tenant-run-log.ts): the head hint, the chunks the page spans by key (newest
 * first), then the page's records by key — about `limit + limit / 64 + 3` reads whatever the
 * tenant's number of jobs and runs, and never an actor: a burst's job actors are not asked.
 *
 * So an active run is shown as its record holds it: a record is written when the run is created
 * and when it ends, so a run that has not ended is listed `queued` (its page,
 * `GET /v1/runs/{run_id}`, and its job's list show it live). For the same reason the `status`
 * filter takes the statuses a run ends with only (`ENDED_STATUSES`).
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

/** The statuses the tenant-wide list filters by: a run's last, written with its end. */
export const ENDED_STATUSES: readonly RunStatus[] = Object.freeze([...TERMINAL]);

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
): Promise<Page<RunView>> {
  if (q.status !== undefined && !ENDED_STATUSES.includes(q.status))
    throw new KairosError(
      "invalid_argument",
      `status: must be one of ${ENDED_STATUSES.join(", ")} or dead_lettered (a run's record is written when it is created and when it ends; runs that have not ended are listed per job, live: /v1/jobs/{job_id}/runs), got ${JSON.stringify(q.status)}`,
      { field: "status" },
    );
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
    const entries = await Promise.all(
      batch.map((b) => readRecord(runs, partitions, tenantId, b.id)),
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

/** A logged run's record, or null when it is gone or is not the tenant's. */
async function readRecord(
  runs: KvStore,
  partitions: number,
  tenantId: string,
  runId: string,
): Promise<RunView | null> {
  const id = parseRunId(runId);
  if (!id) return null;
  const p = partitionOf({ type: JOB_ACTOR, id: jobActorId(tenantId, id.jobId) }, partitions);
  const e = await readShown(runs, runKey(p, tenantId, id.jobId, runId), undefined, notEnded);
  if (!e) return null;
  const r = runView(e.value);
  return r.tenant_id === tenantId ? r : null;
}
