/**
 * A small typed client of the HTTP API (docs/api.md), used by the `kairos jobs` and `kairos runs`
 * commands and usable by any Node 20 program:
 *
 *   const api = new HttpApiClient({ url: "http://127.0.0.1:7700", apiKey: "kai_…" });
 *   const { job } = await api.createJob({ schedule: { cron: "0 2 * * *" }, task: {…} });
 *
 * Results are the REST bodies' types; a non-2xx answer throws `ApiError` (a `KairosError`
 * with the API's `code`, `message` and `field`, plus the HTTP `status` and `Retry-After`). No
 * answer at all is `unavailable` (connection refused, DNS) or `timeout` (no answer within
 * `timeoutMs`: an unknown outcome — the request may have been applied; use an Idempotency-Key for
 * creates and If-Match for patches). The client never retries: what is safe to retry is the
 * caller's decision. Answers are read up to `maxBodyBytes` (a page of 200 jobs is far below it).
 */
import type { SubscriptionView } from "../protocol/events.ts";
import type { ReadableStream } from "node:stream/web";
import type { JobView, RunStatus, RunView } from "../protocol/model.ts";
import { KairosError, type ErrorCode } from "../lib/errors.ts";
import { ApiError, isErrorCode, type JobListOptions, type PageOptions } from "./api-error.ts";
import type { JobPage, RunPage } from "../nats-api/wire.ts";

export type { JobPage, RunPage };
export { ApiError, type JobListOptions, type PageOptions };

export interface HttpApiClientOptions {
  /** The API's base URL (`http://host:port`, no trailing path). */
  url: string;
  /** Sent as `Authorization: Bearer <apiKey>`; never anywhere else. */
  apiKey: string;
  /** How long to wait for an answer (default 30 s; the API's own deadline is 15 s). */
  timeoutMs?: number;
  /** The most bytes of an answer read (default 8 MiB). */
  maxBodyBytes?: number;
}

const MIB = 1024 * 1024;

/** `Retry-After` in seconds as milliseconds, when it is a number. */
function retryAfterMs(h: string | null): number | undefined {
  if (h === null || !/^\d{1,6}$/.test(h.trim())) return undefined;
  return Number(h.trim()) * 1000;
}

