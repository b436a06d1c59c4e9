/**
 * What both API clients share (http-api-client.ts, nats-api-client.ts): the error an answer
 * carries and the paging of list calls. One class, so a caller handles a failed request the same
 * way whichever transport it took.
 */
import { ErrorCodes, KairosError, type ErrorCode } from "../lib/errors.ts";

/** A failed request: the API's error code, message and field, and the HTTP (or HTTP-equivalent) status. */
export class ApiError extends KairosError {
  readonly status: number;
  constructor(
    code: ErrorCode,
    message: string,
    status: number,
    opts: { field?: string; retryAfterMs?: number } = {},
  ) {
    super(code, message, opts);
    this.status = status;
  }
}

/** Paging of list calls (limit 1-200, default 50; the cursor from the previous page). */
export interface PageOptions {
  limit?: number;
  cursor?: string;
}

/** A jobs list's options: paging, a part of the name (any case), a state. */
export interface JobListOptions extends PageOptions {
  name?: string;
  state?: "enabled" | "paused";
}

/** Is `s` one of the API's error codes? (An unknown one is shown as `internal`.) */
export function isErrorCode(s: unknown): s is ErrorCode {
  return typeof s === "string" && Object.prototype.hasOwnProperty.call(ErrorCodes, s);
}
