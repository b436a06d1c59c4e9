/**
 * Task validation shared by every executor: the environment a task sees (its own `env`
 * plus the run identity as KAIROS_* variables, which always win) and the basic shape checks
 * (the rules themselves are task-rules.ts, which the API applies too).
 * Returns a classified error value instead of throwing so `start()` stays total.
 */
import type { ExecutionError, RunIdentity, TaskSpec } from "./types.ts";
import { ENV_NAME, hasNul, isReservedEnvName } from "./task-rules.ts";

/** The identity variables every attempt sees (delivery is at-least-once: customer code makes its side effects idempotent with them). */
export function identityEnv(id: RunIdentity): Record<string, string> {
  const env: Record<string, string> = {
    KAIROS_RUN_ID: id.runId,
    KAIROS_ATTEMPT: String(id.attempt),
    KAIROS_JOB_ID: id.jobId,
    KAIROS_SCHEDULED_FOR: id.scheduledFor,
    KAIROS_FENCE: String(id.fence),
    KAIROS_WORKER_ID: id.workerId,
  };
  // The attempt's signed credential (docs/security.md, "Per-run credentials").
  if (id.runToken !== undefined) env["KAIROS_RUN_TOKEN"] = id.runToken;
  return env;
}

/** Upper bound on a task's own environment (entries), so one task cannot bloat a spawn/create call. */
export const MAX_ENV_ENTRIES = 256;

export function invalidTask(message: string): ExecutionError {
  return { class: "invalid_task", message, retryable: false };
}

/** Checks what every executor needs; `requireArgs` is false for docker (empty args = image's CMD). */
export function validateTask(task: TaskSpec, requireArgs: boolean): ExecutionError | undefined {
  if (!Array.isArray(task.args) || task.args.some((a) => typeof a !== "string" || hasNul(a))) {
    return invalidTask("task.args must be strings without NUL bytes");
  }
  if (requireArgs && task.args.length === 0)
    return invalidTask("task.args must name a program (args[0])");
  if (!Number.isFinite(task.timeoutS) || task.timeoutS <= 0) {
    return invalidTask(`task.timeoutS must be a positive number of seconds, got ${task.timeoutS}`);
  }
  const keys = Object.keys(task.env);
  if (keys.length > MAX_ENV_ENTRIES)
    return invalidTask(`task.env has ${keys.length} entries; at most ${MAX_ENV_ENTRIES}`);
  for (const key of keys) {
    if (isReservedEnvName(key))
      return invalidTask(`task.env key ${key} is reserved (KAIROS_ prefix)`);
    if (!ENV_NAME.test(key))
      return invalidTask(`task.env key ${JSON.stringify(key)} is not a valid variable name`);
    const value = task.env[key];
    if (typeof value !== "string" || hasNul(value))
      return invalidTask(`task.env.${key} must be a string without NUL bytes`);
  }
  return undefined;
}

/** task.env + identity (identity last, so it wins). Call after `validateTask`. */
export function taskEnv(task: TaskSpec, id: RunIdentity): Record<string, string> {
  return { ...task.env, ...identityEnv(id) };
}