/** Reads a body of at most `max` bytes; a longer one is an `internal` error (not this API). */
async function boundedText(res: Response, max: number): Promise<string> {
  if (!res.body) return "";
  const reader = (res.body as unknown as ReadableStream<Uint8Array>).getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > max) {
      await reader.cancel();
      throw new KairosError("internal", `the API's answer is over ${max} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** The error a non-2xx answer stands for (its body's `error`, else one from the status). */
function errorOf(status: number, text: string, retryAfter: string | null): ApiError {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const e = (body as { error?: { code?: unknown; message?: unknown; field?: unknown } } | undefined)
    ?.error;
  const [rawCode, rawMessage, field] = [e?.code, e?.message, e?.field];
  const code: ErrorCode = isErrorCode(rawCode)
    ? rawCode
    : status === 401
      ? "unauthenticated"
      : status === 404
        ? "not_found"
        : status === 503
          ? "unavailable"
          : "internal";
  const message =
    typeof rawMessage === "string" ? rawMessage : `HTTP ${status}: ${text.slice(0, 200)}`;
  const ms = retryAfterMs(retryAfter);
  return new ApiError(code, message, status, {
    ...(typeof field === "string" ? { field } : {}),
    ...(ms !== undefined ? { retryAfterMs: ms } : {}),
  });
}

const seg = (id: string): string => encodeURIComponent(id);

function query(q: Record<string, string | number | undefined>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined) p.set(k, String(v));
  const s = p.toString();
  return s ? `?${s}` : "";
}

/** The answer of a batch create (`POST /v1/jobs:batch`). */
export interface BatchCreateResult {
  created: number;
  replayed: number;
  failed: number;
  results: {
    index: number;
    status: number;
    job?: JobView;
    error?: { code: string; message: string; field?: string };
  }[];
}

export class HttpApiClient {
  readonly #base: string;
  readonly #key: string;
  readonly #timeoutMs: number;
  readonly #maxBody: number;

  constructor(o: HttpApiClientOptions) {
    this.#base = o.url.replace(/\/+$/, "");
    this.#key = o.apiKey;
    this.#timeoutMs = o.timeoutMs ?? 30_000;
    this.#maxBody = o.maxBodyBytes ?? 8 * MIB;
  }

  /** Creates a job (`POST /v1/jobs`); `created` is false for an Idempotency-Key replay. */
  async createJob(
    spec: unknown,
    opts: { idempotencyKey?: string } = {},
  ): Promise<{ job: JobView; created: boolean }> {
    const headers: Record<string, string> =
      opts.idempotencyKey === undefined ? {} : { "idempotency-key": opts.idempotencyKey };
    const r = await this.#call<JobView>("POST", "/v1/jobs", spec, headers);
    return { job: r.body, created: r.status === 201 };
  }

  /**
   * Creates up to 1,000 jobs in one request (`POST /v1/jobs:batch`): each item's result in order,
   * with the status a single create would have answered and its job or error.
   */
  async createJobs(
    items: readonly { job: unknown; idempotency_key?: string }[],
  ): Promise<BatchCreateResult> {
    return (await this.#call<BatchCreateResult>("POST", "/v1/jobs:batch", { jobs: items })).body;
  }

  /**
   * A page of the tenant's jobs (`GET /v1/jobs`), optionally those whose name contains `name`
   * (any case) and/or in `state`; a filtered page may be short with a `next_cursor`.
   */
  async listJobs(o: JobListOptions = {}): Promise<JobPage> {
    return (await this.#call<JobPage>("GET", `/v1/jobs${query({ ...o })}`)).body;
  }

  /** One job with `next_runs` (`GET /v1/jobs/{job_id}`). */
  async getJob(jobId: string): Promise<JobView> {
    return (await this.#call<JobView>("GET", `/v1/jobs/${seg(jobId)}`)).body;
  }

  /** Replaces the given top-level fields (`PATCH`); `ifMatch`: the version it must be at. */
  async patchJob(jobId: string, patch: unknown, opts: { ifMatch?: number } = {}): Promise<JobView> {
    const headers: Record<string, string> =
      opts.ifMatch === undefined ? {} : { "if-match": `"${opts.ifMatch}"` };
    return (await this.#call<JobView>("PATCH", `/v1/jobs/${seg(jobId)}`, patch, headers)).body;
  }

  /** Deletes a job; its active runs are cancelled (`DELETE`, 204). */
  async deleteJob(jobId: string): Promise<void> {
    await this.#call("DELETE", `/v1/jobs/${seg(jobId)}`);
  }

  /** Runs a job now (`POST /v1/jobs/{job_id}/runs`, 202 with the queued run). */
  async runNow(jobId: string): Promise<RunView> {
    return (await this.#call<RunView>("POST", `/v1/jobs/${seg(jobId)}/runs`)).body;
  }

  /** A page of a job's runs, newest first (`GET /v1/jobs/{job_id}/runs`). */
  async listRuns(jobId: string, o: PageOptions & { status?: RunStatus } = {}): Promise<RunPage> {
    const path = `/v1/jobs/${seg(jobId)}/runs${query({ ...o })}`;
    return (await this.#call<RunPage>("GET", path)).body;
  }

  /** A page of the tenant's dead-lettered runs, oldest first (`GET /v1/runs?status=dead_lettered`). */
  async listDeadLetters(o: PageOptions = {}): Promise<RunPage> {
    const path = `/v1/runs${query({ status: "dead_lettered", ...o })}`;
    return (await this.#call<RunPage>("GET", path)).body;
  }

  /** A page of the tenant's runs across its jobs, newest first (`GET /v1/runs`). */
  async listTenantRuns(o: PageOptions & { status?: RunStatus } = {}): Promise<RunPage> {
    return (await this.#call<RunPage>("GET", `/v1/runs${query({ ...o })}`)).body;
  }

  /** One run (`GET /v1/runs/{run_id}`). */
  async getRun(runId: string): Promise<RunView> {
    return (await this.#call<RunView>("GET", `/v1/runs/${seg(runId)}`)).body;
  }

  /**
   * Cancels a run that has not ended (`POST /v1/runs/{run_id}/cancel`): the run, `cancelled`.
   * Idempotent; a run that ended otherwise is `conflict` (409).
   */
  async cancelRun(runId: string, opts: { reason?: string } = {}): Promise<RunView> {
    const body = opts.reason === undefined ? undefined : { reason: opts.reason };
    return (await this.#call<RunView>("POST", `/v1/runs/${seg(runId)}/cancel`, body)).body;
  }

  /** Subscribes to run events (`POST /v1/subscriptions`); a webhook's `secret` is shown only here. */
  async createSubscription(body: unknown): Promise<SubscriptionView & { secret?: string }> {
    return (await this.#call<SubscriptionView>("POST", "/v1/subscriptions", body)).body;
  }

  /** The tenant's subscriptions, oldest first (`GET /v1/subscriptions`). */
  async listSubscriptions(): Promise<SubscriptionView[]> {
    const r = await this.#call<{ subscriptions: SubscriptionView[] }>("GET", "/v1/subscriptions");
    return r.body.subscriptions;
  }

  /** One subscription (`GET /v1/subscriptions/{id}`). */
  async getSubscription(id: string): Promise<SubscriptionView> {
    return (await this.#call<SubscriptionView>("GET", `/v1/subscriptions/${seg(id)}`)).body;
  }

  /** Deletes a subscription (`DELETE /v1/subscriptions/{id}`, 204). */
  async deleteSubscription(id: string): Promise<void> {
    await this.#call("DELETE", `/v1/subscriptions/${seg(id)}`);
  }

  async #call<T = unknown>(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; body: T }> {
    let res: Response;
    try {
      res = await fetch(`${this.#base}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${this.#key}`,
          accept: "application/json",
          ...(body !== undefined ? { "content-type": "application/json" } : {}),
          ...headers,
        },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
    } catch (e) {
      throw transportError(e, this.#base, this.#timeoutMs);
    }
    const text = await boundedText(res, this.#maxBody).catch((e: unknown) => {
      throw isTimeout(e) ? transportError(e, this.#base, this.#timeoutMs) : e;
    });
    if (res.status < 200 || res.status > 299)
      throw errorOf(res.status, text, res.headers.get("retry-after"));
    if (!text) return { status: res.status, body: undefined as T };
    try {
      return { status: res.status, body: JSON.parse(text) as T };
    } catch (e) {
      throw new KairosError("internal", `the API answered ${res.status} with a body not JSON`, {
        cause: e,
      });
    }
  }
}

function isTimeout(e: unknown): boolean {
  return e instanceof Error && (e.name === "TimeoutError" || e.name === "AbortError");
}

/** No answer: `timeout` (unknown outcome) or `unavailable` (nothing reached). */
function transportError(e: unknown, base: string, timeoutMs: number): KairosError {
  if (isTimeout(e))
    return new KairosError("timeout", `no answer from ${base} within ${timeoutMs} ms`, {
      cause: e,
    });
  const why = e instanceof Error && e.cause instanceof Error ? e.cause.message : String(e);
  return new KairosError("unavailable", `cannot reach the API at ${base}: ${why}`, { cause: e });
}
