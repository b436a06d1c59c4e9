/**
 * A batch create (`POST /v1/jobs:batch`): up to MAX_BATCH_JOBS jobs in one request, each with its
 * own optional idempotency key and its own result, checked as `POST /v1/jobs` checks one
 * (validation, image policy, task maxima) and then created together by the jobs service's
 * `createJobs` (quota, catalog and actor writes grouped; each item's outcome its own), or, by a
 * service without it, BATCH_CONCURRENCY at a time through the single-job create.
 * The envelope is checked whole (400 for the request); an item's error is that item's result.
 *
 * Pitfalls: results keep the items' order whatever order the creates end in; two items with the
 * same idempotency key are refused (the second would race the first's "in flight" marker);
 * an item's error names its place (`jobs[3].job.schedule.cron`).
 */
import type { JobSpec, JobView } from "../protocol/model.ts";
import type { CreateOutcome } from "../protocol/service.ts";
import { KairosError, isKairosError } from "../lib/errors.ts";
import { invalid, show } from "./input.ts";
import { parseIdempotencyKey } from "./params.ts";

/** Most jobs in one batch. */
export const MAX_BATCH_JOBS = 1000;
/** Creates of one batch in flight at once. */
export const BATCH_CONCURRENCY = 64;
/** The largest batch body (the other routes keep DEFAULT_MAX_BODY_BYTES). */
export const MAX_BATCH_BODY_BYTES = 4 * 1024 * 1024;

/** One item as read from the body: its key and raw job, or why it cannot be created. */
type BatchItem =
  | { readonly idempotencyKey: string | undefined; readonly job: unknown }
  | { readonly error: KairosError };

/** What became of one item. */
export type BatchOutcome =
  | { readonly index: number; readonly ok: true; readonly created: boolean; readonly job: JobView }
  | { readonly index: number; readonly ok: false; readonly error: unknown };

/** Creates one job (the single-job create with its own key). */
export type CreateOne = (
  idempotencyKey: string | undefined,
  job: unknown,
) => Promise<{ job: JobView; created: boolean }>;

/** Reads the envelope `{"jobs": [{"job": {…}, "idempotency_key"?: "…"}, …]}`. */
export function parseBatchBody(body: unknown): BatchItem[] {
  if (typeof body !== "object" || body === null || Array.isArray(body))
    throw invalid("body", `must be an object {"jobs": [...]}, got ${show(body)}`);
  const extra = Object.keys(body).filter((k) => k !== "jobs");
  if (extra.length > 0) throw invalid(extra[0]!, "unknown field (the body has only `jobs`)");
  const jobs = (body as { jobs?: unknown }).jobs;
  if (!Array.isArray(jobs)) throw invalid("jobs", `must be an array, got ${show(jobs)}`);
  if (jobs.length < 1 || jobs.length > MAX_BATCH_JOBS)
    throw invalid("jobs", `must hold 1 to ${MAX_BATCH_JOBS} items, got ${jobs.length}`);
  const keys = new Map<string, number>();
  return jobs.map((raw: unknown, i): BatchItem => {
    const at = `jobs[${i}]`;
    if (typeof raw !== "object" || raw === null || Array.isArray(raw))
      return { error: invalid(at, `must be an object {"job": {...}}, got ${show(raw)}`) };
    const unknown = Object.keys(raw).find((k) => k !== "job" && k !== "idempotency_key");
    if (unknown !== undefined)
      return {
        error: invalid(
          `${at}.${unknown}`,
          "unknown field (an item has `job` and `idempotency_key`)",
        ),
      };
    const item = raw as { job?: unknown; idempotency_key?: unknown };
    if (item.job === undefined) return { error: invalid(`${at}.job`, "is required") };
    const rawKey = item.idempotency_key;
    if (rawKey !== undefined && typeof rawKey !== "string")
      return { error: invalid(`${at}.idempotency_key`, `must be a string, got ${show(rawKey)}`) };
    let key: string | undefined;
    try {
      key = parseIdempotencyKey(rawKey);
    } catch (e) {
      return { error: placed(e, i) as KairosError };
    }
    if (key !== undefined) {
      const first = keys.get(key);
      if (first !== undefined)
        return {
          error: invalid(`${at}.idempotency_key`, `the same key as jobs[${first}] of this batch`),
        };
      keys.set(key, i);
    }
    return { idempotencyKey: key, job: item.job };
  });
}

/** An item's error with its place in the batch (field and message); other errors as they are. */
function placed(e: unknown, i: number): unknown {
  if (!isKairosError(e)) return e;
  const field =
    e.field === undefined
      ? undefined
      : e.field === "Idempotency-Key"
        ? `jobs[${i}].idempotency_key`
        : e.field.startsWith(`jobs[${i}]`)
          ? e.field
          : `jobs[${i}].job.${e.field}`;
  return new KairosError(e.code, `jobs[${i}]: ${e.message}`, {
    ...(field !== undefined ? { field } : {}),
    retryable: e.retryable,
    ...(e.retryAfterMs !== undefined ? { retryAfterMs: e.retryAfterMs } : {}),
  });
}

/** Creates every item (BATCH_CONCURRENCY at once); outcomes in the items' order. */
export async function createBatch(
  items: BatchItem[],
  createOne: CreateOne,
): Promise<BatchOutcome[]> {
  const out: BatchOutcome[] = new Array<BatchOutcome>(items.length);
  let next = 0;
  const lane = async (): Promise<void> => {
    for (let i = next++; i < items.length; i = next++) {
      const item = items[i]!;
      if ("error" in item) {
        out[i] = { index: i, ok: false, error: item.error };
        continue;
      }
      try {
        const r = await createOne(item.idempotencyKey, item.job);
        out[i] = { index: i, ok: true, created: r.created, job: r.job };
      } catch (e) {
        out[i] = { index: i, ok: false, error: placed(e, i) };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(BATCH_CONCURRENCY, items.length) }, lane));
  return out;
}

/** A job as the single create checks it (schema, image policy, task maxima); throws why not. */
export type CheckJob = (job: unknown) => JobSpec;

/** Creates checked jobs together: one outcome per item, in order (`JobsService.createJobs`). */
export type CreateMany = (
  items: { spec: JobSpec; idempotencyKey?: string }[],
) => Promise<CreateOutcome[]>;

/** Checks every item, then creates the valid ones together; outcomes in the items' order. */
export async function createGrouped(
  items: BatchItem[],
  check: CheckJob,
  createMany: CreateMany,
): Promise<BatchOutcome[]> {
  const out: BatchOutcome[] = new Array<BatchOutcome>(items.length);
  const valid: { spec: JobSpec; idempotencyKey?: string }[] = [];
  const at: number[] = [];
  items.forEach((item, i) => {
    if ("error" in item) {
      out[i] = { index: i, ok: false, error: item.error };
      return;
    }
    try {
      const spec = check(item.job);
      valid.push(
        item.idempotencyKey === undefined
          ? { spec }
          : { spec, idempotencyKey: item.idempotencyKey },
      );
      at.push(i);
    } catch (e) {
      out[i] = { index: i, ok: false, error: placed(e, i) };
    }
  });
  const results = valid.length > 0 ? await createMany(valid) : [];
  if (results.length !== valid.length)
    throw new KairosError("internal", "a batch create answered the wrong number of items");
  results.forEach((r, k) => {
    const i = at[k]!;
    out[i] = r.ok
      ? { index: i, ok: true, created: r.created, job: r.job }
      : { index: i, ok: false, error: placed(r.error, i) };
  });
  return out;
}
