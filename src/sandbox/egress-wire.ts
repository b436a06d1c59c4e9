/**
 * The egress proxy's few words of HTTP on raw sockets (egress-proxy.ts): a CONNECT is answered
 * before any tunnel exists, on the socket itself; a forwarded request drops the hop-by-hop and
 * proxy headers.
 */
import type { IncomingHttpHeaders } from "node:http";
import type { Duplex } from "node:stream";

export const CRLF = "\r\n";

/** A bare response on a raw socket (CONNECT answers before any tunnel exists). */
export function rawResponse(socket: Duplex, status: number, reason: string, extra = ""): void {
  const text = `${reason}\n`;
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? "Error"}${CRLF}${extra}content-type: text/plain${CRLF}content-length: ${Buffer.byteLength(text)}${CRLF}connection: close${CRLF}${CRLF}${text}`,
  );
}

export const STATUS_TEXT: Record<number, string> = {
  400: "Bad Request",
  403: "Forbidden",
  407: "Proxy Authentication Required",
  429: "Too Many Requests",
  502: "Bad Gateway",
  504: "Gateway Timeout",
};

export const AUTH_CHALLENGE = `proxy-authenticate: Basic realm="kairos-egress"${CRLF}`;

/** Hop-by-hop and proxy headers a forwarded request must not carry on. */
export const HOP_HEADERS = new Set([
  "connection",
  "keep-alive",
  "proxy-authorization",
  "proxy-authenticate",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
]);

/** The end-to-end headers of a message: hop-by-hop and proxy headers dropped. */
export function endToEndHeaders(h: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined && !HOP_HEADERS.has(k)) out[k] = v;
  return out;
}
