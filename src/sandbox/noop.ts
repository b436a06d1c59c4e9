/**
 * The `noop` executor: every attempt "exits 0" with empty output, immediately or after
 * `noop.durationMs` on the injected clock — or, for a task whose args are `["sleep", "<seconds>"]`,
 * after that long, as the process executor would (benchmarks mix task lengths so). It measures
 * the scheduler, not the sandbox. `kill()` ends a pending attempt as `killed`.
 */
import type { Execution, ExecutionResult, Executor, RunIdentity, TaskSpec } from "./types.ts";
import type { ExecutorConfig } from "./options.ts";
import { ResultLatch, errorResult, finishedExecution } from "./settle.ts";
import { validateTask } from "./identity.ts";

/** A noop attempt's result: exit 0 with no output, or killed. */
function noopResult(
  outcome: "exited" | "killed",
  startedAtMs: number,
  finishedAtMs: number,
): ExecutionResult {
  return {
    outcome,
    exitCode: outcome === "exited" ? 0 : null,
    output: "",
    startedAtMs,
    finishedAtMs,
  };
}

/** The longest `sleep` a noop task may ask for: a day. */
const MAX_SLEEP_MS = 86_400_000;

/** A `["sleep", "<seconds>"]` task's length in ms, or undefined (not such a task, or out of range). */
export function sleepMsOf(task: TaskSpec): number | undefined {
  if (task.args.length !== 2 || task.args[0] !== "sleep" || !/^\d+(\.\d+)?$/.test(task.args[1]!))
    return undefined;
  const ms = Math.round(Number(task.args[1]) * 1000);
  return ms <= MAX_SLEEP_MS ? ms : undefined;
}

/** Completes every task successfully without running anything. */
export class NoopExecutor implements Executor {
  readonly kind = "noop" as const;
  readonly #cfg: ExecutorConfig;
  readonly #live = new Map<() => void, { runId: string; attempt: number }>();
  #closed = false;
  /**
   * The immediate execution made last, and its millisecond: every start within the same
   * millisecond shares it (an ended execution and its result are read-only — the result is
   * frozen). A burst starts 200,000 attempts in one loop; a result, an execution and a promise
   * each would be garbage collected inside the loop.
   */
  #lastEnded: { atMs: number; execution: Execution } | undefined;

  constructor(cfg: ExecutorConfig) {
    this.#cfg = cfg;
  }

  start(task: TaskSpec, id: RunIdentity): Execution {
    const clock = this.#cfg.clock;
    const startedAtMs = clock.now();
    if (this.#closed)
      return finishedExecution(errorResult("executor_failure", "executor is closed", startedAtMs));
    const invalid = validateTask(task, false);
    if (invalid) return finishedExecution(errorResult(invalid.class, invalid.message, startedAtMs));
    const durationMs = sleepMsOf(task) ?? this.#cfg.noop.durationMs;
    // Ended at once (the default): no closure, no timer — a burst starts 200,000 of these in one loop.
    if (durationMs === 0) {
      const last = this.#lastEnded;
      if (last !== undefined && last.atMs === startedAtMs) return last.execution;
      const execution = Object.freeze(
        finishedExecution(Object.freeze(noopResult("exited", startedAtMs, startedAtMs))),
      );
      this.#lastEnded = { atMs: startedAtMs, execution };
      return execution;
    }
    const done = (outcome: "exited" | "killed"): ExecutionResult =>
      noopResult(outcome, startedAtMs, clock.now());
    const latch = new ResultLatch();
    const kill = (): void => {
      cancel();
      latch.settle(done("killed"));
    };
    const cancel = clock.setTimer(durationMs, () => latch.settle(done("exited")));
    this.#live.set(kill, { runId: id.runId, attempt: id.attempt });
    void latch.promise.then(() => this.#live.delete(kill));
    return {
      result: latch.promise,
      kill: async () => {
        kill();
        await latch.promise;
      },
    };
  }

  async reapOrphans(isLive: (runId: string, attempt: number) => boolean): Promise<number> {
    let n = 0;
    for (const [kill, k] of [...this.#live]) {
      if (!isLive(k.runId, k.attempt)) {
        kill();
        n++;
      }
    }
    return n;
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const kill of [...this.#live.keys()]) kill();
  }
}
