/**
 * The job actor's pure core, `(state, message, now) → decision`, and its composition: activation
 * and `makeJobActor`, which routes each message to the module of its concern (occurrence-plan,
 * occurrences, run-status, run-lifecycle, run-dispatch, run-cancel, job-commands, tx; its types: job-types.ts). One actor per job decides every transition of its runs.
 *
 * Crash-safe ordering: run records first (`pre` effects; a `create` that fails harmlessly if it
 * exists), then the job state with CAS; a crash in between re-fires the same occurrence, finds
 * its run and advances. Leases are in-memory timers ending at last heartbeat ARRIVAL + TTL
 * (`ctx.arrivalMs`, stamped before the mailbox); a new owner re-arms them with a grace.
 *
 * Pitfall: every offer gets its own fence (`fence_seq`) for exactly one worker; after the claim,
 * heartbeats and completions must carry that fence and that worker. A dead offer's fence is never
 * reused. Retried commands carry request ids and get their first result.
 */
import type { ActorContext, ActorDefinition, HostEffect } from "../actors/actor.ts";
import { START_SKEW_TOLERANCE_MS } from "../protocol/worker.ts";
import { JOB_ACTOR, splitJobActorId } from "../protocol/ids.ts";
import {
  activeRunsReply,
  emptyJobState,
  loadJobState,
  neverRan,
  type JobState,
} from "../job-state/job-state.ts";
import { command } from "./job-commands.ts";
import { fireAt, needsGate } from "../job-state/occurrence-plan.ts";
import { fire, occur } from "./occurrences.ts";
import { complete, completionKey, heartbeatKey } from "../runs/run-lifecycle.ts";
import { heartbeatAck, onRunMessage } from "../runs/run-messages.ts";
import { cancelRun } from "../runs/run-cancel.ts";
import { isLeased } from "../runs/run-status.ts";
import { Tx, fail } from "../job-state/tx.ts";
import {
  DEFAULT_JOB_CONFIG,
  type JobActorConfig,
  type JobEffect,
  type JobMsg,
  type JobReply,
} from "../job-state/job-types.ts";
import { NO_FAULTS, type JobFaults } from "../job-state/faults.ts";

// Limits and names defined with the code that uses them, exported here for the shell and tests.
export { SLOT_RECHECK_MS } from "../runs/run-dispatch.ts";
export { MAX_UNSTARTED_ATTEMPTS, completionKey, heartbeatKey } from "../runs/run-lifecycle.ts";
export { RECENT_REQUESTS } from "../job-state/tx.ts";
export { MAX_ENUMERATED } from "./occurrences.ts";
export { holdOf } from "../job-state/occurrence-plan.ts";

