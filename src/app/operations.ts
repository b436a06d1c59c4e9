/**
 * The customer operations, transport-agnostic: one function per operation, shared by the HTTP
 * routes (src/http/routes/) and the internal NATS API (src/nats-api/). Each takes the caller's
 * tenant — resolved by the transport from its credentials (an API key, a NATS identity), never
 * from the request — and the request's inputs in their raw form, validates them with the one set
 * of parsers and schemas (src/http/params.ts, src/http/schemas.ts), checks the image policy, the
 * cluster's per-task maxima (so a job is never created that no worker would run) and, for
 * `network: "egress"`, that the tenant has an egress policy, and
 * calls the jobs service. Results are plain values; failures are `KairosError`s with catalogue
 * codes, which each transport renders in its own envelope (HTTP: errors.ts; NATS: nats-api/wire.ts).
 *
 * Raw inputs are what a URL or a header carries: strings (`limit: "20"`), or undefined when absent.
 * Bodies are read lazily (`body()`), after the other inputs are checked, so the order of errors is
 * the same on every transport: ids, then headers (Idempotency-Key, If-Match), then the body.
 */
import type { JobSpec, JobView, Page, RunStatus, RunView } from "../protocol/model.ts";
import type { JobsService, Tenant } from "../protocol/service.ts";
import type { Clock } from "../lib/clock.ts";
import { checkImage, parseImagePolicy, type ImagePolicy } from "../sandbox/image-policy.ts";
import {
  DEFAULT_TASK_LIMITS,
  resourcesAboveLimits,
  type TaskLimits,
} from "../sandbox/task-rules.ts";
import type { TaskInput } from "../protocol/model.ts";
import {
  parseCursor,
  parseIdempotencyKey,
  parseIfMatch,
  parseJobName,
  parseJobState,
  parseLimit,
  parseRunStatus,
  parseTenantRunStatus,
  pathId,
} from "./params.ts";
import { invalid, show } from "./input.ts";
import { parseCancelBody } from "./cancel-body.ts";
import { parseSubscriptionBody } from "./subscription-body.ts";
import type { SubscriptionService, SubscriptionView } from "../protocol/events.ts";
import { KairosError, isKairosError } from "../lib/errors.ts";
import { parseCreateBody, parsePatchBody } from "./schemas.ts";
import { createBatch, createGrouped, parseBatchBody, type BatchOutcome } from "./job-batch.ts";

/** What the operations need. */
export interface OperationDeps {
  jobs: JobsService;
  clock: Clock;
  /** The operator's default image policy (a tenant's own `image_policy` replaces it). */
  imagePolicy: ImagePolicy;
  /** The cluster's per-task resource maxima, the workers' own (default `DEFAULT_TASK_LIMITS`). */
  taskLimits?: TaskLimits;
  /** The tenants' run-event subscriptions (src/notify/subscriptions.ts); none: not served here. */
  subscriptions?: SubscriptionService;
}

/** Reads the request body (JSON, parsed; schema validation is the operation's). */
export type BodyReader = () => Promise<unknown>;

/** Paging inputs of list operations, raw. */
export interface PageInput {
  limit?: string | undefined;
  cursor?: string | undefined;
}

/** A jobs list's inputs, raw: paging and the `name` and `state` filters. */
export interface ListJobsInput extends PageInput {
  name?: string | undefined;
  state?: string | undefined;
}

export interface CreateJobInput {
  idempotencyKey?: string | undefined;
  body: BodyReader;
}

export interface PatchJobInput {
  jobId: string | undefined;
  ifMatch?: string | undefined;
  body: BodyReader;
}

/** A cancel: the run, who asks (named by the transport: `API key <key_id>`, `NATS API`), the body. */
export interface CancelRunInput {
  runId: string | undefined;
  caller: string;
  /** The optional body `{"reason": "…"}`: undefined when the request has none. */
  body: () => Promise<unknown>;
}

/** The tenant-wide runs list's inputs, raw. */
export interface ListTenantRunsInput extends PageInput {
  status?: string | undefined;
}

export interface ListRunsInput extends PageInput {
  jobId: string | undefined;
  status?: string | undefined;
}

/** A created (or, with an idempotency key, replayed) job. */
export interface CreateJobResult {
  job: JobView;
  /** False when an Idempotency-Key replayed an earlier create. */
  created: boolean;
}

