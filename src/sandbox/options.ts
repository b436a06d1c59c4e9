/**
 * Executor options → defaults → one validated, frozen config (CONTRIBUTING.md). Units are
 * in the names. Invalid options are a `KairosError("invalid_argument")` at construction,
 * never a surprise at the first run.
 */
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KairosError } from "../lib/errors.ts";
import { systemClock, type Clock } from "../lib/clock.ts";
import { DEFAULT_OUTPUT_TAIL_BYTES } from "./output-tail.ts";
import { DEFAULT_TASK_LIMITS } from "./task-rules.ts";
import { parseInternalAllowance, type InternalAllowance } from "./egress-policy.ts";

/**
 * When the docker executor pulls a task's image (docker-image.ts): never; when it is not on the
 * worker host (or is a registry's image this tenant has not pulled here); for every attempt.
 */
export type PullPolicy = "never" | "if_missing" | "always";

export const PULL_POLICIES: readonly PullPolicy[] = ["never", "if_missing", "always"];

export interface ProcessOptions {
  /** Time between SIGTERM and SIGKILL of the task's process group. Default 2000. */
  killGraceMs?: number;
  /** Working directory of spawned tasks. Default: the worker's cwd. */
  cwd?: string;
}

export interface NoopOptions {
  /** How long each noop "run" takes (via the clock). Default 0: completes immediately. */
  durationMs?: number;
}

/**
 * Network egress (docs/security.md): the task network tasks with `network: "egress"` run on,
 * and the bounds of the worker's egress proxy, which listens on that network's gateway.
 */
export interface EgressOptions {
  /** An existing internal bridge network (task-network.ts). */
  network: string;
  /** The proxy's port on the gateway (the task network's firewall lets only it in). Default 3128. */
  proxyPort?: number;
  /** Internal addresses (CIDRs) the proxy may reach anyway; default none (public addresses only). */
  allowInternal?: readonly string[];
  /** Connections of one attempt at once. Default 32. */
  maxConnectionsPerRun?: number;
  /** Bytes one attempt may move through the proxy, both directions. Default 256 MiB. */
  maxBytesPerRun?: number;
  /** Connections of the whole proxy at once. Default 1024. */
  maxConnections?: number;
  /** Default 10000. */
  connectTimeoutMs?: number;
  /** A connection without traffic this long is closed. Default 300000. */
  idleTimeoutMs?: number;
}

/** Egress options resolved (the gateway address is the network's, found at executor start). */
export interface EgressConfig {
  readonly network: string;
  readonly port: number;
  readonly allowInternal: InternalAllowance;
  readonly maxConnectionsPerRun: number;
  readonly maxBytesPerRun: number;
  readonly maxConnections: number;
  readonly connectTimeoutMs: number;
  readonly idleTimeoutMs: number;
}

export interface DockerOptions {
  /** Engine socket; default: DOCKER_HOST or /var/run/docker.sock (dockerode's rules). */
  socketPath?: string;
  /**
   * Default "never" here (no registry is contacted unless asked); `kairos node --pull` defaults to
   * "if_missing" (docs/sandbox.md, "Images and registries").
   */
  pull?: PullPolicy;
  /** Defaults applied when a task does not ask. */
  defaultMemoryMb?: number;
  defaultCpus?: number;
  defaultPids?: number;
  /**
   * Node maximums; a task asking for more is invalid_task. Defaults: the cluster's per-task
   * maxima (task-rules.ts `DEFAULT_TASK_LIMITS`), which API nodes enforce at create.
   */
  maxMemoryMb?: number;
  maxCpus?: number;
  maxPids?: number;
  /** Size of the writable /tmp tmpfs. Default 16. */
  tmpfsSizeMb?: number;
  /**
   * Size of the tmpfs laid over each `VOLUME` path of the image (instead of an unbounded
   * anonymous volume on the host's disk). Default 16.
   */
  volumeTmpfsSizeMb?: number;
  /** Most `VOLUME` paths an image may declare; an image with more is `invalid_task`. Default 8. */
  maxImageVolumes?: number;
  /** Open files per process in the container (soft = hard `nofile` ulimit). Default 1024. Core dumps are always off. */
  nofileLimit?: number;
  /**
   * Refuse to start unless the engine reports seccomp enabled (`docker info` SecurityOptions,
   * not `profile=unconfined`). Default true; false only for engines that cannot have it.
   */
  requireSeccomp?: boolean;
  /** uid:gid the task runs as. Default "65534:65534" (nobody). */
  user?: string;
  /** Engine calls that should be quick (ping, inspect, remove) give up after this. Default 10000. */
  engineTimeoutMs?: number;
  /**
   * A statically linked busybox on the engine's host, mounted read-only into every container
   * to enforce its deadline without the worker (docs/sandbox.md). Default "/bin/busybox"
   * (Debian: busybox-static).
   */
  busyboxPath?: string;
  /** Host directory under which each leased attempt gets its lease directory (default: <tmpdir>/kairos-lease). */
  leaseRoot?: string;
  /** How often the executor removes expired containers of any worker (by label). Default 30000; 0 = never. */
  sweepIntervalMs?: number;
  /** Network egress; absent: a task with `network: "egress"` fails `invalid_task` here. */
  egress?: EgressOptions;
}

