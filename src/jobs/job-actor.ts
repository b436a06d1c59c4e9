/**
 * The job actor's pure core, `(state, message, now) → decision`, and its composition: the
 * message, effect and reply unions, the config, activation, and `makeJobActor`, which routes each
 * message to the module of its concern (occurrence-plan, occurrences, run-status, run-lifecycle,
 * run-dispatch, job-commands, tx). One actor per job decides every transition of its runs.
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
import { START_SKEW_TOLERANCE_MS, type Completion, type ProbeReply } from "../protocol/worker.ts";
import { JOB_ACTOR, splitJobActorId } from "../protocol/ids.ts";
import { activeRunsReply, emptyJobState, loadJobState, type JobState, type jobView } from "./job-state.ts";
import type { RunIndexState } from "../history/run-index.ts";
import type { PutRunMode } from "../history/run-record-store.ts";
import type { JobPatch, JobSpec, RunView, TaskInput } from "../protocol/model.ts";
import { command } from "./job-commands.ts";
import { fireAt, needsGate } from "./occurrence-plan.ts";
import { fire, occur } from "./occurrences.ts";
import { complete, completionKey, heartbeatAck, heartbeatKey, onRunMessage } from "./run-lifecycle.ts";
import { isLeased } from "./run-status.ts";
import { Tx, fail } from "./tx.ts";
import { NO_FAULTS, type JobFaults } from "./faults.ts";

export interface JobActorConfig {
  leaseTtlMs: number;
  /**
   * Runs are created and matched to workers up to this long before they are due: a job's window
   * is this, at most half the gap since its previous occurrence, at least a minute
   * (occurrence-plan.ts `windowOf`).
   */
  lookaheadMs: number;
  /** An occurrence fired later than this after its due time is a misfire. */
  misfireGraceMs: number;
  maxActiveRuns: number;
  queueLimit: number;
  catchUpLimit: number;
  redispatchDelayMs: number;
  /** How long a worker has to accept an offer; a new owner waits this long for an old offer's claim. */
  offerTimeoutMs: number;
  /**
   * A cancelled run's slot is held until its worker reports the attempt ended, at most the lease
   * TTL plus this (the executor's kill grace: SIGTERM, then SIGKILL) — see `JobState.draining`.
   */
  drainGraceMs: number;
}

export const DEFAULT_JOB_CONFIG: JobActorConfig = {
  leaseTtlMs: 10_000,
  // The slow work (KV writes, slot matching) happens before the due instant. Five minutes: a
  // 200,000-run burst takes minutes to prepare on two cores (~1,500 runs/s), so a one-minute
  // window leaves most of it to be prepared after the due second. Jobs due more often get less
  // (`windowOf`).
  lookaheadMs: 300_000,
  misfireGraceMs: 10_000,
  maxActiveRuns: 100,
  queueLimit: 10,
  catchUpLimit: 100,
  redispatchDelayMs: 1_000,
  offerTimeoutMs: 2_000,
  drainGraceMs: 10_000,
};

// Limits and names defined with the code that uses them, exported here for the shell and tests.
export { SLOT_RECHECK_MS } from "./run-dispatch.ts";
export { MAX_UNSTARTED_ATTEMPTS, completionKey, heartbeatKey } from "./run-lifecycle.ts";
export { RECENT_REQUESTS } from "./tx.ts";
export { MAX_ENUMERATED } from "./occurrences.ts";
export { holdOf } from "./occurrence-plan.ts";

/** What a worker reports when an attempt ends (defined with the worker protocol). */
export type { Completion };

export type JobMsg =
  | { kind: "create"; tenant_id: string; job_id: string; spec: JobSpec; request_hash: string }
  | { kind: "get" }
  /** The job's active runs as the API shows them (their records are written only at creation and end). */
  | { kind: "active_runs" }
  | { kind: "patch"; patch: JobPatch; if_match?: number; request_id?: string }
  | { kind: "delete" }
  /**
   * `requested_at_ms`: when the API node first sent it (the same in the router's retries): it names
   * the run (job-commands.ts `runNow`), so every try of one request names the same run.
   */
  | { kind: "run_now"; request_id?: string; requested_at_ms?: number }
  | { kind: "fire" }
  /** `run_id` is the grant id (`<run_id>_<slot_seq>`, see `grantId`). */
  | { kind: "slot_granted"; run_id: string }
  | { kind: "redispatch"; run_id: string }
  | { kind: "claimed"; run_id: string; fence: number; worker: string }
  | { kind: "dispatch_failed"; run_id: string; fence: number; reason: string }
  | { kind: "slot_check"; run_id: string }
  /** The tenant asks whether this run still holds the slot it granted (lost releases). */
  | { kind: "slot_audit"; run_id: string }
  | { kind: "heartbeat"; run_id: string; fence: number; worker: string; started_at_ms?: number }
  | ({ kind: "complete"; run_id: string; fence: number; worker: string } & Completion)
  /** `after_probe`: the probe's answer never came (run-lifecycle.ts `onLeaseExpired`). */
  | { kind: "lease_expired"; run_id: string; fence: number; after_probe?: true }
  /** From the shell: the worker's answer to a probe of a silent lease (null: none; `gone`: no responder, and the worker no longer advertises). */
  | { kind: "probe_answer"; run_id: string; fence: number; worker: string; reply: ProbeReply | null; gone?: true }
  | { kind: "retry_due"; run_id: string }
  /** A gated run's due instant: skip it if another run of the job is still active. */
  | { kind: "gate"; run_id: string }
  /** A cancelled run's drain bound: its worker has stopped it by now; give its slot back. */
  | { kind: "drained"; run_id: string; fence: number }
  /**
   * From the shell: creating this run's record met a terminal one — the occurrence was fired and
   * ended in decisions whose state change was lost (deferred), so the re-fire re-created a run
   * that must not run again: it is dropped (run-lifecycle.ts `onAlreadyEnded`).
   */
  | { kind: "already_ended"; run_id: string };

