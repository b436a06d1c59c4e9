/**
 * `kairos node`: run one node with the given roles against an existing NATS (cluster).
 * Also the shared start-up used by `kairos dev`.
 */
import type { Command } from "commander";
import { KairosError, isKairosError } from "../lib/errors.ts";
import { makeNodeConfig, ROLES, type NodeConfig, type Role } from "../cluster/config.ts";
import type { RateLimitOptions } from "../http/rate-limit.ts";
import { retentionConfig, type RetentionConfig } from "../history/retention.ts";
import {
  detectExecutor,
  parseImagePolicy,
  taskLimits,
  type ExecutorKind,
  type ImagePolicy,
  type TaskLimits,
} from "../sandbox/index.ts";
import { startKairos, type KairosProcess } from "../server/start.ts";
import { natsUserFor, pinnedWorkerUser } from "../cluster/nats-permissions.ts";
import {
  natsAuthOptions,
  resolveNatsAuth,
  resolveNatsUrl,
  type NatsAuthFlags,
} from "./dev-file.ts";
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
}

function int(v: string | undefined, field: string): number | undefined {
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
  });
}

/** A TCP port flag: an integer 0-65535 (0: any free port). */
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
  apiHost?: string;
  apiPort?: string;
  runLeaseTtlMs?: string;
  lookaheadMs?: string;
  metricsHost?: string;
  metricsPort?: string;
  metricsTokenFile?: string;
  metricsTenantLabels?: boolean;
  imagePolicy?: string;
  taskMaxMemoryMb?: string;
  taskMaxCpus?: string;
  taskMaxPids?: string;
  webhookAllowHttp?: boolean;
  webhookAllowPrivate?: boolean;
  rateLimit?: string;
  rateLimitBurst?: string;
  authFailureLimit?: string;
  drainTimeoutMs?: string;
  noopDurationMs?: string;
  secretKeyFile?: string;
  keepRuns?: string;
  keepRunsDays?: string;
  /** `--no-nats-api` makes this false (commander's negated option). */
  natsApi?: boolean;
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

/** What `kairos dev` may do that `kairos node` may not. */
export interface StartMode {
  /** Fall back to the unisolated process executor when no Docker engine answers (dev only). */
  processFallback: boolean;
}

/** Printed (stderr and log) whenever tenant code will run without isolation. */
export const UNISOLATED_WARNING =
  "WARNING: the process executor runs tenant code as plain child processes of this worker, WITHOUT ANY ISOLATION (same user, files and network). Never use it with untrusted tenants.";

/**
 * Resolves the executor: an explicit `--executor`, else docker. Only `kairos dev`
 * (`processFallback`) falls back to the unisolated process executor when no engine answers;
 * a `kairos node` worker without an engine fails to start (createExecutor says why).
 */
export async function chooseExecutor(
  flag: string | undefined,
  mode: StartMode = { processFallback: false },
): Promise<{ kind: ExecutorKind; reason: string }> {
  if (flag !== undefined) {
    if (flag !== "process" && flag !== "noop" && flag !== "docker") {
      throw new KairosError(
        "invalid_argument",
        `--executor: "${flag}" is not one of process, noop, docker`,
        { field: "executor" },
      );
    }
    return {
      kind: flag,
      reason:
        flag === "process"
          ? `chosen with --executor process. ${UNISOLATED_WARNING}`
          : "chosen with --executor",
    };
  }
  if (mode.processFallback) {
    const d = await detectExecutor();
    return d.kind === "process"
      ? { kind: d.kind, reason: `${d.reason}. ${UNISOLATED_WARNING}` }
      : d;
  }
  return {
    kind: "docker",
    reason:
      "the default (no automatic fallback outside `kairos dev`; --executor process is the explicit, unisolated choice)",
  };
}

/**
 * The cluster secret key for `task.secret_env` from `--secret-key-file` (or KAIROS_SECRET_KEY_FILE):
 * a file holding 32 random bytes, base64 or hex (`openssl rand -base64 32 > key`). Read once, here.
 */
export function secretKeyFromFlag(path: string | undefined): { secretKey?: Buffer } {
  if (path === undefined || path === "") return {};
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new KairosError(
      "invalid_argument",
      `--secret-key-file: cannot read ${path}: ${(e as Error).message}`,
      { field: "secret-key-file" },
    );
  }
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
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new KairosError(
      "invalid_argument",
      `--metrics-token-file: cannot read ${path}: ${(e as Error).message}`,
      { field: "metrics-token-file" },
    );
  }
  return { metricsToken: parseMetricsToken(text, "metrics-token-file") };
}

/** The operator's image policy from `--image-policy a,b,c` (undefined: any image, with a warning). */
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

