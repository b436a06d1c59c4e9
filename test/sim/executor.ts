/**
 * The simulation's sandbox: an `Executor` that "runs" each task for a seeded duration on the
 * simulation clock and records every execution — start and end, with run id, attempt, fence and
 * worker — into the shared `Ledger`, which the invariants read.
 *
 * A task is a container, not part of its worker process: it keeps running while the worker is
 * paused (its result reaches the worker through the process gate when it resumes). When the
 * worker process crashes, its tasks die with it (`crashAll`), like children of a killed process.
 */
import type { Execution, ExecutionResult, Executor, RunIdentity, TaskSpec } from "../../src/sandbox/types.ts";
import type { Random } from "../../src/lib/random.ts";
import type { SimClock, SimProcess } from "./sim-clock.ts";

export interface LedgerEntry {
  readonly seq: number;
  readonly runId: string;
  readonly attempt: number;
  readonly fence: number;
  readonly worker: string;
  readonly tenant: string;
  readonly job: string;
  readonly startMs: number;
  endMs: number | null;
  outcome: string | null;
}

/** Every execution of the simulation; `onStart`/`onEnd` let the invariants check incrementally. */
export class Ledger {
  readonly all: LedgerEntry[] = [];
  readonly #active = new Set<LedgerEntry>();
  onStart: ((e: LedgerEntry, active: ReadonlySet<LedgerEntry>) => void) | undefined;
  onEnd: ((e: LedgerEntry) => void) | undefined;

  start(e: Omit<LedgerEntry, "seq" | "endMs" | "outcome">): LedgerEntry {
    const x: LedgerEntry = { ...e, seq: this.all.length, endMs: null, outcome: null };
    this.all.push(x);
    this.#active.add(x);
    this.onStart?.(x, this.#active);
    return x;
  }

  end(x: LedgerEntry, atMs: number, outcome: string): void {
    if (x.endMs !== null) return;
    x.endMs = atMs;
    x.outcome = outcome;
    this.#active.delete(x);
    this.onEnd?.(x);
  }

  get active(): ReadonlySet<LedgerEntry> {
    return this.#active;
  }
}

export interface SimExecutorOptions {
  workerId: string;
  sim: SimClock;
  process: SimProcess;
  random: Random;
  ledger: Ledger;
  /** Task duration range (ms). */
  durationMs: readonly [number, number];
  /** Probability that a task exits non-zero (retryable). */
  failRate: number;
  /**
   * Self-test only: the ledger sees every execution as run "broken", fence 1 — as if one fence
   * had been offered to every worker — so invariant (a) must fire.
   */
  broken?: boolean;
}

export class SimExecutor implements Executor {
  readonly kind = "noop" as const;
  readonly #o: SimExecutorOptions;
  readonly #live = new Map<LedgerEntry, () => void>();

  constructor(o: SimExecutorOptions) {
    this.#o = o;
  }

  start(task: TaskSpec, id: RunIdentity): Execution {
    const { sim, random, ledger, process } = this.#o;
    const [lo, hi] = this.#o.durationMs;
    const duration = lo + Math.floor(random.next() * (hi - lo + 1));
    const exitCode = random.next() < this.#o.failRate ? 1 : 0;
    const x = ledger.start({
      runId: this.#o.broken ? "broken" : id.runId, attempt: id.attempt, fence: this.#o.broken ? 1 : id.fence, worker: this.#o.workerId,
      tenant: id.tenantId, job: id.jobId, startMs: sim.now(),
    });
    const startedAtMs = process.clock.now();
    let settle!: (r: ExecutionResult) => void;
    const result = new Promise<ExecutionResult>((r) => (settle = r));
    let done = false;
    const finish = (outcome: "exited" | "killed" | "timed_out", code: number | null) => {
      if (done) return;
      done = true;
      cancel();
      this.#live.delete(x);
      ledger.end(x, sim.now(), outcome === "exited" ? `exit ${code}` : outcome);
      const r: ExecutionResult = { outcome, exitCode: code, output: "", startedAtMs, finishedAtMs: startedAtMs + (sim.now() - x.startMs) };
      // The worker hears about it when its process runs (never, if it crashed).
      process.gate(() => settle(r));
    };
    const timeoutMs = task.timeoutS * 1000;
    const cancel = duration > timeoutMs
      ? sim.setTimer(timeoutMs, () => finish("timed_out", null))
      : sim.setTimer(duration, () => finish("exited", exitCode));
    this.#live.set(x, () => finish("killed", null));
    return {
      result,
      // A graceful kill (a cancel) takes the task's grace: SIGTERM, the task's trap, exit — up to
      // 600 ms here; a self-fencing kill (immediate: SIGKILL) is instant. A cap or overlap check
      // that forgets the grace is caught (a cancel released the tenant slot at once before).
      kill: async (_why, opts) => {
        if (opts?.immediate) return finish("killed", null);
        sim.setTimer(Math.floor(random.next() * 600), () => finish("killed", null));
      },
    };
  }

  async reapOrphans(): Promise<number> {
    return 0;
  }

  async close(): Promise<void> {
    this.crashAll();
  }

  /** The worker process died: its tasks die with it. */
  crashAll(): void {
    for (const kill of [...this.#live.values()]) kill();
  }
}
