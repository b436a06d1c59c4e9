/**
 * Pure translation of (task, identity, node config) into the Docker Engine's container
 * create options: the lock-down (docs/sandbox.md explains each setting), the resource
 * limits resolved within the node maximums, and the labels that tie a container to its run.
 * No I/O here, so every setting is unit-checkable.
 */
import type Dockerode from "dockerode";
import type { ExecutionError, RunIdentity, TaskSpec } from "./types.ts";
import type { DockerConfig } from "./options.ts";
import type { EgressProxy } from "./egress-proxy.ts";
import { invalidTask, taskEnv } from "./identity.ts";
import {
  CONTAINER_BUSYBOX,
  CONTAINER_LEASE_DIR,
  DOCKER_SUPERVISOR,
  DOCKER_SUPERVISOR_PIDS,
} from "./supervisor.ts";

/** The in-container deadline trails the executor's own timer by this much (the executor normally wins). */
export const CONTAINER_DEADLINE_GRACE_S = 2;

/** What the container runs and until when (see supervisor.ts). */
export interface ContainerRun {
  /** The inspected image's ID: the container runs exactly that image, whatever its name points at now. */
  imageId?: string;
  /** The effective command: the task's args, or the image's Entrypoint + Cmd; an image Entrypoint is kept before args. */
  command: string[];
  /** Epoch ms of the deadline label (create time + timeout + grace). */
  deadlineAtMs: number;
  /** The image's `VOLUME` paths: each gets a bounded tmpfs instead of an anonymous volume. */
  volumes?: readonly string[];
  /** Host directory holding the attempt's lease file (mounted read-only), when it has a lease. */
  leaseDir?: string;
  /** For a task with network egress: the task network, and the proxy URL with the attempt's credential. */
  egress?: { network: string; proxyUrl: string };
}

/** A worker's task network and the egress proxy on its gateway (executor.ts `startEgress`). */
export interface TaskEgress {
  readonly network: string;
  readonly proxy: EgressProxy;
}

/**
 * The proxy variables of an egress task (both spellings: tools read one or the other). Only
 * loopback bypasses the proxy; every other destination goes through it, or nowhere.
 */
export function proxyEnv(proxyUrl: string): Record<string, string> {
  const noProxy = "localhost,127.0.0.1,::1";
  return {
    HTTP_PROXY: proxyUrl,
    HTTPS_PROXY: proxyUrl,
    http_proxy: proxyUrl,
    https_proxy: proxyUrl,
    NO_PROXY: noProxy,
    no_proxy: noProxy,
  };
}

/**
 * The network settings of a container: none at all, or (egress) the task network only, with
 * IPv6 off (its link-local addresses would reach the host and the other containers of the
 * bridge beside the IPv4 firewall: task-network.ts).
 */
function networkSettings(run: ContainerRun): {
  NetworkDisabled: boolean;
  host: { NetworkMode: string; Sysctls?: Record<string, string> };
} {
  if (run.egress === undefined) return { NetworkDisabled: true, host: { NetworkMode: "none" } };
  return {
    NetworkDisabled: false,
    host: {
      NetworkMode: run.egress.network,
      Sysctls: {
        "net.ipv6.conf.all.disable_ipv6": "1",
        "net.ipv6.conf.default.disable_ipv6": "1",
      },
    },
  };
}

const TMPFS_OPTS = "rw,noexec,nosuid,nodev";

/**
 * The tmpfs mounts of a container: `/tmp`, and one per image `VOLUME` path (bounded, in
 * memory, gone with the container) — a tmpfs at a volume's path replaces the anonymous volume
 * the engine would otherwise create on the host's disk without any size limit. The mode of a
 * volume's tmpfs comes from the image's directory (the engine copies it up), so a path the
 * image leaves root-owned stays read-only for the task's user.
 */
export function tmpfsMounts(cfg: DockerConfig, volumes: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {
    "/tmp": `${TMPFS_OPTS},size=${cfg.tmpfsSizeMb}m,mode=1777`,
  };
  for (const v of volumes) {
    const path = normaliseVolumePath(v);
    if (path !== undefined && !(path in out))
      out[path] = `${TMPFS_OPTS},size=${cfg.volumeTmpfsSizeMb}m`;
  }
  return out;
}

