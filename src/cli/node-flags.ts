/**
 * The flags of `kairos node` (shared with `kairos dev`) read into validated config: the node's
 * cluster settings, retention, task limits, drain timeout, rate limits, and the files and policy
 * read once at start (secret key, metrics token, image policy). Every bad value is an
 * `invalid_argument` naming its flag.
 */
import { mailConfig, type MailConfig } from "../notify/mail.ts";
import { KairosError, isKairosError } from "../lib/errors.ts";
import { makeNodeConfig, ROLES, type NodeConfig, type Role } from "../cluster/config.ts";
import type { RateLimitOptions } from "../http/rate-limit.ts";
import { retentionConfig, type RetentionConfig } from "../history/retention.ts";
import {
  parseImagePolicy,
  PULL_POLICIES,
  taskLimits,
  type EgressOptions,
  type ImagePolicy,
  type PullPolicy,
  type TaskLimits,
} from "../sandbox/index.ts";
import { natsUserFor, pinnedWorkerUser } from "../cluster/nats-permissions.ts";
import { resolveNatsAuth, type NatsAuthFlags } from "./dev-file.ts";
import { hostname } from "node:os";
import { readFileSync } from "node:fs";
import { parseSecretKey } from "../secrets/secret-env.ts";
import { parseMetricsToken } from "../http/ops.ts";

export interface NodeFlags extends NatsAuthFlags {
  nats?: string;
  roles?: string;
  nodeId?: string;
  cluster?: string;
  partitions?: string;
  replicas?: string;
  leaseTtlMs?: string;
  leaseRenewer?: string;
  maxWorkerSlots?: string;
  maxWorkerPrefetch?: string;
}

export function int(v: string | undefined, field: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n))
    throw new KairosError("invalid_argument", `--${field}: "${v}" is not an integer`, { field });
  return n;
}

export function nodeConfigFromFlags(f: NodeFlags, natsUrl: string): NodeConfig {
  const roles = (f.roles ?? ROLES.join(","))
    .split(",")
    .map((r) => r.trim())
    .filter(Boolean) as Role[];
  const partitions = int(f.partitions, "partitions");
  const replicas = int(f.replicas, "replicas");
  const leaseTtlMs = int(f.leaseTtlMs, "lease-ttl-ms");
  const maxWorkerSlots = int(f.maxWorkerSlots, "max-worker-slots");
  const maxWorkerPrefetch = int(f.maxWorkerPrefetch, "max-worker-prefetch");
  const nodeId =
    f.nodeId ??
    `${hostname()
      .replace(/[^A-Za-z0-9_-]/g, "-")
      .slice(0, 40)}-${process.pid}`;
  // A worker-only node's own identity first (`worker-<id>`), then the role set's.
  const users =
    roles.length === 1 && roles[0] === "worker"
      ? [pinnedWorkerUser(nodeId), natsUserFor(roles)]
      : [natsUserFor(roles)];
  return makeNodeConfig({
    natsUrl,
    // Flags, env, or the dev cluster's credentials file for this node (`worker-<id>`, `api_scheduler`, …).
    natsAuth: resolveNatsAuth(f, natsUrl, users),
    nodeId,
    roles,
    ...(f.cluster ? { clusterName: f.cluster } : {}),
    ...(partitions !== undefined ? { partitions } : {}),
    ...(replicas !== undefined ? { replicas } : {}),
    ...(leaseTtlMs !== undefined
      ? {
          leaseTtlMs,
          leaseRenewIntervalMs: Math.floor(leaseTtlMs / 4),
          leaseSafetyMarginMs: Math.floor(leaseTtlMs / 4),
        }
      : {}),
    ...(f.leaseRenewer !== undefined
      ? { leaseRenewer: f.leaseRenewer as NodeConfig["leaseRenewer"] }
      : {}),
    ...(maxWorkerSlots !== undefined ? { maxWorkerSlots } : {}),
    ...(maxWorkerPrefetch !== undefined ? { maxWorkerPrefetch } : {}),
  });
}

/** A TCP port flag: an integer 0-65535 (0: any free port). */
/** `--prefetch`: a whole number ≥ 0. */
export function prefetchFlag(v: string): number {
  const n = int(v, "prefetch")!;
  if (n < 0)
    throw new KairosError("invalid_argument", `--prefetch: "${v}" must be 0 or more`, {
      field: "prefetch",
    });
  return n;
}

