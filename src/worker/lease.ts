/**
 * One attempt as this worker holds it (a lease): the offer, what the executor is given, and the
 * worker's view of its owner's lease — acknowledged until when, started, ended and reported.
 * Every field is present from the offer on, so all leases share one shape.
 */
import type { Execution, ExecutionResult, RunIdentity, TaskSpec } from "../sandbox/index.ts";
import { formatUtc } from "../schedule/index.ts";
import type { Completion, HeartbeatAck, StartRequest } from "../protocol/worker.ts";

export interface Lease {
  req: StartRequest;
  /**
   * What the executor is given, made at the offer (its `leaseMs` set at the start): made in a
   * burst's start loop, these objects would be most of its garbage, promoted into a heap that the
   * loop's allocation also pushes into a major GC.
   */
  task: TaskSpec;
  identity: RunIdentity;
  /** Its key in the worker's leases (run id # attempt), made once: rounds look leases up by it. */
  key: string;
  /**
   * Monotonic time of acceptance: an offer never acknowledged by then + TTL − margin is dropped.
   */
  acceptedAtMono: number;
  /** Monotonic time until which the last acknowledged heartbeat lets this attempt run. */
  validUntilMono?: number | undefined;
  /** Monotonic send time of the latest acknowledged heartbeat. */
  ackSentMono?: number | undefined;
  /**
   * The owner's last acknowledgement said `hold`: keep the attempt, do not start it (a gated run).
   */
  held?: boolean | undefined;
  /** `start_at` passed while not (freshly) acknowledged: start on the next acknowledgement. */
  due: boolean;
  /**
   * `start_at` passed while it waited in the prefetch queue (slot-ledger.ts): it starts when it
   * takes a slot. Heartbeated every periodic round meanwhile, so it is fresh then.
   */
  waitingSlot?: boolean | undefined;
  execution?: Execution | undefined;
  startedAtMs?: number | undefined;
  /**
   * The attempt ended; its completion is not acknowledged yet (a copy after each wait until
   * settled, outbox.ts).
   */
  completion?: Completion | undefined;
  completionSinceMono?: number | undefined;
  /** A completion report is being made (waiting for its turn, in flight, or between copies). */
  reporting?: boolean | undefined;
  /**
   * Copies of the completion report sent so far (their waits grow: report-backoff.ts). From the
   * first on, the lease is never heartbeated again: each copy's arrival keeps the owner's lease
   * as a heartbeat's would (job-actor.ts `arrivalKey`), and between copies the owner keeps it
   * while one waits in its mailbox, or else probes it (answered from the completion).
   */
  reportCopies?: number | undefined;
  /**
   * Its last copy was answered with an error that settled nothing (its owner answered: it is not
   * saturated): heartbeated until the next copy, which goes after the lease-bounded wait.
   */
  reportRefused?: boolean | undefined;
  lost: boolean;
  /** Killed at once (SIGKILL: self-fenced, lease lost) — see `endedBeforeKill`. */
  killedAtOnce?: boolean | undefined;
  /** Killed by the drain timeout: its result is reported as a retryable error (handed back). */
  handedBack?: boolean | undefined;
  /**
   * Cancelled by its owner: no more heartbeats, but it keeps its slot here until the task is gone,
   * and its end is reported once (the owner holds the tenant slot until then;
   * src/runs/run-dispatch.ts `drain`).
   */
  cancelled?: boolean | undefined;
  /** Counted among its tenant's executing attempts (WorkerCore `executing`) until it ends. */
  counted?: boolean | undefined;
}

/** A job's resource limits as the executor names them (only those set). */
function resourcesOf(
  r: NonNullable<StartRequest["task"]["resources"]>,
): NonNullable<TaskSpec["resources"]> {
  const out: NonNullable<TaskSpec["resources"]> = {};
  if (r.memory_mb) out.memoryMb = r.memory_mb;
  if (r.cpus) out.cpus = r.cpus;
  if (r.pids) out.pids = r.pids;
  return out;
}