/** Work handed to the shell (src/jobs/job-shell.ts). */
export type JobEffect =
  /**
   * Writes a run record. `create`: a new occurrence (an existing key is a re-fire: fine).
   * `update`: CAS at the known revision; on a conflict re-read, refuse if a later epoch wrote it.
   * `terminal`: a record for an occurrence that does not run (skipped, missed, cancelled): created,
   * or written over an orphaned non-terminal record left by a crash before the job state advanced.
   * `settle`: like `terminal` but only over an existing non-terminal record (never creates).
   */
  | { kind: "put_run"; record: RunView; mode: PutRunMode }
  /**
   * Creates the record of a run the job state already holds (post, after the state write): a
   * run-now's. Its state is the source of truth, so a try whose state write is lost leaves no
   * record behind; one whose write landed unseen is found on load (job-shell.ts `reconcile`).
   */
  | { kind: "create_run"; record: RunView }
  /** A run transition short of its end, not written (see `Tx.putRun`): run metrics only. */
  | { kind: "note_run"; record: RunView }
  /**
   * `starts_in_ms`: how long until the run can start (a run prepared ahead holds its grant from
   * now): the grant lives that long plus the task's timeout plus the shell's grace. `start_at_ms`:
   * when it can start (the tenant grants its waiting runs earliest start first).
   */
  | { kind: "acquire_slot"; run_id: string; grant: string; timeout_s: number; starts_in_ms: number; start_at_ms: number }
  | { kind: "release_slot"; grant: string }
  | { kind: "dispatch"; run_id: string; fence: number; attempt: number; start_at_ms: number; scheduled_for_ms: number; task: TaskInput }
  | { kind: "cancel_on_worker"; worker: string; run_id: string; fence: number }
  /** Ask the worker what became of an attempt whose lease fell silent; answered by `probe_answer`. */
  | { kind: "probe_worker"; worker: string; run_id: string; attempt: number; fence: number }
  | { kind: "dead_letter"; record: RunView };

/** `hold`, `cover_ms`: a heartbeat's acknowledgement (run-lifecycle.ts `heartbeatAck`). */
/** `runs` and `index` answer `active_runs`: the active runs' views and the runs index (run-index.ts). */
export type JobReply = { job?: ReturnType<typeof jobView>; run?: RunView; runs?: RunView[]; index?: RunIndexState; run_id?: string; ok?: true; hold?: true; cover_ms?: number } | null;

/** Re-arms timers from persisted state when the actor is (re)activated on a node. */
function onActivate(s: JobState, ctx: ActorContext, cfg: JobActorConfig): HostEffect<JobMsg>[] {
  const fx: HostEffect<JobMsg>[] = [];
  // A bound set by an earlier owner, whose clock may differ from this one's: allowed the start
  // tolerance (1 s); beyond it the kill grace in the bound (drainGraceMs) absorbs the skew.
  for (const d of s.draining ?? []) fx.push({ kind: "timer", name: `drain:${d.run_id}`, atMs: Math.max(d.until_ms + START_SKEW_TOLERANCE_MS, ctx.nowMs), msg: { kind: "drained", run_id: d.run_id, fence: d.fence } });
  if (!s.job || s.deleted) return fx;
  if (s.next_run_at_ms !== null) fx.push({ kind: "timer", name: "fire", atMs: fireAt(cfg, s, ctx.nowMs), msg: { kind: "fire" } });
  for (const r of s.runs) {
    if (needsGate(s, r)) fx.push({ kind: "timer", name: `gate:${r.run_id}`, atMs: r.scheduled_for_ms, msg: { kind: "gate", run_id: r.run_id } });
    if (isLeased(r)) {
      // A fresh grace period: live workers re-heartbeat with the same fence.
      fx.push({ kind: "timer", name: `lease:${r.run_id}`, atMs: Math.max(ctx.nowMs, r.start_at_ms) + cfg.leaseTtlMs, msg: { kind: "lease_expired", run_id: r.run_id, fence: r.fence } });
    } else if (r.status === "retry_wait" && r.next_attempt_at_ms !== null) {
      fx.push({ kind: "timer", name: `retry:${r.run_id}`, atMs: r.next_attempt_at_ms, msg: { kind: "retry_due", run_id: r.run_id } });
    } else if (r.status === "queued") {
      // An offer of the previous owner may have been accepted: give its worker the offer timeout
      // to claim it by heartbeat before offering again under a new fence. (It cannot be running
      // unclaimed: workers start only after an acknowledged heartbeat.)
      const wait = r.fence > 0 ? cfg.offerTimeoutMs : 0;
      fx.push({ kind: "timer", name: `dispatch:${r.run_id}`, atMs: ctx.nowMs + wait, msg: { kind: "redispatch", run_id: r.run_id } });
    }
  }
  return fx;
}

