/**
 * The OpenAPI 3.1 document served at /openapi.json. Component schemas are generated with
 * `z.toJSONSchema` from the very zod schemas that validate requests (schemas.ts) and describe
 * responses (views.ts); only the paths object is written by hand. Built once, on first use.
 */
import { z } from "zod";
import { JOB_STATES, RUN_STATUSES } from "../protocol/model.ts";
import { subscriptionPaths, subscriptionSchemas } from "./openapi-subscriptions.ts";
import { statsPaths, statsSchemas } from "./openapi-stats.ts";
import { DEFAULT_MAX_BODY_BYTES } from "./body.ts";
import { JWKS_MAX_AGE_S } from "./jwks.ts";
import { MAX_IDEMPOTENCY_KEY_CHARS, MAX_NAME_FILTER_CHARS, PAGE } from "../app/params.ts";
import { MAX_CANCEL_NOTE_CHARS } from "../app/cancel-body.ts";
import { CreateJobSchema, PatchJobSchema } from "../app/schemas.ts";
import { MAX_BATCH_BODY_BYTES, MAX_BATCH_JOBS } from "../app/job-batch.ts";
import {
  BatchCreateResultSchema,
  ErrorSchema,
  JobPageSchema,
  JobViewSchema,
  RunPageSchema,
  RunViewSchema,
} from "./views.ts";

type Json = Record<string, unknown>;

const ref = (id: string): Json => ({ $ref: `#/components/schemas/${id}` });

/** Converts a registry of zod schemas into OpenAPI component schemas. */
function components(entries: [string, z.ZodType][], io: "input" | "output"): Record<string, Json> {
  const reg = z.registry<{ id: string }>();
  for (const [id, schema] of entries) reg.add(schema, { id });
  const out = z.toJSONSchema(reg, { io, uri: (id) => `#/components/schemas/${id}` }).schemas;
  const clean: Record<string, Json> = {};
  for (const [id, s] of Object.entries(out)) {
    const { $schema: _s, $id: _i, ...rest } = s as Json;
    clean[id] = rest;
  }
  return clean;
}

const json = (schema: Json, description: string, headers?: Json): Json => ({
  description,
  ...(headers ? { headers } : {}),
  content: { "application/json": { schema } },
});

const errorResponse = (description: string): Json => json(ref("Error"), description);
const etag: Json = {
  ETag: { description: 'the job version, quoted: "3"', schema: { type: "string" } },
};
const retryAfter: Json = { "Retry-After": { description: "seconds", schema: { type: "integer" } } };

const errors = (...codes: number[]): Json => {
  const all: Record<number, Json> = {
    400: errorResponse("invalid_argument: `error.field` names the offending input"),
    401: errorResponse(
      "unauthenticated: missing, invalid or revoked API key, or a refused run token (the message says why: expired, unknown key, bad signature…)",
    ),
    403: errorResponse(
      "permission_denied: a run token used for anything but reading its own run and its own job",
    ),
    404: errorResponse("not_found (also for another tenant's ids and malformed ids)"),
    409: errorResponse("conflict: e.g. Idempotency-Key reused with a different body"),
    412: errorResponse("precondition_failed: If-Match does not match the job's version"),
    413: errorResponse(`payload_too_large: body over ${DEFAULT_MAX_BODY_BYTES} bytes`),
    422: errorResponse(
      "quota_exceeded (e.g. the tenant's max_jobs) or policy_denied: task.image outside the tenant's image policy (or a registry on a loopback/private address it does not name), task.resources above the cluster's per-task maxima, or task.network egress for a tenant without an egress policy; `error.field` names it",
    ),
  };
  const out: Json = {};
  for (const c of [...codes, 401]) if (all[c]) out[String(c)] = all[c];
  out["429"] = {
    ...errorResponse(
      "rate_limited (the tenant's request rate, or too many failed authentications from this address) or overloaded: retry after Retry-After seconds",
    ),
    headers: retryAfter,
  };
  out["503"] = {
    ...errorResponse("unavailable / no_owner / timeout: retry after Retry-After seconds"),
    headers: retryAfter,
  };
  out["500"] = errorResponse("internal error");
  return out;
};

const param = (
  name: string,
  where: "path" | "query" | "header",
  schema: Json,
  description: string,
  required = where === "path",
): Json => ({
  name,
  in: where,
  required,
  description,
  schema,
});

const jobId = param(
  "job_id",
  "path",
  { type: "string", pattern: "^[A-Za-z0-9_-]{1,64}$" },
  "job id",
);
const runId = param(
  "run_id",
  "path",
  { type: "string", pattern: "^[A-Za-z0-9_-]{1,64}$" },
  "run id",
);
const limit = param(
  "limit",
  "query",
  { type: "integer", minimum: 1, maximum: PAGE.maxLimit, default: PAGE.defaultLimit },
  "page size",
);
const cursor = param(
  "cursor",
  "query",
  { type: "string", maxLength: PAGE.maxCursorChars },
  "next_cursor of the previous page",
);