export async function startProcess(
  config: NodeConfig,
  f: ProcessFlags,
  defaults: { apiPort: number; drainTimeoutMs?: number },
  mode: StartMode = { processFallback: false },
): Promise<KairosProcess & { executor: { kind: ExecutorKind; reason: string } }> {
  const drainTimeoutMs = drainTimeoutFlag(f.drainTimeoutMs) ?? defaults.drainTimeoutMs;
  const executor = config.roles.includes("worker")
    ? await chooseExecutor(f.executor, mode)
    : { kind: "noop" as const, reason: "no worker role" };
  if (executor.kind === "process") console.error(`kairos: ${UNISOLATED_WARNING}`);
  const imagePolicy = imagePolicyFromFlag(f.imagePolicy);
  if (imagePolicy === undefined && config.roles.includes("api")) {
    console.error(
      "kairos: no --image-policy: tenants without their own image policy may name ANY image present on the workers (docs/security.md)",
    );
  }
  const p = await startKairos(config, {
    ...(imagePolicy !== undefined ? { imagePolicy } : {}),
    taskLimits: taskLimitsFromFlags(f),
    webhook: {
      allowHttp: f.webhookAllowHttp === true,
      allowPrivateAddresses: f.webhookAllowPrivate === true,
    },
    rateLimits: rateLimitsFromFlags(f),
    executor: executor.kind,
    workerSlots: int(f.slots, "slots") ?? 4,
    ...(f.metricsPort !== undefined
      ? { metricsPort: portFlag(f.metricsPort, "metrics-port")! }
      : {}),
    ...(f.metricsHost !== undefined ? { metricsHost: f.metricsHost } : {}),
    ...metricsTokenFromFlag(f.metricsTokenFile ?? process.env["KAIROS_METRICS_TOKEN_FILE"]),
    metricsTenantLabels: f.metricsTenantLabels === true,
    ...(drainTimeoutMs !== undefined ? { drainTimeoutMs } : {}),
    retention: retentionFromFlags(f),
    natsApi: { enabled: f.natsApi !== false },
    ...(f.noopDurationMs !== undefined
      ? { noopDurationMs: int(f.noopDurationMs, "noop-duration-ms")! }
      : {}),
    ...secretKeyFromFlag(f.secretKeyFile ?? process.env.KAIROS_SECRET_KEY_FILE),
    apiHost: f.apiHost ?? "127.0.0.1",
    apiPort: int(f.apiPort, "api-port") ?? defaults.apiPort,
    job: {
      ...(f.runLeaseTtlMs !== undefined
        ? { leaseTtlMs: int(f.runLeaseTtlMs, "run-lease-ttl-ms")! }
        : {}),
      ...(f.lookaheadMs !== undefined ? { lookaheadMs: int(f.lookaheadMs, "lookahead-ms")! } : {}),
    },
  });
  return Object.assign(p, { executor });
}

/**
 * Runs `stop` on the first SIGINT/SIGTERM, then exits. A second signal during the stop calls
 * `hurry` (a draining worker hands its running attempts back at once).
 */
export function onShutdown(stop: () => Promise<void>, hurry?: () => void): void {
  let stopping = false;
  const handler = (sig: string) => {
    if (stopping) {
      hurry?.();
      return;
    }
    stopping = true;
    stop().then(
      () => process.exit(0),
      (e: unknown) => {
        console.error(`kairos: error during ${sig} shutdown:`, e);
        process.exit(1);
      },
    );
  };
  process.on("SIGINT", () => handler("SIGINT"));
  process.on("SIGTERM", () => handler("SIGTERM"));
}

export function registerNodeCommand(program: Command): void {
  const cmd = natsAuthOptions(
    program
      .command("node")
      .description("run one Kairos node against an existing NATS cluster")
      .option("--nats <url>", "NATS URL(s), comma-separated (env KAIROS_NATS_URL)"),
  );
  lifecycleOptions(guardOptions(taskOptions(listenerOptions(clusterOptions(cmd))))).action(runNode);
}

/** The node: roles, identity, cluster, partition leases, executor and slots. */
function clusterOptions(c: Command): Command {
  return c
    .option("--roles <list>", "roles: any of api,scheduler,worker", "api,scheduler,worker")
    .option("--node-id <id>", "stable node id (default: host-pid)")
    .option("--cluster <name>", "cluster name (bucket and subject prefix)", "kairos")
    .option("--partitions <n>", "partition count when the cluster is first created")
    .option("--replicas <n>", "KV replicas (1, or 3 on a 3-server NATS cluster)")
    .option("--lease-ttl-ms <ms>", "partition lease TTL")
    .option(
      "--lease-renewer <where>",
      "who renews partition leases: thread (default: a worker thread, so a busy event loop keeps them) or inline",
    )
    .option(
      "--executor <kind>",
      "worker executor: docker (default; the node fails to start without an engine), noop, or process (UNISOLATED: tenant code runs as plain processes)",
    )
    .option("--slots <n>", "worker slots (concurrent attempts)", "4");
}

