/**
 * `kairos node`: run one node with the given roles against an existing NATS (cluster).
 * Also the shared start-up used by `kairos dev`.
 */
import type { Command } from "commander";
import { getPriority, setPriority } from "node:os";
import { KairosError } from "../lib/errors.ts";
import { type NodeConfig } from "../cluster/config.ts";
import { detectExecutor, type ExecutorKind } from "../sandbox/index.ts";
import { startKairos, type KairosProcess } from "../server/start.ts";
import { natsAuthOptions, resolveNatsUrl } from "./dev-file.ts";
import { readRunTokenKeysFile } from "./run-token-keys.ts";
import { runTokenConfig, type RunTokenConfig } from "../secrets/run-token.ts";
import {
  cpuNiceFlag,
  drainTimeoutFlag,
  imagePolicyFromFlag,
  egressFromFlags,
  int,
  mailFromFlags,
  portFlag,
  prefetchFlag,
  pullFlag,
  metricsTokenFromFlag,
  nodeConfigFromFlags,
  rateLimitsFromFlags,
  retentionFromFlags,
  secretKeyFromFlag,
  taskLimitsFromFlags,
  type NodeFlags,
  type ProcessFlags,
} from "./node-flags.ts";

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
 * The run-token settings from `--run-token-keys` (or KAIROS_RUN_TOKEN_KEYS_FILE): the key set,
 * read once, here; the issuer names the cluster. None: no run tokens (docs/security.md).
 */
export function runTokensFromFlag(
  path: string | undefined,
  clusterName: string,
): { runTokens?: RunTokenConfig } {
  if (path === undefined || path === "") return {};
  return {
    runTokens: runTokenConfig({
      keys: readRunTokenKeysFile(path),
      issuer: `kairos:${clusterName}`,
    }),
  };
}

/** Raises this process's nice value by `by` (at most to 19); a refusal is said, not fatal. */
function lowerPriority(by: number): void {
  if (by === 0) return;
  try {
    setPriority(Math.min(19, getPriority() + by));
  } catch (e) {
    console.error(`kairos: could not lower the CPU priority (--cpu-nice ${by}): ${String(e)}`);
  }
}