function paths(): Json {
  return {
    ...servicePaths(),
    ...jobPaths(),
    ...batchPath(),
    ...runPaths(),
    ...cancelPath(),
    ...subscriptionPaths({ json, ref, errors, param }),
    ...statsPaths({ json, ref, errors, param }),
  };
}

/** Liveness and this document: no API key. */
function servicePaths(): Json {
  return {
    "/healthz": {
      get: {
        summary: "Liveness",
        security: [],
        responses: {
          "200": json({ type: "object", properties: { ok: { const: true } } }, "alive"),
        },
      },
    },
    "/openapi.json": {
      get: {
        summary: "This document",
        security: [],
        responses: { "200": json({ type: "object" }, "OpenAPI 3.1 document") },
      },
    },
    "/.well-known/jwks.json": {
      get: {
        summary:
          "The public keys that verify run tokens (KAIROS_RUN_TOKEN), as a JWK Set: Ed25519 (OKP) keys with their kid; the current key and the earlier ones still verifying. Empty when the node has no run-token keys",
        security: [],
        responses: {
          "200": json(
            {
              type: "object",
              required: ["keys"],
              properties: {
                keys: {
                  type: "array",
                  items: {
                    type: "object",
                    required: ["kty", "crv", "kid", "x"],
                    properties: {
                      kty: { const: "OKP" },
                      crv: { const: "Ed25519" },
                      kid: { type: "string" },
                      x: { type: "string", description: "the public key, base64url" },
                      alg: { const: "EdDSA" },
                      use: { const: "sig" },
                    },
                  },
                },
              },
            },
            "the JWK Set",
            {
              "Cache-Control": {
                description: `public, max-age=${JWKS_MAX_AGE_S}`,
                schema: { type: "string" },
              },
            },
          ),
        },
      },
    },
  };
}

/** Either credential: an API key, or the run token of this run or job. */
const keyOrRunToken: Json[] = [{ bearer: [] }, { runToken: [] }];

/** The batch create: the body's envelope around CreateJobRequest items. */
function batchPath(): Json {
  return {
    "/v1/jobs:batch": {
      post: {
        summary: `Create up to ${MAX_BATCH_JOBS} jobs, each with its own result`,
        description: `Each item is created as \`POST /v1/jobs\` would create it (with its \`idempotency_key\` as the Idempotency-Key) and answered with the status and job or error that create would have answered. A body up to ${MAX_BATCH_BODY_BYTES} bytes.`,
        requestBody: {
          required: true,
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["jobs"],
                additionalProperties: false,
                properties: {
                  jobs: {
                    type: "array",
                    minItems: 1,
                    maxItems: MAX_BATCH_JOBS,
                    items: {
                      type: "object",
                      required: ["job"],
                      additionalProperties: false,
                      properties: {
                        job: ref("CreateJobRequest"),
                        idempotency_key: {
                          type: "string",
                          minLength: 1,
                          maxLength: MAX_IDEMPOTENCY_KEY_CHARS,
                        },
                      },
                    },
                  },
                },
              },
            },
          },
        },
        responses: {
          "200": json(ref("BatchCreateResult"), "every item's result, in order"),
          ...errors(400, 413),
        },
      },
    },
  };
}

/** Jobs: create, list, get, change, delete. */
function jobPaths(): Json {
  return {
    "/v1/jobs": {
      post: {
        summary: "Create a job",
        parameters: [
          param(
            "Idempotency-Key",
            "header",
            { type: "string", minLength: 1, maxLength: MAX_IDEMPOTENCY_KEY_CHARS },
            "a retried create with the same key (within 24 h) returns the same job",
          ),
        ],
        requestBody: {
          required: true,
          content: { "application/json": { schema: ref("CreateJobRequest") } },
        },
        responses: {
          "201": json(ref("Job"), "created", { ...etag, Location: { schema: { type: "string" } } }),
          "200": json(
            ref("Job"),
            "replayed: the Idempotency-Key was used before with this body",
            etag,
          ),
          ...errors(400, 409, 413, 422),
        },
      },
      get: {
        summary:
          "List jobs in job id order, which is creation order (a name filter or state=enabled may return a short page with a cursor: follow it until null)",
        parameters: [
          param(
            "name",
            "query",
            { type: "string", maxLength: MAX_NAME_FILTER_CHARS },
            "only jobs whose name contains this text, in any case (empty: no filter); a request examines at most 5,000 jobs (of the paused ones with state=paused)",
          ),
          param(
            "state",
            "query",
            { type: "string", enum: [...JOB_STATES] },
            "only enabled or only paused jobs; paused is read from an index of the tenant's paused jobs, so its pages cost the same however few jobs are paused",
          ),
          cursor,
          limit,
        ],
        responses: { "200": json(ref("JobPage"), "a page of jobs"), ...errors(400) },
      },
    },
    "/v1/jobs/{job_id}": {
      get: {
        summary: "Get a job (with next_runs); also with the run token of one of its attempts",
        parameters: [jobId],
        security: keyOrRunToken,
        responses: { "200": json(ref("Job"), "the job", etag), ...errors(403, 404) },
      },
      patch: {
        summary: "Change a job: each top-level field sent replaces the job's field",
        parameters: [
          jobId,
          param("If-Match", "header", { type: "string" }, 'expected version: "3", W/"3" or 3'),
        ],
        requestBody: {
          required: true,
          content: { "application/json": { schema: ref("PatchJobRequest") } },
        },
        responses: {
          "200": json(ref("Job"), "the changed job", etag),
          ...errors(400, 404, 412, 413, 422),
        },
      },
      delete: {
        summary: "Delete a job (active runs are cancelled)",
        parameters: [jobId],
        responses: { "204": { description: "deleted" }, ...errors(404) },
      },
    },
  };
}

