/**
 * Bearer authentication: `Authorization: Bearer <api key>` → the key's tenant, stored in the
 * request context. The tenant id comes only from the key, never from the path or body. Every
 * failure (no header, another scheme, unknown or revoked key) is the same 401, so a caller
 * cannot tell a revoked key from a made-up one.
 */
import type { MiddlewareHandler } from "hono";
import { KairosError } from "../lib/errors.ts";
import type { Tenant, TenantDirectory } from "../jobs/service.ts";

/** Hono environment of authenticated routes. */
export interface ApiEnv {
  Variables: { tenant: Tenant };
}

/** Longest Authorization header considered; longer ones are rejected without a lookup. */
const MAX_AUTH_HEADER_CHARS = 512;

/** Middleware that authenticates the request or throws `unauthenticated`. */
export function bearerAuth(tenants: TenantDirectory): MiddlewareHandler<ApiEnv> {
  return async (c, next) => {
    const header = c.req.header("authorization");
    if (header === undefined) throw new KairosError("unauthenticated", "missing Authorization: Bearer <api key>");
    const m = header.length <= MAX_AUTH_HEADER_CHARS ? /^Bearer +(\S+) *$/i.exec(header) : null;
    const key = m?.[1];
    if (key === undefined) throw new KairosError("unauthenticated", "Authorization must be: Bearer <api key>");
    const tenant = await tenants.authenticate(key);
    if (tenant === null) throw new KairosError("unauthenticated", "invalid or revoked API key");
    c.set("tenant", tenant);
    await next();
  };
}