/**
 * A lease with every field present from the offer on (undefined until set): one shape for all
 * leases, its fields in the object itself. Added one by one later, each lease grew a separate
 * property store as it was heartbeated and started — an allocation and a copy per start in a
 * burst's start loop, on objects minutes old.
 */
export function newLease(
  req: StartRequest,
  key: string,
  acceptedAtMono: number,
  workerId: string,
): Lease {
  const task: TaskSpec = {
    image: req.task.image,
    args: req.task.args,
    env: req.task.env,
    timeoutS: req.task.timeout_s,
    leaseMs: 0,
  };
  if (req.task.resources) task.resources = resourcesOf(req.task.resources);
  if (req.task.network === "egress") task.egress = { allow: req.egress ?? [] };
  if (req.registry_auth !== undefined) task.registryAuth = { ...req.registry_auth };
  const identity: RunIdentity = {
    runId: req.run_id,
    attempt: req.attempt,
    jobId: req.job_id,
    tenantId: req.tenant_id,
    scheduledFor: formatUtc(req.scheduled_for_ms),
    workerId,
    fence: req.fence,
  };
  if (req.run_token !== undefined) identity.runToken = req.run_token;
  return {
    req,
    task,
    identity,
    key,
    acceptedAtMono,
    validUntilMono: undefined,
    ackSentMono: undefined,
    held: undefined,
    due: false,
    waitingSlot: undefined,
    execution: undefined,
    startedAtMs: undefined,
    completion: undefined,
    completionSinceMono: undefined,
    reporting: undefined,
    reportCopies: undefined,
    reportRefused: undefined,
    lost: false,
    killedAtOnce: undefined,
    handedBack: undefined,
    cancelled: undefined,
    counted: undefined,
  };
}

/** An attempt's key in the worker's leases: run id # attempt. */
export function attemptKey(runId: string, attempt: number): string {
  return `${runId}#${attempt}`;
}

/**
 * An attempt under one fence, as the worker's memory of attempts gone (attempt-memory.ts) names it.
 */
export function fencedKey(key: string, fence: number): string {
  return `${key}#${fence}`;
}

/** The longest cover an acknowledgement is taken for (a bound on a malformed or hostile reply). */
export const MAX_COVER_MS = 24 * 3_600_000;

/**
 * How long from its send time an acknowledgement lets an attempt run (before the margin): the
 * lease TTL, or the owner's `cover_ms` for an attempt not started yet (its lease then ends at
 * start_at + TTL on the owner's clock; see protocol/worker.ts `HeartbeatAck`), bounded.
 */
export function coverOf(ack: Partial<HeartbeatAck> | null, l: Lease): number {
  const cover = ack?.cover_ms;
  if (l.execution || typeof cover !== "number" || !Number.isFinite(cover))
    return l.req.lease_ttl_ms;
  return Math.min(MAX_COVER_MS, Math.max(l.req.lease_ttl_ms, cover));
}

/** The safety margin of self-fencing: the option, else 20 % of the lease TTL, 250 ms to 2 s. */
export function marginOf(leaseSafetyMarginMs: number | undefined, l: Lease): number {
  return leaseSafetyMarginMs ?? Math.min(2000, Math.max(250, l.req.lease_ttl_ms * 0.2));
}

/**
 * Whether an attempt killed at once (SIGKILL) had in fact ended by itself, successfully, before
 * the kill — its exit not yet seen (the event loop runs timers before I/O, so a self-fencing
 * timer can fire after a task's exit and before the worker hears of it): exit code 0, where a
 * SIGKILL gives 137 (the executor may still call it `killed`: it was asked to stop it).
 */
export function endedBeforeKill(r: ExecutionResult): boolean {
  return r.exitCode === 0 && (r.outcome === "exited" || r.outcome === "killed");
}
