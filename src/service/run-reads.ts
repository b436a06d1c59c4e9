/**
 * The runs side of `JobsService` (nats-service.ts delegates): a job's runs pages, the tenant's
 * runs across its jobs, dead letters, one run, and cancel. Records are written at a run's
 * creation and end only; between them its job actor holds it, so a run not ended is shown as its
 * actor has it: a job's page and one run through an `active_runs` query (answered from memory,
 * also while the actor is in a turn — never queued behind a burst's turns nor admitted as one; a
 * job not in memory is loaded; one per page or run, never per record), the tenant's page through
 * the scheduler nodes' memory (`LiveRunSource`, one request per node per page), as it spans
 * many jobs.
 */
import { KairosError, isKairosError } from "../lib/errors.ts";
import type { Buckets } from "../cluster/buckets.ts";
import { partitionOf } from "../cluster/placement.ts";
import type { ActorRouter } from "../cluster/router.ts";
import { parseRunId, runKey } from "../protocol/ids.ts";
import type { JobReply } from "../job-state/job-types.ts";
import type { LiveRunSource } from "../protocol/live-runs.ts";
import { runView } from "../history/run-record.ts";
import {
  decodeCursor,
  encodeCursor,
  indexedRunsPage,
  legacyRunsPage,
} from "../history/run-pages.ts";
import { deadLetterKey } from "../notify/dead-letters.ts";
import { tenantRunsPage } from "../history/tenant-runs-page.ts";
import { TERMINAL, type Page, type RunStatus, type RunView } from "../protocol/model.ts";

/** A job actor's address (throws `not_found` for an id that cannot be a job's). */
type JobAddress = (tenantId: string, jobId: string) => { type: string; id: string };

export class RunReads {
  constructor(
    private readonly router: ActorRouter,
    private readonly buckets: Buckets,
    private readonly partitions: number,
    private readonly jobAddress: JobAddress,
    /** Live views of runs not ended for the tenant's runs list; none: records as written. */
    private readonly live?: LiveRunSource,
  ) {}

  async listRuns(
    tenantId: string,
    jobId: string,
    opts: { status?: RunStatus; cursor?: string; limit: number },
  ): Promise<Page<RunView>> {
    const p = partitionOf(this.jobAddress(tenantId, jobId), this.partitions);
    // One request to the job actor, answered from memory even during a turn (404 for unknown,
    // deleted or foreign jobs): its active runs as it holds them (records are written at creation
    // and end only) and its runs index — in memory, since a `fire`'s state change (and the index
    // entries of the records it creates) is deferred until the job's next state write.
    const reply = await this.router.request<JobReply>(this.jobAddress(tenantId, jobId), {
      kind: "active_runs",
    });
    const live = liveRuns(reply);
    const q = { ...opts, live };
    if (reply?.index)
      return indexedRunsPage(this.buckets.runs, p, { tenantId, jobId, index: reply.index }, q);
    return legacyRunsPage(this.buckets.runs, p, tenantId, jobId, q);
  }

  async listTenantRuns(
    tenantId: string,
    opts: { status?: RunStatus; cursor?: string; limit: number },
  ): Promise<Page<RunView>> {
    const live = this.live;
    return tenantRunsPage(
      this.buckets.runs,
      this.partitions,
      tenantId,
      opts,
      live && ((ids) => live.liveRuns(tenantId, ids)),
    );
  }

  async listDeadLetters(
    tenantId: string,
    opts: { cursor?: string; limit: number },
  ): Promise<Page<RunView>> {
    let after = 0;
    if (opts.cursor !== undefined) {
      const [kind, rev] = decodeCursor(opts.cursor, 2);
      after = Number(rev);
      if (kind !== "dl" || !Number.isSafeInteger(after) || after < 0)
        throw new KairosError("invalid_argument", "cursor: not a cursor returned by this API", {
          field: "cursor",
        });
    }
    // Keys dl.<tenant>.<run> (dead-letters.ts), in the order they were written.
    const page = await this.buckets.runs.scan(deadLetterKey(tenantId, "*"), after, opts.limit);
    return {
      items: page.entries.map((e) => runView(e.value)),
      next_cursor: page.next === null ? null : encodeCursor(["dl", String(page.next)]),
    };
  }

  async getRun(tenantId: string, runId: string): Promise<RunView> {
    const id = parseRunId(runId);
    if (!id) throw new KairosError("not_found", "run not found");
    const { jobId } = id;
    const p = partitionOf(this.jobAddress(tenantId, jobId), this.partitions);
    const e = await this.buckets.runs.get(runKey(p, tenantId, jobId, runId));
    if (!e) {
      // A scheduled run's record is written before the job state, so none means none. Only a
      // run-now's (`-m<n>`) is written just after: its owner holds it meanwhile — the one case
      // in which a missing record costs an actor request.
      if (id.seq === 0) throw new KairosError("not_found", "run not found");
      const live = (await this.#activeRuns(tenantId, jobId)).get(runId);
      if (live) return live;
      throw new KairosError("not_found", "run not found");
    }
    const r = runView(e.value);
    return TERMINAL.has(r.status) ? r : withLive(r, await this.#activeRuns(tenantId, jobId));
  }

  async cancelRun(tenantId: string, runId: string, by: string, note?: string): Promise<RunView> {
    const id = parseRunId(runId);
    if (!id) throw new KairosError("not_found", "run not found");
    // The actor is addressed with the caller's tenant: another tenant's run is not its job's.
    const job = this.jobAddress(tenantId, id.jobId);
    let reply: JobReply = null;
    try {
      reply = await this.router.request<JobReply>(job, {
        kind: "cancel",
        run_id: runId,
        by,
        ...(note === undefined ? {} : { note }),
      });
    } catch (e) {
      // No such job (or deleted, or another tenant's): the record, if any, decides below.
      if (!isKairosError(e, "not_found")) throw e;
    }
    if (reply?.run) return reply.run;
    // Not active under its job: read after the actor's answer, which came after any settle of
    // the record it made, so an ended run's record is there.
    const p = partitionOf(job, this.partitions);
    const e = await this.buckets.runs.get(runKey(p, tenantId, id.jobId, runId));
    if (!e) throw new KairosError("not_found", "run not found");
    const r = runView(e.value);
    if (r.status === "cancelled") return r;
    throw new KairosError(
      "conflict",
      TERMINAL.has(r.status)
        ? `run ${runId} has already ended (${r.status}); only a run that has not ended can be cancelled`
        : `run ${runId} is not active under its job (the job was deleted)`,
      { retryable: false },
    );
  }

  /**
   * The job's active runs from its actor (their records are written at creation and at their
   * end only; the actor holds every transition in between). Empty if the job has none.
   */
  async #activeRuns(tenantId: string, jobId: string): Promise<Map<string, RunView>> {
    try {
      return liveRuns(
        await this.router.request<JobReply>(this.jobAddress(tenantId, jobId), {
          kind: "active_runs",
        }),
      );
    } catch (e) {
      if (isKairosError(e, "not_found")) return new Map(); // a deleted job: its records are all there is
      throw e;
    }
  }
}

/** The active runs of an `active_runs` reply, by run id. */
const liveRuns = (reply: JobReply | undefined): Map<string, RunView> =>
  new Map((reply?.runs ?? []).map((r) => [r.run_id, r]));

/** A record as the API shows it: an active run's live view from its job actor, if it has one. */
function withLive(record: RunView, live: ReadonlyMap<string, RunView>): RunView {
  return TERMINAL.has(record.status) ? record : (live.get(record.run_id) ?? record);
}
