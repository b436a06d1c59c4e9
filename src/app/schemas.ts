/**
 * Request body schemas (zod v4) for creating and patching jobs. These same schemas validate
 * requests and generate the OpenAPI document (openapi.ts), so the two cannot drift.
 *
 * Validation produces a `JobSpec` with every default applied, or throws ONE
 * `KairosError("invalid_argument")` whose `field` names the offending input in API terms
 * (`task.timeout_s`, `schedule.cron`, `task.env.FOO`, `body`) and whose message says why and
 * what was received. Unknown fields are reported before anything else: a misspelt field name
 * usually explains the other errors ("Task: unknown field" beats "task: required").
 *
 * Gotchas: zod cannot express "cron compiles" or "at is in the future", so schedules are
 * compiled after the shape check (the engine's own errors already name `schedule.*`); and
 * `retry.max_s` defaults to max(3600, base_s) so that a long base alone is not an error.
 */
import { z } from "zod";
import {
  BACKOFFS,
  MISFIRES,
  OVERLAPS,
  type JobPatch,
  type JobSpec,
  type RetryPolicy,
  type MisfireSpec,
  type ScheduleInput,
  type TaskInput,
} from "../protocol/model.ts";
import { TASK_NETWORKS } from "../protocol/worker.ts";
import { KairosError, isKairosError } from "../lib/errors.ts";
import { assertFuture, compileSchedule } from "../schedule/index.ts";
import { invalid, show } from "./input.ts";
import {
  ENV_NAME,
  RESERVED_ENV_PREFIX,
  TASK_RESOURCE_BOUNDS,
  isReservedEnvName,
} from "../sandbox/task-rules.ts";

/** Limits on a job's fields; documented in docs/api.md. */
export const LIMITS = {
  nameChars: 200,
  imageChars: 512,
  args: 256,
  argChars: 4096,
  envEntries: 64,
  envValueChars: 4096,
  cronChars: 1000,
  timeZoneChars: 64,
  atChars: 64,
  timeoutS: 86_400,
  retryAttempts: 20,
  flexWindowS: 3600,
} as const;

/**
 * An environment name the worker accepts: ENV_NAME, not starting with KAIROS_ in any case —
 * spelt out per letter (`[Kk][Aa]…`), not with a flag, so the OpenAPI pattern says the same.
 */
const ENV_KEY = new RegExp(
  `^(?!${[...RESERVED_ENV_PREFIX].map((c) => (/[a-z]/i.test(c) ? `[${c.toUpperCase()}${c.toLowerCase()}]` : c)).join("")})${ENV_NAME.source.slice(1)}`,
);
/** A string without NUL bytes (what an exec or the engine can carry); also a pattern in the OpenAPI. */
const NO_NUL = /^[^\0]*$/;
const noNul = (max: number) =>
  z.string().max(max).regex(NO_NUL, { error: "must not contain NUL bytes" });
const DEFAULT_MAX_S = 3600;

/** An integer field in [min, max] whose errors say so. */
function intIn(min: number, max: number) {
  return z
    .int({
      error: (iss) =>
        iss.input === undefined ? "required" : `must be an integer, got ${show(iss.input)}`,
    })
    .min(min, { error: (iss) => `must be an integer >= ${min}, got ${show(iss.input)}` })
    .max(max, { error: (iss) => `must be an integer <= ${max}, got ${show(iss.input)}` });
}

/** A number field in [min, max] whose errors say so. */
function numberIn(min: number, max: number) {
  return z
    .number({
      error: (iss) =>
        iss.input === undefined ? "required" : `must be a number, got ${show(iss.input)}`,
    })
    .min(min, { error: (iss) => `must be a number >= ${min}, got ${show(iss.input)}` })
    .max(max, { error: (iss) => `must be a number <= ${max}, got ${show(iss.input)}` });
}

