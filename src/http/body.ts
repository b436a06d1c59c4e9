/**
 * JSON request bodies: size-limited (413 before the body is read when Content-Length says so,
 * while streaming otherwise), `Content-Type: application/json` required (400, field
 * `Content-Type` — a form-encoded `curl -d` is the usual mistake and the message says how to fix
 * it), and malformed JSON reported as 400 field `body` with the parser's reason.
 */
import type { Context, MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { KairosError } from "../lib/errors.ts";
import { invalid, show } from "./errors.ts";

/** Default maximum request body: 64 KiB. */
export const DEFAULT_MAX_BODY_BYTES = 64 * 1024;

/** Rejects bodies over `maxBytes` with `payload_too_large` (413). */
export function limitBody(maxBytes: number): MiddlewareHandler {
  return bodyLimit({
    maxSize: maxBytes,
    onError: () => {
      throw new KairosError(
        "payload_too_large",
        `body: larger than the limit of ${maxBytes} bytes`,
        { field: "body" },
      );
    },
  });
}

/** Reads and parses a JSON body; the result still needs schema validation. */
export async function readJson(c: Context): Promise<unknown> {
  const type = c.req.header("content-type");
  if (type === undefined || !/^application\/json\s*(;|$)/i.test(type)) {
    throw invalid(
      "Content-Type",
      `must be application/json, got ${show(type)} (curl: -H 'Content-Type: application/json')`,
    );
  }
  return parseJsonText(await c.req.text());
}

/**
 * Parses a JSON request body (any transport): empty is `body: required`, malformed JSON is
 * `body: malformed JSON (…)`, both `invalid_argument`.
 */
export function parseJsonText(text: string): unknown {
  if (text.trim() === "") throw invalid("body", "required: a JSON object");
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw invalid("body", `malformed JSON (${e instanceof Error ? e.message : String(e)})`);
  }
}