/** The API and metrics listeners. */
function listenerOptions(c: Command): Command {
  return c
    .option("--api-host <host>", "API listen address", "127.0.0.1")
    .option("--api-port <port>", "API port (0: any free port)", "0")
    .option(
      "--metrics-port <port>",
      "serve /healthz, /readyz and /metrics on this port (0: any free port; default: no metrics listener). /metrics is never served on the API port",
    )
    .option(
      "--metrics-host <host>",
      "metrics listen address (default 127.0.0.1, whatever --api-host is)",
    )
    .option(
      "--metrics-token-file <path>",
      "the metrics listener's /metrics answers only Authorization: Bearer <the token in this file> (16-512 printable characters; env KAIROS_METRICS_TOKEN_FILE)",
    )
    .option(
      "--metrics-tenant-labels",
      "scheduler: label the per-tenant metrics with the tenant id (default: no tenant in any label)",
    );
}

/** Run claims, look-ahead, and what tasks may name and ask for. */
function taskOptions(c: Command): Command {
  return c
    .option(
      "--run-lease-ttl-ms <ms>",
      "how long a worker's claim on an attempt lives without a heartbeat (default 10000)",
    )
    .option(
      "--lookahead-ms <ms>",
      "how far ahead a job's next run is created and matched to a worker (default 300000; a job gets at most half the gap since its previous occurrence, at least 60000 or the whole window if shorter); workers hold slots for claimed runs until they start",
    )
    .option(
      "--image-policy <entries>",
      "api: images tenants without their own policy may name, comma-separated: *, registry/namespace/ prefixes, repo@sha256:…, repo:tag (default: any)",
    )
    .option(
      "--task-max-memory-mb <mb>",
      "api, worker: the most memory a task may ask for (16-65536; default 2048); give every api and worker node the same",
    )
    .option(
      "--task-max-cpus <n>",
      "api, worker: the most CPUs a task may ask for (0.1-64; default 2); the same on every api and worker node",
    )
    .option(
      "--task-max-pids <n>",
      "api, worker: the most processes a task may ask for (8-4096; default 512); the same on every api and worker node",
    );
}

/** Webhook targets, rate limits and the NATS API. */
function guardOptions(c: Command): Command {
  return c
    .option(
      "--webhook-allow-http",
      "scheduler: allow plain-http dead-letter webhooks (default: https only)",
    )
    .option(
      "--webhook-allow-private",
      "scheduler: allow webhooks to loopback, private, link-local and CGNAT addresses (default: refused)",
    )
    .option(
      "--rate-limit <rps>",
      "api: requests per second per tenant on this node (0: none; default 100); over it: 429 rate_limited with Retry-After",
    )
    .option(
      "--rate-limit-burst <n>",
      "api: largest burst per tenant (default: twice --rate-limit, 200)",
    )
    .option(
      "--auth-failure-limit <per-second>",
      "api: failed authentications per second per client address before 429 (0: none; default 10, bursts of 5 s worth)",
    )
    .option(
      "--no-nats-api",
      "api: do not serve the internal NATS API (kairos.<cluster>.api.<tenant>.>, docs/nats-api.md) on this node",
    );
}

/** Benchmarks, the secret key, draining and run retention. */
function lifecycleOptions(c: Command): Command {
  return c
    .option(
      "--noop-duration-ms <ms>",
      "worker, --executor noop: how long each run occupies its slot (benchmarks; default 0)",
    )
    .option(
      "--secret-key-file <path>",
      "api, scheduler: the cluster key that encrypts task.secret_env (32 bytes, base64 or hex; the same on every api and scheduler node; workers do not need it; env KAIROS_SECRET_KEY_FILE). Without it, jobs with secret_env are refused",
    )
    .option(
      "--drain-timeout-ms <ms>",
      "worker: on SIGTERM, how long running attempts may finish before they are handed back (0-3600000; default 60000); a second signal hands back at once",
    )
    .option(
      "--keep-runs <n>",
      "scheduler: terminal run records kept per job, newest first (0: no count limit; default 1000)",
    )
    .option(
      "--keep-runs-days <days>",
      "scheduler: run records older than this many days are deleted (0: no age limit; default 30)",
    );
}

/** `kairos node`: starts the process with the given roles and stops it on SIGINT/SIGTERM. */
async function runNode(f: NodeFlags & ProcessFlags): Promise<void> {
  const url = resolveNatsUrl(f.nats);
  if (!url)
    throw new KairosError(
      "invalid_argument",
      "--nats is required (or KAIROS_NATS_URL, or a running `kairos dev`)",
      { field: "nats" },
    );
  const p = await startProcess(nodeConfigFromFlags(f, url), f, { apiPort: 0 });
  if (p.api) console.error(`kairos node: api on ${p.api.url}`);
  if (p.metrics)
    console.error(
      `kairos node: health and metrics on ${p.metrics.url} (/healthz, /readyz, /metrics)`,
    );
  if (p.worker)
    console.error(`kairos node: worker executor ${p.executor.kind} (${p.executor.reason})`);
  onShutdown(
    () => p.stop(),
    () => p.hurry(),
  );
}
