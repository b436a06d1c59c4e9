/**
 * The sandbox's entry points: the contract (re-exported from types.ts), the factory that
 * builds an executor of an explicit kind, and the detection that tells `kairos dev` which
 * kind this machine supports and why. The process executor is never a silent fallback:
 * `createExecutor("docker", …)` fails loudly when no engine answers, and refuses an engine
 * that runs containers without seccomp (its syscall filter is part of the lock-down).
 */
import Dockerode from "dockerode";
import { KairosError } from "../lib/errors.ts";
import { systemClock } from "../lib/clock.ts";
import type { Executor, ExecutorKind } from "./types.ts";
import { resolveExecutorOptions, type ExecutorConfig, type ExecutorOptions } from "./options.ts";
import { ProcessExecutor } from "./process.ts";
import { NoopExecutor } from "./noop.ts";
import { DockerExecutor } from "./docker.ts";
import { engineMessage, withTimeout } from "./docker-errors.ts";
import { staticBusyboxProblem } from "./supervisor.ts";
import { inspectTaskNetwork } from "./task-network.ts";
import { EgressProxy } from "./egress-proxy.ts";
import type { TaskEgress } from "./docker-spec.ts";

export type {
  ErrorClass,
  Execution,
  ExecutionError,
  ExecutionResult,
  Executor,
  ExecutorKind,
  Outcome,
  RegistryAuth,
  RunIdentity,
  TaskSpec,
} from "./types.ts";
export { isRetryable } from "./types.ts";
export type {
  ExecutorOptions,
  ExecutorLog,
  DockerOptions,
  EgressOptions,
  ProcessOptions,
  NoopOptions,
  PullPolicy,
} from "./options.ts";

const PING_TIMEOUT_MS = 3000;

function dockerClient(socketPath: string | undefined): Dockerode {
  return socketPath === undefined ? new Dockerode() : new Dockerode({ socketPath });
}

/** Where dockerode will connect (for messages). */
function engineAddress(socketPath: string | undefined): string {
  return socketPath ?? process.env["DOCKER_HOST"] ?? "/var/run/docker.sock";
}

/** Asks the engine for its version; resolves to it, or rejects with the reason it did not answer. */
async function pingEngine(docker: Dockerode, timeoutMs: number): Promise<string> {
  const v = await withTimeout(docker.version(), timeoutMs, "version", systemClock);
  return `${v.Version} (API ${v.ApiVersion})`;
}

/**
 * Why an engine's `docker info` SecurityOptions (e.g. `["name=seccomp,profile=default"]`) do not
 * give containers a seccomp filter, or undefined when they do.
 */
export function seccompProblem(
  securityOptions: readonly string[] | null | undefined,
): string | undefined {
  const opts = securityOptions ?? [];
  const seccomp = opts.find((o) => o.split(",").includes("name=seccomp"));
  if (seccomp === undefined)
    return `the engine reports no seccomp support (SecurityOptions: ${JSON.stringify(opts)})`;
  if (/(^|,)profile=unconfined(,|$)/.test(seccomp))
    return `the engine's default seccomp profile is unconfined (${seccomp})`;
  return undefined;
}

/**
 * Builds an executor of `kind`. Options are validated first (`invalid_argument`); for
 * "docker" the engine must answer, else `KairosError("unavailable")` with the address tried.
 */
export async function createExecutor(kind: ExecutorKind, opts: ExecutorOptions): Promise<Executor> {
  const cfg = resolveExecutorOptions(opts);
  switch (kind) {
    case "process":
      return new ProcessExecutor(cfg);
    case "noop":
      return new NoopExecutor(cfg);
    case "docker": {
      const docker = dockerClient(cfg.docker.socketPath);
      try {
        await pingEngine(docker, Math.min(PING_TIMEOUT_MS, cfg.docker.engineTimeoutMs));
      } catch (e) {
        throw new KairosError(
          "unavailable",
          `the docker executor needs a Docker engine, but none answered at ${engineAddress(cfg.docker.socketPath)}: ${engineMessage(e)}`,
          { cause: e },
        );
      }
      if (cfg.docker.requireSeccomp) {
        let secOpts: string[] | undefined;
        try {
          const info = (await withTimeout(
            docker.info(),
            cfg.docker.engineTimeoutMs,
            "info",
            systemClock,
          )) as { SecurityOptions?: string[] };
          secOpts = info.SecurityOptions;
        } catch (e) {
          throw new KairosError(
            "unavailable",
            `the docker executor could not read the engine's security options: ${engineMessage(e)}`,
            { cause: e },
          );
        }
        const noSeccomp = seccompProblem(secOpts);
        if (noSeccomp !== undefined) {
          throw new KairosError(
            "unavailable",
            `the docker executor refuses to run tenant code on this engine: ${noSeccomp}. Run the engine with seccomp (the default), or set docker.requireSeccomp=false knowingly`,
            {
              field: "docker.requireSeccomp",
            },
          );
        }
      }
      const problem = await staticBusyboxProblem(cfg.docker.busyboxPath);
      if (problem !== undefined) {
        throw new KairosError(
          "unavailable",
          `the docker executor mounts a static busybox into every container to enforce its deadline: ${problem}`,
          {
            field: "docker.busyboxPath",
          },
        );
      }
      return new DockerExecutor(docker, cfg, await startEgress(docker, cfg));
    }
    default:
      throw new KairosError("invalid_argument", `unknown executor kind ${JSON.stringify(kind)}`, {
        field: "executor",
      });
  }
}

/**
 * The task network and its egress proxy, when the node has one: the network must be an internal
 * bridge (task-network.ts); the proxy listens on its gateway.
 */
async function startEgress(
  docker: Dockerode,
  cfg: ExecutorConfig,
): Promise<TaskEgress | undefined> {
  const e = cfg.docker.egress;
  if (e === undefined) return undefined;
  const net = await inspectTaskNetwork(docker, e.network);
  const proxy = await EgressProxy.listen(
    {
      host: net.gateway,
      port: e.port,
      allowInternal: e.allowInternal,
      maxConnectionsPerRun: e.maxConnectionsPerRun,
      maxBytesPerRun: e.maxBytesPerRun,
      maxConnections: e.maxConnections,
      connectTimeoutMs: e.connectTimeoutMs,
      idleTimeoutMs: e.idleTimeoutMs,
    },
    { clock: cfg.clock, log: cfg.log },
  );
  cfg.log("info", "egress proxy listening", {
    network: net.name,
    address: `${net.gateway}:${proxy.port}`,
    allow_internal: e.allowInternal.source,
  });
  return { network: net.name, proxy };
}

/**
 * Which executor this machine supports: "docker" when an engine answers, else "process",
 * with a sentence for the operator saying why (printed by `kairos dev`).
 */
export async function detectExecutor(
  opts: { socketPath?: string } = {},
): Promise<{ kind: "docker" | "process"; reason: string }> {
  const where = engineAddress(opts.socketPath);
  try {
    const version = await pingEngine(dockerClient(opts.socketPath), PING_TIMEOUT_MS);
    return {
      kind: "docker",
      reason: `a Docker engine ${version} answered at ${where}; tasks run in locked-down containers`,
    };
  } catch (e) {
    return {
      kind: "process",
      reason: `no Docker engine answered at ${where} (${engineMessage(e)}); tasks run as local processes WITHOUT isolation (development only)`,
    };
  }
}
