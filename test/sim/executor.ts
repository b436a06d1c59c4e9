/**
 * The simulation's sandbox: an `Executor` that "runs" each task for a seeded duration on the
 * simulation clock and records every execution — start and end, with run id, attempt, fence and
 * worker — into the shared `Ledger`, which the invariants read.
 *
 * A task is a container, not part of its worker process: it keeps running while the worker is
 * paused (its result reaches the worker through the process gate when it resumes). When the
 * worker process crashes, its tasks die with it (`crashAll`), like children of a killed process.
 *
 * What stops a task whose worker is frozen is modelled as production has it (src/sandbox/
 * supervisor.ts), one of two per worker, chosen by the seed:
 * - `docker`: the container counts down the lease the worker last renewed (`TaskSpec.leaseMs`,
 *   `Execution.renewLease`) in quarter seconds on its own (the simulation's, not the worker's)
 *   clock and is killed when it runs out;
 * - `process`: the supervisor watchdog polls the worker every 250 ms and kills the task once the
 *   worker is stopped (paused) or gone.
 * - `none` (self-tests only): nothing does — a frozen worker's task runs to its end.
 */
import type {
  Execution,
  ExecutionResult,
  Executor,
  RunIdentity,
  TaskSpec,
} from "../../src/sandbox/types.ts";
import { finishedExecution } from "../../src/sandbox/settle.ts";
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
  /** The run's scheduled_for (its identity's, KAIROS_SCHEDULED_FOR). */
  readonly scheduledForMs: number;
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

export type SimSandbox = "docker" | "process" | "none";

/** The supervisors' poll interval (src/sandbox/supervisor.ts WATCHDOG_POLL_S; the docker lease countdown's quarter). */
export const WATCHDOG_MS = 250;

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
  /** What kills a task whose worker is frozen (see the file comment). */
  sandbox: SimSandbox;
  /** The watchdogs' phase (a separate stream, so it shifts no other draw). */
  watchdogRandom: Random;
  /**
   * A share of tasks (drawn from `endedRandom`, a stream of its own) that end as they start: the
   * execution names its result (`Execution.ended`, as the noop executor's does) and is shared by
   * every such start of the same millisecond and exit code — the worker's path for these
   * (`#completeEnded`, one microtask per start loop) is then under the invariants too.
   */
  endedRandom?: Random;
  endedRate?: number;
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

  /** The last execution ended at its start, shared within its millisecond and exit code (see `endedRate`). */
  #lastEnded: { atMs: number; code: number; execution: Execution } | undefined;

  /** The ledger's record of an execution starting now (self-test `broken`: every one as run "broken", fence 1). */
  #ledgerStart(id: RunIdentity): LedgerEntry {
    const broken = this.#o.broken === true;
    return this.#o.ledger.start({
      runId: broken ? "broken" : id.runId,
      attempt: id.attempt,
      fence: broken ? 1 : id.fence,
      worker: this.#o.workerId,
      tenant: id.tenantId,
      job: id.jobId,
      scheduledForMs: Date.parse(id.scheduledFor),
      startMs: this.#o.sim.now(),
    });
  }

  start(task: TaskSpec, id: RunIdentity): Execution {
    const { sim, random, ledger, process } = this.#o;
    if (this.#o.endedRandom && this.#o.endedRandom.next() < (this.#o.endedRate ?? 0)) {
      const code = this.#o.endedRandom.next() < this.#o.failRate ? 1 : 0;
      ledger.end(this.#ledgerStart(id), sim.now(), `exit ${code}`);
      const atMs = process.clock.now();
      const last = this.#lastEnded;
      if (last !== undefined && last.atMs === atMs && last.code === code) return last.execution;
      const execution = finishedExecution(
        Object.freeze({
          outcome: "exited",
          exitCode: code,
          output: "",
          startedAtMs: atMs,
          finishedAtMs: atMs,
        }),
      );
      this.#lastEnded = { atMs, code, execution };
      return execution;
    }
    const [lo, hi] = this.#o.durationMs;
    const duration = lo + Math.floor(random.next() * (hi - lo + 1));
    const exitCode = random.next() < this.#o.failRate ? 1 : 0;
    const x = this.#ledgerStart(id);
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
      const r: ExecutionResult = {
        outcome,
        exitCode: code,
        output: "",
        startedAtMs,
        finishedAtMs: startedAtMs + (sim.now() - x.startMs),
      };
      // The worker hears about it when its process runs (never, if it crashed).
      process.gate(() => settle(r));
    };
    const timeoutMs = task.timeoutS * 1000;
    const cancel =
      duration > timeoutMs
        ? sim.setTimer(timeoutMs, () => finish("timed_out", null))
        : sim.setTimer(duration, () => finish("exited", exitCode));
    this.#live.set(x, () => finish("killed", null));
    // Until when (sim monotonic ms) the container's lease runs (docker; none: no lease).
    let leaseUntil =
      task.leaseMs === undefined ? Number.POSITIVE_INFINITY : sim.monoMs() + task.leaseMs;
    this.#watch(
      x,
      () => leaseUntil,
      () => finish("killed", null),
    );
    return {
      result,
      // A graceful kill (a cancel) takes the task's grace: SIGTERM, the task's trap, exit — up to
      // 600 ms here; a self-fencing kill (immediate: SIGKILL) is instant. A cap or overlap check
      // that forgets the grace is caught (a cancel released the tenant slot at once before).
      kill: async (_why, opts) => {
        if (opts?.immediate) return finish("killed", null);
        sim.setTimer(Math.floor(random.next() * 600), () => finish("killed", null));
      },
      // Called by the worker (so only while its process runs), like the lease file's rewrite.
      renewLease: (validForMs) => {
        if (task.leaseMs !== undefined) leaseUntil = sim.monoMs() + validForMs;
      },
    };
  }

  /**
   * The watchdog of one task, on the simulation's clock (it is not part of the worker process):
   * every WATCHDOG_MS from a random phase, docker kills the task once its lease has run out,
   * process once its worker is paused.
   */
  #watch(x: LedgerEntry, leaseUntil: () => number, kill: () => void): void {
    const { sim, sandbox, process } = this.#o;
    if (sandbox === "none" || (sandbox === "docker" && leaseUntil() === Number.POSITIVE_INFINITY))
      return;
    const tick = () => {
      if (!this.#live.has(x)) return;
      const out = sandbox === "docker" ? sim.monoMs() >= leaseUntil() : process.state !== "running";
      if (out) kill();
      else sim.setTimer(WATCHDOG_MS, tick);
    };
    sim.setTimer(1 + Math.floor(this.#o.watchdogRandom.next() * WATCHDOG_MS), tick);
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
