/**
 * The transition table of an active run's status — the one place that says which edges exist
 * and in which statuses each run message acts. run-lifecycle.ts changes a status only through
 * `moveRun`, which refuses an edge the table lacks, and gates its handlers with `actsOn`.
 *
 *   queued ─claim─▶ leased ─start─▶ running
 *   leased/running ─requeue─▶ queued        (lease lost, attempts left)
 *   leased/running ─retry─▶ retry_wait ─retry_due─▶ queued   (retryable failure, attempts left)
 *   any ─end (`finish`)─▶ a terminal record; the run leaves the job state
 *
 * Pitfalls: a status is only half a message's check — fences and the claiming worker are checked
 * too (`holds` in run-lifecycle.ts). Grants and drains (`slot_granted`, `slot_audit`, `drained`,
 * `recall`) are judged by the grant or drain they name, so they have no row.
 */
import { KairosError } from "../lib/errors.ts";
import type { ActiveRun, ActiveStatus } from "../job-state/job-state.ts";
import type { RunStatus } from "../protocol/model.ts";

type Edges = Partial<Record<ActiveStatus, ActiveStatus>>;

/** Every edge between active statuses, by the event that takes it. */
export const RUN_EDGES = {
  /** A worker accepted the offer under the run's current fence (or heartbeat/completed with it). */
  claim: { queued: "leased" },
  /** The worker started the attempt (its heartbeat carries `started_at_ms`). */
  start: { leased: "running" },
  /** The lease ran out and attempts remain: offered again under a new fence. */
  requeue: { leased: "queued", running: "queued" },
  /** The attempt failed, retryably, and attempts remain: wait out the backoff. */
  retry: { leased: "retry_wait", running: "retry_wait" },
  /** The backoff passed: ask for a slot and a worker again. */
  retry_due: { retry_wait: "queued" },
} as const satisfies Record<string, Edges>;

export type RunEdge = keyof typeof RUN_EDGES;

/** Whether `edge` leaves the run's current status. */
export function canMove(r: ActiveRun, edge: RunEdge): boolean {
  return (RUN_EDGES[edge] as Edges)[r.status] !== undefined;
}

/** Takes `edge` from the run's current status; an edge the table does not have is a bug. */
export function moveRun(r: ActiveRun, edge: RunEdge): void {
  const to = (RUN_EDGES[edge] as Edges)[r.status];
  if (to === undefined)
    throw new KairosError("internal", `run ${r.run_id}: no edge "${edge}" from status ${r.status}`);
  r.status = to;
}

/** The statuses in which a worker holds the run's lease (heartbeats and completions count). */
const LEASED = ["leased", "running"] as const satisfies readonly ActiveStatus[];

/** The run messages judged by status, and the statuses in which each acts (otherwise ignored or refused). */
export const ACTS_IN = {
  redispatch: ["queued"],
  slot_check: ["queued"],
  dispatch_failed: ["queued"],
  /** Leased or running under the same fence and worker: claimed already (by its first heartbeat). */
  claimed: ["queued"],
  /** A queued run is first claimed by the offer's fence (edge `claim`). */
  heartbeat: LEASED,
  complete: LEASED,
  lease_expired: LEASED,
  probe_answer: LEASED,
  gate: ["queued", "leased"],
  retry_due: ["retry_wait"],
} as const satisfies Record<string, readonly ActiveStatus[]>;

export type StatusGatedKind = keyof typeof ACTS_IN;

/** Whether a message of this kind acts on `r` (undefined: the run is no longer active). */
export function actsOn(kind: StatusGatedKind, r: ActiveRun | undefined): r is ActiveRun {
  return r !== undefined && (ACTS_IN[kind] as readonly ActiveStatus[]).includes(r.status);
}

/** Whether a worker holds the run's lease (leased or running). */
/** Ends the scheduler gives a run, not its attempt: a worker holding it is told to drop it. */
export const STOPPED: ReadonlySet<RunStatus> = new Set<RunStatus>([
  "cancelled",
  "skipped",
  "missed",
  "throttled",
]);

export function isLeased(r: ActiveRun): boolean {
  return (LEASED as readonly ActiveStatus[]).includes(r.status);
}