/** Re-arms timers from persisted state when the actor is (re)activated on a node. */
function onActivate(s: JobState, ctx: ActorContext, cfg: JobActorConfig): HostEffect<JobMsg>[] {
  const fx: HostEffect<JobMsg>[] = [];
  // A bound set by an earlier owner, whose clock may differ from this one's: allowed the start
  // tolerance (1 s); beyond it the kill grace in the bound (drainGraceMs) absorbs the skew.
  for (const d of s.draining ?? [])
    fx.push({
      kind: "timer",
      name: `drain:${d.run_id}`,
      atMs: Math.max(d.until_ms + START_SKEW_TOLERANCE_MS, ctx.nowMs),
      msg: { kind: "drained", run_id: d.run_id, fence: d.fence },
    });
  for (const d of s.draining ?? [])
    if (d.untold)
      fx.push({
        kind: "timer",
        name: `recall:${d.run_id}`,
        atMs: ctx.nowMs,
        msg: { kind: "recall", run_id: d.run_id, fence: d.fence },
      });
  if (!s.job || s.deleted) return fx;
  if (s.next_run_at_ms !== null)
    fx.push({
      kind: "timer",
      name: "fire",
      atMs: fireAt(cfg, s, ctx.nowMs),
      msg: { kind: "fire" },
    });
  for (const r of s.runs) {
    if (needsGate(s, r))
      fx.push({
        kind: "timer",
        name: `gate:${r.run_id}`,
        atMs: r.scheduled_for_ms,
        msg: { kind: "gate", run_id: r.run_id },
      });
    if (r.stopping !== undefined && r.worker !== null)
      // Being stopped: its worker is told again (the old owner's cancel may not have gone out).
      fx.push({
        kind: "timer",
        name: `recall:${r.run_id}`,
        atMs: ctx.nowMs,
        msg: { kind: "recall", run_id: r.run_id, fence: r.fence },
      });
    if (isLeased(r)) {
      // A fresh grace period: live workers re-heartbeat with the same fence.
      fx.push({
        kind: "timer",
        name: `lease:${r.run_id}`,
        atMs: Math.max(ctx.nowMs, r.start_at_ms) + cfg.leaseTtlMs,
        msg: { kind: "lease_expired", run_id: r.run_id, fence: r.fence },
      });
    } else if (r.status === "retry_wait" && r.next_attempt_at_ms !== null) {
      fx.push({
        kind: "timer",
        name: `retry:${r.run_id}`,
        atMs: r.next_attempt_at_ms,
        msg: { kind: "retry_due", run_id: r.run_id },
      });
    } else if (r.status === "queued") {
      // An offer of the previous owner may have been accepted: give its worker the offer timeout
      // to claim it by heartbeat before offering again under a new fence. (It cannot be running
      // unclaimed: workers start only after an acknowledged heartbeat.)
      const wait = r.fence > 0 ? cfg.offerTimeoutMs : 0;
      fx.push({
        kind: "timer",
        name: `dispatch:${r.run_id}`,
        atMs: ctx.nowMs + wait,
        msg: { kind: "redispatch", run_id: r.run_id },
      });
    }
  }
  return fx;
}

/** The answer to a heartbeat whose lease is gone (or being stopped), from memory. */
const leaseLost = (m: { run_id: string; fence: number; worker: string }) => ({
  fail: {
    code: "lease_lost" as const,
    message: `run ${m.run_id}: lease with fence ${m.fence} of worker ${m.worker} is gone`,
  },
});