/** The customer operations of one API node. */
export interface Operations {
  createJob(tenant: Tenant, input: CreateJobInput): Promise<CreateJobResult>;
  /** A batch create (job-batch.ts): each item's outcome, in order. */
  createJobs(tenant: Tenant, input: { body: BodyReader }): Promise<BatchOutcome[]>;
  listJobs(tenant: Tenant, input: ListJobsInput): Promise<Page<JobView>>;
  getJob(tenant: Tenant, jobId: string | undefined): Promise<JobView>;
  patchJob(tenant: Tenant, input: PatchJobInput): Promise<JobView>;
  deleteJob(tenant: Tenant, jobId: string | undefined): Promise<void>;
  runNow(tenant: Tenant, jobId: string | undefined): Promise<RunView>;
  listRuns(tenant: Tenant, input: ListRunsInput): Promise<Page<RunView>>;
  getRun(tenant: Tenant, runId: string | undefined): Promise<RunView>;
  /** Cancels a run that has not ended; idempotent (src/runs/run-cancel.ts). */
  cancelRun(tenant: Tenant, input: CancelRunInput): Promise<RunView>;
  /** The tenant's dead-lettered runs, oldest first (`status` must be `dead_lettered`). */
  listDeadLetters(tenant: Tenant, input: PageInput): Promise<Page<RunView>>;
  /** The tenant's runs across its jobs, newest first; `status` one a run ends with. */
  listTenantRuns(tenant: Tenant, input: ListTenantRunsInput): Promise<Page<RunView>>;
  /** Subscribes to run events (src/notify/run-events.ts); a webhook's answer carries its secret once. */
  createSubscription(
    tenant: Tenant,
    body: BodyReader,
  ): Promise<SubscriptionView & { secret?: string }>;
  listSubscriptions(tenant: Tenant): Promise<SubscriptionView[]>;
  getSubscription(tenant: Tenant, id: string | undefined): Promise<SubscriptionView>;
  deleteSubscription(tenant: Tenant, id: string | undefined): Promise<void>;
}

/**
 * Throws unless a worker would run `task` for this tenant: its image is a reference the tenant's
 * policy allows (400 / 422 `policy_denied`), its resources are within the cluster's per-task
 * maxima (422 `policy_denied`), and it asks for egress only if the tenant has an egress policy
 * (422 `policy_denied`). The schema has already applied the rest of the worker's rules
 * (environment names, NUL bytes: src/sandbox/task-rules.ts).
 */
function checkTask(tenant: Tenant, deps: OperationDeps, task: TaskInput): void {
  const policy = tenant.image_policy
    ? parseImagePolicy(tenant.image_policy, "tenant image_policy")
    : deps.imagePolicy;
  const denied =
    checkImage(policy, task.image) ??
    resourcesAboveLimits(task.resources, deps.taskLimits ?? DEFAULT_TASK_LIMITS) ??
    egressDenied(tenant, task);
  if (denied) throw denied;
}

/** A create's body validated and its task checked (`checkTask`). */
function checkedSpec(deps: OperationDeps, tenant: Tenant, body: unknown): JobSpec {
  const spec = parseCreateBody(body, deps.clock.now());
  checkTask(tenant, deps, spec.task);
  return spec;
}

/** `egress` for a tenant without an egress policy: 422 `policy_denied` on `task.network`. */
function egressDenied(tenant: Tenant, task: TaskInput): KairosError | undefined {
  if (task.network !== "egress" || (tenant.egress_policy?.length ?? 0) > 0) return undefined;
  return new KairosError(
    "policy_denied",
    "task.network: egress is not allowed for this tenant (it has no egress policy; an operator sets one with `kairos admin tenant egress`)",
    { field: "task.network" },
  );
}

/** `{limit, cursor?}` from raw paging inputs. */
function pageOf(input: PageInput): { limit: number; cursor?: string } {
  const limit = parseLimit(input.limit);
  const cursor = parseCursor(input.cursor);
  return cursor === undefined ? { limit } : { limit, cursor };
}

/** The subscription service, or `not_found` on a node that does not serve it. */
function subscriptionsOf(deps: OperationDeps): SubscriptionService {
  if (deps.subscriptions === undefined)
    throw new KairosError("not_found", "run-event subscriptions are not served by this node");
  return deps.subscriptions;
}

/** A subscription's `job_id` must name a job of the tenant (400 `job_id` otherwise). */
async function checkJobExists(deps: OperationDeps, tenant: Tenant, jobId: string): Promise<void> {
  try {
    await deps.jobs.getJob(tenant.tenant_id, jobId);
  } catch (e) {
    if (isKairosError(e) && e.code === "not_found")
      throw invalid("job_id", `names no job of this tenant: ${show(jobId)}`);
    throw e;
  }
}

/** The subscription operations (create, list, get, delete). */
function subscriptionOperations(
  deps: OperationDeps,
): Pick<
  Operations,
  "createSubscription" | "listSubscriptions" | "getSubscription" | "deleteSubscription"
