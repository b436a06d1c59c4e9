/**
 * The operators' routes, `/v1/admin/…`, behind an operator key (`kop_…`, made by `kairos admin
 * operator-key create`; src/tenants/operator-keys.ts) instead of a tenant's API key:
 * `GET /v1/admin/cluster` — nodes, partitions and their holders, schedulers, workers and their
 * slots, and each tenant's fair share against its demand and use (src/server/operator-view.ts).
 *
 * A tenant's key — valid or not — never reads them: a valid tenant key is 403
 * `permission_denied` (it names a tenant, not an operator), anything else that is not a valid
 * operator key is 401. Failed authentications are throttled per client address with the
 * tenants' (rate-limit.ts), and each operator key has the per-tenant request rate. The tenant
 * routes' own authentication never runs here (app.ts skips it for this prefix).
 */
import type { Context, Hono, MiddlewareHandler } from "hono";
import { KairosError } from "../lib/errors.ts";
import type { TenantDirectory } from "../protocol/service.ts";
import type { ClusterViewSource, OperatorKeyCheck } from "../protocol/stats.ts";
import type { ApiEnv } from "./auth.ts";
import { rateLimited, type TokenBuckets } from "./rate-limit.ts";

export const ADMIN_PREFIX = "/v1/admin/";

/** Whether a path is an operator route (the tenant routes' middleware skips it). */
export function isAdminPath(path: string): boolean {
  return path.startsWith(ADMIN_PREFIX) || path === "/v1/admin";
}

/** What the operators' routes need. */
export interface OperatorDeps {
  keys: OperatorKeyCheck;
  view: ClusterViewSource;
}

export interface AdminAuthDeps {
  tenants: TenantDirectory;
  failures: TokenBuckets;
  perKey: TokenBuckets;
  perSecond: number;
  clientAddress: (c: Context) => string | undefined;
  nowMs: () => number;
}

const MAX_AUTH_HEADER_CHARS = 512;

/** Authenticates an operator key, or refuses (401, or 403 for a tenant's key). */
function adminAuth(keys: OperatorKeyCheck, d: AdminAuthDeps): MiddlewareHandler<ApiEnv> {
  return async (c, next) => {
    const client = d.clientAddress(c);
    if (client !== undefined) {
      const wait = d.failures.waitMs(client, d.nowMs());
      if (wait > 0) throw rateLimited("too many failed authentications from this address", wait);
    }
    const fail = (code: "unauthenticated" | "permission_denied", why: string): KairosError => {
      if (client !== undefined) d.failures.charge(client, d.nowMs());
      return new KairosError(code, why);
    };
    const header = c.req.header("authorization");
    const m =
      header !== undefined && header.length <= MAX_AUTH_HEADER_CHARS
        ? /^Bearer +(\S+) *$/i.exec(header)
        : null;
    const key = m?.[1];
    if (key === undefined)
      throw fail("unauthenticated", "Authorization must be: Bearer <operator key>");
    const op = await keys.authenticate(key);
    if (op === null) {
      if ((await d.tenants.authenticateKey(key)) !== null)
        throw fail(
          "permission_denied",
          "a tenant's API key cannot read the operators' views: they need an operator key (kairos admin operator-key create)",
        );
      throw fail("unauthenticated", "invalid or revoked operator key");
    }
    const wait = d.perKey.take(`operator:${op.keyId}`, d.nowMs());
    if (wait > 0)
      throw rateLimited(`rate limit of ${d.perSecond} requests/s for this key exceeded`, wait);
    c.set("caller", `operator key ${op.keyId} (${op.name})`);
    await next();
  };
}

/** Mounts the operators' routes (none without `deps`: then they are 404 like unknown routes). */
export function registerAdminRoutes(
  app: Hono<ApiEnv>,
  deps: OperatorDeps | undefined,
  auth: AdminAuthDeps,
): void {
  if (deps === undefined) return;
  app.use(`${ADMIN_PREFIX}*`, adminAuth(deps.keys, auth));
  app.get(`${ADMIN_PREFIX}cluster`, async (c) => {
    const [name] = new URL(c.req.url).searchParams.keys();
    if (name !== undefined)
      throw new KairosError(
        "invalid_argument",
        `${name.slice(0, 64)}: this route takes no parameters`,
        {
          field: name.slice(0, 64),
        },
      );
    c.header("Cache-Control", "no-store");
    return c.json(await deps.view.clusterView());
  });
}