/** An image VOLUME path as a clean absolute path, or undefined for one the engine would reject anyway. */
function normaliseVolumePath(v: string): string | undefined {
  if (!v.startsWith("/") || v.includes(",") || v.includes(":")) return undefined;
  const clean = v.replace(/\/+/g, "/").replace(/\/$/, "");
  return clean === "" ? undefined : clean;
}

/** The image's VOLUME paths within the node's bound, or an invalid_task error. */
export function imageVolumes(
  volumes: Record<string, unknown> | null | undefined,
  image: string,
  cfg: DockerConfig,
): string[] | ExecutionError {
  const paths = Object.keys(volumes ?? {});
  if (paths.length > cfg.maxImageVolumes)
    return invalidTask(
      `image ${image} declares ${paths.length} VOLUME paths; this node allows at most ${cfg.maxImageVolumes}`,
    );
  const bad = paths.find((p) => normaliseVolumePath(p) === undefined);
  if (bad !== undefined)
    return invalidTask(
      `image ${image} declares an unsupported VOLUME path ${JSON.stringify(bad.slice(0, 100))}`,
    );
  return paths;
}

/** Per-process limits: open files bounded, core dumps off (a dump could hold secrets and fill the disk). */
export function ulimits(cfg: DockerConfig): { Name: string; Soft: number; Hard: number }[] {
  return [
    { Name: "nofile", Soft: cfg.nofileLimit, Hard: cfg.nofileLimit },
    { Name: "core", Soft: 0, Hard: 0 },
  ];
}

/** The effective command of a task in an image with `entrypoint` and `cmd` (docker's own rule). */
export function effectiveCommand(
  args: string[],
  entrypoint: string | string[] | null | undefined,
  cmd: string[] | null | undefined,
): string[] {
  const ep = typeof entrypoint === "string" ? [entrypoint] : (entrypoint ?? []);
  return [...ep, ...(args.length > 0 ? args : (cmd ?? []))];
}

/** Seconds the in-container watchdog sleeps before killing the task. */
export function containerDeadlineS(task: TaskSpec): string {
  return String(Math.round((task.timeoutS + CONTAINER_DEADLINE_GRACE_S) * 1000) / 1000);
}

/** Label keys. `kairos.managed=true` + `kairos.worker_id` scope orphan reaping to one worker. */
export const LABEL = {
  managed: "kairos.managed",
  runId: "kairos.run_id",
  attempt: "kairos.attempt",
  jobId: "kairos.job_id",
  tenantId: "kairos.tenant_id",
  workerId: "kairos.worker_id",
  fence: "kairos.fence",
  /** Epoch ms after which the container must not be running (its own deadline has passed). */
  deadlineMs: "kairos.deadline_ms",
} as const;

/** The engine refuses memory limits under 6 MiB. */
export const MIN_MEMORY_MB = 6;
/** Bound on the engine's on-disk json log of one container (we read output by attach). */
const LOG_MAX_SIZE = "1m";

export interface ResolvedLimits {
  memoryMb: number;
  cpus: number;
  pids: number;
}

/** The task's resources within the node maximums, or an invalid_task error naming the limit. */
export function resolveLimits(task: TaskSpec, cfg: DockerConfig): ResolvedLimits | ExecutionError {
  const r = task.resources ?? {};
  const memoryMb = r.memoryMb ?? cfg.defaultMemoryMb;
  const cpus = r.cpus ?? cfg.defaultCpus;
  const pids = r.pids ?? cfg.defaultPids;
  if (!Number.isInteger(memoryMb) || memoryMb < MIN_MEMORY_MB)
    return invalidTask(
      `resources.memoryMb must be an integer >= ${MIN_MEMORY_MB}, got ${memoryMb}`,
    );
  if (memoryMb > cfg.maxMemoryMb)
    return invalidTask(
      `resources.memoryMb ${memoryMb} exceeds this node's maximum of ${cfg.maxMemoryMb}`,
    );
  if (!Number.isFinite(cpus) || cpus <= 0)
    return invalidTask(`resources.cpus must be a positive number, got ${cpus}`);
  if (cpus > cfg.maxCpus)
    return invalidTask(`resources.cpus ${cpus} exceeds this node's maximum of ${cfg.maxCpus}`);
  if (!Number.isInteger(pids) || pids < 1)
    return invalidTask(`resources.pids must be a positive integer, got ${pids}`);
  if (pids > cfg.maxPids)
    return invalidTask(`resources.pids ${pids} exceeds this node's maximum of ${cfg.maxPids}`);
  return { memoryMb, cpus, pids };
}

