/**
 * The HTTP API (Hono): wiring only. Public routes (/healthz, /openapi.json, the run-token keys at
 * /.well-known/jwks.json, the web dashboard's page at / and its assets: dashboard.ts), then for
 * /v1/* authentication by API key or run token (with throttled failures), a run token's scope,
 * the per-tenant rate limit and the body limit, then the job, run, subscription and live-figure
 * (`/v1/stats`) routes (thin:
 * the operations are src/app/operations.ts, shared with the internal NATS API). Errors of every
 * route are mapped in ONE place (`onError`, `notFound`) to `{"error": {code, message, field?}}`; one
 * answered before its request's body arrived first reads that body, within bounds, or closes the
 * connection (`settleUnreadBody`).
 */
import { Hono, type Context, type MiddlewareHandler } from "hono";
import { createOperations } from "../app/operations.ts";
import { MAX_BATCH_BODY_BYTES } from "../app/job-batch.ts";
import type { JobsService, Tenant, TenantDirectory } from "../protocol/service.ts";
import type { Clock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import { type ApiEnv, bearerAuth, runTokenScope } from "./auth.ts";
import { DEFAULT_MAX_BODY_BYTES, limitBody, settleUnreadBody } from "./body.ts";
import { toHttpError } from "./errors.ts";
import {
  DEFAULT_RATE_LIMITS,
  TokenBuckets,
  rateLimited,
  type RateLimitOptions,
} from "./rate-limit.ts";
import { openApiDocument } from "./openapi.ts";
import { registerJwks } from "./jwks.ts";
import { registerDashboard } from "./dashboard.ts";
import { registerJobRoutes } from "./routes/jobs.ts";
import { registerRunRoutes } from "./routes/runs.ts";
import { registerSubscriptionRoutes } from "./routes/subscriptions.ts";
import { registerStatsRoutes } from "./routes/stats.ts";
import type { TenantStatsSource } from "../protocol/stats.ts";
import { isAdminPath, registerAdminRoutes, type OperatorDeps } from "./admin.ts";
import type { SubscriptionService } from "../protocol/events.ts";
import { ALLOW_ANY_IMAGE, type ImagePolicy } from "../sandbox/image-policy.ts";
import type { TaskLimits } from "../sandbox/task-rules.ts";
import type { RunTokenVerifier } from "../secrets/run-token.ts";

/** What the API needs. */
export interface AppDeps {
  jobs: JobsService;
  tenants: TenantDirectory;
  clock: Clock;
  /**
   * The operator's image policy: which images a tenant without its own `image_policy` may name
   * (checked at create and patch, 422 `policy_denied`). Default: any image.
   */
  imagePolicy?: ImagePolicy;
  /** The cluster's per-task resource maxima (create and patch above them: 422); default DEFAULT_TASK_LIMITS. */
  taskLimits?: TaskLimits;
  /** Largest accepted request body; default 64 KiB. */
  maxBodyBytes?: number;
  /** Per-tenant request limit and failed-authentication throttle (rate-limit.ts; defaults there). */
  rateLimits?: Partial<RateLimitOptions>;
  /** The client's address for the failure throttle (default: the TCP peer of @hono/node-server). */
  clientAddress?: (c: Context) => string | undefined;
  /**
   * Run tokens (src/secrets/run-token.ts): accepted as a credential for reading their own run and
   * job, and their public keys served at /.well-known/jwks.json. None: API keys only, no keys.
   */
  runTokens?: RunTokenVerifier;
  /** The tenants' run-event subscriptions (/v1/subscriptions); none: those routes answer 404. */
  subscriptions?: SubscriptionService;
  /** The tenants' live figures (`GET /v1/stats`); none: that route answers 404. */
  stats?: TenantStatsSource;
  /** The operators' views (`/v1/admin/…`, operator keys: admin.ts); none: those routes answer 404. */
  operator?: OperatorDeps;
  /** Receives errors that became a 500 (default: stderr). */
  logError?: (err: unknown, req: { method: string; path: string }) => void;
}

const defaultLogError = (err: unknown, req: { method: string; path: string }): void => {
  console.error(`kairos api: internal error on ${req.method} ${req.path}:`, err);
};

/** The TCP peer's address under @hono/node-server (`c.env.incoming`); undefined without a socket. */
function socketAddress(c: Context): string | undefined {
  const env = c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined;
  return env?.incoming?.socket?.remoteAddress;
}

/** How long a run token's tenant record is trusted without a read, and how many are kept. */
const TOKEN_TENANT_TTL_MS = 5_000;
const TOKEN_TENANT_CACHE_MAX = 10_000;

/** Tenant records by id through a short, bounded cache (a task may poll its run). */
function cachedTenants(
  tenants: TenantDirectory,
  nowMs: () => number,
): (id: string) => Promise<Tenant | null> {
  const cache = new Map<string, { t: Tenant | null; atMs: number }>();
  return async (id) => {
    const hit = cache.get(id);
    if (hit && nowMs() - hit.atMs < TOKEN_TENANT_TTL_MS) return hit.t;
    const t = await tenants.getTenant(id);
    if (cache.size >= TOKEN_TENANT_CACHE_MAX) cache.clear();
    cache.set(id, { t, atMs: nowMs() });
    return t;
  };
}

/** The body limit of a route: a batch create's own, larger one; `maxBytes` for every other. */
function bodyLimits(maxBytes: number): MiddlewareHandler {
  const batch = limitBody(Math.max(maxBytes, MAX_BATCH_BODY_BYTES));
  const other = limitBody(maxBytes);
  return (c, next) => (c.req.path === "/v1/jobs:batch" ? batch(c, next) : other(c, next));
}

/** Builds the API application; serve it with `serveApi` or call `app.request()` in tests. */
export function createApp(deps: AppDeps): Hono<ApiEnv> {
  const app = new Hono<ApiEnv>();
  const logError = deps.logError ?? defaultLogError;

  app.onError(async (err, c) => {
    const e = toHttpError(err, (x) => logError(x, { method: c.req.method, path: c.req.path }));
    for (const [k, v] of Object.entries(e.headers)) c.header(k, v);
    await settleUnreadBody(c, deps.clock);
    return c.json(e.body, e.status);
  });
  app.notFound(async (c) => {
    const e = toHttpError(
      new KairosError("not_found", `no route ${c.req.method} ${c.req.path.slice(0, 200)}`),
      () => undefined,
    );
    await settleUnreadBody(c, deps.clock);
    return c.json(e.body, e.status);
  });

  app.get("/healthz", (c) => c.json({ ok: true }));
  app.get("/openapi.json", (c) => c.json(openApiDocument()));
  registerJwks(app, deps.runTokens);
  registerDashboard(app);

  const limits = { ...DEFAULT_RATE_LIMITS, ...deps.rateLimits };
  const perTenant = new TokenBuckets(limits.tenantPerSecond, limits.tenantBurst);
  const failures = new TokenBuckets(limits.authFailuresPerSecond, limits.authFailuresBurst);
  const nowMs = () => deps.clock.monoMs();
  const clientAddress = deps.clientAddress ?? socketAddress;
  // The operators' routes authenticate operator keys on their own (admin.ts): the tenant chain
  // below skips them, so a tenant's key is refused there, never taken for its tenant.
  registerAdminRoutes(app, deps.operator, {
    tenants: deps.tenants,
    failures,
    perKey: perTenant,
    perSecond: limits.tenantPerSecond,
    clientAddress,
    nowMs,
  });
  const tenantOnly =
    (mw: MiddlewareHandler<ApiEnv>): MiddlewareHandler<ApiEnv> =>
    (c, next) =>
      isAdminPath(c.req.path) ? next() : mw(c, next);
  app.use(
    "/v1/*",
    ...[
      bearerAuth(
        deps.tenants,
        { failures, clientAddress, nowMs },
        deps.runTokens
          ? {
              verifier: deps.runTokens,
              tenant: cachedTenants(deps.tenants, nowMs),
              nowMs: () => deps.clock.now(),
            }
          : undefined,
      ),
      runTokenScope(),
      async (c: Context<ApiEnv>, next: () => Promise<void>) => {
        const wait = perTenant.take(c.get("tenant").tenant_id, nowMs());
        if (wait > 0)
          throw rateLimited(
            `rate limit of ${limits.tenantPerSecond} requests/s for this tenant exceeded`,
            wait,
          );
        await next();
      },
      bodyLimits(deps.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES),
    ].map(tenantOnly),
  );
  const ops = createOperations({
    jobs: deps.jobs,
    clock: deps.clock,
    imagePolicy: deps.imagePolicy ?? ALLOW_ANY_IMAGE,
    ...(deps.taskLimits ? { taskLimits: deps.taskLimits } : {}),
    ...(deps.subscriptions ? { subscriptions: deps.subscriptions } : {}),
  });
  registerJobRoutes(app, ops, logError);
  registerRunRoutes(app, ops);
  registerSubscriptionRoutes(app, ops);
  registerStatsRoutes(app, deps.stats);
  return app;
}