const cronSchedule = z
  .strictObject({
    cron: z
      .string()
      .min(1)
      .max(LIMITS.cronChars)
      .meta({
        description: "5 fields, 6 with leading seconds, or a macro (@daily)",
        examples: ["0 9 * * MON-FRI"],
      }),
    time_zone: z
      .string()
      .min(1)
      .max(LIMITS.timeZoneChars)
      .default("UTC")
      .meta({ description: "IANA time zone", examples: ["Europe/Berlin"] }),
  })
  .meta({ title: "CronSchedule" });

const atSchedule = z
  .strictObject({
    at: z
      .string()
      .min(1)
      .max(LIMITS.atChars)
      .meta({
        description: "RFC 3339 instant with offset or Z; must be in the future",
        examples: ["2030-01-01T09:00:00Z"],
      }),
  })
  .meta({ title: "AtSchedule" });

/** `{cron, time_zone}` or `{at}`, exactly one shape. */
export const ScheduleSchema = z.union([cronSchedule, atSchedule]);

const envSchema = z
  .record(z.string().regex(ENV_KEY), noNul(LIMITS.envValueChars))
  .refine((r) => Object.keys(r).length <= LIMITS.envEntries, {
    error: `must have at most ${LIMITS.envEntries} entries`,
  })
  .meta({
    maxProperties: LIMITS.envEntries,
    description:
      "Environment variables: names ^[A-Za-z_][A-Za-z0-9_]*$, not starting with KAIROS_ in any case (reserved); values without NUL bytes",
  });

const B = TASK_RESOURCE_BOUNDS;
/** Above the cluster's per-task maxima (default 2048 MiB, 2 CPUs, 512 pids) is 422 policy_denied (operations.ts). */
const resourcesSchema = z.strictObject({
  memory_mb: intIn(B.memoryMb.min, B.memoryMb.max).optional().meta({
    description:
      "at most the cluster's maximum per task (default 2048; 422 policy_denied above it)",
  }),
  cpus: numberIn(B.cpus.min, B.cpus.max).optional().meta({
    description: "at most the cluster's maximum per task (default 2; 422 policy_denied above it)",
  }),
  pids: intIn(B.pids.min, B.pids.max).optional().meta({
    description: "at most the cluster's maximum per task (default 512; 422 policy_denied above it)",
  }),
});

const TaskFields = {
  image: z
    .string()
    .min(1)
    .max(LIMITS.imageChars)
    .meta({
      description:
        "An image reference, [host[:port]/]path[:tag][@sha256:<64 hex>] (not an image ID): 400 otherwise. It must be allowed by the tenant's image policy (422 policy_denied); a registry on a loopback, private or link-local address is allowed only when the policy names it",
      examples: [
        "busybox:latest",
        "registry.example.com/acme/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
      ],
    }),
  args: z
    .array(noNul(LIMITS.argChars))
    .min(1)
    .max(LIMITS.args)
    .meta({
      description: "args[0] is the program; no NUL bytes",
      examples: [["sh", "-c", "echo hello"]],
    }),
  env: envSchema.default({}),
  timeout_s: intIn(1, LIMITS.timeoutS),
  resources: resourcesSchema.optional(),
  network: z.enum(TASK_NETWORKS).default("none").meta({
    description:
      "none: no network at all. egress: the task reaches the destinations of its tenant's egress policy through the worker's egress proxy (HTTP_PROXY/HTTPS_PROXY are set for it), and nothing else; 422 policy_denied when the tenant has no egress policy",
  }),
};

/** The task: what runs, for how long. */
export const TaskSchema = z
  .strictObject({
    ...TaskFields,
    secret_env: envSchema.optional().meta({
      description:
        "Write-only environment variables for secrets: encrypted at rest, never returned (responses show secret_env_names), deleted with the job. A PATCH of task replaces them too: send them again, or the job has none",
    }),
  })
  .superRefine((t, ctx) => {
    for (const name of Object.keys(t.secret_env ?? {})) {
      if (name in t.env)
        ctx.addIssue({
          code: "custom",
          path: ["secret_env", name],
          input: name,
          message: "is also in task.env: a name is either plain or secret",
        });
    }
  });

