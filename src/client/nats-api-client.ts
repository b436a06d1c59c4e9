/**
 * A small typed client of the internal NATS API (docs/nats-api.md), for a tenant's internal
 * services. Connect to NATS with the service's credentials (`service-<name>`, made by
 * `kairos nats-auth --service <name>:<tenant_id>`), then:
 *
 *   const api = new NatsApiClient(nc, { cluster: "kairos", tenantId: "t…" });
 *   const { job } = await api.createJob({ schedule: { cron: "0 2 * * *" }, task: {…} }, { idempotencyKey: "nightly-1" });
 *
 * Results are the REST bodies' types; failures throw `ApiError` (a `KairosError` whose `code`
 * is the REST error code, plus the HTTP-equivalent `status`). A request that gets no reply in
 * time throws `timeout` — an unknown outcome: the operation may have happened (use an
 * Idempotency-Key for creates, If-Match for patches); no API node listening is `unavailable`.
 * The tenant id only builds subjects: the service's NATS permissions pin it, and the server
 * takes it from the subject.
 */
import {
  errors as natsErrors,
  headers as natsHeaders,
  type NatsConnection,
} from "@nats-io/transport-node";
import type { JobView, RunStatus, RunView } from "../protocol/model.ts";
import type { SubscriptionView } from "../protocol/events.ts";
import { KairosError } from "../lib/errors.ts";
import { ApiError, isErrorCode, type JobListOptions, type PageOptions } from "./api-error.ts";

export { ApiError, type JobListOptions, type PageOptions };
import { API_HEADERS, apiSubject, type ApiOperation } from "../nats-api/subjects.ts";
import type { ApiReply, JobPage, RunPage } from "../nats-api/wire.ts";

export interface NatsApiClientOptions {
  /** The Kairos cluster name (subject prefix `kairos.<cluster>.api`). */
  cluster: string;
  /** The tenant the service's credentials are pinned to. */
  tenantId: string;
  /** How long to wait for a reply (default 10 s; the API node's own deadline is 15 s). */
  timeoutMs?: number;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

export class NatsApiClient {
  readonly #nc: NatsConnection;
  readonly #o: Required<NatsApiClientOptions>;

  constructor(nc: NatsConnection, opts: NatsApiClientOptions) {
    this.#nc = nc;
    this.#o = { timeoutMs: 10_000, ...opts };
  }

  /** Creates a job (REST `POST /v1/jobs`); `created` is false for an Idempotency-Key replay. */
  async createJob(
    spec: Record<string, unknown>,
    opts: { idempotencyKey?: string } = {},
  ): Promise<{ job: JobView; created: boolean }> {
    const r = await this.#call<JobView>(
      "jobs.create",
      undefined,
      spec,
      opts.idempotencyKey === undefined
        ? {}
        : { [API_HEADERS.idempotencyKey]: opts.idempotencyKey },
    );
    return { job: r.result, created: r.status === 201 };
  }

