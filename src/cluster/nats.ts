/**
 * NATS connection handling: reconnect forever with jitter, name the connection after the node,
 * and drain on shutdown so in-flight replies are delivered before the socket closes.
 *
 * Authentication: a credentials file (`NatsCredentials`, JSON, mode 0600) names the NATS user,
 * its password and its inbox prefix (replies go to `_INBOX_<user>.>`, the only inbox its
 * permissions allow: see nats-permissions.ts). TLS: a CA to verify the server, and a client
 * certificate and key when the server asks for one.
 */
import { readFileSync } from "node:fs";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { KairosError } from "../lib/errors.ts";
import { useBufferEncoder } from "./nats-encoding.ts";
import type { NatsAuthOptions, NatsCredentials, NatsTlsOptions } from "./nats-auth.ts";
import { inboxPrefixFor } from "./nats-permissions.ts";

export type { NatsAuthOptions, NatsCredentials, NatsTlsOptions };

export interface ConnectOptions extends NatsAuthOptions {
  /** One URL or a comma-separated list (every server of the cluster). */
  url: string;
  name: string;
  /** How long the first connection may take before failing start-up. */
  connectTimeoutMs?: number;
}

const USER_RE = /^[A-Za-z0-9_-]{1,64}$/;
/** An account nkey seed: `SA` and 56 more base32 characters. */
const ACCOUNT_SEED_RE = /^SA[A-Z2-7]{56}$/;
/** A curve (xkey) seed: `SX` and 56 more base32 characters. */
const CURVE_SEED_RE = /^SX[A-Z2-7]{56}$/;

/** Reads and validates a credentials file. */
export function readNatsCredentials(path: string): NatsCredentials {
  let c: Partial<NatsCredentials>;
  try {
    c = JSON.parse(readFileSync(path, "utf8")) as Partial<NatsCredentials>;
  } catch (e) {
    throw new KairosError("invalid_argument", `NATS credentials ${path}: ${(e as Error).message}`, {
      field: "nats-creds",
      cause: e,
    });
  }
  if (
    typeof c.user !== "string" ||
    !USER_RE.test(c.user) ||
    typeof c.password !== "string" ||
    c.password.length === 0
  ) {
    throw new KairosError(
      "invalid_argument",
      `NATS credentials ${path}: expected {"user": "<1-64 of [A-Za-z0-9_-]>", "password": "<non-empty>"}`,
      { field: "nats-creds" },
    );
  }
  const seed = c.callout_issuer_seed;
  if (seed !== undefined && (typeof seed !== "string" || !ACCOUNT_SEED_RE.test(seed))) {
    throw new KairosError(
      "invalid_argument",
      `NATS credentials ${path}: callout_issuer_seed must be an account nkey seed (SA…, 58 characters)`,
      { field: "nats-creds" },
    );
  }
  const xseed = c.callout_xkey_seed;
  if (xseed !== undefined && (typeof xseed !== "string" || !CURVE_SEED_RE.test(xseed))) {
    throw new KairosError(
      "invalid_argument",
      `NATS credentials ${path}: callout_xkey_seed must be a curve nkey seed (SX…, 58 characters)`,
      { field: "nats-creds" },
    );
  }
  return {
    user: c.user,
    password: c.password,
    inbox_prefix: typeof c.inbox_prefix === "string" ? c.inbox_prefix : inboxPrefixFor(c.user),
    ...(seed !== undefined ? { callout_issuer_seed: seed } : {}),
    ...(xseed !== undefined ? { callout_xkey_seed: xseed } : {}),
  };
}

export async function connectNats(opts: ConnectOptions): Promise<NatsConnection> {
  useBufferEncoder(); // see nats-encoding.ts: TextEncoder was 8–10 % of a burst's CPU
  const creds = opts.credsFile !== undefined ? readNatsCredentials(opts.credsFile) : undefined;
  const tls = opts.tls;
  try {
    return await connect({
      servers: opts.url
        .split(",")
        .map((s) => s.trim())
        .filter(Boolean),
      name: opts.name,
      timeout: opts.connectTimeoutMs ?? 5000,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 250,
      reconnectJitter: 250,
      pingInterval: 5000,
      maxPingOut: 3,
      // Without this, every request builds an Error up front for a possible async stack trace:
      // about a fifth of a scheduler's CPU in a burst.
      noAsyncTraces: true,
      ...(creds
        ? { user: creds.user, pass: creds.password, inboxPrefix: creds.inbox_prefix! }
        : {}),
      ...(tls
        ? {
            tls: {
              ...(tls.caFile ? { caFile: tls.caFile } : {}),
              ...(tls.certFile ? { certFile: tls.certFile } : {}),
              ...(tls.keyFile ? { keyFile: tls.keyFile } : {}),
            },
          }
        : {}),
    });
  } catch (e) {
    const who = creds ? ` as "${creds.user}"` : " without credentials";
    throw new KairosError(
      "unavailable",
      `cannot connect to NATS at ${opts.url}${who}: ${(e as Error).message}`,
      { cause: e },
    );
  }
}
