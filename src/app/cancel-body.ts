/**
 * The body of a cancel (REST `POST /v1/runs/{run_id}/cancel`, NATS `runs.cancel.<run_id>`):
 * optional; when given, a JSON object with at most `reason`, a short text shown in the cancelled
 * run's `reason` after who asked. Unknown fields are refused, as everywhere in the API.
 */
import { MAX_CANCEL_NOTE_CHARS } from "../runs/run-cancel.ts";
import { invalid, show } from "./input.ts";

export { MAX_CANCEL_NOTE_CHARS };

/** `undefined` (no body) or `{"reason"?: string}` (1-200 characters, no control characters). */
export function parseCancelBody(body: unknown): { reason?: string } {
  if (body === undefined) return {};
  if (body === null || typeof body !== "object" || Array.isArray(body))
    throw invalid("body", `must be a JSON object, got ${show(body)}`);
  for (const k of Object.keys(body)) {
    if (k !== "reason") throw invalid(k.slice(0, 100), "unknown field");
  }
  const reason: unknown = (body as { reason?: unknown }).reason;
  if (reason === undefined) return {};
  if (typeof reason !== "string") throw invalid("reason", `must be a string, got ${show(reason)}`);
  if (reason.length === 0 || reason.length > MAX_CANCEL_NOTE_CHARS)
    throw invalid(
      "reason",
      `must be 1 to ${MAX_CANCEL_NOTE_CHARS} characters, got ${reason.length}`,
    );
  if ([...reason].some((ch) => ch.charCodeAt(0) < 0x20 || ch.charCodeAt(0) === 0x7f))
    throw invalid("reason", "must not contain control characters (line breaks included)");
  return { reason };
}
