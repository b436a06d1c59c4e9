/**
 * Runs that have not ended, as their owners hold them, for reads that must not ask the job
 * actors (the tenant's runs list, `GET /v1/runs`). A run's record is written when it is created
 * and when it ends; in between only its job actor's memory knows it is leased, running or
 * waiting to retry. An API node asks every live scheduler node at once with the ids of a page's
 * records that have not ended (`LiveRunsRequest`, on the same subject as the tenant's figures:
 * src/server/stats-responder.ts); each answers from the state of the job actors it holds in
 * memory (no mailbox, no load, no KV read), and the API node shows the live views over the
 * records. Types only.
 */
import type { RunView } from "./model.ts";

/** Most run ids one request names (a page examines at most 1,000 positions: a few requests). */
export const MAX_LIVE_RUN_IDS = 256;

/** An API node's request to a scheduler node. */
export interface LiveRunsRequest {
  kind: "runs";
  tenant_id: string;
  run_ids: string[];
}

/** A scheduler node's answer: the named runs active in the job actors it holds in memory. */
export interface NodeLiveRuns {
  v: 1;
  node: string;
  runs: RunView[];
}

/** Where the API gets live views of runs that have not ended (by run id; missing: not known live). */
export interface LiveRunSource {
  liveRuns(tenantId: string, runIds: readonly string[]): Promise<ReadonlyMap<string, RunView>>;
}
