/**
 * `GET /v1/stats`: the caller's tenant's live figures — runs started per 5 s step over the last
 * 10 minutes, their dispatch lag p50/p99, runs waiting, and the forecast of runs due per minute
 * over the next hour — summed over the scheduler nodes' own memory (src/server/stats-responder.ts;
 * never a KV read, never an actor). The tenant is the credential's; the route takes no parameter
 * at all, and refuses any (a `tenant_id` in the query is a 400, not another tenant's figures).
 * Without a stats source (an app built without one) it is 404 like an unknown route.
 */
import type { Hono } from "hono";
import { KairosError } from "../../lib/errors.ts";
import type { TenantStatsSource } from "../../protocol/stats.ts";
import type { ApiEnv } from "../auth.ts";

/** Mounts `GET /v1/stats` on `app` (authentication and the rate limit are already in place). */
export function registerStatsRoutes(app: Hono<ApiEnv>, stats: TenantStatsSource | undefined): void {
  if (stats === undefined) return;
  app.get("/v1/stats", async (c) => {
    const [name] = new URL(c.req.url).searchParams.keys();
    if (name !== undefined) {
      const field = name.slice(0, 64);
      throw new KairosError(
        "invalid_argument",
        `${field}: /v1/stats takes no parameters (its figures are always the caller's tenant's)`,
        { field },
      );
    }
    c.header("Cache-Control", "no-store");
    return c.json(await stats.tenantStats(c.get("tenant").tenant_id));
  });
}
