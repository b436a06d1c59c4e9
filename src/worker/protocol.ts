/** Messages between job actors and workers (NATS subjects `kairos.<cluster>.worker.<id>.*`). */
import type { TaskInput } from "../jobs/model.ts";

/**
 * The job actor messages a worker sends (on the worker plane, `kairos.<cluster>.w.<n>`): the
 * only ones a worker identity can deliver. Everything else a job actor accepts comes from api and
 * scheduler identities on `….p.<n>`.
 */
export const WORKER_TO_JOB_KINDS = ["heartbeat", "complete"] as const;

/** Offer of one attempt to a worker; the worker starts it at `start_at_ms` by its own timer. */
export interface StartRequest {
  job_actor: string;
  tenant_id: string;
  job_id: string;
  run_id: string;
  attempt: number;
  fence: number;
  scheduled_for_ms: number;
  start_at_ms: number;
  task: TaskInput;
  /**
   * The owner's lease TTL: the worker starts the attempt only after a heartbeat for it was
   * acknowledged, and kills it once its last acknowledged heartbeat (send time) is older than
   * this minus its safety margin — the worker's half of "both sides of a lease keep time".
   */
  lease_ttl_ms: number;
}

export interface StartReply {
  accepted: boolean;
  reason?: string;
}

export interface CancelRequest {
  run_id: string;
  fence: number;
}
