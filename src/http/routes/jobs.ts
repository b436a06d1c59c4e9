/**
 * Job routes: create (201, or 200 when an Idempotency-Key replays an earlier create), a batch
 * create (`/v1/jobs:batch`, each item with its own result), list,
 * get (with `next_runs`), patch (optional If-Match), delete (204) and run now (202). Every
 * response carrying a job also carries its version as `ETag`. The routes only translate HTTP:
 * validation, the image-policy check and the service calls are the transport-agnostic
 * operations' (src/app/operations.ts), shared with the internal NATS API. The tenant comes from
 * authentication.
 */
import type { Context, Hono } from "hono";
import type { Operations } from "../../app/operations.ts";
import type { JobView } from "../../protocol/model.ts";
import type { ApiEnv } from "../auth.ts";
import { readJson } from "../body.ts";
import { etagOf } from "../../app/params.ts";
import type { BatchOutcome } from "../../app/job-batch.ts";
import { toHttpError } from "../errors.ts";

/** One batch item's result as the API shows it: the job, or the error it would have answered. */
function batchResult(o: BatchOutcome, log: (err: unknown) => void) {
  if (o.ok) return { index: o.index, status: o.created ? 201 : 200, job: o.job };
  const e = toHttpError(o.error, log);
  return { index: o.index, status: e.status, error: e.body.error };
}

/** Sends a job with its ETag. */
function sendJob(c: Context<ApiEnv>, job: JobView, status: 200 | 201): Response {
  c.header("ETag", etagOf(job.version));
  return c.json(job, status);
}

/** Mounts the /v1/jobs routes on `app` (authentication is already in place). */
export function registerJobRoutes(
  app: Hono<ApiEnv>,
  ops: Operations,
  logError: (err: unknown, req: { method: string; path: string }) => void,
): void {
  app.post("/v1/jobs", async (c) => {
    const { job, created } = await ops.createJob(c.get("tenant"), {
      idempotencyKey: c.req.header("idempotency-key"),
      body: () => readJson(c),
    });
    c.header("Location", `/v1/jobs/${job.job_id}`);
    if (!created) c.header("Idempotent-Replayed", "true");
    return sendJob(c, job, created ? 201 : 200);
  });

  // Always 200: each item carries the status a single create would have answered.
  app.post("/v1/jobs:batch", async (c) => {
    const outcomes = await ops.createJobs(c.get("tenant"), { body: () => readJson(c) });
    const log = (err: unknown) => logError(err, { method: "POST", path: c.req.path });
    const results = outcomes.map((o) => batchResult(o, log));
    const count = (f: (r: (typeof results)[number]) => boolean) => results.filter(f).length;
    return c.json(
      {
        created: count((r) => r.status === 201),
        replayed: count((r) => r.status === 200),
        failed: count((r) => r.status >= 400),
        results,
      },
      200,
    );
  });

  app.get("/v1/jobs", async (c) => {
    const page = await ops.listJobs(c.get("tenant"), {
      limit: c.req.query("limit"),
      cursor: c.req.query("cursor"),
      name: c.req.query("name"),
      state: c.req.query("state"),
    });
    return c.json({ jobs: page.items, next_cursor: page.next_cursor });
  });

  app.get("/v1/jobs/:job_id", async (c) => {
    return sendJob(c, await ops.getJob(c.get("tenant"), c.req.param("job_id")), 200);
  });

  app.patch("/v1/jobs/:job_id", async (c) => {
    const job = await ops.patchJob(c.get("tenant"), {
      jobId: c.req.param("job_id"),
      ifMatch: c.req.header("if-match"),
      body: () => readJson(c),
    });
    return sendJob(c, job, 200);
  });

  app.delete("/v1/jobs/:job_id", async (c) => {
    await ops.deleteJob(c.get("tenant"), c.req.param("job_id"));
    return c.body(null, 204);
  });

  app.post("/v1/jobs/:job_id/runs", async (c) => {
    const run = await ops.runNow(c.get("tenant"), c.req.param("job_id"));
    c.header("Location", `/v1/runs/${run.run_id}`);
    return c.json(run, 202);
  });
}