/** The task as responses show it: secret names, never secret values. */
export const TaskViewSchema = z.strictObject({
  ...TaskFields,
  network: z
    .enum(TASK_NETWORKS)
    .optional()
    .meta({ description: "egress when the task asked for it; absent: none (no network)" }),
  secret_env_names: z
    .array(z.string())
    .optional()
    .meta({ description: "names of the task's secret_env (values are never returned)" }),
});

/** Retries; `max_s` defaults to max(3600, base_s). */
export const RetrySchema = z
  .strictObject({
    max_attempts: intIn(1, LIMITS.retryAttempts).default(1),
    backoff: z.enum(BACKOFFS).default("exponential"),
    base_s: intIn(1, 86_400).default(10),
    max_s: intIn(1, 86_400)
      .optional()
      .meta({ description: "cap on one wait, >= base_s; default max(3600, base_s)" }),
  })
  .superRefine((r, ctx) => {
    if (r.max_s !== undefined && r.max_s < r.base_s) {
      ctx.addIssue({
        code: "custom",
        path: ["max_s"],
        input: r.max_s,
        message: `must be >= base_s (${r.base_s}), got ${r.max_s}`,
      });
    }
  });

/** Misfire policy. */
export const MisfireSchema = z.strictObject({
  policy: z.enum(MISFIRES).default("run_once"),
  starting_deadline_s: intIn(1, 86_400).nullable().optional().meta({
    description:
      "a run not started within this many seconds of its due time is recorded missed (fired late, or waiting for a slot or a worker); null: for a cron job the gap to its next occurrence, 10-300 s",
  }),
});

const nameSchema = z.string().min(1).max(LIMITS.nameChars).nullable();
const overlapSchema = z.enum(OVERLAPS);
const flexSchema = intIn(0, LIMITS.flexWindowS);

/** POST /v1/jobs body. */
export const CreateJobSchema = z.strictObject({
  name: nameSchema.optional(),
  schedule: ScheduleSchema,
  task: TaskSchema,
  retry: RetrySchema.prefault({}),
  overlap: overlapSchema.default("skip"),
  misfire: MisfireSchema.prefault({}),
  flex_window_s: flexSchema.default(0),
  enabled: z.boolean().default(true),
});

/** PATCH /v1/jobs/{job_id} body: each top-level field given replaces the job's whole field. */
export const PatchJobSchema = z.strictObject({
  name: nameSchema.optional(),
  schedule: ScheduleSchema.optional(),
  task: TaskSchema.optional(),
  retry: RetrySchema.optional(),
  overlap: overlapSchema.optional(),
  misfire: MisfireSchema.optional(),
  flex_window_s: flexSchema.optional(),
  enabled: z.boolean().optional(),
});

/** Validates a create body (already JSON-parsed) into a `JobSpec`; throws `invalid_argument`. */
export function parseCreateBody(body: unknown, nowMs: number): JobSpec {
  const r = CreateJobSchema.safeParse(body, PARSE_PARAMS);
  if (!r.success) throw issueError(r.error.issues);
  const v = r.data;
  const schedule = checkSchedule(v.schedule, nowMs);
  return {
    name: v.name ?? null,
    schedule,
    task: toTask(v.task),
    retry: toRetry(v.retry),
    overlap: v.overlap,
    misfire: toMisfire(v.misfire),
    flex_window_s: v.flex_window_s,
    enabled: v.enabled,
  };
}