export function portFlag(v: string | undefined, field: string): number | undefined {
  if (v === undefined) return undefined;
  const n = /^\d{1,5}$/.test(v) ? Number(v) : NaN;
  if (!(n >= 0 && n <= 65535))
    throw new KairosError("invalid_argument", `--${field}: "${v}" is not a port (0-65535)`, {
      field,
    });
  return n;
}

/** Process options shared by `kairos node` and `kairos dev`. */
export interface ProcessFlags {
  executor?: string;
  slots?: string;
  prefetch?: string;
  apiHost?: string;
  apiPort?: string;
  runLeaseTtlMs?: string;
  lookaheadMs?: string;
  metricsHost?: string;
  metricsPort?: string;
  metricsTokenFile?: string;
  metricsTenantLabels?: boolean;
  imagePolicy?: string;
  pull?: string;
  taskMaxMemoryMb?: string;
  taskMaxCpus?: string;
  taskMaxPids?: string;
  webhookAllowHttp?: boolean;
  webhookAllowPrivate?: boolean;
  smtpUrl?: string;
  smtpFrom?: string;
  mailLimit?: string;
  mailWindowS?: string;
  rateLimit?: string;
  rateLimitBurst?: string;
  authFailureLimit?: string;
  drainTimeoutMs?: string;
  cpuNice?: string;
  noopDurationMs?: string;
  secretKeyFile?: string;
  runTokenKeys?: string;
  keepRuns?: string;
  keepRunsDays?: string;
  /** `--no-nats-api` makes this false (commander's negated option). */
  natsApi?: boolean;
  taskNetwork?: string;
  egressProxyPort?: string;
  egressAllowInternal?: string;
  egressMaxConnectionsPerRun?: string;
  egressMaxBytesPerRun?: string;
}

/**
 * `--task-network` and the `--egress-*` flags: the worker's egress settings (src/sandbox/options.ts
 * validates the rest), or undefined without a task network (tasks asking for egress then fail).
 */
export function egressFromFlags(f: ProcessFlags): EgressOptions | undefined {
  const egressFlags = [
    f.egressProxyPort,
    f.egressAllowInternal,
    f.egressMaxConnectionsPerRun,
    f.egressMaxBytesPerRun,
  ];
  if (f.taskNetwork === undefined || f.taskNetwork === "") {
    if (egressFlags.some((v) => v !== undefined))
      throw new KairosError("invalid_argument", "--egress-* flags need --task-network", {
        field: "task-network",
      });
    return undefined;
  }
  const positive = (v: string | undefined, field: string): number | undefined => {
    const n = int(v, field);
    if (n !== undefined && n < 1)
      throw new KairosError("invalid_argument", `--${field}: must be at least 1`, { field });
    return n;
  };
  const port = portFlag(f.egressProxyPort, "egress-proxy-port");
  const perRun = positive(f.egressMaxConnectionsPerRun, "egress-max-connections-per-run");
  const bytes = positive(f.egressMaxBytesPerRun, "egress-max-bytes-per-run");
  return {
    network: f.taskNetwork,
    ...(port !== undefined ? { proxyPort: port } : {}),
    ...(f.egressAllowInternal !== undefined
      ? {
          allowInternal: f.egressAllowInternal
            .split(",")
            .map((s) => s.trim())
            .filter(Boolean),
        }
      : {}),
    ...(perRun !== undefined ? { maxConnectionsPerRun: perRun } : {}),
    ...(bytes !== undefined ? { maxBytesPerRun: bytes } : {}),
  };
}

/** `--keep-runs N` (0: no count limit) and `--keep-runs-days D` (0: no age limit), validated. */
export function retentionFromFlags(f: ProcessFlags): Partial<RetentionConfig> {
  const keepRuns = int(f.keepRuns, "keep-runs");
  const days = int(f.keepRunsDays, "keep-runs-days");
  const out = {
    ...(keepRuns !== undefined ? { keepRuns } : {}),
    ...(days !== undefined ? { maxAgeMs: days * 86_400_000 } : {}),
  };
  try {
    retentionConfig(out);
  } catch (e) {
    const field =
      keepRuns !== undefined && !(keepRuns >= 0 && keepRuns <= 1_000_000)
        ? "keep-runs"
        : "keep-runs-days";
    throw new KairosError(
      "invalid_argument",
      `--${field}: ${e instanceof Error ? e.message : String(e)}`,
      { field, cause: e },
    );
  }
  return out;
}

