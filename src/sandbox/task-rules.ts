/**
 * What a task must be to run on a worker — one set of rules for both ends: the API refuses a job
 * whose task breaks them (src/app), and the executors refuse such an attempt should one arrive
 * anyway (identity.ts, docker-spec.ts: a job stored before a rule, a forged offer).
 * - Environment names `^[A-Za-z_][A-Za-z0-9_]*$`, not starting with `KAIROS_` in any case.
 * - No NUL byte in an argument, an environment value or the image.
 * - Resources within the cluster's per-task maxima (`TaskLimits`: `--task-max-memory-mb`,
 *   `--task-max-cpus`, `--task-max-pids`, defaults 2048 MiB, 2 CPUs, 512 pids), which the
 *   operator gives every API and worker node alike: workers apply them as executor maxima, API
 *   nodes refuse a task above them (422 `policy_denied`).
 */
import { KairosError } from "../lib/errors.ts";

/** A valid environment variable name. */
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** The prefix of the variables Kairos sets (KAIROS_RUN_ID, …); reserved in any case. */
export const RESERVED_ENV_PREFIX = "KAIROS_";

/** Whether `name` is reserved for Kairos (`KAIROS_…`, `kairos_…`, `Kairos_…`). */
export function isReservedEnvName(name: string): boolean {
  return name.toUpperCase().startsWith(RESERVED_ENV_PREFIX);
}

/** Whether a string holds a NUL byte (it cannot reach an exec or the engine intact). */
export function hasNul(s: string): boolean {
  return s.includes("\0");
}

/** The cluster's per-task resource maxima (one frozen config, shared by API and worker nodes). */
export interface TaskLimits {
  readonly maxMemoryMb: number;
  readonly maxCpus: number;
  readonly maxPids: number;
}

/** The bounds of any task resource (and of the maxima an operator may set). */
export const TASK_RESOURCE_BOUNDS = {
  memoryMb: { min: 16, max: 65_536 },
  cpus: { min: 0.1, max: 64 },
  pids: { min: 8, max: 4096 },
} as const;

export const DEFAULT_TASK_LIMITS: TaskLimits = Object.freeze({
  maxMemoryMb: 2048,
  maxCpus: 2,
  maxPids: 512,
});

/** Options → defaults → validated, frozen maxima; `invalid_argument` naming the option. */
export function taskLimits(opts: Partial<TaskLimits> = {}): TaskLimits {
  const out = { ...DEFAULT_TASK_LIMITS, ...opts };
  const check = (
    field: string,
    v: number,
    b: { min: number; max: number },
    integer: boolean,
  ): void => {
    if (!Number.isFinite(v) || v < b.min || v > b.max || (integer && !Number.isInteger(v))) {
      throw new KairosError(
        "invalid_argument",
        `${field}: must be ${integer ? "an integer" : "a number"} ${b.min}-${b.max}, got ${v}`,
        { field },
      );
    }
  };
  check("task-max-memory-mb", out.maxMemoryMb, TASK_RESOURCE_BOUNDS.memoryMb, true);
  check("task-max-cpus", out.maxCpus, TASK_RESOURCE_BOUNDS.cpus, false);
  check("task-max-pids", out.maxPids, TASK_RESOURCE_BOUNDS.pids, true);
  return Object.freeze(out);
}

/**
 * The first resource of a task above the maxima, as a `policy_denied` error naming its field
 * (`task.resources.memory_mb`…), or undefined when all are within them.
 */
export function resourcesAboveLimits(
  r: { memory_mb?: number; cpus?: number; pids?: number } | undefined,
  limits: TaskLimits,
): KairosError | undefined {
  const over: [string, number | undefined, number, string][] = [
    ["memory_mb", r?.memory_mb, limits.maxMemoryMb, "MiB"],
    ["cpus", r?.cpus, limits.maxCpus, "CPUs"],
    ["pids", r?.pids, limits.maxPids, "processes"],
  ];
  for (const [name, value, max, unit] of over) {
    if (value !== undefined && value > max) {
      const field = `task.resources.${name}`;
      return new KairosError(
        "policy_denied",
        `${field}: ${value} is above this cluster's maximum of ${max} ${unit} per task`,
        { field },
      );
    }
  }
  return undefined;
}
