/**
 * Parsing of everything a request carries besides its body: path ids, query parameters and the
 * Idempotency-Key / If-Match headers. Each parser throws one `invalid_argument` naming the
 * parameter or header, except path ids: a malformed id is `not_found`, exactly like an id that
 * does not exist, so the API never tells a caller which ids are well-formed.
 */
import { KairosError } from "../lib/errors.ts";
import { JOB_STATES, RUN_STATUSES, type JobListState, type RunStatus } from "../protocol/model.ts";
import { invalid, show } from "./input.ts";

const ID = /^[A-Za-z0-9_-]{1,64}$/;

/** Paging limits for list routes. */
export const PAGE = { defaultLimit: 50, maxLimit: 200, maxCursorChars: 1024 } as const;
/** Longest accepted Idempotency-Key. */
export const MAX_IDEMPOTENCY_KEY_CHARS = 255;

/** A path id (`job_id`, `run_id`); malformed ids are reported as not found. */
export function pathId(raw: string | undefined, what: "job" | "run" | "subscription"): string {
  if (raw === undefined || !ID.test(raw)) throw new KairosError("not_found", `${what} not found`);
  return raw;
}

/** `limit`: an integer 1..200, default 50. */
export function parseLimit(raw: string | undefined): number {
  if (raw === undefined) return PAGE.defaultLimit;
  if (!/^\d{1,6}$/.test(raw))
    throw invalid("limit", `must be an integer from 1 to ${PAGE.maxLimit}, got ${show(raw)}`);
  const n = Number(raw);
  if (n < 1 || n > PAGE.maxLimit)
    throw invalid("limit", `must be an integer from 1 to ${PAGE.maxLimit}, got ${n}`);
  return n;
}

/** `cursor`: opaque (the service checks its content); empty means the first page. */
export function parseCursor(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === "") return undefined;
  if (raw.length > PAGE.maxCursorChars)
    throw invalid("cursor", `must be at most ${PAGE.maxCursorChars} characters`);
  return raw;
}

/** `status`: one of the run statuses. */
export function parseRunStatus(raw: string | undefined): RunStatus | undefined {
  if (raw === undefined || raw === "") return undefined;
  const s = RUN_STATUSES.find((x) => x === raw);
  if (s === undefined)
    throw invalid("status", `must be one of ${RUN_STATUSES.join(", ")}, got ${show(raw)}`);
  return s;
}

/**
 * `status` of the tenant-wide runs list: any run status (a run not ended is matched as its owner
 * holds it live), or `dead_lettered`, which the route answers with the dead-letter list.
 */
export function parseTenantRunStatus(raw: string | undefined): RunStatus | undefined {
  if (raw === undefined || raw === "") return undefined;
  const s = RUN_STATUSES.find((x) => x === raw);
  if (s === undefined)
    throw invalid(
      "status",
      `must be one of ${RUN_STATUSES.join(", ")} or dead_lettered, got ${show(raw)}`,
    );
  return s;
}

/** Longest `name` filter of a jobs list (a job's name is at most 200 characters). */
export const MAX_NAME_FILTER_CHARS = 200;

/**
 * `name` (jobs list): a part of the job's name, matched in any case; empty means no filter. At
 * most 200 characters, no control characters.
 */
export function parseJobName(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === "") return undefined;
  if (raw.length > MAX_NAME_FILTER_CHARS)
    throw invalid("name", `must be at most ${MAX_NAME_FILTER_CHARS} characters, got ${raw.length}`);

  if (/[\u0000-\u001f\u007f]/.test(raw))
    throw invalid("name", `must not contain control characters, got ${show(raw)}`);
  return raw;
}

/** `state` (jobs list): `enabled` or `paused`; empty means either. */
export function parseJobState(raw: string | undefined): JobListState | undefined {
  if (raw === undefined || raw === "") return undefined;
  const s = JOB_STATES.find((x) => x === raw);
  if (s === undefined)
    throw invalid("state", `must be one of ${JOB_STATES.join(", ")}, got ${show(raw)}`);
  return s;
}

/** `Idempotency-Key`: 1..255 visible ASCII characters. */
export function parseIdempotencyKey(raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined;
  if (raw.length === 0 || raw.length > MAX_IDEMPOTENCY_KEY_CHARS || !/^[\x21-\x7e]+$/.test(raw)) {
    throw invalid(
      "Idempotency-Key",
      `must be 1 to ${MAX_IDEMPOTENCY_KEY_CHARS} visible ASCII characters`,
    );
  }
  return raw;
}

/**
 * `If-Match`: the ETag as returned (`"3"`), weak (`W/"3"`) or the bare version (`3`); `*` means
 * "any version" (no check). One value only: a list cannot name one expected version.
 */
export function parseIfMatch(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const t = raw.trim();
  if (t === "*") return undefined;
  const m = /^(?:W\/)?"(\d{1,15})"$|^(\d{1,15})$/.exec(t);
  const digits = m?.[1] ?? m?.[2];
  if (digits === undefined)
    throw invalid(
      "If-Match",
      `must be a job version as returned in ETag, e.g. "3", got ${show(raw)}`,
    );
  return Number(digits);
}

/** The ETag of a job version. */
export function etagOf(version: number): string {
  return `"${version}"`;
}