/** Validates a PATCH body into a `JobPatch` (only the fields sent); throws `invalid_argument`. */
export function parsePatchBody(body: unknown, nowMs: number): JobPatch {
  const r = PatchJobSchema.safeParse(body, PARSE_PARAMS);
  if (!r.success) throw issueError(r.error.issues);
  const v = r.data;
  const patch: JobPatch = {};
  if (v.name !== undefined) patch.name = v.name;
  if (v.schedule !== undefined) patch.schedule = checkSchedule(v.schedule, nowMs);
  if (v.task !== undefined) patch.task = toTask(v.task);
  if (v.retry !== undefined) patch.retry = toRetry(v.retry);
  if (v.overlap !== undefined) patch.overlap = v.overlap;
  if (v.misfire !== undefined) patch.misfire = toMisfire(v.misfire);
  if (v.flex_window_s !== undefined) patch.flex_window_s = v.flex_window_s;
  if (v.enabled !== undefined) patch.enabled = v.enabled;
  if (Object.keys(patch).length === 0)
    throw invalid("body", "nothing to change: give at least one field");
  return patch;
}

type ParsedTask = z.output<typeof TaskSchema>;
type ParsedRetry = z.output<typeof RetrySchema>;
type ParsedMisfire = z.output<typeof MisfireSchema>;
type ParsedSchedule = z.output<typeof ScheduleSchema>;

/** Compiles the schedule (the engine names `schedule.cron` / `.time_zone` / `.at`). */
function checkSchedule(s: ParsedSchedule, nowMs: number): ScheduleInput {
  const spec: ScheduleInput = "at" in s ? { at: s.at } : { cron: s.cron, time_zone: s.time_zone };
  try {
    compileSchedule(spec);
    assertFuture(spec, nowMs);
  } catch (e) {
    if (isKairosError(e) && (e.code === "invalid_schedule" || e.code === "invalid_argument")) {
      const field = e.field ?? "schedule";
      throw new KairosError("invalid_argument", `${field}: ${e.message}`, { field, cause: e });
    }
    throw e;
  }
  return spec;
}

function toTask(t: ParsedTask): TaskInput {
  const task: TaskInput = { image: t.image, args: t.args, env: t.env, timeout_s: t.timeout_s };
  if (t.secret_env !== undefined && Object.keys(t.secret_env).length > 0)
    task.secret_env = t.secret_env;
  if (t.resources !== undefined) {
    const r: NonNullable<TaskInput["resources"]> = {};
    if (t.resources.memory_mb !== undefined) r.memory_mb = t.resources.memory_mb;
    if (t.resources.cpus !== undefined) r.cpus = t.resources.cpus;
    if (t.resources.pids !== undefined) r.pids = t.resources.pids;
    task.resources = r;
  }
  if (t.network === "egress") task.network = "egress";
  return task;
}

function toRetry(r: ParsedRetry): RetryPolicy {
  return {
    max_attempts: r.max_attempts,
    backoff: r.backoff,
    base_s: r.base_s,
    max_s: r.max_s ?? Math.max(DEFAULT_MAX_S, r.base_s),
  };
}

function toMisfire(m: ParsedMisfire): MisfireSpec {
  return { policy: m.policy, starting_deadline_s: m.starting_deadline_s ?? null };
}

// ---- issue → error ---------------------------------------------------------------------------

type Issue = z.core.$ZodIssue;
type RawIssue = z.core.$ZodRawIssue;