/** The job actor under `cfg`; `faults` only in the simulation's self-tests (faults.ts). */
export function makeJobActor(cfg: JobActorConfig = DEFAULT_JOB_CONFIG, faults: JobFaults = NO_FAULTS): ActorDefinition<JobState, JobMsg, JobReply, JobEffect> {
  return {
    type: JOB_ACTOR,
    loadOnAcquire: true,
    // In memory before its `fire` (the host's `warmMs`): a burst's preparation reads none back.
    warmTimer: "fire",
    // Not passivated while a run is active: its grant, offer and start are deferred (memory only).
    keepLoaded: (s) => s.runs.length > 0 || (s.draining?.length ?? 0) > 0,
    initialState: () => emptyJobState(),
    onActivate: (s, ctx) => onActivate(s, ctx, cfg),
    // Heartbeats: their arrival is recorded before the mailbox, and one for a lease already
    // recorded is acknowledged from the committed state without queueing (busy is not dead).
    // A completion report's arrival counts as the lease's heartbeat too (the worker does not
    // heartbeat an attempt whose report is on the wire): it proves the holder alive, and its
    // attempt has ended — a lease kept longer by it cannot let two executions overlap.
    arrivalKey: (m) => (m.kind === "heartbeat" || m.kind === "complete" ? heartbeatKey(m.run_id, m.fence, m.worker) : undefined),
    // A worker's completion report or heartbeat sent again (its answer timed out, or the next
    // round came) while the first still waits here behind a turn: one turn for both. Safe for
    // heartbeats: the copy's arrival is recorded before it joins (the lease runs from it), and
    // the shared reply is decided after that arrival, so its cover ends no later than for the copy
    // alone; a start the copy carried (`started_at_ms`) comes again with the next round or the
    // completion. (One attempt ends once: a report's content is fixed.)
    coalesceKey: (m) => (m.kind === "complete" ? completionKey(m.run_id, m.fence, m.worker) : m.kind === "heartbeat" ? `heartbeat|${heartbeatKey(m.run_id, m.fence, m.worker)}` : undefined),
    // Admitted ahead of a burst's completion turns: a claim (the dispatcher's `claimed`, or a
    // worker's heartbeat under the offer's fence) — the offer dies on the worker after lease TTL −
    // margin without it — and EVERY heartbeat: a running attempt's worker kills it itself once no
    // heartbeat was acknowledged for TTL − margin, so a heartbeat's deadline is as hard (do not
    // narrow this to claims). A queued completion keeps its lease: it can wait.
    urgent: (m) => m.kind === "claimed" || m.kind === "heartbeat",
    onLoad: loadJobState,
    query: (s, m, ctx) => {
      // Read-only, from memory (deferred changes included): no queueing behind a burst.
      if (m.kind === "active_runs") return s.job && !s.deleted ? { reply: activeRunsReply(s), alsoQueue: false } : undefined;
      if (m.kind !== "heartbeat") return undefined;
      const r = s.runs.find((x) => x.run_id === m.run_id);
      // A dead offer, answered from memory: the run is gone, or it has moved on to another fence
      // (fences are never handed out twice, so no message in the mailbox can make this one
      // current again). Through the mailbox, a burst's dead offers re-asked every round queued
      // faster than they were answered (200,000-run burst: 100,000+ per 5 s).
      if (s.job && !s.deleted && (!r || r.fence !== m.fence)) return { fail: { code: "lease_lost", message: `run ${m.run_id}: lease with fence ${m.fence} of worker ${m.worker} is gone` } };
      if (!r || r.fence !== m.fence || r.worker !== m.worker || !isLeased(r)) return undefined;
      // The first heartbeat after the start still goes through the mailbox (status running).
      return { reply: heartbeatAck(s, r, m.started_at_ms, ctx.nowMs, cfg.leaseTtlMs), alsoQueue: r.status === "leased" && m.started_at_ms !== undefined };
    },
    receive(state, msg, ctx) {
      const tx = new Tx(state, ctx.nowMs, cfg, occur, ctx.arrivalMs ? (k) => ctx.arrivalMs!(k) : undefined, ctx.pending ? (k) => ctx.pending!(k) : undefined, faults);
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
        default:
          return onRunMessage(tx, msg);
      }
    },
  };
}
