/**
 * `.kairos/dev.json`: where `kairos dev` records how to reach the dev cluster, so that other
 * `kairos` commands work without flags.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { KairosError } from "../lib/errors.ts";
import type { NatsAuthOptions } from "../cluster/nats.ts";

export interface DevFile {
  /** Never holds a secret: the credentials are in the files `nats_creds` points to. */
  nats_url: string;
  /** NATS user → its credentials file (`admin`, `api`, `scheduler`, `api_scheduler_worker`, …, `worker-<id>` per worker id). */
  nats_creds?: Record<string, string>;
  api_url?: string;
  api_key?: string;
  tenant_id?: string;
  /** Prometheus metrics of the dev node (its own loopback listener, not the API port). */
  metrics_url?: string;
  cluster?: string;
  pid?: number;
}

/** `.kairos`, or `KAIROS_STATE_DIR` (`env`: the environment to read, default the process's). */
export function stateDir(env: NodeJS.ProcessEnv = process.env): string {
  return env["KAIROS_STATE_DIR"] ?? ".kairos";
}

export function devFilePath(env: NodeJS.ProcessEnv = process.env): string {
  return join(stateDir(env), "dev.json");
}

export function readDevFile(env: NodeJS.ProcessEnv = process.env): DevFile | undefined {
  try {
    return JSON.parse(readFileSync(devFilePath(env), "utf8")) as DevFile;
  } catch {
    return undefined;
  }
}

export function writeDevFile(d: DevFile): void {
  mkdirSync(dirname(devFilePath()), { recursive: true });
  writeFileSync(devFilePath(), JSON.stringify(d, null, 2) + "\n");
}

/** The NATS URL from a flag, the environment, or the dev file, in that order. */
export function resolveNatsUrl(flag: string | undefined): string | undefined {
  return flag ?? process.env["KAIROS_NATS_URL"] ?? readDevFile()?.nats_url;
}

/** `--nats-creds` and `--nats-tls-*`, shared by every command that connects to NATS. */
export interface NatsAuthFlags {
  natsCreds?: string;
  natsTlsCa?: string;
  natsTlsCert?: string;
  natsTlsKey?: string;
}

/** Adds the NATS credentials and TLS options to a command. */
export function natsAuthOptions<C extends { option(flags: string, description: string): C }>(
  cmd: C,
): C {
  return cmd
    .option(
      "--nats-creds <file>",
      "NATS credentials file {user, password} (env KAIROS_NATS_CREDS; default: the dev cluster's, for this command's identity)",
    )
    .option(
      "--nats-tls-ca <file>",
      "CA (PEM) the NATS server's certificate must chain to; turns TLS on (env KAIROS_NATS_TLS_CA)",
    )
    .option(
      "--nats-tls-cert <file>",
      "client certificate (PEM) for a NATS server that verifies clients (env KAIROS_NATS_TLS_CERT)",
    )
    .option(
      "--nats-tls-key <file>",
      "the client certificate's key (PEM) (env KAIROS_NATS_TLS_KEY)",
    );
}

const WORKER_ID_RE = /^[A-Za-z0-9_-]{1,64}$/;
/** Most worker ids in one `--workers` list (each is a NATS user in the server's config). */
export const MAX_WORKER_IDS = 1000;

/** `--workers a,b,c` → the ids, validated (node ids: 1-64 of [A-Za-z0-9_-]). */
export function parseWorkerIds(v: string): string[] {
  const ids = v
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  if (ids.length > MAX_WORKER_IDS)
    throw new KairosError("invalid_argument", `--workers: at most ${MAX_WORKER_IDS} ids`, {
      field: "workers",
    });
  const bad = ids.find((w) => !WORKER_ID_RE.test(w));
  if (bad !== undefined)
    throw new KairosError(
      "invalid_argument",
      `--workers: "${bad.slice(0, 80)}" must be 1-64 of [A-Za-z0-9_-]`,
      { field: "workers" },
    );
  return [...new Set(ids)];
}

/**
 * The NATS credentials and TLS of a command: flags, else the environment, else — when `url` is
 * the dev cluster's — the dev file's credentials file of the first of `users` it has (the
 * node's pinned worker user, then its role set; or admin).
 */
export function resolveNatsAuth(
  f: NatsAuthFlags,
  url: string,
  users: string | readonly string[],
): NatsAuthOptions {
  const env = process.env;
  const dev = readDevFile();
  const devCreds = dev?.nats_url === url ? dev.nats_creds : undefined;
  const devUser = (typeof users === "string" ? [users] : users).find(
    (u) => devCreds?.[u] !== undefined,
  );
  const creds =
    f.natsCreds ??
    env["KAIROS_NATS_CREDS"] ??
    (devUser !== undefined ? devCreds?.[devUser] : undefined);
  const ca = f.natsTlsCa ?? env["KAIROS_NATS_TLS_CA"];
  const cert = f.natsTlsCert ?? env["KAIROS_NATS_TLS_CERT"];
  const key = f.natsTlsKey ?? env["KAIROS_NATS_TLS_KEY"];
  for (const [flag, v] of [
    ["nats-creds", creds],
    ["nats-tls-ca", ca],
    ["nats-tls-cert", cert],
    ["nats-tls-key", key],
  ] as const) {
    if (v !== undefined && v.trim() === "")
      throw new KairosError("invalid_argument", `--${flag}: a file path is required`, {
        field: flag,
      });
  }
  const tls = {
    ...(ca ? { caFile: ca } : {}),
    ...(cert ? { certFile: cert } : {}),
    ...(key ? { keyFile: key } : {}),
  };
  return { ...(creds ? { credsFile: creds } : {}), ...(Object.keys(tls).length ? { tls } : {}) };
}
