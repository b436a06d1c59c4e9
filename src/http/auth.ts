/**
 * Bearer authentication: `Authorization: Bearer <api key>` → the key's tenant (and the key's id,
 * which names the caller), stored in the request context. The tenant id comes only from the key,
 * never from the path or body. Every failure (no header, another scheme, unknown or revoked key)
 * is the same 401, so a caller cannot tell a revoked key from a made-up one.
 *
 * Failed authentications are throttled per client address (rate-limit.ts): once a client has
 * spent its failure budget it gets 429 `rate_limited` before any key lookup.
 */
import type { Context, MiddlewareHandler } from "hono";
import type { TokenBuckets } from "./rate-limit.ts";
import { rateLimited } from "./rate-limit.ts";
import { KairosError } from "../lib/errors.ts";
import type { Tenant, TenantDirectory } from "../protocol/service.ts";

/** Hono environment of authenticated routes. */
export interface ApiEnv {
  /** `caller`: who asks, as a cancelled run's reason names them (`API key <key_id>`). */
  Variables: { tenant: Tenant; caller: string };
}

/** Longest Authorization header considered; longer ones are rejected without a lookup. */
const MAX_AUTH_HEADER_CHARS = 512;

/** Throttling of failed authentications (absent: none). */
export interface AuthThrottle {
  failures: TokenBuckets;
  /** The client's address (undefined: not throttled, e.g. `app.request()` without a socket). */
  clientAddress: (c: Context) => string | undefined;
  nowMs: () => number;
}

/** Middleware that authenticates the request or throws `unauthenticated` (or `rate_limited`). */
export function bearerAuth(
  tenants: TenantDirectory,
  throttle?: AuthThrottle,
): MiddlewareHandler<ApiEnv> {
  return async (c, next) => {
    const client = throttle?.clientAddress(c);
    if (client !== undefined) {
      const wait = throttle!.failures.waitMs(client, throttle!.nowMs());
      if (wait > 0) throw rateLimited("too many failed authentications from this address", wait);
    }
    const fail = (why: string): KairosError => {
      if (client !== undefined) throttle!.failures.charge(client, throttle!.nowMs());
      return new KairosError("unauthenticated", why);
    };
    const header = c.req.header("authorization");
    if (header === undefined) throw fail("missing Authorization: Bearer <api key>");
    const m = header.length <= MAX_AUTH_HEADER_CHARS ? /^Bearer +(\S+) *$/i.exec(header) : null;
    const key = m?.[1];
    if (key === undefined) throw fail("Authorization must be: Bearer <api key>");
    const found = await tenants.authenticateKey(key);
    if (found === null) throw fail("invalid or revoked API key");
    c.set("tenant", found.tenant);
    c.set("caller", `API key ${found.keyId}`);
    await next();
  };
}