  async listJobs(opts: JobListOptions = {}): Promise<JobPage> {
    return (await this.#call<JobPage>("jobs.list", undefined, opts)).result;
  }

  async getJob(jobId: string): Promise<JobView> {
    return (await this.#call<JobView>("jobs.get", jobId)).result;
  }

  /** Changes a job (REST `PATCH`); `ifMatch` is the version the change was based on. */
  async patchJob(
    jobId: string,
    patch: Record<string, unknown>,
    opts: { ifMatch?: number | string } = {},
  ): Promise<JobView> {
    const h = opts.ifMatch === undefined ? {} : { [API_HEADERS.ifMatch]: String(opts.ifMatch) };
    return (await this.#call<JobView>("jobs.patch", jobId, patch, h)).result;
  }

  async deleteJob(jobId: string): Promise<void> {
    await this.#call<null>("jobs.delete", jobId);
  }

  /** Starts a run now (REST `POST /v1/jobs/{id}/runs`). */
  async runNow(jobId: string): Promise<RunView> {
    return (await this.#call<RunView>("jobs.run", jobId)).result;
  }

  async listRuns(jobId: string, opts: PageOptions & { status?: RunStatus } = {}): Promise<RunPage> {
    return (await this.#call<RunPage>("runs.list", jobId, opts)).result;
  }

  async getRun(runId: string): Promise<RunView> {
    return (await this.#call<RunView>("runs.get", runId)).result;
  }

  /**
   * Cancels a run that has not ended (REST `POST /v1/runs/{id}/cancel`): the run, `cancelled`.
   * Idempotent; a run that ended otherwise is `conflict` (409), an unknown one `not_found`.
   */
  async cancelRun(runId: string, opts: { reason?: string } = {}): Promise<RunView> {
    const body = opts.reason === undefined ? undefined : { reason: opts.reason };
    return (await this.#call<RunView>("runs.cancel", runId, body)).result;
  }

  /** The tenant's runs across its jobs, newest first (`status`: one a run ends with). */
  async listTenantRuns(opts: PageOptions & { status?: RunStatus } = {}): Promise<RunPage> {
    return (await this.#call<RunPage>("runs.tenant", undefined, opts)).result;
  }

  /** The tenant's dead-lettered runs, oldest first. */
  async listDeadLetters(opts: PageOptions = {}): Promise<RunPage> {
    return (await this.#call<RunPage>("runs.dead_lettered", undefined, opts)).result;
  }

  /** Subscribes to run events (`subscriptions.create`); a webhook's `secret` is shown only here. */
  async createSubscription(body: unknown): Promise<SubscriptionView & { secret?: string }> {
    return (await this.#call<SubscriptionView>("subscriptions.create", undefined, body)).result;
  }

  /** The tenant's subscriptions, oldest first. */
  async listSubscriptions(): Promise<SubscriptionView[]> {
    const r = await this.#call<{ subscriptions: SubscriptionView[] }>(
      "subscriptions.list",
      undefined,
    );
    return r.result.subscriptions;
  }

  async getSubscription(id: string): Promise<SubscriptionView> {
    return (await this.#call<SubscriptionView>("subscriptions.get", id)).result;
  }

  async deleteSubscription(id: string): Promise<void> {
    await this.#call<null>("subscriptions.delete", id);
  }

  async #call<T>(
    op: ApiOperation,
    id: string | undefined,
    body?: unknown,
    hdrs: Record<string, string> = {},
  ): Promise<{ status: number; result: T }> {
    const subject = apiSubject(this.#o.cluster, this.#o.tenantId, op, id);
    const h = natsHeaders();
    for (const [k, v] of Object.entries(hdrs)) h.set(k, v);
    let data: Uint8Array;
    try {
      const m = await this.#nc.request(
        subject,
        body === undefined ? new Uint8Array() : enc.encode(JSON.stringify(body)),
        { timeout: this.#o.timeoutMs, headers: h },
      );
      data = m.data;
    } catch (e) {
      throw transportError(e, op);
    }
    let reply: ApiReply<T>;
    try {
      reply = JSON.parse(dec.decode(data)) as ApiReply<T>;
    } catch (e) {
      throw new KairosError("internal", `${op}: the reply is not JSON`, { cause: e });
    }
    if (reply.ok) return { status: reply.status, result: reply.result };
    const { code, message, field } = reply.error;
    return Promise.reject(
      new ApiError(isErrorCode(code) ? code : "internal", message, reply.status, {
        ...(field !== undefined ? { field } : {}),
        ...(reply.retry_after_s !== undefined ? { retryAfterMs: reply.retry_after_s * 1000 } : {}),
      }),
    );
  }
}

/**
 * The transport's failures as catalogue errors: no responders (no API node serves the subject)
 * is `unavailable`, a timeout `timeout` (unknown outcome), a publish the server refused (the
 * credentials are pinned to another tenant's subjects) `permission_denied`. nats.js wraps the
 * cause of a failed request in a `RequestError`.
 */
function transportError(e: unknown, op: string): KairosError {
  const cause: unknown =
    e instanceof natsErrors.RequestError && e.cause !== undefined ? e.cause : e;
  if (
    cause instanceof natsErrors.NoRespondersError ||
    (e instanceof natsErrors.RequestError && e.isNoResponders())
  ) {
    return new KairosError("unavailable", `${op}: no API node answers the NATS API`, { cause: e });
  }
  if (cause instanceof natsErrors.TimeoutError) {
    return new KairosError(
      "timeout",
      `${op}: no reply in time (unknown outcome: the operation may have happened)`,
      { cause: e },
    );
  }
  if (cause instanceof natsErrors.PermissionViolationError) {
    return new KairosError(
      "permission_denied",
      `${op}: these NATS credentials may not use this subject (${cause.message})`,
      { cause: e },
    );
  }
  return new KairosError("unavailable", `${op}: ${e instanceof Error ? e.message : String(e)}`, {
    cause: e,
  });
}