> {
  return {
    async createSubscription(tenant, body) {
      const subs = subscriptionsOf(deps);
      const input = parseSubscriptionBody(await body());
      if (input.job_id !== null) await checkJobExists(deps, tenant, input.job_id);
      return subs.create(tenant.tenant_id, input);
    },
    async listSubscriptions(tenant) {
      return subscriptionsOf(deps).list(tenant.tenant_id);
    },
    async getSubscription(tenant, id) {
      return subscriptionsOf(deps).get(tenant.tenant_id, pathId(id, "subscription"));
    },
    async deleteSubscription(tenant, id) {
      await subscriptionsOf(deps).delete(tenant.tenant_id, pathId(id, "subscription"));
    },
  };
}

/** The tenant-wide run lists: its runs across its jobs, and its dead letters. */
function tenantRunOperations({
  jobs,
}: OperationDeps): Pick<Operations, "listTenantRuns" | "listDeadLetters"> {
  return {
    async listTenantRuns(tenant, input) {
      const page = pageOf(input);
      const status = parseTenantRunStatus(input.status);
      return jobs.listTenantRuns(
        tenant.tenant_id,
        status === undefined ? page : { ...page, status },
      );
    },
    async listDeadLetters(tenant, input) {
      return jobs.listDeadLetters(tenant.tenant_id, pageOf(input));
    },
  };
}

/** The operations over a jobs service. */
export function createOperations(deps: OperationDeps): Operations {
  const { jobs, clock } = deps;
  /** One create, its key already checked: the body validated, the task checked, then made. */
  const createOne = (
    tenant: Tenant,
    idempotencyKey: string | undefined,
    body: unknown,
  ): Promise<CreateJobResult> => {
    const spec = checkedSpec(deps, tenant, body);
    return idempotencyKey === undefined
      ? jobs.createJob(tenant.tenant_id, spec)
      : jobs.createJob(tenant.tenant_id, spec, idempotencyKey);
  };
  return {
    ...subscriptionOperations(deps),
    ...tenantRunOperations(deps),
    async createJob(tenant, input) {
      const idempotencyKey = parseIdempotencyKey(input.idempotencyKey);
      return createOne(tenant, idempotencyKey, await input.body());
    },
    async createJobs(tenant, input) {
      const items = parseBatchBody(await input.body());
      const many = jobs.createJobs?.bind(jobs);
      if (many === undefined) return createBatch(items, (key, job) => createOne(tenant, key, job));
      return createGrouped(
        items,
        (job) => checkedSpec(deps, tenant, job),
        (specs) => many(tenant.tenant_id, specs),
      );
    },
    async listJobs(tenant, input) {
      const name = parseJobName(input.name);
      const state = parseJobState(input.state);
      return jobs.listJobs(tenant.tenant_id, {
        ...pageOf(input),
        ...(name === undefined ? {} : { name }),
        ...(state === undefined ? {} : { state }),
      });
    },
    async getJob(tenant, jobId) {
      return jobs.getJob(tenant.tenant_id, pathId(jobId, "job"));
    },
    async patchJob(tenant, input) {
      const jobId = pathId(input.jobId, "job");
      const ifMatch = parseIfMatch(input.ifMatch);
      const patch = parsePatchBody(await input.body(), clock.now());
      if (patch.task !== undefined) checkTask(tenant, deps, patch.task);
      return ifMatch === undefined
        ? jobs.patchJob(tenant.tenant_id, jobId, patch)
        : jobs.patchJob(tenant.tenant_id, jobId, patch, ifMatch);
    },
    async deleteJob(tenant, jobId) {
      await jobs.deleteJob(tenant.tenant_id, pathId(jobId, "job"));
    },
    async runNow(tenant, jobId) {
      return jobs.runNow(tenant.tenant_id, pathId(jobId, "job"));
    },
    async listRuns(tenant, input) {
      const jobId = pathId(input.jobId, "job");
      const page = pageOf(input);
      const status: RunStatus | undefined = parseRunStatus(input.status);
      return jobs.listRuns(
        tenant.tenant_id,
        jobId,
        status === undefined ? page : { ...page, status },
      );
    },
    async getRun(tenant, runId) {
      return jobs.getRun(tenant.tenant_id, pathId(runId, "run"));
    },
    async cancelRun(tenant, input) {
      const runId = pathId(input.runId, "run");
      const { reason } = parseCancelBody(await input.body());
      return reason === undefined
        ? jobs.cancelRun(tenant.tenant_id, runId, input.caller)
        : jobs.cancelRun(tenant.tenant_id, runId, input.caller, reason);
    },
  };
}
