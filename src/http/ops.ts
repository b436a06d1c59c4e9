/**
 * Operations endpoints: `/healthz` (liveness: the process serves HTTP), `/readyz` (readiness:
 * 200 `{"ready": true, "checks": {…}}` or 503 with the failing checks, src/health/readiness.ts)
 * and `/metrics` (Prometheus text, src/metrics).
 *
 * `/metrics` is served only by the node's own metrics listener (`--metrics-port`, bound to
 * 127.0.0.1 unless `--metrics-host` says otherwise, `createOpsApp`), never on the public API port:
 * the API port answers it 404 like any unknown route. With a metrics token
 * (`--metrics-token-file`) the listener's `/metrics` answers only `Authorization: Bearer <token>`
 * (401 otherwise, the same answer for a missing and a wrong token; compared in constant time).
 * `/healthz` and `/readyz` need no token: orchestrators probe them, and they carry no tenant data.
 * API nodes also answer `/readyz` on the API port (load balancers probe it there).
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { Hono, type Env } from "hono";
import type { Readiness } from "../health/readiness.ts";
import { KairosError } from "../lib/errors.ts";
import type { ApiEnv } from "./auth.ts";

export interface OpsDeps {
  readiness(): Promise<Readiness>;
  metrics(): Promise<{ body: string; contentType: string }>;
}

/** Options of the metrics listener. */
export interface OpsAppOptions {
  /** `/metrics` requires `Authorization: Bearer <metricsToken>` (see `parseMetricsToken`). */
  metricsToken?: string;
}

/** Shortest and longest accepted metrics token (characters). */
export const METRICS_TOKEN_CHARS = { min: 16, max: 512 } as const;

/**
 * A metrics token as read from its file: surrounding whitespace trimmed, then 16-512 printable
 * ASCII characters without spaces (what a `Bearer` header can carry). `invalid_argument` otherwise.
 */
export function parseMetricsToken(text: string, field = "metrics-token-file"): string {
  const token = text.trim();
  if (
    token.length < METRICS_TOKEN_CHARS.min ||
    token.length > METRICS_TOKEN_CHARS.max ||
    !/^[\x21-\x7e]+$/.test(token)
  ) {
    throw new KairosError(
      "invalid_argument",
      `${field}: the token must be ${METRICS_TOKEN_CHARS.min}-${METRICS_TOKEN_CHARS.max} printable characters without spaces (e.g. \`openssl rand -hex 32\`)`,
      { field },
    );
  }
  return token;
}

const digest = (s: string): Buffer => createHash("sha256").update(s).digest();

/** Whether an Authorization header carries `token` (constant time in the header's content). */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const m =
    header !== undefined && header.length <= 1024 ? /^Bearer +(\S+) *$/i.exec(header) : null;
  return timingSafeEqual(digest(m?.[1] ?? ""), digest(token)) && m !== null;
}

/** Adds `/readyz` to an app (the API app has its own `/healthz`; it never gets `/metrics`). */
export function registerReadiness<E extends Env>(
  app: Hono<E>,
  deps: Pick<OpsDeps, "readiness">,
): void {
  app.get("/readyz", async (c) => {
    const r = await deps.readiness();
    return c.json(r, r.ready ? 200 : 503);
  });
}

/** The app of a `--metrics-port` listener: `/healthz`, `/readyz`, `/metrics`, JSON 404 otherwise. */
export function createOpsApp(deps: OpsDeps, opts: OpsAppOptions = {}): Hono<ApiEnv> {
  const app = new Hono<ApiEnv>();
  const token =
    opts.metricsToken === undefined
      ? undefined
      : parseMetricsToken(opts.metricsToken, "metricsToken");
  app.get("/healthz", (c) => c.json({ ok: true }));
  registerReadiness(app, deps);
  app.get("/metrics", async (c) => {
    if (token !== undefined && !bearerMatches(c.req.header("authorization"), token)) {
      c.header("WWW-Authenticate", 'Bearer realm="kairos-metrics"');
      return c.json(
        {
          error: {
            code: "unauthenticated",
            message: "/metrics needs Authorization: Bearer <metrics token>",
          },
        },
        401,
      );
    }
    const m = await deps.metrics();
    return c.body(m.body, 200, { "content-type": m.contentType });
  });
  app.notFound((c) =>
    c.json(
      {
        error: {
          code: "not_found",
          message: `no route ${c.req.method} ${c.req.path.slice(0, 200)}`,
        },
      },
      404,
    ),
  );
  app.onError((_e, c) => c.json({ error: { code: "internal", message: "internal error" } }, 500));
  return app;
}
