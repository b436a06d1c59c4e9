/**
 * Live views of runs that have not ended, between nodes (the protocol: src/protocol/live-runs.ts).
 * A scheduler node answers from the job actors it holds in memory (`nodeLiveRuns`, through
 * `ActorHost.peek`: no mailbox, no load, no KV read — a dashboard's reads never wait on or wake
 * a burst's actors); an API node (`LiveRunsGatherer`) asks every live scheduler at once with a
 * short deadline and merges what came back in time. A node that does not answer in time, or a
 * job actor no node holds in memory, leaves those runs as their records show them.
 */
import type { Bus } from "../cluster/bus.ts";
import { decode, encode } from "../cluster/codec.ts";
import { activeRunView, type JobState } from "../job-state/job-state.ts";
import { JOB_ACTOR, jobActorId, parseRunId } from "../protocol/ids.ts";
import {
  MAX_LIVE_RUN_IDS,
  type LiveRunSource,
  type LiveRunsRequest,
  type NodeLiveRuns,
} from "../protocol/live-runs.ts";
import { RUN_STATUSES, TERMINAL, type RunStatus, type RunView } from "../protocol/model.ts";
import { MAX_STATS_NODES, statsSubject } from "./stats-responder.ts";

/** The in-memory state of a loaded actor (ActorHost.peek). */
type Peek = (type: string, id: string) => unknown;

/**
 * The named runs of `tenantId` active in the job actors this node holds in memory (at most
 * MAX_LIVE_RUN_IDS ids are looked at; ids that are not the tenant's runs are ignored).
 */
export function nodeLiveRuns(peek: Peek, tenantId: string, runIds: readonly string[]): RunView[] {
  const out: RunView[] = [];
  for (const runId of runIds.slice(0, MAX_LIVE_RUN_IDS)) {
    const id = parseRunId(runId);
    if (!id) continue;
    const s = peek(JOB_ACTOR, jobActorId(tenantId, id.jobId)) as JobState | undefined;
    if (!s?.job || s.deleted || s.job.tenant_id !== tenantId) continue;
    const r = s.runs.find((x) => x.run_id === runId);
    if (r) out.push(activeRunView(s.job, r));
  }
  return out;
}

const STATUSES: ReadonlySet<string> = new Set(RUN_STATUSES);

/** A node's answer, or undefined when it is not one (dropped, as if the node had not answered). */
export function parseNodeLiveRuns(x: unknown): NodeLiveRuns | undefined {
  if (x === null || typeof x !== "object") return undefined;
  const a = x as Record<string, unknown>;
  if (a.v !== 1 || typeof a.node !== "string" || !Array.isArray(a.runs)) return undefined;
  for (const r of a.runs as unknown[]) {
    if (r === null || typeof r !== "object") return undefined;
    const v = r as Record<string, unknown>;
    if (typeof v.run_id !== "string" || typeof v.tenant_id !== "string") return undefined;
    if (typeof v.status !== "string" || !STATUSES.has(v.status)) return undefined;
  }
  return a as unknown as NodeLiveRuns;
}

export interface LiveRunsGathererOptions {
  clusterName: string;
  /** The control connection (requests from this API node's identity). */
  bus: () => Bus;
  /** The live scheduler nodes (membership). */
  schedulers: () => readonly string[];
  /** How long a node is waited for (default 500 ms). */
  deadlineMs?: number;
}

/** The API node's side: asks every live scheduler for the runs it holds live, and merges. */
export class LiveRunsGatherer implements LiveRunSource {
  constructor(private readonly o: LiveRunsGathererOptions) {}

  async liveRuns(
    tenantId: string,
    runIds: readonly string[],
  ): Promise<ReadonlyMap<string, RunView>> {
    const out = new Map<string, RunView>();
    const nodes = [...new Set(this.o.schedulers())].slice(0, MAX_STATS_NODES);
    if (nodes.length === 0 || runIds.length === 0) return out;
    const wanted = new Set(runIds);
    const timeout = this.o.deadlineMs ?? 500;
    const requests: Promise<void>[] = [];
    for (let i = 0; i < runIds.length; i += MAX_LIVE_RUN_IDS) {
      const body = encode({
        kind: "runs",
        tenant_id: tenantId,
        run_ids: runIds.slice(i, i + MAX_LIVE_RUN_IDS),
      } satisfies LiveRunsRequest);
      for (const node of nodes)
        requests.push(
          this.o
            .bus()
            .request(statsSubject(this.o.clusterName, node), body, { timeout })
            .then(
              (m) => {
                for (const r of parseNodeLiveRuns(decode<unknown>(m.data))?.runs ?? []) {
                  // Only what was asked, of this tenant, not ended; two owners (a hand-over):
                  // the further along wins.
                  if (!wanted.has(r.run_id) || r.tenant_id !== tenantId || TERMINAL.has(r.status))
                    continue;
                  const had = out.get(r.run_id);
                  if (had === undefined || progress(r) > progress(had)) out.set(r.run_id, r);
                }
              },
              () => undefined, // not in time, gone, or not an answer: its runs stay as recorded
            ),
        );
    }
    await Promise.all(requests);
    return out;
  }
}

const ORDER: Record<RunStatus, number> = {
  queued: 0,
  leased: 1,
  running: 2,
  retry_wait: 3,
  succeeded: 4,
  failed: 4,
  timed_out: 4,
  cancelled: 4,
  skipped: 4,
  missed: 4,
  throttled: 4,
};

/** How far along a live view is: its attempt, then its status within the attempt. */
const progress = (r: RunView): number => r.attempt * 10 + ORDER[r.status];
