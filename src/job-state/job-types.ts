/**
 * The job actor's vocabulary: its config, the messages it takes (`JobMsg`), the effects it hands
 * its shell (`JobEffect`) and its replies (`JobReply`). A leaf of the area: the modules of the
 * core and the shell import these from here, none from the composing file (job-actor.ts).
 */
import type { RunIndexState } from "../history/run-index.ts";
import type { PutRunMode } from "../history/run-record-store.ts";
import type { JobPatch, JobSpec, JobView, RunView, TaskInput } from "../protocol/model.ts";
import type { Completion, ProbeReply } from "../protocol/worker.ts";

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
  /**
   * Most runs of one job waiting for a tenant slot (queued, not granted; backlog.ts
   * `waitingRuns`): an occurrence of its schedule beyond it is recorded `throttled`.
   */
  maxWaitingRuns: number;
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
  maxWaitingRuns: 10,
  queueLimit: 10,
  catchUpLimit: 100,
  redispatchDelayMs: 1_000,
  offerTimeoutMs: 2_000,
  drainGraceMs: 10_000,
};

/** What a worker reports when an attempt ends (defined with the worker protocol). */
export type { Completion };

export type JobMsg =
  /** `fresh`: its id is new (no idempotent replay), so the actor is made without a read (`assumeNew`). */
  | {
      kind: "create";
      tenant_id: string;
      job_id: string;
      spec: JobSpec;
      request_hash: string;
      fresh?: boolean;
    }
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
  /**
   * The tenant refused the ask named by grant id `run_id`: `waiting` of its runs already wait for
   * a slot, its bound `max_waiting` (tenant-actor.ts). Only asks marked `throttle` are refused.
   */
  | { kind: "slot_throttled"; run_id: string; waiting: number; max_waiting: number }
  /**
   * Offer the run again (its timer). `fence`: from the dispatcher, when a worker advertised room
   * after the offer under that fence failed — only while the run still waits under it.
   */
  | { kind: "redispatch"; run_id: string; fence?: number }
  | { kind: "claimed"; run_id: string; fence: number; worker: string }
  | { kind: "dispatch_failed"; run_id: string; fence: number; reason: string }
  | { kind: "slot_check"; run_id: string }
  /** The tenant asks whether this run still holds the slot it granted (lost releases). */
  | { kind: "slot_audit"; run_id: string }
  | { kind: "heartbeat"; run_id: string; fence: number; worker: string; started_at_ms?: number }
  | ({ kind: "complete"; run_id: string; fence: number; worker: string } & Completion)
  /** `after_probe`: the probe's answer never came (run-messages.ts `onLeaseExpired`). */
  | {
      kind: "lease_expired";
      run_id: string;
      fence: number;
      /** The fallback of the probe numbered `probe` (`probes` at its send): its answer never came. */
      after_probe?: true;
      probe?: number;
    }
  /** From the shell: the worker's answer to a probe of a silent lease (null: none; `gone`: no responder, and the worker no longer advertises). */
  | {
      kind: "probe_answer";
      run_id: string;
      fence: number;
      worker: string;
      reply: ProbeReply | null;
      gone?: true;
      /** No answer in time from a worker that still advertises (alive, swamped): see `probeOrLapse`. */
      advertising?: true;
    }
  | { kind: "retry_due"; run_id: string }
  /** A gated run's due instant: skip it if another run of the job is still active. */
  | { kind: "gate"; run_id: string }
  /** A cancelled run's drain bound: its worker has stopped it by now; give its slot back. */
  | { kind: "drained"; run_id: string; fence: number }
  /**
   * On load: a draining run found ended by its record alone (job-shell `reconcile`), whose worker
   * was never told — tell it now (run-messages.ts `onRecall`).
   */
  | { kind: "recall"; run_id: string; fence: number }
  /**
   * From the shell: creating this run's record met a terminal one — the occurrence was fired and
   * ended in decisions whose state change was lost (deferred), so the re-fire re-created a run
   * that must not run again: it is dropped (run-messages.ts `onAlreadyEnded`).
   */
  | { kind: "already_ended"; run_id: string }
  /**
   * A user's request to cancel one run of this job (run-cancel.ts): `by` names who asked (the
   * API key id, or the NATS API), `note` is the reason they gave, if any. Idempotent.
   */
  | { kind: "cancel"; run_id: string; by: string; note?: string }
  /**
   * From the shell: a `settle` wrote this run's terminal record over an orphan (a fire whose state
   * change was lost). Changes nothing in the core; the runs index adds the record (with-history.ts).
   */
  | { kind: "run_settled"; run_id: string };

/** Work handed to the shell (src/jobs/job-shell.ts). */
export type JobEffect =
  /**
   * Writes a run record. `create`: a new occurrence (an existing key is a re-fire: fine).
   * `update`: CAS at the known revision; on a conflict re-read, refuse if a later epoch wrote it.
   * `terminal`: a record for an occurrence that does not run (skipped, missed, cancelled): created,
   * or written over an orphaned non-terminal record left by a crash before the job state advanced.
   * `settle`: like `terminal` but only over an existing non-terminal record (never creates).
   */
  | {
      kind: "put_run";
      record: RunView;
      mode: PutRunMode;
      /** Its record was made, and indexed, before (JobState.requeued): the runs index adds no entry. */
      indexed?: true;
    }
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
   * when it can start, past for a run due since then (the tenant grants its waiting runs earliest
   * start first: the longest waiting first). `throttle`: the
   * tenant may refuse it when its backlog is at its bound (a run of the schedule never attempted;
   * answered `slot_throttled`).
   */
  | {
      kind: "acquire_slot";
      run_id: string;
      grant: string;
      timeout_s: number;
      starts_in_ms: number;
      start_at_ms: number;
      throttle?: true;
    }
  | { kind: "release_slot"; grant: string }
  | {
      kind: "dispatch";
      run_id: string;
      fence: number;
      attempt: number;
      start_at_ms: number;
      scheduled_for_ms: number;
      task: TaskInput;
    }
  | { kind: "cancel_on_worker"; worker: string; run_id: string; fence: number }
  /** Ask the worker what became of an attempt whose lease fell silent; answered by `probe_answer`. */
  | { kind: "probe_worker"; worker: string; run_id: string; attempt: number; fence: number }
  | { kind: "dead_letter"; record: RunView }
  /**
   * A run ended (succeeded, failed, timed out, skipped, missed; not cancelled): its run event
   * (src/notify/run-events.ts), written to the event outbox only if the tenant subscribes to it.
   * A post effect: the end's record is written first; nothing in a burst's turn waits for it.
   */
  | { kind: "run_ended"; record: RunView };

/** `hold`, `cover_ms`: a heartbeat's acknowledgement (run-messages.ts `heartbeatAck`). */
/** `runs` and `index` answer `active_runs`: the active runs' views and the runs index (run-index.ts). */
export type JobReply = {
  job?: JobView;
  run?: RunView;
  runs?: RunView[];
  index?: RunIndexState;
  run_id?: string;
  ok?: true;
  hold?: true;
  cover_ms?: number;
} | null;
