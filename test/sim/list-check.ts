/**
 * The simulation's check of the runs list (invariant c, `run_unlisted` / `run_listed_twice` /
 * `run_listed_stale`): each job's runs, paged through the production service as the API pages
 * them (the job actor's runs index in memory, its chunks, the records), against the run records in
 * the store. Every record the store held before the listing began is listed, no run is listed
 * twice, and a run whose record had ended before is not listed as still to run or running.
 *
 * The records are read first: a record written later may not be in the list yet, but one written
 * before is (its index entry is made in the turn that writes it, and the list's read of the index
 * waits for that turn). Deleted jobs are not listed (their runs are looked up by id).
 */
import type { KvStore } from "../../src/cluster/kv.ts";
import { decode } from "../../src/cluster/codec.ts";
import { TERMINAL, type RunView } from "../../src/protocol/model.ts";
import type { NatsJobsService } from "../../src/service/nats-service.ts";
import type { JobUnderTest } from "./record-check.ts";

type Fail = (invariant: string, subject: string, detail: string) => void;

/** Most pages one job's listing reads (200 runs each): beyond it the listing is reported as endless. */
const MAX_PAGES = 100;

/** A record in the store: its run and whether it had ended. */
export interface StoredRun {
  id: string;
  ended: boolean;
}

/** The records in the store now, per job. */
export async function recordIds(
  runs: KvStore,
  jobs: readonly JobUnderTest[],
): Promise<Map<string, StoredRun[]>> {
  const out = new Map<string, StoredRun[]>();
  for (const j of jobs) {
    const list = await runs.list(`*.${j.tenant}.${j.jobId}.*`);
    out.set(
      j.jobId,
      list.map((e) => {
        const r = decode<RunView>(e.value);
        return { id: r.run_id, ended: TERMINAL.has(r.status) };
      }),
    );
  }
  return out;
}

/** Every run of the job, newest first, as the list pages them; null for a deleted job. */
async function listed(
  service: Pick<NatsJobsService, "listRuns">,
  j: JobUnderTest,
): Promise<RunView[] | null> {
  const ids: RunView[] = [];
  let cursor: string | undefined;
  for (let n = 0; n < MAX_PAGES; n++) {
    let page;
    try {
      page = await service.listRuns(j.tenant, j.jobId, {
        limit: 200,
        ...(cursor === undefined ? {} : { cursor }),
      });
    } catch (e) {
      if ((e as { code?: unknown }).code === "not_found") return null;
      throw e;
    }
    ids.push(...page.items);
    if (page.next_cursor === null) return ids;
    cursor = page.next_cursor;
  }
  throw new Error(`the runs list of ${j.jobId} did not end within ${MAX_PAGES} pages`);
}

/** Lists each job (not deleted) and reports what the list lacks or repeats of `before`. */
export async function checkListing(
  service: Pick<NatsJobsService, "listRuns">,
  jobs: readonly JobUnderTest[],
  deleted: ReadonlySet<string>,
  before: ReadonlyMap<string, readonly StoredRun[]>,
  fail: Fail,
): Promise<void> {
  for (const j of jobs) {
    if (deleted.has(j.jobId)) continue;
    const runs = await listed(service, j);
    if (runs === null) continue;
    const seen = new Map<string, RunView>();
    for (const r of runs) {
      const id = r.run_id;
      if (seen.has(id)) fail("run_listed_twice", id, `run ${id} of ${j.jobId} is listed twice`);
      seen.set(id, r);
    }
    for (const { id, ended } of before.get(j.jobId) ?? []) {
      const r = seen.get(id);
      if (!r) fail("run_unlisted", id, `run ${id} of ${j.jobId} has a record but is not listed`);
      else if (ended && !TERMINAL.has(r.status))
        fail(
          "run_listed_stale",
          id,
          `run ${id} of ${j.jobId} had ended before the listing, which shows it ${r.status}`,
        );
    }
  }
}
