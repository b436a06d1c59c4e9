/**
 * The job shell's run-record writes: the `pre` effects of a decision, performed before its state
 * write (`put_run` through the run-record store, a dead letter's keys after its terminal record,
 * the runs index's chunks), and `reconcile`, which squares a job state read back with its runs'
 * records.
 *
 * Pitfall: ownership is re-checked before each write — a long series (catch-up records) must not
 * outlive it; a stale owner's write throws `not_owner`, which drops the actor.
 */
import type { ActorRegistration } from "../actors/host.ts";
import type { KvStore } from "../cluster/kv.ts";
import { isRunIndexEffect, type RunIndexEffect } from "../history/run-index.ts";
import { writeRunIndexChunk } from "../history/run-index-store.ts";
import type { RunRecordStore } from "../history/run-record-store.ts";
import { decodeRunRecord } from "../history/run-record.ts";
import { KairosError } from "../lib/errors.ts";
import { isDeadLetter, recordDeadLetter } from "../notify/dead-letters.ts";
import { grantId, runKey, splitJobActorId } from "../protocol/ids.ts";
import { TERMINAL, type RunStatus } from "../protocol/model.ts";
import {
  activeRunView,
  type ActiveRun,
  type Draining,
  type JobState,
} from "../job-state/job-state.ts";
import { isLeased, STOPPED } from "../runs/run-status.ts";
import type { JobEffect, JobMsg } from "../job-state/job-types.ts";

/**
 * A run ended by the scheduler (a cancel, a skip) while on a worker, which may hold it prepared
 * ahead with a cover and never have heard the cancel: its slot is held until the lease's end and
 * its worker told (`recall`), as `finish` would have done.
 */
function drainOnLoad(
  r: ActiveRun,
  status: RunStatus | null,
  drainUntil: (startAtMs: number) => number,
): Draining | undefined {
  if (!r.slot || r.worker === null || !isLeased(r) || status === null || !STOPPED.has(status))
    return undefined;
  return {
    run_id: r.run_id,
    fence: r.fence,
    worker: r.worker,
    grant: grantId(r),
    until_ms: drainUntil(r.start_at_ms),
    created_at_ms: r.created_at_ms,
    scheduled_for_ms: r.scheduled_for_ms,
    untold: true,
  };
}

type Log = (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;

/** The registration's `perform` and `reconcile` over the runs bucket; `deadLetterKeys`: write a dead letter's keys (a durable outbox delivers them). */
export function makeRecordWrites(
  runs: KvStore,
  records: RunRecordStore,
  deadLetterKeys: boolean,
  log: Log,
  drainUntil: (startAtMs: number) => number,
): Required<Pick<ActorRegistration, "perform" | "reconcile">> {
  return {
    /**
     * A job state read back may still list runs whose end was a deferred change (`finish`): the
     * terminal record was written, the state not — and retention may have pruned that record
     * since (the state of a one-shot job is never written again). One read per active run finds
     * them: a terminal record or none means ended; they are dropped (the state is written with
     * the next write). Without this a completed run would be
     * given a fresh lease and, its worker long gone, run again when the lease expired.
     */
    async reconcile(raw, at) {
      const s = raw as JobState;
      if (!s.job || s.runs.length === 0) return s;
      const { tenantId, jobId } = splitJobActorId(at.address.id);
      const ended = new Set<string>();
      const draining: Draining[] = [];
      let manualEnded = false;
      await Promise.all(
        s.runs.map(async (r) => {
          const key = runKey(at.partition, tenantId, jobId, r.run_id);
          const e = await runs.get(key);
          if (!e && r.recorded_after) {
            // Written after the state (`create_run`), and that write did not happen: the state write
            // landed unseen (a timeout) or the node stopped. The run is live; write its record now,
            // through the store (this epoch's fence, run metrics).
            await records.put(at, activeRunView(s.job!, r), "create");
            return;
          }
          // No record: it ended and retention pruned it (a stored state lists a run only after its
          // record was created, and retention prunes terminal records only; once the end is
          // deferred, the state may list the run long after — one-shot jobs).
          const status = e ? decodeRunRecord(e.value).record.status : null;
          if (status === null || TERMINAL.has(status)) {
            ended.add(r.run_id);
            const d = drainOnLoad(r, status, drainUntil);
            if (d) draining.push(d);
            // Its end is written before retention may prune that record (JobState.ends_unwritten).
            if (r.recorded_after) manualEnded = true;
          }
        }),
      );
      if (ended.size === 0) return s;
      log("info", "runs ended before the job state was written: dropped on load", {
        job: at.address.id,
        runs: [...ended],
      });
      return {
        ...s,
        runs: s.runs.filter((r) => !ended.has(r.run_id)),
        ...(draining.length > 0 ? { draining: [...(s.draining ?? []), ...draining] } : {}),
        ...(manualEnded ? { ends_unwritten: true as const } : {}),
      };
    },
    async perform(pre, ctx) {
      const followUps: JobMsg[] = [];
      for (const fx of pre as (JobEffect | RunIndexEffect)[]) {
        // Re-checked before each write: a long series (catch-up records) must not outlive ownership.
        if (!ctx.stillOwner())
          throw new KairosError(
            "not_owner",
            `${ctx.address.type}/${ctx.address.id}: no longer the owner`,
          );
        if (isRunIndexEffect(fx)) {
          await writeRunIndexChunk(runs, ctx, fx);
          continue;
        }
        if (fx.kind !== "put_run") continue;
        const put = await records.put(ctx, fx.record, fx.mode);
        if (put === "ended")
          followUps.push({ kind: "already_ended", run_id: fx.record.run_id } satisfies JobMsg);
        // Indexed only now that it exists (run-index.ts): a settle that found nothing adds no entry.
        if (put === "settled")
          followUps.push({ kind: "run_settled", run_id: fx.record.run_id } satisfies JobMsg);
        if (fx.mode === "update" && deadLetterKeys && isDeadLetter(fx.record))
          await recordDeadLetter(runs, ctx.partition, fx.record);
      }
      return followUps;
    },
  };
}
