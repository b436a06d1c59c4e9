/**
 * The shapes the ledger chaos test shares between its parts: fault kinds and records, executions
 * read from the ledger, jobs with the history of the user's changes to them, and what the checks
 * report. No logic here (test/chaos/ledger-checks.ts judges, ledger-faults.ts injects).
 */

/**
 * Every fault the chaos test injects. Each faulted process comes back under its own id.
 * - `kill9_*` / `sigterm_scheduler` / `sigstop_*`: one process killed (and restarted), stopped
 *   gracefully (and restarted), or paused (SIGSTOP, then SIGCONT);
 * - `cut_worker`: a worker cut off from NATS through its proxies;
 * - `nats_restart`: one NATS server stopped (SIGTERM) and started again on its port and store;
 *   `kill9_nats_meta_leader` / `_stream_leader` / `_follower` (a 3-server cluster only): kill -9
 *   of the JetStream meta leader, of the leader of a bucket's stream, or of a server following
 *   that stream (not the meta leader), then its return; `sigstop_nats`: a NATS server paused;
 * - `rolling_workers_drain` / `rolling_workers_kill9`: every worker in turn drained (SIGTERM) or
 *   killed, then started again under its own id, the next once the cluster is whole;
 *   `rolling_schedulers`: every scheduler in turn stopped (SIGTERM) and started again;
 * - `two_at_once`: two of the single-process kinds above at the same time (distinct processes, at
 *   most one NATS server).
 */
export const FAULT_KINDS = [
  "kill9_scheduler",
  "sigterm_scheduler",
  "sigstop_scheduler",
  "kill9_worker",
  "sigstop_worker",
  "cut_worker",
  "nats_restart",
  "sigstop_nats",
  "kill9_nats_meta_leader",
  "kill9_nats_stream_leader",
  "kill9_nats_follower",
  "rolling_workers_drain",
  "rolling_workers_kill9",
  "rolling_schedulers",
  "two_at_once",
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** Kinds that need a NATS cluster (a meta leader, stream leaders and their followers). */
export const CLUSTER_ONLY: ReadonlySet<FaultKind> = new Set([
  "kill9_nats_meta_leader",
  "kill9_nats_stream_leader",
  "kill9_nats_follower",
]);
/** Kinds that fault one process, which `two_at_once` combines. */
export const SINGLE_KINDS: readonly FaultKind[] = [
  "kill9_scheduler",
  "sigterm_scheduler",
  "sigstop_scheduler",
  "kill9_worker",
  "sigstop_worker",
  "cut_worker",
  "nats_restart",
  "sigstop_nats",
  "kill9_nats_meta_leader",
  "kill9_nats_stream_leader",
  "kill9_nats_follower",
];
/** Kinds whose process is a NATS server. */
export const NATS_KINDS: ReadonlySet<FaultKind> = new Set([
  "nats_restart",
  "sigstop_nats",
  "kill9_nats_meta_leader",
  "kill9_nats_stream_leader",
  "kill9_nats_follower",
]);

/** One process a fault touched, and for how long its effects may last. */
export interface Hit {
  /** A worker or scheduler node id, or `nats:<server name>`. */
  target: string;
  atMs: number;
  /** When the cluster was whole again after it; undefined: not within the recovery deadline. */
  untilMs: number | undefined;
  /**
   * Not a graceful stop: kill -9, SIGSTOP, cut off, or anything done to a NATS server (its
   * clients lose what was in flight). A drained worker or a SIGTERMed scheduler is not hard.
   */
  hard: boolean;
}

export interface FaultRecord {
  kind: FaultKind;
  target: string;
  atMs: number;
  /** When the fault was lifted (process restarted, resumed, healed; the last step of a roll). */
  liftedMs: number;
  /** When the cluster was whole again (or undefined: recovery deadline passed). */
  recoveredMs: number | undefined;
  detail: string;
  /** Every process the fault touched (a rolling restart: each in its turn). */
  hits: Hit[];
  /** The other fault of a `two_at_once`, by its index in the fault list. */
  pairedWith?: number;
}

export interface Exec {
  run: string;
  attempt: number;
  fence: number;
  worker: string;
  tenant: string;
  key: string;
  startMs: number;
  endMs: number | undefined;
  /** How the execution ended: its own end line, a TERM trap, the test's kill -9, or not at all. */
  how: "end" | "killed" | "kill9" | "gone" | "open";
  /** The task ended by itself (its end line; in Docker an exit code 0), even if a TERM came after. */
  endLine: boolean;
}

export type Invariant = "a" | "b" | "c" | "d" | "e" | "f" | "g" | "h";

export interface Violation {
  invariant: Invariant;
  text: string;
  faults: string[];
}

/**
 * An at-least-once re-run: a run executed again after one of its executions had ended by itself,
 * with a hard fault on that execution's worker or on a NATS server in between (its completion may
 * never have reached the owner). Allowed, but counted and listed — never silent.
 */
export interface Rerun {
  run: string;
  text: string;
  faults: string[];
}

/**
 * A job's state from one change on. The first phase is the job as created; each later one a
 * user's change (pause, resume, new schedule, delete), applied by the cluster at some instant
 * between the request's send and its acknowledgement.
 */
export interface JobPhase {
  change: "create" | "pause" | "resume" | "patch" | "delete";
  sentMs: number;
  /** Undefined: never acknowledged (its outcome stays unknown from `sentMs` on). */
  ackMs: number | undefined;
  enabled: boolean;
  /** The cron seconds step (`*\/step * * * * *`). */
  step: number;
  deleted: boolean;
}

export interface JobInfo {
  jobId: string;
  tenant: string;
  overlap: string;
  misfire: string;
  maxAttempts: number;
  /** The job's first occurrence (its `next_run_at` when created). */
  firstMs: number;
  /** The newest occurrence known to be fired by a healthy cluster (set before the final pause). */
  lastCheckedMs: number;
  /** The harness's own pause of the job after the faults (it cancels the runs not started). */
  finalPause?: { sentMs: number; ackMs?: number };
  phases: JobPhase[];
  /** Run-now requests sent, and the run ids of those acknowledged. */
  manual: { sent: number; acked: string[] };
}

/** What a user's change expects of the occurrence at one instant. */
export type Expectation = "one" | "maybe" | "none";

export interface RunRec {
  run_id: string;
  job_id: string;
  scheduled_for: string;
  status: string;
  trigger: string;
  attempts: {
    worker: string | null;
    started_at: string | null;
    finished_at: string | null;
    outcome: string | null;
    error?: string | null;
  }[];
  reason: string | null;
}
