/**
 * The internal NATS API's request handler, free of NATS: (subject, headers, payload) → one reply.
 * The service (service.ts) feeds it messages; unit tests call it directly.
 *
 * Order of checks: the subject's operation (unknown: 404 `not_found`), the payload size (413),
 * the tenant's request rate (429), the tenant itself (taken from the subject token that the
 * caller's NATS permissions pin; unknown: 401 `unauthenticated`), then the operation
 * (src/app/operations.ts: the same validation, image policy and service calls as REST). A body
 * naming a `tenant_id` — any, even the caller's own — is refused (400, field `tenant_id`): the
 * tenant is the NATS identity's, never the request's. Every failure, including malformed JSON,
 * invalid UTF-8 and bugs, becomes an error reply; nothing is thrown to the caller.
 */
import type { Operations } from "../app/operations.ts";
import type { Tenant, TenantDirectory } from "../protocol/service.ts";
import type { Clock } from "../lib/clock.ts";
import { assertNever } from "../lib/assert.ts";
import { KairosError } from "../lib/errors.ts";
import { invalid, show, toHttpError } from "../http/errors.ts";
import { parseJsonText } from "../http/body.ts";
import { TokenBuckets, rateLimited } from "../http/rate-limit.ts";
import { LruCache } from "../tenants/lru.ts";
import type { NatsApiConfig } from "./config.ts";
import { API_HEADERS, parseApiSubject, type ApiOperation } from "./subjects.ts";
import type { ApiReply } from "./wire.ts";

/** One request as it arrived. */
export interface NatsApiRequest {
  subject: string;
  data: Uint8Array;
  /** A header's value (first one), or undefined. */
  header(name: string): string | undefined;
}

export interface NatsApiHandlerDeps {
  clusterName: string;
  operations: Operations;
  tenants: Pick<TenantDirectory, "getTenant">;
  clock: Clock;
  config: NatsApiConfig;
  /** Receives errors that became a 500 (their details are never sent). */
  logError: (err: unknown, op: string) => void;
}

export type NatsApiHandler = (req: NatsApiRequest) => Promise<ApiReply>;

const TENANT_TOKEN = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Who asks, as a cancelled run's reason names them: a service of the subject's tenant (the NATS
 * identity is not visible here beyond the tenant its permissions pin).
 */
export const NATS_CALLER = "the NATS API";

/** The fields a params-only request body may carry, per operation. */
type Param = "limit" | "cursor" | "status" | "name" | "state";
/** The parameters of `jobs.list`. */
const JOB_LIST_PARAMS: readonly Param[] = ["limit", "cursor", "name", "state"];

/** Decoded, size-checked payload: undefined when empty. */
function decodeText(data: Uint8Array): string {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(data);
  } catch {
    throw invalid("body", "not valid UTF-8");
  }
}

/** Refuses any `tenant_id` at the top of a body: the tenant is the NATS identity's. */
function refuseTenantId(body: unknown): void {
  if (
    body !== null &&
    typeof body === "object" &&
    !Array.isArray(body) &&
    Object.prototype.hasOwnProperty.call(body, "tenant_id")
  ) {
    throw invalid(
      "tenant_id",
      "not accepted: the tenant is the one your NATS credentials are pinned to (the subject's tenant token), never a body field",
    );
  }
}

/** A JSON body (create, patch), parsed lazily by the operation, after its header checks. */
function bodyReader(text: string): () => Promise<unknown> {
  return async () => {
    const body = parseJsonText(text);
    refuseTenantId(body);
    return body;
  };
}

/**
 * The parameters of an operation without a REST body: `{}` or nothing, plus `limit` (integer),
 * `cursor`, `status` (strings) where the operation has them. Returned in their raw text form for
 * the shared parsers (src/http/params.ts), which check ranges as they do for query strings.
 */
function parseParams(text: string, allowed: readonly Param[]): Partial<Record<Param, string>> {
  if (text.trim() === "") return {};
  const body = parseJsonText(text);
  refuseTenantId(body);
  if (body === null || typeof body !== "object" || Array.isArray(body))
    throw invalid("body", `must be a JSON object, got ${show(body)}`);
  const out: Partial<Record<Param, string>> = {};
  for (const [k, v] of Object.entries(body as Record<string, unknown>)) {
    const p = allowed.find((a) => a === k);
    if (p === undefined) throw invalid(k.slice(0, 100), "unknown field");
    if (p === "limit") {
      if (typeof v !== "number" || !Number.isInteger(v))
        throw invalid("limit", `must be an integer, got ${show(v)}`);
      out.limit = String(v);
    } else {
      if (typeof v !== "string") throw invalid(p, `must be a string, got ${show(v)}`);
      out[p] = v;
    }
  }
  return out;
}

