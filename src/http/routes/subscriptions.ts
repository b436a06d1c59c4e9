/**
 * Run-event subscription routes: create (201, a webhook's answer carrying its signing `secret`,
 * shown once), list (the tenant's, oldest first; at most the per-tenant limit, so no paging), get
 * and delete (204). Validation and storage are the shared operations' (src/app/operations.ts).
 */
import type { Hono } from "hono";
import type { Operations } from "../../app/operations.ts";
import type { ApiEnv } from "../auth.ts";
import { readJson } from "../body.ts";

/** Mounts the /v1/subscriptions routes on `app` (authentication is already in place). */
export function registerSubscriptionRoutes(app: Hono<ApiEnv>, ops: Operations): void {
  app.post("/v1/subscriptions", async (c) => {
    const sub = await ops.createSubscription(c.get("tenant"), () => readJson(c));
    c.header("Location", `/v1/subscriptions/${sub.subscription_id}`);
    return c.json(sub, 201);
  });

  app.get("/v1/subscriptions", async (c) => {
    return c.json({ subscriptions: await ops.listSubscriptions(c.get("tenant")) });
  });

  app.get("/v1/subscriptions/:subscription_id", async (c) => {
    return c.json(await ops.getSubscription(c.get("tenant"), c.req.param("subscription_id")));
  });

  app.delete("/v1/subscriptions/:subscription_id", async (c) => {
    await ops.deleteSubscription(c.get("tenant"), c.req.param("subscription_id"));
    return c.body(null, 204);
  });
}
