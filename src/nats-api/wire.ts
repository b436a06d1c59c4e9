/**
 * Replies of the internal NATS API (shared by the service and the client). Every request gets
 * exactly one JSON reply:
 *
 *   {"ok": true,  "status": 201, "result": {…job…}}
 *   {"ok": false, "status": 404, "error": {"code": "not_found", "message": "job not found"}}
 *   {"ok": false, "status": 429, "error": {…}, "retry_after_s": 1}
 *
 * `status` is the HTTP status the REST API answers for the same outcome (201 created, 200 an
 * Idempotency-Key replay, 202 run now, 204 delete with `result: null`); `error` is exactly the
 * REST error object, mapped by the same function (src/http/errors.ts), so a code means the same on
 * both transports. `retry_after_s` is REST's `Retry-After`.
 */
import type { JobView, RunView } from "../protocol/model.ts";
import type { ErrorBody } from "../http/errors.ts";

export type ApiErrorObject = ErrorBody["error"];

export interface OkReply<T> {
  ok: true;
  status: number;
  result: T;
}

export interface ErrorReply {
  ok: false;
  status: number;
  error: ApiErrorObject;
  retry_after_s?: number;
}

export type ApiReply<T = unknown> = OkReply<T> | ErrorReply;

/** A page of jobs, as REST's `GET /v1/jobs` body. */
export interface JobPage {
  jobs: JobView[];
  next_cursor: string | null;
}

/** A page of runs, as REST's run lists. */
export interface RunPage {
  runs: RunView[];
  next_cursor: string | null;
}

const encoder = new TextEncoder();

export function encodeReply(r: ApiReply): Uint8Array {
  return encoder.encode(JSON.stringify(r));
}