/**
 * `--task-max-memory-mb`, `--task-max-cpus`, `--task-max-pids`: the cluster's per-task maxima
 * (unset: the defaults of src/sandbox/task-rules.ts), validated.
 */
export function taskLimitsFromFlags(f: ProcessFlags): TaskLimits {
  const num = (v: string | undefined, field: string): number | undefined => {
    if (v === undefined) return undefined;
    const n = /^\d{1,6}(\.\d{1,3})?$/.test(v) ? Number(v) : NaN;
    if (!Number.isFinite(n))
      throw new KairosError("invalid_argument", `--${field}: "${v}" is not a number`, { field });
    return n;
  };
  const memory = num(f.taskMaxMemoryMb, "task-max-memory-mb");
  const cpus = num(f.taskMaxCpus, "task-max-cpus");
  const pids = num(f.taskMaxPids, "task-max-pids");
  try {
    return taskLimits({
      ...(memory !== undefined ? { maxMemoryMb: memory } : {}),
      ...(cpus !== undefined ? { maxCpus: cpus } : {}),
      ...(pids !== undefined ? { maxPids: pids } : {}),
    });
  } catch (e) {
    if (isKairosError(e))
      throw new KairosError("invalid_argument", `--${e.message}`, {
        field: e.field ?? "task-max",
        cause: e,
      });
    throw e;
  }
}

/** Longest drain a worker may be given (1 h): an orchestrator waits that long at most. */
export const MAX_DRAIN_TIMEOUT_MS = 3_600_000;

/** `--drain-timeout-ms`: an integer 0-3600000 (0: hand running attempts back at once). */
export function drainTimeoutFlag(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = /^\d{1,7}$/.test(v) ? Number(v) : NaN;
  if (!(n >= 0 && n <= MAX_DRAIN_TIMEOUT_MS)) {
    throw new KairosError(
      "invalid_argument",
      `--drain-timeout-ms: "${v}" is not a whole number of milliseconds 0-${MAX_DRAIN_TIMEOUT_MS}`,
      { field: "drain-timeout-ms" },
    );
  }
  return n;
}

/**
 * The nice value an API-only node adds to its own by default. On a host it shares with schedulers
 * and workers, its reads (dashboards, lists) then take the CPU the dispatch leaves: a dashboard
 * reading at a burst's due second moved the 20,000-run burst's lag p99 by +43% at nice 0 and not
 * measurably at 10 (`npm run bench -- burst --jobs 20000 --dashboard poll`); its requests wait
 * those tens of milliseconds instead. A node with the scheduler or worker role keeps its priority.
 */
export const API_NODE_NICE = 10;

/**
 * `--cpu-nice`: how much to raise this process's nice value at start (0-19; unset: API_NODE_NICE
 * for a node whose only role is api, else 0).
 */
export function cpuNiceFlag(v: string | undefined, roles: readonly Role[]): number {
  if (v === undefined) return roles.length === 1 && roles[0] === "api" ? API_NODE_NICE : 0;
  const n = /^\d{1,2}$/.test(v) ? Number(v) : NaN;
  if (!(n >= 0 && n <= 19))
    throw new KairosError("invalid_argument", `--cpu-nice: "${v}" is not a whole number 0-19`, {
      field: "cpu-nice",
    });
  return n;
}

/** A non-negative decimal flag (`--rate-limit 2.5`); undefined when not given. */
function rateFlag(v: string | undefined, field: string): number | undefined {
  if (v === undefined) return undefined;
  const n = /^\d{1,6}(\.\d{1,3})?$/.test(v) ? Number(v) : NaN;
  if (!Number.isFinite(n))
    throw new KairosError("invalid_argument", `--${field}: "${v}" is not a number >= 0`, { field });
  return n;
}

/** `--rate-limit`, `--rate-limit-burst`, `--auth-failure-limit` → the API's limits (unset: defaults). */
export function rateLimitsFromFlags(f: ProcessFlags): Partial<RateLimitOptions> {
  const perSecond = rateFlag(f.rateLimit, "rate-limit");
  const burst = int(f.rateLimitBurst, "rate-limit-burst");
  const failures = rateFlag(f.authFailureLimit, "auth-failure-limit");
  if (burst !== undefined && burst < 1)
    throw new KairosError("invalid_argument", `--rate-limit-burst: must be at least 1`, {
      field: "rate-limit-burst",
    });
  return {
    ...(perSecond !== undefined
      ? { tenantPerSecond: perSecond, tenantBurst: burst ?? Math.max(1, Math.ceil(perSecond * 2)) }
      : {}),
    ...(burst !== undefined ? { tenantBurst: burst } : {}),
    ...(failures !== undefined
      ? { authFailuresPerSecond: failures, authFailuresBurst: Math.max(1, Math.ceil(failures * 5)) }
      : {}),
  };
}

