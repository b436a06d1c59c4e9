/**
 * The jobs service: what the API layer calls. Every method takes the tenant from authentication,
 * never from the request body; another tenant's job or run is `not_found`. Errors are
 * `KairosError`s (validation: `invalid_argument` with `field`; ETag mismatch:
 * `precondition_failed`; idempotency key reused with another body: `conflict`).
 */
import type { JobListFilter, JobPatch, JobView, Page, RunStatus, RunView } from "./model.ts";

/** A validated create request (defaults applied by the validator). */
export type { JobSpec as CreateJobInput } from "./model.ts";
import type { JobSpec } from "./model.ts";

/** One create's outcome among several (`JobsService.createJobs`). */
export type CreateOutcome =
  | { readonly ok: true; readonly job: JobView; readonly created: boolean }
  | { readonly ok: false; readonly error: unknown };

export interface JobsService {
  /** `created` is false when an idempotency key replayed an earlier create. */
  createJob(
    tenantId: string,
    spec: JobSpec,
    idempotencyKey?: string,
  ): Promise<{ job: JobView; created: boolean }>;
  /**
   * Several creates of one tenant at once (a batch), each with its own outcome, in order, as
   * `createJob` would give it. Optional: without it a batch's jobs are created one by one.
   */
  createJobs?(
    tenantId: string,
    items: readonly { spec: JobSpec; idempotencyKey?: string }[],
  ): Promise<CreateOutcome[]>;
  /**
   * The tenant's jobs in id order, after the cursor, matching the filters (`name`: lower-case
   * substring of the name; `state`). A filtered page may be short, even empty, with a cursor.
   */
  listJobs(
    tenantId: string,
    opts: { cursor?: string; limit: number } & JobListFilter,
  ): Promise<Page<JobView>>;
  /** The job with `next_runs`. */
  getJob(tenantId: string, jobId: string): Promise<JobView>;
  /** `ifMatch` is the expected version (bare number) when the client sent If-Match. */
  patchJob(tenantId: string, jobId: string, patch: JobPatch, ifMatch?: number): Promise<JobView>;
  deleteJob(tenantId: string, jobId: string): Promise<void>;
  runNow(tenantId: string, jobId: string): Promise<RunView>;
  listRuns(
    tenantId: string,
    jobId: string,
    opts: { status?: RunStatus; cursor?: string; limit: number },
  ): Promise<Page<RunView>>;
  getRun(tenantId: string, runId: string): Promise<RunView>;
  /**
   * Cancels a run that has not ended (`by`: who asks, e.g. `API key k…`; `note`: their reason):
   * answers the run, `cancelled`. Idempotent: a run already cancelled is answered as it is; one
   * that ended otherwise is `conflict`; an unknown run, or another tenant's, `not_found`.
   */
  cancelRun(tenantId: string, runId: string, by: string, note?: string): Promise<RunView>;
  /**
   * The tenant's dead-lettered runs (ended failed or timed out), oldest first, as they were when
   * dead-lettered; O(page). `GET /v1/runs?status=dead_lettered`.
   */
  listDeadLetters(
    tenantId: string,
    opts: { cursor?: string; limit: number },
  ): Promise<Page<RunView>>;
  /**
   * The tenant's runs across its jobs, newest first by creation, from its runs log; O(page), no
   * actor asked (src/history/tenant-runs-page.ts). `status`: a status a run ends with.
   * `GET /v1/runs`.
   */
  listTenantRuns(
    tenantId: string,
    opts: { status?: RunStatus; cursor?: string; limit: number },
  ): Promise<Page<RunView>>;
}

/** A tenant's default bound on its runs waiting for a slot (`Tenant.max_waiting_runs`). */
export const DEFAULT_MAX_WAITING_RUNS = 1_000;
/** The largest `max_waiting_runs` (the tenant actor's hard limit on its waiting list). */
export const MAX_WAITING_RUNS_LIMIT = 100_000;

export interface Tenant {
  tenant_id: string;
  name: string;
  created_at: string;
  max_concurrent_runs: number;
  max_jobs: number;
  weight: number;
  /**
   * Most runs of the tenant waiting for a slot (queued, not granted); a run of a schedule asking
   * beyond it is recorded `throttled`. Absent in records made before it: DEFAULT_MAX_WAITING_RUNS.
   */
  max_waiting_runs?: number;
  webhook_url: string | null;
  /**
   * Images this tenant may name (src/sandbox/image-policy.ts); absent or null: the operator's
   * default (`kairos node --image-policy`). Set with `kairos admin tenant images`.
   */
  image_policy?: string[] | null;
  /**
   * Destinations this tenant's tasks with `network: "egress"` may reach (src/sandbox/egress-policy.ts);
   * absent or null: none, and the API refuses `egress`. Set with `kairos admin tenant egress`.
   */
  egress_policy?: string[] | null;
  /** HMAC-SHA256 key for webhook signatures (never shown after it is set). */
  webhook_secret?: string;
}

/** Tenants and API keys (keys stored as SHA-256 hashes; the plain key is shown once). */
export interface TenantDirectory {
  /** The tenant of a valid, unrevoked key, or null. */
  authenticate(apiKey: string): Promise<Tenant | null>;
  /** The same, with the key's id (which names the caller, e.g. in a cancelled run's reason). */
  authenticateKey(apiKey: string): Promise<{ tenant: Tenant; keyId: string } | null>;
  createTenant(name: string): Promise<{ tenant: Tenant; apiKey: string; keyId: string }>;
  createKey(tenantId: string): Promise<{ apiKey: string; keyId: string }>;
  revokeKey(keyId: string): Promise<void>;
  getTenant(tenantId: string): Promise<Tenant | null>;
  findTenantByName(name: string): Promise<Tenant | null>;
  /** Sets (or clears, with null) the dead-letter webhook; returns the new signing secret. */
  setWebhook(tenantId: string, url: string | null): Promise<{ secret: string | null }>;
}
