/**
 * A page of `GET /v1/jobs`: the tenant's job catalog (src/catalog/) — or, for `state=paused`,
 * its paused index (job-lists.ts) — gives the ids after the cursor that may match the filters,
 * then those jobs' states are read from the `actors` bucket (by key, never through the actors)
 * and each is checked: shown if it exists and matches, and its entry repaired if it disagrees (a
 * deleted job's entry removed, stale values settled, an enabled job's paused entry dropped) — in
 * the background, so a page never waits on a repair. About `limit + 1` state reads and one or
 * two chunk reads, whatever the tenant's size.
 *
 * Pitfall: a page examines at most MAX_EXAMINED_JOBS entries, so a name filter (or
 * `state=enabled`) that matches few jobs may answer a short (even empty) page with a
 * `next_cursor`. The cursor is a position
 * in id order, so jobs created or deleted meanwhile never make a walk repeat or skip another job.
 */
import { decode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import { partitionOf } from "../cluster/placement.ts";
import { KairosError } from "../lib/errors.ts";
import { JOB_ACTOR, jobActorId } from "../protocol/ids.ts";
import type { JobListFilter, JobView, Page } from "../protocol/model.ts";
import { jobView, type JobState } from "../job-state/job-state.ts";
import { decodeCursor, encodeCursor, readShown } from "../history/run-pages.ts";
import { publicJob } from "../secrets/secret-env.ts";
import { sourceOf, type JobLists, type ListSource } from "../catalog/job-lists.ts";
import type { CatalogEntry, CatalogFilter, CatalogOp } from "../catalog/catalog-core.ts";

/** Most catalog entries one page examines; past it a filtered page ends early with a cursor. */
export const MAX_EXAMINED_JOBS = 5_000;

export interface JobsPageDeps {
  /** The tenant's job catalog and paused index. */
  readonly lists: JobLists;
  /** The `actors` bucket (job states, read by key). */
  readonly actors: KvStore;
  readonly partitions: number;
  readonly nowMs: number;
}

/** A job's state key in the `actors` bucket. */
function stateKey(tenantId: string, jobId: string, partitions: number): string {
  const addr = { type: JOB_ACTOR, id: jobActorId(tenantId, jobId) };
  return `${JOB_ACTOR}.${partitionOf(addr, partitions)}.${addr.id}`;
}

/** The position a cursor names ("" for none). */
function positionOf(cursor: string | undefined): string {
  if (cursor === undefined) return "";
  const [after] = decodeCursor(cursor, 1);
  if (after === undefined || !/^[A-Za-z0-9_~-]{1,65}$/.test(after))
    throw new KairosError("invalid_argument", "cursor: not a cursor returned by this API", {
      field: "cursor",
    });
  return after;
}

/** The entries' jobs, read together and checked; shown ones in order. */
async function check(
  d: JobsPageDeps,
  tenantId: string,
  source: ListSource,
  entries: readonly CatalogEntry[],
  filter: CatalogFilter,
): Promise<{ entry: CatalogEntry; view: JobView }[]> {
  const states = await Promise.all(
    entries.map(async (e) => {
      const got = await readShown(d.actors, stateKey(tenantId, e.i, d.partitions));
      const s = got === null ? null : decode<{ s: JobState }>(got.value).s;
      // Another tenant's state under this key cannot be (the key holds the tenant): guarded all the same.
      return s?.job && s.job.tenant_id === tenantId ? s : null;
    }),
  );
  const shown: { entry: CatalogEntry; view: JobView }[] = [];
  const repairs: CatalogOp[] = [];
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i]!;
    const s = states[i] ?? null;
    const job =
      s === null
        ? null
        : {
            deleted: s.deleted,
            values: { n: s.job!.spec.name, e: s.job!.spec.enabled },
            v: s.job!.version,
          };
    const v = d.lists.verdict(source, e, job, filter, d.nowMs);
    if (v.kind === "repair") repairs.push(v.op);
    if (v.kind === "show" || (v.kind === "repair" && v.show))
      shown.push({ entry: e, view: publicJob(jobView(s!)) });
  }
  if (repairs.length > 0) void d.lists.repair(tenantId, source, repairs).catch(() => undefined);
  return shown;
}

/** One page of the tenant's jobs in id order, after the cursor, matching the filters. */
export async function jobsPage(
  d: JobsPageDeps,
  tenantId: string,
  opts: { cursor?: string; limit: number } & JobListFilter,
): Promise<Page<JobView>> {
  const filter: CatalogFilter = {
    ...(opts.name !== undefined ? { name: opts.name.toLowerCase() } : {}),
    ...(opts.state !== undefined ? { state: opts.state } : {}),
  };
  const source = sourceOf(filter);
  let after = positionOf(opts.cursor);
  const out: JobView[] = [];
  let examined = 0;
  for (;;) {
    const read = await d.lists.read(tenantId, after, {
      filter,
      want: opts.limit + 1 - out.length,
      maxExamined: MAX_EXAMINED_JOBS - examined,
    });
    examined += read.examined;
    for (const { view } of await check(d, tenantId, source, read.entries, filter)) out.push(view);
    if (out.length > opts.limit) {
      const page = out.slice(0, opts.limit);
      return { items: page, next_cursor: encodeCursor([page[page.length - 1]!.job_id]) };
    }
    if (read.resume === null) return { items: out, next_cursor: null };
    after = read.resume;
    if (examined >= MAX_EXAMINED_JOBS) return { items: out, next_cursor: encodeCursor([after]) };
  }
}
