/**
 * Shared fixtures of the sandbox suites: run identities with unique run ids, and task specs.
 */
import { randomUUID } from "node:crypto";
import type { RunIdentity, TaskSpec } from "../../../src/sandbox/index.ts";

export function identity(workerId: string, attempt = 1): RunIdentity {
  return {
    runId: `run-${randomUUID()}`,
    attempt,
    jobId: "job-1",
    tenantId: "tenant-1",
    scheduledFor: "2026-03-08T07:00:00Z",
    workerId,
    fence: 1,
  };
}

export function task(args: string[], extra: Partial<TaskSpec> = {}): TaskSpec {
  return { image: "", args, env: {}, timeoutS: 30, ...extra };
}

/** A unique worker id per test file run, so parallel files never reap each other's containers. */
export function uniqueWorkerId(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}