/** Where an executor writes what tenants must not see (engine messages): the operator's log. */
export type ExecutorLog = (
  level: "info" | "warn" | "error",
  msg: string,
  extra?: Record<string, unknown>,
) => void;

export interface ExecutorOptions {
  /** This worker's id: labels docker containers and scopes orphan reaping. */
  workerId: string;
  clock?: Clock;
  /** The operator's log (engine details of failed attempts). Default: stderr. */
  log?: ExecutorLog;
  /** Bound of the output tail kept per attempt. Default 4096. */
  outputTailBytes?: number;
  process?: ProcessOptions;
  noop?: NoopOptions;
  docker?: DockerOptions;
}

export interface DockerConfig {
  readonly socketPath: string | undefined;
  readonly pull: PullPolicy;
  readonly defaultMemoryMb: number;
  readonly defaultCpus: number;
  readonly defaultPids: number;
  readonly maxMemoryMb: number;
  readonly maxCpus: number;
  readonly maxPids: number;
  readonly tmpfsSizeMb: number;
  readonly volumeTmpfsSizeMb: number;
  readonly maxImageVolumes: number;
  readonly nofileLimit: number;
  readonly requireSeccomp: boolean;
  readonly user: string;
  readonly engineTimeoutMs: number;
  readonly busyboxPath: string;
  readonly leaseRoot: string;
  readonly sweepIntervalMs: number;
  readonly egress: EgressConfig | undefined;
}

export interface ExecutorConfig {
  readonly workerId: string;
  readonly clock: Clock;
  readonly log: ExecutorLog;
  readonly outputTailBytes: number;
  readonly process: { readonly killGraceMs: number; readonly cwd: string | undefined };
  readonly noop: { readonly durationMs: number };
  readonly docker: DockerConfig;
}

function positive(
  field: string,
  value: number | undefined,
  fallback: number,
  integer: boolean,
): number {
  const v = value ?? fallback;
  if (!Number.isFinite(v) || v <= 0 || (integer && !Number.isInteger(v))) {
    throw new KairosError(
      "invalid_argument",
      `${field} must be a positive ${integer ? "integer" : "number"}, got ${v}`,
      { field },
    );
  }
  return v;
}

function resolveDocker(d: DockerOptions): DockerConfig {
  // The cluster's per-task maxima (task-rules.ts): API nodes refuse a task above them.
  const maxMemoryMb = positive(
    "docker.maxMemoryMb",
    d.maxMemoryMb,
    DEFAULT_TASK_LIMITS.maxMemoryMb,
    true,
  );
  const maxCpus = positive("docker.maxCpus", d.maxCpus, DEFAULT_TASK_LIMITS.maxCpus, false);
  const maxPids = positive("docker.maxPids", d.maxPids, DEFAULT_TASK_LIMITS.maxPids, true);
  const cfg: DockerConfig = {
    socketPath: d.socketPath,
    pull: d.pull ?? "never",
    defaultMemoryMb: positive(
      "docker.defaultMemoryMb",
      d.defaultMemoryMb,
      Math.min(256, maxMemoryMb),
      true,
    ),
    defaultCpus: positive("docker.defaultCpus", d.defaultCpus, Math.min(1, maxCpus), false),
    defaultPids: positive("docker.defaultPids", d.defaultPids, Math.min(64, maxPids), true),
    maxMemoryMb,
    maxCpus,
    maxPids,
    tmpfsSizeMb: positive("docker.tmpfsSizeMb", d.tmpfsSizeMb, 16, true),
    volumeTmpfsSizeMb: positive("docker.volumeTmpfsSizeMb", d.volumeTmpfsSizeMb, 16, true),
    maxImageVolumes: positive("docker.maxImageVolumes", d.maxImageVolumes, 8, true),
    nofileLimit: positive("docker.nofileLimit", d.nofileLimit, 1024, true),
    requireSeccomp: d.requireSeccomp ?? true,
    user: d.user ?? "65534:65534",
    engineTimeoutMs: positive("docker.engineTimeoutMs", d.engineTimeoutMs, 10_000, true),
    busyboxPath: d.busyboxPath ?? "/bin/busybox",
    leaseRoot: d.leaseRoot ?? join(tmpdir(), "kairos-lease"),
    sweepIntervalMs: d.sweepIntervalMs ?? 30_000,
    egress: d.egress === undefined ? undefined : resolveEgress(d.egress),
  };
  if (typeof cfg.leaseRoot !== "string" || !cfg.leaseRoot.startsWith("/")) {
    throw new KairosError(
      "invalid_argument",
      `docker.leaseRoot must be an absolute path, got ${String(cfg.leaseRoot)}`,
      { field: "docker.leaseRoot" },
    );
  }
  if (typeof cfg.busyboxPath !== "string" || !cfg.busyboxPath.startsWith("/")) {
    throw new KairosError(
      "invalid_argument",
      `docker.busyboxPath must be an absolute path, got ${String(cfg.busyboxPath)}`,
      { field: "docker.busyboxPath" },
    );
  }
  if (!Number.isInteger(cfg.sweepIntervalMs) || cfg.sweepIntervalMs < 0) {
    throw new KairosError(
      "invalid_argument",
      `docker.sweepIntervalMs must be an integer >= 0, got ${cfg.sweepIntervalMs}`,
      { field: "docker.sweepIntervalMs" },
    );
  }
  if (!PULL_POLICIES.includes(cfg.pull)) {
    throw new KairosError(
      "invalid_argument",
      `docker.pull must be one of ${PULL_POLICIES.join(", ")}, got ${String(cfg.pull)}`,
      { field: "docker.pull" },
    );
  }
  if (cfg.defaultMemoryMb > maxMemoryMb || cfg.defaultCpus > maxCpus || cfg.defaultPids > maxPids) {
    throw new KairosError("invalid_argument", "docker defaults must not exceed the node maximums", {
      field: "docker",
    });
  }
  if (cfg.user.startsWith("0:") || cfg.user === "0" || cfg.user === "root") {
    throw new KairosError("invalid_argument", "docker.user must not be root", {
      field: "docker.user",
    });
  }
  return Object.freeze(cfg);
}