/** Builds the handler. Stateful only in its bounded caches (tenants, rate buckets). */
export function createNatsApiHandler(deps: NatsApiHandlerDeps): NatsApiHandler {
  const { config: cfg, operations: ops } = deps;
  const buckets = new TokenBuckets(cfg.tenantPerSecond, cfg.tenantBurst);
  const cache = new LruCache<string, { tenant: Tenant; expiresAtMs: number }>(cfg.tenantCacheMax);

  async function tenantOf(token: string): Promise<Tenant> {
    const now = deps.clock.monoMs();
    const hit = cache.get(token);
    if (hit !== undefined && hit.expiresAtMs > now) return hit.tenant;
    const t = TENANT_TOKEN.test(token) ? await deps.tenants.getTenant(token) : null;
    // Not cached when unknown: a tenant created a moment ago is found on the next request.
    if (t === null)
      throw new KairosError(
        "unauthenticated",
        "no such tenant: the subject's tenant token names no tenant",
      );
    if (cfg.tenantCacheMs > 0)
      cache.set(token, { tenant: t, expiresAtMs: now + cfg.tenantCacheMs });
    return t;
  }

  return async (req) => {
    const parsed = parseApiSubject(deps.clusterName, req.subject);
    try {
      if (parsed === null || parsed.op === undefined) {
        throw new KairosError(
          "not_found",
          `no operation ${JSON.stringify(parsed?.raw ?? "")} (see docs/nats-api.md)`,
        );
      }
      if (req.data.length > cfg.maxBodyBytes) {
        throw new KairosError(
          "payload_too_large",
          `body: larger than the limit of ${cfg.maxBodyBytes} bytes`,
          { field: "body" },
        );
      }
      const wait = buckets.take(parsed.tenantToken, deps.clock.monoMs());
      if (wait > 0)
        throw rateLimited(
          `rate limit of ${cfg.tenantPerSecond} requests/s for this tenant exceeded`,
          wait,
        );
      const tenant = await tenantOf(parsed.tenantToken);
      return await runOperation(ops, parsed.op, tenant, parsed.id, req, decodeText(req.data));
    } catch (e) {
      return errorReply(e, (x) => deps.logError(x, parsed?.raw ?? "?"));
    }
  };
}

const RUN_LIST_PARAMS = ["limit", "cursor", "status"] as const;

/** One operation of an authenticated tenant: parses its body and calls the shared operation. */
async function runOperation(
  ops: NatsApiHandlerDeps["operations"],
  op: ApiOperation,
  tenant: Tenant,
  id: string | undefined,
  req: NatsApiRequest,
  text: string,
): Promise<ApiReply> {
  const ok = (status: number, result: unknown): ApiReply => ({ ok: true, status, result });
  const runs = (p: { items: unknown[]; next_cursor: string | null }): ApiReply =>
    ok(200, { runs: p.items, next_cursor: p.next_cursor });
  switch (op) {
    case "jobs.create": {
      const r = await ops.createJob(tenant, {
        idempotencyKey: req.header(API_HEADERS.idempotencyKey),
        body: bodyReader(text),
      });
      return ok(r.created ? 201 : 200, r.job);
    }
    case "jobs.list": {
      const page = await ops.listJobs(tenant, parseParams(text, JOB_LIST_PARAMS));
      return ok(200, { jobs: page.items, next_cursor: page.next_cursor });
    }
    case "jobs.get":
      parseParams(text, []);
      return ok(200, await ops.getJob(tenant, id));
    case "jobs.patch":
      return ok(
        200,
        await ops.patchJob(tenant, {
          jobId: id,
          ifMatch: req.header(API_HEADERS.ifMatch),
          body: bodyReader(text),
        }),
      );
    case "jobs.delete":
      parseParams(text, []);
      await ops.deleteJob(tenant, id);
      return ok(204, null);
    case "jobs.run":
      parseParams(text, []);
      return ok(202, await ops.runNow(tenant, id));
    case "runs.list":
      return runs(await ops.listRuns(tenant, { jobId: id, ...parseParams(text, RUN_LIST_PARAMS) }));
    case "runs.get":
      parseParams(text, []);
      return ok(200, await ops.getRun(tenant, id));
    case "runs.cancel":
      return ok(
        200,
        await ops.cancelRun(tenant, {
          runId: id,
          caller: NATS_CALLER,
          body: async () => (text.trim() === "" ? undefined : bodyReader(text)()),
        }),
      );
    case "runs.tenant":
      return runs(await ops.listTenantRuns(tenant, parseParams(text, RUN_LIST_PARAMS)));
    case "runs.dead_lettered":
      return runs(await ops.listDeadLetters(tenant, parseParams(text, ["limit", "cursor"])));
    case "subscriptions.create":
      return ok(201, await ops.createSubscription(tenant, bodyReader(text)));
    case "subscriptions.list":
      parseParams(text, []);
      return ok(200, { subscriptions: await ops.listSubscriptions(tenant) });
    case "subscriptions.get":
      parseParams(text, []);
      return ok(200, await ops.getSubscription(tenant, id));
    case "subscriptions.delete":
      parseParams(text, []);
      await ops.deleteSubscription(tenant, id);
      return ok(204, null);
    default:
      return assertNever(op, "NATS API operation");
  }
}

/** Any thrown value as the REST error object with its HTTP-equivalent status. */
export function errorReply(e: unknown, log: (err: unknown) => void): ApiReply {
  const h = toHttpError(e, log);
  const retry = h.headers["Retry-After"];
  return {
    ok: false,
    status: h.status,
    error: h.body.error,
    ...(retry !== undefined ? { retry_after_s: Number(retry) } : {}),
  };
}
