/**
 * Small helpers shared by executors: a result that settles exactly once, and an
 * `Execution` that is already over (validation failures, closed executor).
 */
import type { ErrorClass, Execution, ExecutionResult } from "./types.ts";
import { ERROR_CLASS_RETRYABLE } from "./types.ts";

/** A promise of an `ExecutionResult` that the owner settles once; later settles are ignored. */
export class ResultLatch {
  readonly promise: Promise<ExecutionResult>;
  #resolve!: (r: ExecutionResult) => void;
  #settled = false;
  constructor() {
    this.promise = new Promise((resolve) => {
      this.#resolve = resolve;
    });
  }
  get settled(): boolean {
    return this.#settled;
  }
  settle(r: ExecutionResult): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#resolve(r);
  }
}

/** An error result; `retryable` defaults to the class's rule. */
export function errorResult(
  cls: ErrorClass,
  message: string,
  atMs: number,
  retryable = ERROR_CLASS_RETRYABLE[cls],
): ExecutionResult {
  return {
    outcome: "error",
    exitCode: null,
    output: "",
    error: { class: cls, message, retryable },
    startedAtMs: atMs,
    finishedAtMs: atMs,
  };
}

/** The `kill` of an execution that has already ended: one function for all of them. */
const killNothing = (): Promise<void> => Promise.resolve();

/**
 * An execution that has already ended with `result` (also as `ended`); `kill` is a no-op. (No
 * closure per call: a refused task makes one per start; the noop executor one per millisecond,
 * shared by that millisecond's starts — a burst starts 200,000 in one loop.)
 */
export function finishedExecution(result: ExecutionResult): Execution {
  return { result: Promise.resolve(result), ended: result, kill: killNothing };
}

/** Best-effort message of an unknown thrown value. */
export function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
