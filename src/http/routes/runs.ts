/**
 * Run routes: a job's runs (newest first, cursor paging, optional status filter), one run by id,
 * and the tenant's dead-lettered runs across its jobs (`GET /v1/runs?status=dead_lettered`,
 * oldest first; the only status this route takes). Runs of another tenant's job are
 * `not_found`, as the service guarantees.
 */
import type { Hono } from "hono";
import { KairosError } from "../../lib/errors.ts";
import type { RunStatus } from "../../jobs/model.ts";
import type { JobsService } from "../../jobs/service.ts";
import type { ApiEnv } from "../auth.ts";
import { parseCursor, parseLimit, parseRunStatus, pathId } from "../params.ts";

/** Mounts the run routes on `app` (authentication is already in place). */
export function registerRunRoutes(app: Hono<ApiEnv>, jobs: JobsService): void {
  app.get("/v1/jobs/:job_id/runs", async (c) => {
    const jobId = pathId(c.req.param("job_id"), "job");
    const limit = parseLimit(c.req.query("limit"));
    const cursor = parseCursor(c.req.query("cursor"));
    const status = parseRunStatus(c.req.query("status"));
    const opts: { limit: number; cursor?: string; status?: RunStatus } = { limit };
    if (cursor !== undefined) opts.cursor = cursor;
    if (status !== undefined) opts.status = status;
    const page = await jobs.listRuns(c.get("tenant").tenant_id, jobId, opts);
    return c.json({ runs: page.items, next_cursor: page.next_cursor });
  });

  app.get("/v1/runs", async (c) => {
    const status = c.req.query("status");
    if (status !== "dead_lettered") {
      throw new KairosError("invalid_argument", `status: must be dead_lettered (other statuses are listed per job: /v1/jobs/{job_id}/runs), got ${JSON.stringify(status ?? null)}`, { field: "status" });
    }
    const limit = parseLimit(c.req.query("limit"));
    const cursor = parseCursor(c.req.query("cursor"));
    const page = await jobs.listDeadLetters(c.get("tenant").tenant_id, cursor === undefined ? { limit } : { limit, cursor });
    return c.json({ runs: page.items, next_cursor: page.next_cursor });
  });

  app.get("/v1/runs/:run_id", async (c) => {
    const runId = pathId(c.req.param("run_id"), "run");
    return c.json(await jobs.getRun(c.get("tenant").tenant_id, runId));
  });
}
