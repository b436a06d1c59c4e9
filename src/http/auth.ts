/**
 * Bearer authentication. Two kinds of credential, told apart by their shape:
 * - an API key (`kai_…`): `Authorization: Bearer <api key>` → the key's tenant (and the key's id,
 *   which names the caller);
 * - a run token (a compact JWS, `KAIROS_RUN_TOKEN`; src/secrets/run-token.ts), on nodes given the
 *   run-token keys: its signature, kid, type, issuer and expiry are checked, and the request is
 *   its claims' tenant's, limited by `runTokenScope` to reading its own run and its own job.
 * The tenant id comes only from the credential, never from the path or body. Every failure of an
 * API key (no header, another scheme, unknown or revoked key) is the same 401, so a caller cannot
 * tell a revoked key from a made-up one; a refused run token is a 401 that says why (expired,
 * unknown key, bad signature…): its holder is the task it was issued to, and the reasons reveal
 * nothing about other credentials.
 *
 * Failed authentications of either kind are throttled per client address (rate-limit.ts): once a
 * client has spent its failure budget it gets 429 `rate_limited` before any lookup.
 */
import type { Context, MiddlewareHandler } from "hono";
import type { TokenBuckets } from "./rate-limit.ts";
import { rateLimited } from "./rate-limit.ts";
import { KairosError } from "../lib/errors.ts";
import type { Tenant, TenantDirectory } from "../protocol/service.ts";
import {
  MAX_RUN_TOKEN_CHARS,
  looksLikeJws,
  type RunTokenClaims,
  type RunTokenVerifier,
} from "../secrets/run-token.ts";

/** Which credential authenticated a request. */
export type Credential = { kind: "api_key" } | { kind: "run_token"; claims: RunTokenClaims };

/** Hono environment of authenticated routes. */
export interface ApiEnv {
  /** `caller`: who asks, as a cancelled run's reason names them (`API key <key_id>`). */
  Variables: { tenant: Tenant; caller: string; credential: Credential };
}

/** Longest Authorization header considered for an API key; longer ones are rejected without a lookup. */
const MAX_AUTH_HEADER_CHARS = 512;
/** Longest Authorization header considered at all (a run token is longer than a key). */
const MAX_TOKEN_HEADER_CHARS = MAX_RUN_TOKEN_CHARS + 16;

/** Run tokens at this API node: the verifier and the tenant of a token's claims. */
export interface RunTokenAuth {
  verifier: RunTokenVerifier;
  /** The tenant record (null: gone); read through a short cache by the caller. */
  tenant: (tenantId: string) => Promise<Tenant | null>;
  nowMs: () => number;
}

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
  runTokens?: RunTokenAuth,
): MiddlewareHandler<ApiEnv> {
  return async (c, next) => {
    const client = throttle?.clientAddress(c);
    if (client !== undefined) {
      const wait = throttle!.failures.waitMs(client, throttle!.nowMs());
      if (wait > 0) throw rateLimited("too many failed authentications from this address", wait);
    }
    const fail = (why: string | KairosError): KairosError => {
      if (client !== undefined) throttle!.failures.charge(client, throttle!.nowMs());
      return typeof why === "string" ? new KairosError("unauthenticated", why) : why;
    };
    const header = c.req.header("authorization");
    if (header === undefined) throw fail("missing Authorization: Bearer <api key>");
    const m = header.length <= MAX_TOKEN_HEADER_CHARS ? /^Bearer +(\S+) *$/i.exec(header) : null;
    const credential = m?.[1];
    if (credential !== undefined && looksLikeJws(credential)) {
      if (runTokens === undefined)
        throw fail("this API node does not accept run tokens (no run-token keys)");
      let claims: RunTokenClaims;
      try {
        claims = await runTokens.verifier.verify(credential, runTokens.nowMs());
      } catch (e) {
        throw fail(e as KairosError);
      }
      const tenant = await runTokens.tenant(claims.tenant);
      if (tenant === null) throw fail("run token refused: its tenant no longer exists");
      c.set("tenant", tenant);
      c.set("caller", `run token of run ${claims.run} (attempt ${claims.attempt})`);
      c.set("credential", { kind: "run_token", claims });
      await next();
      return;
    }
    // An API key: exactly as before run tokens existed (length bound, shape, lookup).
    const key = header.length <= MAX_AUTH_HEADER_CHARS ? credential : undefined;
    if (key === undefined) throw fail("Authorization must be: Bearer <api key>");
    const found = await tenants.authenticateKey(key);
    if (found === null) throw fail("invalid or revoked API key");
    c.set("tenant", found.tenant);
    c.set("caller", `API key ${found.keyId}`);
    c.set("credential", { kind: "api_key" });
    await next();
  };
}

/** The one path a run token may read, per resource: its own run and its own job. */
function allowedForRunToken(method: string, path: string, claims: RunTokenClaims): boolean {
  if (method !== "GET") return false;
  const m = /^\/v1\/(runs|jobs)\/([^/]+)$/.exec(path);
  if (m === null) return false;
  let id: string;
  try {
    id = decodeURIComponent(m[2]!);
  } catch {
    return false;
  }
  return m[1] === "runs" ? id === claims.run : id === claims.job;
}

/**
 * After `bearerAuth`: a run token reads only `GET /v1/runs/<its run>` and `GET /v1/jobs/<its
 * job>`; anything else is 403 `permission_denied`. An API key passes unchanged.
 */
export function runTokenScope(): MiddlewareHandler<ApiEnv> {
  return async (c, next) => {
    const cred = c.get("credential");
    // The path as sent (percent-encoded), decoded once here as the router decodes it.
    const path = cred.kind === "run_token" ? new URL(c.req.url).pathname : "";
    if (cred.kind === "run_token" && !allowedForRunToken(c.req.method, path, cred.claims)) {
      throw new KairosError(
        "permission_denied",
        `a run token may only read its own run (GET /v1/runs/${cred.claims.run}) and job (GET /v1/jobs/${cred.claims.job})`,
      );
    }
    await next();
  };
}
