/**
 * Response schemas (zod) for the OpenAPI document and for tests that check what the API sends.
 * They describe `JobView` / `RunView` from src/protocol/model.ts; the request-side pieces (task,
 * retry, misfire, schedule) are the very schemas that validate requests.
 */
import { z } from "zod";
import { BACKOFFS, MISFIRES, OVERLAPS, RUN_STATUSES } from "../protocol/model.ts";
import { ScheduleSchema, TaskViewSchema } from "../app/schemas.ts";

const instant = z
  .string()
  .meta({ format: "date-time", description: "RFC 3339 UTC", examples: ["2030-01-01T09:00:00Z"] });

/** A job as the API returns it. */
export const JobViewSchema = z.looseObject({
  job_id: z.string(),
  tenant_id: z.string(),
  version: z.int().min(1),
  name: z.string().nullable(),
  schedule: ScheduleSchema,
  task: TaskViewSchema,
  retry: z.object({
    max_attempts: z.int(),
    backoff: z.enum(BACKOFFS),
    base_s: z.int(),
    max_s: z.int(),
  }),
  overlap: z.enum(OVERLAPS),
  misfire: z.object({ policy: z.enum(MISFIRES), starting_deadline_s: z.int().nullable() }),
  flex_window_s: z.int(),
  enabled: z.boolean(),
  created_at: instant,
  updated_at: instant,
  next_run_at: instant.nullable(),
  next_runs: z
    .array(instant)
    .optional()
    .meta({ description: "only in single-job responses: the next 5 run times" }),
});

const attempt = z.object({
  attempt: z.int().min(1),
  worker: z.string().nullable(),
  started_at: instant.nullable(),
  finished_at: instant.nullable(),
  exit_code: z.int().nullable(),
  outcome: z
    .enum(["succeeded", "failed", "timed_out", "oom", "lease_lost", "cancelled", "error"])
    .nullable(),
  error: z.string().nullable(),
  image_digest: z.string().optional().meta({
    description:
      "the registry digest (sha256:…) of the image the attempt ran in; absent when the image was built or imported on the worker host, or the attempt ended before its image was known",
  }),
});

/** A run as the API returns it. */
export const RunViewSchema = z.looseObject({
  run_id: z.string(),
  job_id: z.string(),
  tenant_id: z.string(),
  scheduled_for: instant,
  trigger: z.enum(["schedule", "manual", "catch_up"]),
  status: z.enum(RUN_STATUSES).meta({
    description:
      "queued, leased, running, retry_wait (active); succeeded, failed, timed_out, cancelled, skipped (overlap), missed (misfire, or not started within its starting deadline), throttled (beyond its job's or tenant's bound on runs waiting for a slot)",
  }),
  attempt: z.int().min(0),
  attempts: z.array(attempt),
  created_at: instant,
  started_at: instant.nullable(),
  finished_at: instant.nullable(),
  next_attempt_at: instant.nullable().meta({ description: "set while status is retry_wait" }),
  result: z
    .object({
      exit_code: z.int().nullable(),
      output: z.string().meta({ description: "tail of stdout/stderr, bounded" }),
    })
    .nullable(),
  reason: z.string().nullable().meta({
    description:
      "why a run is skipped, missed, throttled, cancelled or dead-lettered; on a leased run, that a pause or schedule change is stopping it on its worker",
  }),
});

/** A page of jobs. */
export const JobPageSchema = z.object({
  jobs: z.array(JobViewSchema),
  next_cursor: z.string().nullable(),
});
/** A page of runs. */
export const RunPageSchema = z.object({
  runs: z.array(RunViewSchema),
  next_cursor: z.string().nullable(),
});

/** The error body of every non-2xx response. */
export const ErrorSchema = z.object({
  error: z.object({
    code: z.string().meta({ description: "stable error code, e.g. invalid_argument, not_found" }),
    message: z.string(),
    field: z
      .string()
      .optional()
      .meta({ description: "the offending input, e.g. task.timeout_s or If-Match" }),
  }),
});

/** The answer of a batch create: counts, and each item's result in the items' order. */
export const BatchCreateResultSchema = z.object({
  created: z.number().int().meta({ description: "items answered 201" }),
  replayed: z
    .number()
    .int()
    .meta({ description: "items answered 200 (an idempotency key's replay)" }),
  failed: z.number().int().meta({ description: "items answered 4xx or 5xx" }),
  results: z.array(
    z.object({
      index: z.number().int().meta({ description: "the item's place in `jobs`" }),
      status: z
        .number()
        .int()
        .meta({ description: "what `POST /v1/jobs` would have answered for this item" }),
      job: JobViewSchema.optional(),
      error: ErrorSchema.shape.error.optional(),
    }),
  ),
});