/** Per-parse error map: the "why" half of every message (the field is prefixed later). */
function why(iss: RawIssue): string {
  switch (iss.code) {
    case "invalid_type":
      return iss.input === undefined
        ? "required"
        : `must be ${article(iss.expected)}, got ${typeName(iss.input)}`;
    case "too_small":
      if (iss.origin === "string")
        return Number(iss.minimum) <= 1
          ? "must not be empty"
          : `must be at least ${iss.minimum} characters`;
      if (iss.origin === "array")
        return `must have at least ${iss.minimum} element${Number(iss.minimum) === 1 ? "" : "s"}`;
      return `must be >= ${iss.minimum}, got ${show(iss.input)}`;
    case "too_big":
      if (iss.origin === "string")
        return `must be at most ${iss.maximum} characters, got ${lengthOf(iss.input)}`;
      if (iss.origin === "array")
        return `must have at most ${iss.maximum} elements, got ${lengthOf(iss.input)}`;
      return `must be <= ${iss.maximum}, got ${show(iss.input)}`;
    case "invalid_value":
      return `must be one of ${iss.values.map(String).join(", ")}, got ${show(iss.input)}`;
    case "invalid_format":
      return `must match ${iss.pattern ?? iss.format}, got ${show(iss.input)}`;
    default:
      return iss.message ?? "invalid";
  }
}

const PARSE_PARAMS = { reportInput: true, error: why } as const;

function article(t: string): string {
  return /^[aeiou]/.test(t) ? `an ${t}` : `a ${t}`;
}

function typeName(v: unknown): string {
  if (v === undefined) return "nothing";
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "object") return "an object";
  return `${typeof v} ${show(v)}`;
}

function lengthOf(v: unknown): string {
  return typeof v === "string" || Array.isArray(v) ? String(v.length) : "?";
}

/** Renders a zod path in API terms: `task.args[0]`, `task.env.FOO`; the root is `body`. */
export function fieldOf(path: readonly PropertyKey[]): string {
  if (path.length === 0) return "body";
  let out = "";
  for (const p of path) {
    if (typeof p === "number") out += `[${p}]`;
    else out += (out === "" ? "" : ".") + String(p).slice(0, 100);
  }
  return out;
}

/** The error for the most useful issue: unknown fields first, then schema order. */
function issueError(issues: readonly Issue[]): Error {
  const unknown = issues.find((i) => i.code === "unrecognized_keys");
  const first = unknown ?? issues[0];
  if (first === undefined) return invalid("body", "invalid");
  const { field, message } = describe(first, []);
  const more =
    issues.length > 1
      ? ` (and ${issues.length - 1} more problem${issues.length > 2 ? "s" : ""})`
      : "";
  return invalid(field, message + more);
}

function describe(iss: Issue, prefix: readonly PropertyKey[]): { field: string; message: string } {
  const path = [...prefix, ...iss.path];
  switch (iss.code) {
    case "unrecognized_keys":
      return {
        field: fieldOf([...path, iss.keys[0] ?? "?"]),
        message: `unknown field${iss.keys.length > 1 ? ` (also: ${iss.keys.slice(1, 5).join(", ")})` : ""}`,
      };
    case "invalid_key": {
      const key = String(iss.input);
      const message = isReservedEnvName(key)
        ? "the KAIROS_ prefix (in any case) is reserved for the variables Kairos sets"
        : `must be an environment variable name matching ^[A-Za-z_][A-Za-z0-9_]*$`;
      return { field: fieldOf(path), message };
    }
    case "invalid_union":
      return describeSchedule(iss, path);
    default:
      return { field: fieldOf(path), message: iss.message };
  }
}

/** The only union is the schedule: pick the branch the client meant by its keys. */
function describeSchedule(
  iss: Extract<Issue, { code: "invalid_union" }>,
  path: PropertyKey[],
): { field: string; message: string } {
  const input: unknown = iss.input;
  const field = fieldOf(path);
  if (input === undefined) return { field, message: "required" };
  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    return {
      field,
      message: `must be an object {cron, time_zone} or {at}, got ${typeName(input)}`,
    };
  }
  const hasAt = "at" in input;
  if (hasAt && ("cron" in input || "time_zone" in input))
    return { field, message: "give either cron (with time_zone) or at, not both" };
  const branch = iss.errors[hasAt ? 1 : 0] ?? [];
  const inner = branch.find((i) => i.code === "unrecognized_keys") ?? branch[0];
  if (inner === undefined) return { field, message: "invalid schedule" };
  return describe(inner, path);
}
