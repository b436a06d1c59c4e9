/**
 * Pure translation of (task, identity, node config) into the Docker Engine's container
 * create options: the lock-down (docs/sandbox.md explains each setting), the resource
 * limits resolved within the node maximums, and the labels that tie a container to its run.
 * No I/O here, so every setting is unit-checkable.
 */
import type Dockerode from "dockerode";
import type { ExecutionError, RunIdentity, TaskSpec } from "./types.ts";
import type { DockerConfig } from "./options.ts";
import { invalidTask, taskEnv } from "./identity.ts";

/** Label keys. `kairos.managed=true` + `kairos.worker_id` scope orphan reaping to one worker. */
export const LABEL = {
  managed: "kairos.managed",
  runId: "kairos.run_id",
  attempt: "kairos.attempt",
  jobId: "kairos.job_id",
  tenantId: "kairos.tenant_id",
  workerId: "kairos.worker_id",
  fence: "kairos.fence",
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
  if (!Number.isInteger(memoryMb) || memoryMb < MIN_MEMORY_MB) return invalidTask(`resources.memoryMb must be an integer >= ${MIN_MEMORY_MB}, got ${memoryMb}`);
  if (memoryMb > cfg.maxMemoryMb) return invalidTask(`resources.memoryMb ${memoryMb} exceeds this node's maximum of ${cfg.maxMemoryMb}`);
  if (!Number.isFinite(cpus) || cpus <= 0) return invalidTask(`resources.cpus must be a positive number, got ${cpus}`);
  if (cpus > cfg.maxCpus) return invalidTask(`resources.cpus ${cpus} exceeds this node's maximum of ${cfg.maxCpus}`);
  if (!Number.isInteger(pids) || pids < 1) return invalidTask(`resources.pids must be a positive integer, got ${pids}`);
  if (pids > cfg.maxPids) return invalidTask(`resources.pids ${pids} exceeds this node's maximum of ${cfg.maxPids}`);
  return { memoryMb, cpus, pids };
}

/** Labels for one attempt; `workerId` is the executor's own (what reapOrphans filters on). */
export function runLabels(id: RunIdentity, workerId: string): Record<string, string> {
  return {
    [LABEL.managed]: "true",
    [LABEL.runId]: id.runId,
    [LABEL.attempt]: String(id.attempt),
    [LABEL.jobId]: id.jobId,
    [LABEL.tenantId]: id.tenantId,
    [LABEL.workerId]: workerId,
    [LABEL.fence]: String(id.fence),
  };
}

/** The full create options of one attempt's container. */
export function containerSpec(
  task: TaskSpec,
  id: RunIdentity,
  limits: ResolvedLimits,
  cfg: DockerConfig,
  workerId: string,
): Dockerode.ContainerCreateOptions {
  const memoryBytes = limits.memoryMb * 1024 * 1024;
  const spec: Dockerode.ContainerCreateOptions = {
    Image: task.image,
    Env: Object.entries(taskEnv(task, id)).map(([k, v]) => `${k}=${v}`),
    User: cfg.user,
    Labels: runLabels(id, workerId),
    Tty: false,
    OpenStdin: false,
    AttachStdin: false,
    AttachStdout: true,
    AttachStderr: true,
    NetworkDisabled: true,
    HostConfig: {
      NetworkMode: "none",
      ReadonlyRootfs: true,
      Tmpfs: { "/tmp": `rw,noexec,nosuid,nodev,size=${cfg.tmpfsSizeMb}m,mode=1777` },
      CapDrop: ["ALL"],
      SecurityOpt: ["no-new-privileges"],
      Privileged: false,
      Binds: [],
      Mounts: [],
      Devices: [],
      IpcMode: "private",
      PidsLimit: limits.pids,
      Memory: memoryBytes,
      MemorySwap: memoryBytes,
      NanoCpus: Math.round(limits.cpus * 1e9),
      AutoRemove: false,
      RestartPolicy: { Name: "no" },
      LogConfig: { Type: "json-file", Config: { "max-size": LOG_MAX_SIZE, "max-file": "1" } },
    },
  };
  if (task.args.length > 0) spec.Cmd = [...task.args];
  return spec;
}