/** Runs: run now, a job's runs, the tenant's runs and dead letters, one run (its cancel: `cancelPath`). */
function runPaths(): Json {
  return {
    "/v1/jobs/{job_id}/runs": {
      post: {
        summary: "Run now",
        parameters: [jobId],
        responses: {
          "202": json(ref("Run"), "the run, queued", { Location: { schema: { type: "string" } } }),
          ...errors(404, 422),
        },
      },
      get: {
        summary:
          "List a job's runs, newest first by creation (a status filter may return a short page with a cursor: follow it until null)",
        parameters: [
          jobId,
          param(
            "status",
            "query",
            { type: "string", enum: [...RUN_STATUSES] },
            "only runs in this status",
          ),
          cursor,
          limit,
        ],
        responses: { "200": json(ref("RunPage"), "a page of runs"), ...errors(400, 404) },
      },
    },
    "/v1/runs": {
      get: {
        summary:
          "List the tenant's runs across its jobs, newest first by creation; or, with status=dead_lettered, its dead-lettered runs (ended failed or timed out), oldest first. A run that has not ended is shown as its owner holds it now (read from the scheduler nodes' memory, never an actor's mailbox); one whose owner does not answer within 500 ms is shown as its record holds it (queued). A status filter may return a short page with a cursor: follow it until null",
        parameters: [
          param(
            "status",
            "query",
            { type: "string", enum: [...RUN_STATUSES, "dead_lettered"] },
            "only runs shown in this status (a run that has not ended: as its owner holds it now); dead_lettered: the dead-letter list (oldest first)",
          ),
          cursor,
          limit,
        ],
        responses: { "200": json(ref("RunPage"), "a page of runs"), ...errors(400) },
      },
    },
    "/v1/runs/{run_id}": {
      get: {
        summary: "Get a run; also with the run token of one of its attempts",
        parameters: [runId],
        security: keyOrRunToken,
        responses: { "200": json(ref("Run"), "the run"), ...errors(403, 404) },
      },
    },
  };
}

/** A run's cancel. */
function cancelPath(): Json {
  return {
    "/v1/runs/{run_id}/cancel": {
      post: {
        summary:
          "Cancel a run that has not ended: one waiting or prepared ahead is dropped, a running one is stopped (process executor: SIGTERM, a grace, SIGKILL; Docker: the container is killed); it ends `cancelled`, its reason naming the API key that asked. Idempotent",
        parameters: [runId],
        requestBody: {
          required: false,
          content: {
            "application/json": {
              schema: {
                type: "object",
                additionalProperties: false,
                properties: {
                  reason: {
                    type: "string",
                    minLength: 1,
                    maxLength: MAX_CANCEL_NOTE_CHARS,
                    description: "shown in the run's reason after who cancelled it",
                  },
                },
              },
            },
          },
        },
        responses: {
          "200": json(ref("Run"), "the run, cancelled (now, or already before)"),
          ...errors(400, 404, 413),
          "409": errorResponse(
            "conflict: the run has already ended otherwise (succeeded, failed…)",
          ),
        },
      },
    },
  };
}

let cached: Json | undefined;

/** The OpenAPI 3.1 document (built once). */
export function openApiDocument(): Json {
  cached ??= {
    openapi: "3.1.0",
    info: {
      title: "Kairos API",
      version: "1",
      description: "Multi-tenant job scheduler. Times are RFC 3339 UTC; fields are snake_case.",
    },
    servers: [{ url: "/" }],
    security: [{ bearer: [] }],
    paths: paths(),
    components: {
      securitySchemes: {
        bearer: {
          type: "http",
          scheme: "bearer",
          description: "API key from `kairos admin tenant create`",
        },
        runToken: {
          type: "http",
          scheme: "bearer",
          bearerFormat: "JWT",
          description:
            "An attempt's KAIROS_RUN_TOKEN (EdDSA-signed JWT; keys at /.well-known/jwks.json): reads only its own run and its own job, until the attempt's deadline",
        },
      },
      schemas: {
        ...components(
          [
            ["CreateJobRequest", CreateJobSchema],
            ["PatchJobRequest", PatchJobSchema],
          ],
          "input",
        ),
        ...components(
          [
            ["Job", JobViewSchema],
            ["Run", RunViewSchema],
            ["JobPage", JobPageSchema],
            ["RunPage", RunPageSchema],
            ["Error", ErrorSchema],
            ["BatchCreateResult", BatchCreateResultSchema],
          ],
          "output",
        ),
        ...subscriptionSchemas(ref),
        ...statsSchemas(),
      },
    },
  };
  return cached;
}
