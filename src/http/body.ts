/**
 * JSON request bodies: size-limited (413 before the body is read when Content-Length says so,
 * while streaming otherwise), `Content-Type: application/json` required (400, field
 * `Content-Type` — a form-encoded `curl -d` is the usual mistake and the message says how to fix
 * it), and malformed JSON reported as 400 field `body` with the parser's reason.
 */
import type { Context, MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import type { ReadableStreamReadResult } from "node:stream/web";
import type { Clock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import { invalid, show } from "./errors.ts";

/** Default maximum request body: 64 KiB. */
export const DEFAULT_MAX_BODY_BYTES = 64 * 1024;

/**
 * Rejects bodies over `maxBytes` with `payload_too_large` (413): on the declared Content-Length
 * before anything is read, or while streaming a body without one (chunked).
 *
 * Pitfall: on the Node server, touching `c.req.raw.body` (as hono's `bodyLimit` does first)
 * turns the request into a web `Request` whose body is then read through web streams — a tenth
 * of a create's CPU. Requests without a body, and bodies with a Content-Length, never touch it:
 * the handler's `c.req.text()` then reads the socket directly.
 */
export function limitBody(maxBytes: number): MiddlewareHandler {
  const tooLarge = (): never => {
    throw new KairosError("payload_too_large", `body: larger than the limit of ${maxBytes} bytes`, {
      field: "body",
    });
  };
  const streamed = bodyLimit({ maxSize: maxBytes, onError: tooLarge });
  return async (c, next) => {
    const method = c.req.method;
    // A GET or HEAD has no body as far as the handlers go (a web Request drops it).
    if (method === "GET" || method === "HEAD") return next();
    const length = c.req.header("content-length");
    if (length !== undefined && c.req.header("transfer-encoding") === undefined) {
      if (parseInt(length, 10) > maxBytes) tooLarge();
      return next();
    }
    return streamed(c, next);
  };
}

/** An unread body of at most this size is read to its end before an error is answered. */
export const DRAIN_MAX_BYTES = 16 * 1024 * 1024;
/** …and for at most this long. */
export const DRAIN_MAX_MS = 5_000;

/**
 * Before an error is answered while the request's body is still arriving (413 on
 * Content-Length, 401, 429, a wrong Content-Type, an unknown route…): reads and discards that
 * body when it declares at most DRAIN_MAX_BYTES and arrives within DRAIN_MAX_MS, so the
 * connection is kept and the client, still writing, reads the answer. Otherwise the answer says
 * `Connection: close`. Answering at once and closing broke a client still sending a large body
 * with EPIPE before it read the status; keeping the connection without reading made Node drop
 * it later under a keep-alive client, whose next request then failed with no status at all.
 */
export async function settleUnreadBody(c: Context, clock: Clock): Promise<void> {
  const incoming = (c.env as { incoming?: { complete?: boolean } } | undefined)?.incoming;
  // A getter: TypeScript would keep `complete` narrowed to false across the reads below.
  const complete = (): boolean => incoming?.complete !== false;
  if (complete()) return;
  const declared = Number(c.req.header("content-length") ?? Number.NaN);
  const body = c.req.raw.body;
  if (body !== null && !body.locked && declared <= DRAIN_MAX_BYTES) {
    const reader = body.getReader();
    const cancelTimer = clock.setTimer(
      DRAIN_MAX_MS,
      () => void reader.cancel().catch(() => undefined),
    );
    try {
      for (let read = 0; read <= DRAIN_MAX_BYTES;) {
        const chunk = (await reader.read()) as ReadableStreamReadResult<Uint8Array>;
        if (chunk.done) break;
        read += chunk.value.byteLength;
      }
    } catch {
      // The client went or the wait ran out: closing below is all that is left.
    } finally {
      cancelTimer();
    }
  }
  if (!complete()) c.header("Connection", "close");
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