/** Labels for one attempt; `workerId` is the executor's own (what reapOrphans filters on). */
export function runLabels(
  id: RunIdentity,
  workerId: string,
  deadlineAtMs: number,
): Record<string, string> {
  return {
    [LABEL.managed]: "true",
    [LABEL.runId]: id.runId,
    [LABEL.attempt]: String(id.attempt),
    [LABEL.jobId]: id.jobId,
    [LABEL.tenantId]: id.tenantId,
    [LABEL.workerId]: workerId,
    [LABEL.fence]: String(id.fence),
    [LABEL.deadlineMs]: String(Math.ceil(deadlineAtMs)),
  };
}

/** The full create options of one attempt's container. */
export function containerSpec(
  task: TaskSpec,
  id: RunIdentity,
  limits: ResolvedLimits,
  cfg: DockerConfig,
  workerId: string,
  run: ContainerRun,
): Dockerode.ContainerCreateOptions {
  const memoryBytes = limits.memoryMb * 1024 * 1024;
  const net = networkSettings(run);
  const env = {
    ...taskEnv(task, id),
    ...(run.egress !== undefined ? proxyEnv(run.egress.proxyUrl) : {}),
  };
  const spec: Dockerode.ContainerCreateOptions = {
    Image: run.imageId ?? task.image,
    Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
    User: cfg.user,
    Labels: runLabels(id, workerId, run.deadlineAtMs),
    // PID 1 is the host's static busybox running DOCKER_SUPERVISOR: the deadline holds without the worker.
    Entrypoint: [
      CONTAINER_BUSYBOX,
      "sh",
      "-c",
      DOCKER_SUPERVISOR,
      "kairos-supervisor",
      containerDeadlineS(task),
      run.leaseDir === undefined ? "0" : "1",
      ...run.command,
    ],
    Tty: false,
    OpenStdin: false,
    AttachStdin: false,
    AttachStdout: true,
    AttachStderr: true,
    NetworkDisabled: net.NetworkDisabled,
    HostConfig: {
      ...net.host,
      ReadonlyRootfs: true,
      Tmpfs: tmpfsMounts(cfg, run.volumes ?? []),
      Ulimits: ulimits(cfg),
      CapDrop: ["ALL"],
      SecurityOpt: ["no-new-privileges"],
      Privileged: false,
      Binds: [],
      // The only host paths, read-only: one static binary (the in-container supervisor) and the
      // attempt's lease directory (its lease file, renewed by the worker).
      Mounts: [
        { Type: "bind", Source: cfg.busyboxPath, Target: CONTAINER_BUSYBOX, ReadOnly: true },
        ...(run.leaseDir === undefined
          ? []
          : [
              {
                Type: "bind" as const,
                Source: run.leaseDir,
                Target: CONTAINER_LEASE_DIR,
                ReadOnly: true,
              },
            ]),
      ],
      Devices: [],
      IpcMode: "private",
      PidsLimit: limits.pids + DOCKER_SUPERVISOR_PIDS, // the task keeps its whole budget
      Memory: memoryBytes,
      MemorySwap: memoryBytes,
      NanoCpus: Math.round(limits.cpus * 1e9),
      AutoRemove: false,
      RestartPolicy: { Name: "no" },
      LogConfig: { Type: "json-file", Config: { "max-size": LOG_MAX_SIZE, "max-file": "1" } },
    },
  };
  return spec;
}
