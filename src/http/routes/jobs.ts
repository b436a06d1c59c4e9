/**
 * Job routes: create (201, or 200 when an Idempotency-Key replays an earlier create), list,
 * get (with `next_runs`), patch (optional If-Match), delete (204) and run now (202). Every
 * response carrying a job also carries its version as `ETag`. Validation happens here; the
 * service receives a complete `JobSpec` / `JobPatch` and the tenant from authentication.
 * A task's image is checked against the tenant's image policy (its own, else the operator's)
 * at create and patch: 422 `policy_denied` (src/sandbox/image-policy.ts).
 */
import type { Context, Hono } from "hono";
import type { JobView } from "../../jobs/model.ts";
import type { JobsService, Tenant } from "../../jobs/service.ts";
import { checkImage, parseImagePolicy, type ImagePolicy } from "../../sandbox/image-policy.ts";
import type { Clock } from "../../lib/clock.ts";
import type { ApiEnv } from "../auth.ts";
import { readJson } from "../body.ts";
import { etagOf, parseCursor, parseIdempotencyKey, parseIfMatch, parseLimit, pathId } from "../params.ts";
import { parseCreateBody, parsePatchBody } from "../schemas.ts";

/** What the job routes need. */
export interface JobRouteDeps {
  jobs: JobsService;
  clock: Clock;
  /** The operator's default image policy (a tenant's own `image_policy` replaces it). */
  imagePolicy: ImagePolicy;
}

/** Throws `policy_denied` (422) unless the tenant may name `image`. */
function checkTenantImage(tenant: Tenant, fallback: ImagePolicy, image: string): void {
  const policy = tenant.image_policy ? parseImagePolicy(tenant.image_policy, "tenant image_policy") : fallback;
  const denied = checkImage(policy, image);
  if (denied) throw denied;
}

/** Sends a job with its ETag. */
function sendJob(c: Context<ApiEnv>, job: JobView, status: 200 | 201): Response {
  c.header("ETag", etagOf(job.version));
  return c.json(job, status);
}

/** Mounts the /v1/jobs routes on `app` (authentication is already in place). */
export function registerJobRoutes(app: Hono<ApiEnv>, deps: JobRouteDeps): void {
  const { jobs, clock } = deps;

  app.post("/v1/jobs", async (c) => {
    const idempotencyKey = parseIdempotencyKey(c.req.header("idempotency-key"));
    const spec = parseCreateBody(await readJson(c), clock.now());
    checkTenantImage(c.get("tenant"), deps.imagePolicy, spec.task.image);
    const tenantId = c.get("tenant").tenant_id;
    const { job, created } = idempotencyKey === undefined
      ? await jobs.createJob(tenantId, spec)
      : await jobs.createJob(tenantId, spec, idempotencyKey);
    c.header("Location", `/v1/jobs/${job.job_id}`);
    if (!created) c.header("Idempotent-Replayed", "true");
    return sendJob(c, job, created ? 201 : 200);
  });

  app.get("/v1/jobs", async (c) => {
    const limit = parseLimit(c.req.query("limit"));
    const cursor = parseCursor(c.req.query("cursor"));
    const page = await jobs.listJobs(c.get("tenant").tenant_id, cursor === undefined ? { limit } : { limit, cursor });
    return c.json({ jobs: page.items, next_cursor: page.next_cursor });
  });

  app.get("/v1/jobs/:job_id", async (c) => {
    const jobId = pathId(c.req.param("job_id"), "job");
    return sendJob(c, await jobs.getJob(c.get("tenant").tenant_id, jobId), 200);
  });

  app.patch("/v1/jobs/:job_id", async (c) => {
    const jobId = pathId(c.req.param("job_id"), "job");
    const ifMatch = parseIfMatch(c.req.header("if-match"));
    const patch = parsePatchBody(await readJson(c), clock.now());
    if (patch.task !== undefined) checkTenantImage(c.get("tenant"), deps.imagePolicy, patch.task.image);
    const tenantId = c.get("tenant").tenant_id;
    const job = ifMatch === undefined
      ? await jobs.patchJob(tenantId, jobId, patch)
      : await jobs.patchJob(tenantId, jobId, patch, ifMatch);
    return sendJob(c, job, 200);
  });

  app.delete("/v1/jobs/:job_id", async (c) => {
    const jobId = pathId(c.req.param("job_id"), "job");
    await jobs.deleteJob(c.get("tenant").tenant_id, jobId);
    return c.body(null, 204);
  });

  app.post("/v1/jobs/:job_id/runs", async (c) => {
    const jobId = pathId(c.req.param("job_id"), "job");
    const run = await jobs.runNow(c.get("tenant").tenant_id, jobId);
    c.header("Location", `/v1/runs/${run.run_id}`);
    return c.json(run, 202);
  });
}