/** The text of the file a `--<flag>` names; an unreadable one is `invalid_argument` naming the flag. */
function readFlagFile(path: string, flag: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (e) {
    throw new KairosError(
      "invalid_argument",
      `--${flag}: cannot read ${path}: ${(e as Error).message}`,
      { field: flag },
    );
  }
}

/**
 * The cluster secret key for `task.secret_env` from `--secret-key-file` (or KAIROS_SECRET_KEY_FILE):
 * a file holding 32 random bytes, base64 or hex (`openssl rand -base64 32 > key`). Read once, here.
 */
export function secretKeyFromFlag(path: string | undefined): { secretKey?: Buffer } {
  if (path === undefined || path === "") return {};
  const text = readFlagFile(path, "secret-key-file");
  try {
    return { secretKey: parseSecretKey(text) };
  } catch (e) {
    throw new KairosError(
      "invalid_argument",
      `--secret-key-file ${path}: ${(e as Error).message}`,
      { field: "secret-key-file" },
    );
  }
}

/**
 * The metrics listener's token from `--metrics-token-file` (or KAIROS_METRICS_TOKEN_FILE): a file
 * holding 16-512 printable characters (`openssl rand -hex 32 > token`). Read once, here.
 */
export function metricsTokenFromFlag(path: string | undefined): { metricsToken?: string } {
  if (path === undefined || path === "") return {};
  const text = readFlagFile(path, "metrics-token-file");
  return { metricsToken: parseMetricsToken(text, "metrics-token-file") };
}

/** The operator's image policy from `--image-policy a,b,c` (undefined: any image, with a warning). */
/** `--pull`: never, if_missing or always (default if_missing: docs/sandbox.md). */
export function pullFlag(v: string | undefined): PullPolicy {
  if (v === undefined) return "if_missing";
  if (!(PULL_POLICIES as readonly string[]).includes(v))
    throw new KairosError(
      "invalid_argument",
      `--pull: "${v.slice(0, 40)}" is not one of ${PULL_POLICIES.join(", ")}`,
      { field: "pull" },
    );
  return v as PullPolicy;
}

export function imagePolicyFromFlag(flag: string | undefined): ImagePolicy | undefined {
  if (flag === undefined) return undefined;
  return parseImagePolicy(
    flag
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean),
    "--image-policy",
  );
}

/**
 * `--smtp-url` (or KAIROS_SMTP_URL), `--smtp-from` (or KAIROS_SMTP_FROM), `--mail-limit`,
 * `--mail-window-s`: the mail options, checked in full by `mailConfig` (src/notify/mail.ts) before
 * the node starts. The mail flags without an SMTP server are an error, not silently ignored.
 * `kairos dev` has no mail flags: it reads the two environment variables only.
 */
export function mailFromFlags(
  f: ProcessFlags,
  env: { url?: string | undefined; from?: string | undefined },
): { mail?: Partial<MailConfig> & { smtpUrl: string } } {
  const smtpUrl = f.smtpUrl ?? (env.url === "" ? undefined : env.url);
  const from = f.smtpFrom ?? (env.from === "" ? undefined : env.from);
  const limit = int(f.mailLimit, "mail-limit");
  const windowS = int(f.mailWindowS, "mail-window-s");
  if (smtpUrl === undefined) {
    const stray = [
      f.smtpFrom !== undefined ? "--smtp-from" : undefined,
      limit !== undefined ? "--mail-limit" : undefined,
      windowS !== undefined ? "--mail-window-s" : undefined,
    ].filter((x) => x !== undefined);
    if (stray.length > 0)
      throw new KairosError("invalid_argument", `${stray.join(", ")}: needs --smtp-url`, {
        field: "smtp-url",
      });
    return {};
  }
  return {
    mail: mailConfig({
      smtpUrl,
      ...(from !== undefined ? { from } : {}),
      ...(limit !== undefined ? { maxPerWindow: limit } : {}),
      ...(windowS !== undefined ? { windowMs: windowS * 1000 } : {}),
    }),
  };
}