export async function startProcess(
  config: NodeConfig,
  f: ProcessFlags,
  defaults: { apiPort: number; drainTimeoutMs?: number },
  mode: StartMode = { processFallback: false },
): Promise<KairosProcess & { executor: { kind: ExecutorKind; reason: string } }> {
  const drainTimeoutMs = drainTimeoutFlag(f.drainTimeoutMs) ?? defaults.drainTimeoutMs;
  lowerPriority(cpuNiceFlag(f.cpuNice, config.roles));
  const executor = config.roles.includes("worker")
    ? await chooseExecutor(f.executor, mode)
    : { kind: "noop" as const, reason: "no worker role" };
  if (executor.kind === "process") console.error(`kairos: ${UNISOLATED_WARNING}`);
  const workerSlots = int(f.slots, "slots") ?? 4;
  if (config.roles.includes("worker") && workerSlots > config.maxWorkerSlots) {
    console.error(
      `kairos: --slots ${workerSlots} is above --max-worker-slots ${config.maxWorkerSlots}: schedulers believe at most their own --max-worker-slots of one worker (docs/security.md)`,
    );
  }
  const egress = egressFromFlags(f);
  if (egress !== undefined && config.roles.includes("worker") && executor.kind !== "docker")
    console.error(
      `kairos: --task-network is for the docker executor; with ${executor.kind}, tasks asking for egress fail`,
    );
  const imagePolicy = imagePolicyFromFlag(f.imagePolicy);
  if (imagePolicy === undefined && config.roles.includes("api")) {
    console.error(
      "kairos: no --image-policy: tenants without their own image policy may name ANY image present on the workers (docs/security.md)",
    );
  }
  const p = await startKairos(config, {
    ...(imagePolicy !== undefined ? { imagePolicy } : {}),
    taskLimits: taskLimitsFromFlags(f),
    ...(egress !== undefined && executor.kind === "docker" ? { egress } : {}),
    webhook: {
      allowHttp: f.webhookAllowHttp === true,
      allowPrivateAddresses: f.webhookAllowPrivate === true,
    },
    rateLimits: rateLimitsFromFlags(f),
    executor: executor.kind,
    pull: pullFlag(f.pull),
    workerSlots,
    ...(f.prefetch !== undefined ? { workerPrefetch: prefetchFlag(f.prefetch) } : {}),
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
    ...mailFromFlags(f, {
      url: process.env["KAIROS_SMTP_URL"],
      from: process.env["KAIROS_SMTP_FROM"],
    }),
    ...runTokensFromFlag(
      f.runTokenKeys ?? process.env["KAIROS_RUN_TOKEN_KEYS_FILE"],
      config.clusterName,
    ),
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
  egressOptions(
    lifecycleOptions(guardOptions(taskOptions(listenerOptions(clusterOptions(cmd))))),
  ).action(runNode);
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
    .option("--slots <n>", "worker slots (concurrent attempts)", "4")
    .option(
      "--max-worker-slots <n>",
      "scheduler: the most slots believed of one worker's advert (1-1000000; default 1024); an advert above it is believed only up to it, counted and logged",
    )
    .option(
      "--max-worker-prefetch <n>",
      "scheduler: the most prefetch places believed of one worker's advert (0-1000000; default 256)",
    )
    .option(
      "--prefetch <n>",
      "attempts a worker accepts beyond its slots, each started the moment a slot frees after its start, runs on time before late ones, with as many places again for them (default: an eighth of the slots, at least 2, at most 256 and the slots; 0: none)",
    );
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
      "--pull <policy>",
      "worker, docker executor: when to pull a task's image, with its tenant's registry credentials: never (images are provisioned on the hosts), if_missing (default: when absent, and before a tenant first runs a registry's image already here), always (every attempt)",
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

/** The task network and the egress proxy (worker, docker executor). */
export function egressOptions(c: Command): Command {
  return c
    .option(
      "--task-network <name>",
      'worker: the internal Docker network tasks with network egress run on (docs/deploy.md, "Task network"); the egress proxy listens on its gateway. Without it, such tasks fail',
    )
    .option("--egress-proxy-port <port>", "worker: the egress proxy's port (default 3128)")
    .option(
      "--egress-allow-internal <cidrs>",
      "worker: internal addresses the egress proxy may reach anyway, comma-separated CIDRs (default: none, public addresses only)",
    )
    .option(
      "--egress-max-connections-per-run <n>",
      "worker: connections one attempt may have open through the proxy (default 32)",
    )
    .option(
      "--egress-max-bytes-per-run <bytes>",
      "worker: bytes one attempt may move through the proxy, both directions (default 268435456)",
    );
}

/** Webhook targets, run-event mail, rate limits and the NATS API. */
function guardOptions(c: Command): Command {
  return c
    .option(
      "--webhook-allow-http",
      "scheduler: allow plain-http webhooks (dead letters, run-event subscriptions; default: https only)",
    )
    .option(
      "--webhook-allow-private",
      "scheduler: allow webhooks to loopback, private, link-local and CGNAT addresses (default: refused)",
    )
    .option(
      "--smtp-url <url>",
      "scheduler: send run events to email subscriptions through this SMTP server: smtp://[user:pass@]host[:port] (STARTTLS when offered) or smtps://… (env KAIROS_SMTP_URL; default: no email)",
    )
    .option(
      "--smtp-from <address>",
      "scheduler, with --smtp-url: the sender address of run-event mails",
    )
    .option(
      "--mail-limit <n>",
      "scheduler: run-event mails per tenant per window on this node (1-1000; default 10); the rest are counted into one digest per address, sent when the window closes",
    )
    .option(
      "--mail-window-s <s>",
      "scheduler: the mail limit's window, opened by a tenant's first mail (1-86400; default 600)",
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
      "--run-token-keys <path>",
      "scheduler, api: the Ed25519 key set (JWK Set; `kairos run-token-keys new`) that signs each attempt's KAIROS_RUN_TOKEN (schedulers: the first key with its private part) and verifies it (API nodes, which publish /.well-known/jwks.json); workers do not need it; env KAIROS_RUN_TOKEN_KEYS_FILE. Without it, attempts get no token",
    )
    .option(
      "--drain-timeout-ms <ms>",
      "worker: on SIGTERM, how long running attempts may finish before they are handed back (0-3600000; default 60000); a second signal hands back at once",
    )
    .option(
      "--cpu-nice <n>",
      "raise this process's nice value by n at start (0-19; default 10 for a node whose only role is api, else 0): on a host shared with schedulers, the API's reads take the CPU the dispatch leaves",
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