/** The job actor under `cfg`; `faults` only in the simulation's self-tests (faults.ts). */
export function makeJobActor(
  cfg: JobActorConfig = DEFAULT_JOB_CONFIG,
  faults: JobFaults = NO_FAULTS,
): ActorDefinition<JobState, JobMsg, JobReply, JobEffect> {
  return {
    type: JOB_ACTOR,
    loadOnAcquire: true,
    // In memory before its `fire` (the host's `warmMs`): a burst's preparation reads none back.
    warmTimer: "fire",
    // Not passivated while a run is active: its grant, offer and start are deferred (memory only).
    keepLoaded: (s) => s.runs.length > 0 || (s.draining?.length ?? 0) > 0,
    // A job that never had a run, its `fire` far off (a job created for later), leaves memory
    // seconds after its last command: nothing of a run can be on its way to it. One that has run
    // keeps the host's idle time: its workers' late reports would each read it back.
    passivateEarly: neverRan,
    initialState: () => emptyJobState(),
    onActivate: (s, ctx) => onActivate(s, ctx, cfg),
    // Heartbeats: their arrival is recorded before the mailbox, and one for a lease already
    // recorded is acknowledged from the committed state without queueing (busy is not dead).
    // A completion report's arrival counts as the lease's heartbeat too (the worker does not
    // heartbeat an attempt whose report is on the wire): it proves the holder alive, and its
    // attempt has ended — a lease kept longer by it cannot let two executions overlap.
    arrivalKey: (m) =>
      m.kind === "heartbeat" || m.kind === "complete"
        ? heartbeatKey(m.run_id, m.fence, m.worker)
        : undefined,
    // A worker's completion report or heartbeat sent again (its answer timed out, or the next
    // round came) while the first still waits here behind a turn: one turn for both. Safe for
    // heartbeats: the copy's arrival is recorded before it joins (the lease runs from it), and
    // the shared reply is decided after that arrival, so its cover ends no later than for the copy
    // alone; a start the copy carried (`started_at_ms`) comes again with the next round or the
    // completion. (One attempt ends once: a report's content is fixed.)
    coalesceKey: (m) =>
      m.kind === "complete"
        ? completionKey(m.run_id, m.fence, m.worker)
        : m.kind === "heartbeat"
          ? `heartbeat|${heartbeatKey(m.run_id, m.fence, m.worker)}`
          : undefined,
    // Admitted ahead of a burst's completion turns: a claim (the dispatcher's `claimed`, or a
    // worker's heartbeat under the offer's fence) — the offer dies on the worker after lease TTL −
    // margin without it — and EVERY heartbeat: a running attempt's worker kills it itself once no
    // heartbeat was acknowledged for TTL − margin, so a heartbeat's deadline is as hard (do not
    // narrow this to claims). A queued completion keeps its lease: it can wait.
    urgent: (m) => m.kind === "claimed" || m.kind === "heartbeat",
    onLoad: loadJobState,
    // A create under a new job id finds no state: its read is skipped (a replay's is not).
    assumeNew: (m) => m.kind === "create" && m.fresh === true,
    // An API read of the job's runs (run-reads.ts) is answered even while the actor is in a turn
    // (a burst's): from the state before it, never queued behind it or admitted as a turn.
    queryDuringTurn: (m) => m.kind === "active_runs",
    query: (s, m, ctx) => {
      // Read-only, from memory (deferred changes included): no queueing behind a burst.
      if (m.kind === "active_runs")
        return s.job && !s.deleted ? { reply: activeRunsReply(s), alsoQueue: false } : undefined;
      if (m.kind !== "heartbeat") return undefined;
      const r = s.runs.find((x) => x.run_id === m.run_id);
      // A dead offer, answered from memory: the run is gone, or it has moved on to another fence
      // (fences are never handed out twice, so no message in the mailbox can make this one
      // current again). Through the mailbox, a burst's dead offers re-asked every round queued
      // faster than they were answered (200,000-run burst: 100,000+ per 5 s).
      if (s.job && !s.deleted && (!r || r.fence !== m.fence)) return leaseLost(m);
      if (!r || r.fence !== m.fence || r.worker !== m.worker || !isLeased(r)) return undefined;
      // Being stopped (run-lifecycle.ts `stopBeforeStart`): answered as an ended run is, from
      // memory — its worker stops the attempt; its report or the probe of its lease ends it.
      if (r.stopping !== undefined) return leaseLost(m);
      // The first heartbeat after the start still goes through the mailbox (status running).
      return {
        reply: heartbeatAck(s, r, m.started_at_ms, ctx.nowMs, cfg.leaseTtlMs),
        alsoQueue: r.status === "leased" && m.started_at_ms !== undefined,
      };
    },
    receive(state, msg, ctx) {
      const tx = new Tx(
        state,
        ctx.nowMs,
        cfg,
        occur,
        ctx.arrivalMs ? (k) => ctx.arrivalMs!(k) : undefined,
        ctx.pending ? (k) => ctx.pending!(k) : undefined,
        faults,
      );
      if (msg.kind !== "create" && !state.job) {
        return tx.done(null, fail("not_found", `job ${splitJobActorId(ctx.id).jobId} not found`));
      }
      switch (msg.kind) {
        case "create":
        case "get":
        case "active_runs":
        case "patch":
        case "delete":
        case "run_now":
          return command(tx, msg);
        case "fire":
          fire(tx);
          return tx.done(null);
        case "complete":
          return complete(tx, msg);
        case "cancel":
          return cancelRun(tx, msg);
        default:
          return onRunMessage(tx, msg);
      }
    },
  };
}
