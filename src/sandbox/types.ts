/**
 * The sandbox contract: what a worker hands an executor (`TaskSpec` + `RunIdentity`) and
 * what it gets back (`ExecutionResult`). Every executor (`process`, `noop`, `docker`)
 * implements `Executor`; the WorkerActor codes only against these types.
 *
 * Gotchas: `start` never throws — every failure (bad task, missing image, engine down)
 * comes back as `outcome: "error"` with a classified `error`, so the caller has one path.
 * `kill()` resolves only once the process/container is gone and the result has settled.
 */

/** What to run. `image` is ignored by the process and noop executors. */
export interface TaskSpec {
  image: string;
  /** The command. For `process`, `args[0]` is the program (no shell). For `docker`, the container's Cmd (empty = image default). */
  args: string[];
  /** Extra environment; keys starting with `KAIROS_` are reserved (→ invalid_task). */
  env: Record<string, string>;
  /** Wall-clock limit in seconds, counted from the moment the task starts. */
  timeoutS: number;
  /** Per-job limits, each within the executor's node maximums (docker only). */
  resources?: { memoryMb?: number; cpus?: number; pids?: number };
  /**
   * How long the attempt may run without its worker renewing the lease (`Execution.renewLease`).
   * Docker enforces it inside the container, so it holds when the worker is killed, frozen or cut
   * off; the process executor's supervisor watches the worker itself instead. Absent: no lease.
   */
  leaseMs?: number;
  /**
   * Present exactly for a task with `network: "egress"` (docker only): the destinations its
   * tenant's policy allows (entries of egress-policy.ts; empty: none), which the worker's egress
   * proxy enforces. Absent: the container has no network at all.
   */
  egress?: { allow: readonly string[] };
  /**
   * The tenant's credential for the registry of `image` (docker only, for pulls; never put into the
   * container, its labels or any log). Used only when its `registry` is the image's.
   */
  registryAuth?: RegistryAuth;
}

/** A registry credential, as the engine's X-Registry-Auth carries it. */
export interface RegistryAuth {
  /** The normalised registry host (src/sandbox/image-policy.ts `parseImageRef`), e.g. `docker.io`. */
  readonly registry: string;
  readonly username: string;
  readonly password: string;
}

/** Who this attempt is: exported to the task as KAIROS_* variables and (docker) labels. */
export interface RunIdentity {
  runId: string;
  attempt: number;
  jobId: string;
  tenantId: string;
  /** RFC 3339 UTC instant of the occurrence. */
  scheduledFor: string;
  workerId: string;
  /** The attempt's fence (the lease it runs under); a ledger of executions can tell offers apart by it. */
  fence: number;
  /** The attempt's run token (a signed JWT), given to the task as KAIROS_RUN_TOKEN; absent: none. */
  runToken?: string;
}

/** Why an attempt could not run at all (as opposed to ran and failed). */
export type ErrorClass =
  | "image_not_found"
  | "image_unauthorized"
  | "registry_unreachable"
  | "invalid_task"
  | "permission_denied"
  | "executor_failure";

/** How an attempt ended. `killed` means `kill()` was called (lease lost, cancel, orphan reaping). */
export type Outcome = "exited" | "timed_out" | "killed" | "oom" | "error";

export interface ExecutionError {
  class: ErrorClass;
  message: string;
  retryable: boolean;
}

export interface ExecutionResult {
  outcome: Outcome;
  /** The process's exit code when known (also for timed_out/killed/oom when the engine reports one). */
  exitCode: number | null;
  /** Bounded tail of stdout and stderr interleaved (UTF-8 safe; default 4096 bytes). */
  output: string;
  /** Present exactly when `outcome === "error"`. */
  error?: ExecutionError;
  startedAtMs: number;
  finishedAtMs: number;
  /**
   * Docker: the registry digest (`sha256:…`) of the image the attempt ran in, when the image came
   * from a registry (absent for images built or imported on the host, and before a container).
   */
  imageDigest?: string;
}

/** A running attempt. */
export interface Execution {
  /** Settles exactly once; never rejects. */
  readonly result: Promise<ExecutionResult>;
  /**
   * The result, when the attempt had already ended as `start` returned it (a validation failure,
   * a closed executor, the noop executor's default): `result` resolves to the same. A caller may
   * take it from here instead of awaiting `result` — a burst's start loop starts 200,000 of these,
   * and a promise reaction per start was two closures and a promise each, all alive until the loop ends.
   * An execution with `ended` may be shared by several starts (the noop executor's, within a
   * millisecond): nothing may key on its identity, and its result is read-only (frozen there).
   */
  readonly ended?: Readonly<ExecutionResult>;
  /** Stops the attempt (outcome `killed` unless it already ended); resolves when it is gone. Never rejects. */
  /**
   * `immediate`: SIGKILL at once, no grace — for a worker fencing itself, whose lease margin
   * must not be spent waiting for a task to handle SIGTERM.
   */
  kill(reason: string, opts?: { immediate?: boolean }): Promise<void>;
  /** The worker's lease was acknowledged: the attempt may run `validForMs` more (see TaskSpec.leaseMs). */
  renewLease?(validForMs: number): void;
}

export type ExecutorKind = "process" | "noop" | "docker";

export interface Executor {
  readonly kind: ExecutorKind;
  /** Starts one attempt. Never throws; failures come back as outcome "error". */
  start(task: TaskSpec, id: RunIdentity): Execution;
  /**
   * Kills and removes containers/processes of this worker whose (runId, attempt) `isLive`
   * says are no longer leased. Returns how many were removed.
   */
  reapOrphans(isLive: (runId: string, attempt: number) => boolean): Promise<number>;
  /** Kills what is still running, waits for it, and refuses further starts. */
  close(): Promise<void>;
}

/**
 * The retry rule (README, "Retries and dead letters"): a non-zero exit, a timeout, an OOM kill and a
 * kill (lost lease) are retryable; an error is retryable when its class says so; exit 0 is done.
 */
export function isRetryable(r: ExecutionResult): boolean {
  switch (r.outcome) {
    case "exited":
      return r.exitCode !== 0;
    case "timed_out":
    case "oom":
    case "killed":
      return true;
    case "error":
      return r.error?.retryable ?? false;
  }
}

/** Default retryability per error class (executor_failure: the engine or host hiccuped). */
export const ERROR_CLASS_RETRYABLE: Readonly<Record<ErrorClass, boolean>> = {
  image_not_found: false,
  // The registry refused the tenant's credential (or its lack of one): a retry would be refused too.
  image_unauthorized: false,
  // The registry did not answer (or timed out): another attempt, later or elsewhere, may reach it.
  registry_unreachable: true,
  invalid_task: false,
  permission_denied: false,
  executor_failure: true,
};
