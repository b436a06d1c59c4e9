/**
 * Operations endpoints: `/healthz` (liveness: the process serves HTTP), `/readyz` (readiness:
 * 200 `{"ready": true, "checks": {…}}` or 503 with the failing checks, src/health/readiness.ts)
 * and `/metrics` (Prometheus text, src/metrics). API nodes serve them on the API port (added to
 * the API app; its own `/healthz` stays); any node serves them on `--metrics-port` through
 * `createOpsApp`. None needs authentication: they carry no tenant data (metric labels are tenant
 * ids, not names or keys) — keep the listener on a private address.
 */
import { Hono, type Env } from "hono";
import type { Readiness } from "../health/readiness.ts";
import type { ApiEnv } from "./auth.ts";

export interface OpsDeps {
  readiness(): Promise<Readiness>;
  metrics(): Promise<{ body: string; contentType: string }>;
}

/** Adds `/readyz` and `/metrics` to an app (the API app already has `/healthz`). */
export function registerOpsRoutes<E extends Env>(app: Hono<E>, deps: OpsDeps): void {
  app.get("/readyz", async (c) => {
    const r = await deps.readiness();
    return c.json(r, r.ready ? 200 : 503);
  });
  app.get("/metrics", async (c) => {
    const m = await deps.metrics();
    return c.body(m.body, 200, { "content-type": m.contentType });
  });
}

/** The app of a `--metrics-port` listener: `/healthz`, `/readyz`, `/metrics`, JSON 404 otherwise. */
export function createOpsApp(deps: OpsDeps): Hono<ApiEnv> {
  const app = new Hono<ApiEnv>();
  app.get("/healthz", (c) => c.json({ ok: true }));
  registerOpsRoutes(app, deps);
  app.notFound((c) => c.json({ error: { code: "not_found", message: `no route ${c.req.method} ${c.req.path.slice(0, 200)}` } }, 404));
  app.onError((_e, c) => c.json({ error: { code: "internal", message: "internal error" } }, 500));
  return app;
}
