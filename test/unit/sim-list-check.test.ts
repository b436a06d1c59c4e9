/**
 * Self-test of the simulation's runs-list check (test/sim/list-check.ts): a list that repeats a
 * run, lacks a recorded one or shows an ended one as still queued fails it; the same list without
 * the fault passes; a deleted job is not listed.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { KairosError } from "../../src/lib/errors.ts";
import type { JobSpec, Page, RunView } from "../../src/protocol/model.ts";
import type { JobUnderTest } from "../sim/record-check.ts";
import { checkListing } from "../sim/list-check.ts";

/** The check reads a job's tenant and id only. */
const JOB: JobUnderTest = { tenant: "t1", jobId: "j0123456789abcdef", spec: {} as JobSpec };

/** A service whose list pages `ids` two at a time (the cursor is the next index); `queued` are shown queued, the rest succeeded. */
function service(ids: string[] | "not_found", queued: readonly string[] = []) {
  return {
    async listRuns(
      _t: string,
      _j: string,
      o: { cursor?: string; limit: number },
    ): Promise<Page<RunView>> {
      if (ids === "not_found") throw new KairosError("not_found", "job not found");
      const from = Number(o.cursor ?? 0);
      const next = from + 2 < ids.length ? String(from + 2) : null;
      return {
        items: ids
          .slice(from, from + 2)
          .map(
            (run_id) =>
              ({ run_id, status: queued.includes(run_id) ? "queued" : "succeeded" }) as RunView,
          ),
        next_cursor: next,
      };
    },
  };
}

async function failures(
  ids: string[] | "not_found",
  records: string[],
  deleted = false,
  shownQueued: readonly string[] = [],
) {
  const out: string[] = [];
  await checkListing(
    service(ids, shownQueued),
    [JOB],
    new Set(deleted ? [JOB.jobId] : []),
    new Map([[JOB.jobId, records.map((id) => ({ id, ended: true }))]]),
    (inv, subject) => out.push(`${inv} ${subject}`),
  );
  return out;
}

describe("the simulation's runs-list check", () => {
  it("passes a list of every record once, across pages", async () => {
    assert.deepEqual(await failures(["r5", "r4", "r3", "r2", "r1"], ["r1", "r2", "r3", "r4"]), []);
  });
  it("fires run_listed_twice on a run at two positions", async () => {
    assert.deepEqual(await failures(["r4", "r3", "r3", "r1"], ["r1", "r3", "r4"]), [
      "run_listed_twice r3",
    ]);
  });
  it("fires run_unlisted on a record the list lacks", async () => {
    assert.deepEqual(await failures(["r4", "r3", "r1"], ["r1", "r2", "r3", "r4"]), [
      "run_unlisted r2",
    ]);
  });
  it("fires run_listed_stale on an ended run listed as queued", async () => {
    assert.deepEqual(await failures(["r3", "r2", "r1"], ["r1", "r2", "r3"], false, ["r2"]), [
      "run_listed_stale r2",
    ]);
  });
  it("skips a deleted job, and one the service no longer knows", async () => {
    assert.deepEqual(await failures(["r1"], ["r1", "r2"], true), []);
    assert.deepEqual(await failures("not_found", ["r1"]), []);
  });
});
