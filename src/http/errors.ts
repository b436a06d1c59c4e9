/**
 * The one place where errors become HTTP responses. Every failure leaves the API as
 * `{"error": {"code", "message", "field"?}}`; the status comes from the error's catalogue code,
 * never from where it was thrown. Unknown errors are a 500 with a generic message (the real one
 * is logged, never sent: it may name internals). Retryable capacity errors carry Retry-After.
 */
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { HTTPException } from "hono/http-exception";
import { type ErrorCode, KairosError, isKairosError } from "../lib/errors.ts";

/** The error body every non-2xx response carries. */
export interface ErrorBody {
  error: { code: string; message: string; field?: string };
}

/** What the API answers for an error: status, body and extra headers. */
export interface HttpError {
  status: ContentfulStatusCode;
  body: ErrorBody;
  headers: Record<string, string>;
}

/** Catalogue code → HTTP status. Codes not listed here are 500. */
const STATUS: Partial<Record<ErrorCode, ContentfulStatusCode>> = {
  invalid_argument: 400,
  invalid_schedule: 400,
  unauthenticated: 401,
  permission_denied: 403,
  not_found: 404,
  conflict: 409,
  precondition_failed: 412,
  payload_too_large: 413,
  quota_exceeded: 422,
  policy_denied: 422,
  overloaded: 429,
  rate_limited: 429,
  no_owner: 503,
  not_owner: 503,
  unavailable: 503,
  timeout: 503,
};

/** Seconds a client should wait before retrying a 429 or 503. */
export const RETRY_AFTER_S = 1;

/** The HTTP status of a catalogue code (500 when the code has no client meaning). */
export function statusOf(code: ErrorCode): ContentfulStatusCode {
  return STATUS[code] ?? 500;
}

/**
 * Maps any thrown value to the response. `log` receives the errors that become a 500, so that
 * their details reach the operator and not the client.
 */
export function toHttpError(e: unknown, log: (err: unknown) => void): HttpError {
  const k = asKairosError(e);
  const status = k === undefined ? 500 : statusOf(k.code);
  if (k === undefined || status === 500) {
    log(e);
    return {
      status: 500,
      body: { error: { code: "internal", message: "internal error" } },
      headers: {},
    };
  }
  const retryAfterS =
    k.retryAfterMs === undefined ? RETRY_AFTER_S : Math.max(1, Math.ceil(k.retryAfterMs / 1000));
  const headers: Record<string, string> =
    status === 429 || status === 503 ? { "Retry-After": String(retryAfterS) } : {};
  if (status === 401) headers["WWW-Authenticate"] = 'Bearer realm="kairos"';
  return { status, body: { error: k.toJSON() }, headers };
}

/** Kairos errors as they are; Hono's own HTTP exceptions (bad request parsing) translated. */
function asKairosError(e: unknown): KairosError | undefined {
  if (isKairosError(e)) return e;
  if (e instanceof HTTPException) {
    if (e.status === 413)
      return new KairosError("payload_too_large", "request body too large", { field: "body" });
    if (e.status >= 400 && e.status < 500)
      return new KairosError("invalid_argument", e.message || "bad request");
  }
  return undefined;
}

export { invalid, show } from "../app/input.ts";
