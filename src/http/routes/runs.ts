/**
 * Run routes: a job's runs (newest first, cursor paging, optional status filter), one run by id,
 * a run's cancel (`POST /v1/runs/{run_id}/cancel`, 200 with the cancelled run; idempotent; 409 on
 * a run that ended otherwise), the tenant's runs across its jobs (`GET /v1/runs`, newest first,
 * `status` one a run ends with: src/history/tenant-runs-page.ts) and its dead-lettered runs
 * (`GET /v1/runs?status=dead_lettered`, oldest first). Runs of
 * another tenant's job are `not_found`, as the service guarantees. Validation and the service
 * calls are the shared operations' (src/app/operations.ts).
 */
import type { Hono } from "hono";
import type { Operations } from "../../app/operations.ts";
import type { ApiEnv } from "../auth.ts";
import { readJson } from "../body.ts";

/** Mounts the run routes on `app` (authentication is already in place). */
export function registerRunRoutes(app: Hono<ApiEnv>, ops: Operations): void {
  app.get("/v1/jobs/:job_id/runs", async (c) => {
    const page = await ops.listRuns(c.get("tenant"), {
      jobId: c.req.param("job_id"),
      limit: c.req.query("limit"),
      cursor: c.req.query("cursor"),
      status: c.req.query("status"),
    });
    return c.json({ runs: page.items, next_cursor: page.next_cursor });
  });

  app.get("/v1/runs", async (c) => {
    // Which list this URL names: `status=dead_lettered` is the dead-letter list (oldest first).
    const status = c.req.query("status");
    const input = { limit: c.req.query("limit"), cursor: c.req.query("cursor") };
    const page =
      status === "dead_lettered"
        ? await ops.listDeadLetters(c.get("tenant"), input)
        : await ops.listTenantRuns(c.get("tenant"), { ...input, status });
    return c.json({ runs: page.items, next_cursor: page.next_cursor });
  });

  app.get("/v1/runs/:run_id", async (c) => {
    return c.json(await ops.getRun(c.get("tenant"), c.req.param("run_id")));
  });

  app.post("/v1/runs/:run_id/cancel", async (c) => {
    const run = await ops.cancelRun(c.get("tenant"), {
      runId: c.req.param("run_id"),
      caller: c.get("caller"),
      // Optional: an empty body is a cancel without a reason.
      body: async () => ((await c.req.text()).trim() === "" ? undefined : readJson(c)),
    });
    return c.json(run, 200);
  });
}
