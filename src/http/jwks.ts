/**
 * `GET /.well-known/jwks.json`: the public keys that verify run tokens (src/secrets/run-token.ts),
 * as a JWK Set — the current key and the earlier ones still verifying; never a private part. No
 * authentication (a tenant's own services fetch it); cacheable for JWKS_MAX_AGE_S, so a rotation
 * reaches API nodes that long before schedulers sign with the new key (docs/security.md). A node
 * without run-token keys answers an empty set.
 */
import type { Hono } from "hono";
import type { ApiEnv } from "./auth.ts";
import type { RunTokenVerifier } from "../secrets/run-token.ts";

/** How long verifiers may cache the key set (seconds). */
export const JWKS_MAX_AGE_S = 300;

export function registerJwks(app: Hono<ApiEnv>, verifier: RunTokenVerifier | undefined): void {
  app.get("/.well-known/jwks.json", (c) => {
    c.header("Cache-Control", `public, max-age=${JWKS_MAX_AGE_S}`);
    return c.json(verifier?.jwks() ?? { keys: [] });
  });
}