function resolveEgress(e: EgressOptions): EgressConfig {
  if (typeof e.network !== "string" || !/^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/.test(e.network))
    throw new KairosError(
      "invalid_argument",
      `docker.egress.network must name a Docker network, got ${JSON.stringify(e.network)}`,
      { field: "docker.egress.network" },
    );
  const port = e.proxyPort ?? 3128;
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new KairosError(
      "invalid_argument",
      `docker.egress.proxyPort must be 1-65535, got ${port}`,
      { field: "docker.egress.proxyPort" },
    );
  return Object.freeze({
    network: e.network,
    port,
    allowInternal: parseInternalAllowance(e.allowInternal ?? []),
    maxConnectionsPerRun: positive(
      "docker.egress.maxConnectionsPerRun",
      e.maxConnectionsPerRun,
      32,
      true,
    ),
    maxBytesPerRun: positive("docker.egress.maxBytesPerRun", e.maxBytesPerRun, 256 << 20, true),
    maxConnections: positive("docker.egress.maxConnections", e.maxConnections, 1024, true),
    connectTimeoutMs: positive("docker.egress.connectTimeoutMs", e.connectTimeoutMs, 10_000, true),
    idleTimeoutMs: positive("docker.egress.idleTimeoutMs", e.idleTimeoutMs, 300_000, true),
  });
}

const stderrLog: ExecutorLog = (level, msg, extra) =>
  console.error(`kairos sandbox ${level}: ${msg}`, extra ?? "");

/** Validates and freezes executor options. */
export function resolveExecutorOptions(opts: ExecutorOptions): ExecutorConfig {
  if (typeof opts.workerId !== "string" || opts.workerId.length === 0) {
    throw new KairosError("invalid_argument", "workerId is required", { field: "workerId" });
  }
  const tail = opts.outputTailBytes ?? DEFAULT_OUTPUT_TAIL_BYTES;
  if (!Number.isInteger(tail) || tail < 0 || tail > 1 << 20) {
    throw new KairosError(
      "invalid_argument",
      `outputTailBytes must be an integer in [0, 1 MiB], got ${tail}`,
      { field: "outputTailBytes" },
    );
  }
  const duration = opts.noop?.durationMs ?? 0;
  if (!Number.isFinite(duration) || duration < 0) {
    throw new KairosError("invalid_argument", `noop.durationMs must be >= 0, got ${duration}`, {
      field: "noop.durationMs",
    });
  }
  return Object.freeze({
    workerId: opts.workerId,
    clock: opts.clock ?? systemClock,
    log: opts.log ?? stderrLog,
    outputTailBytes: tail,
    process: Object.freeze({
      killGraceMs: positive("process.killGraceMs", opts.process?.killGraceMs, 2000, true),
      cwd: opts.process?.cwd,
    }),
    noop: Object.freeze({ durationMs: duration }),
    docker: resolveDocker(opts.docker ?? {}),
  });
}
