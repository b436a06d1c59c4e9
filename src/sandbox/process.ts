/**
 * The `process` executor: each attempt is a child process, for development and tests where no
 * Docker engine runs. NOT a sandbox: the task runs with the worker's user and sees its host.
 *
 * - `args[0]` is the program, exec'd with its args as they are (no shell parsing); `task.image` is ignored.
 * - Environment: only PATH (the worker's), `task.env` and the KAIROS_* identity.
 * - The child leads its own process group (detached), so a timeout or `kill()` reaches the
 *   whole tree: SIGTERM, then SIGKILL after `process.killGraceMs`.
 * - Container semantics: when the main process exits, what is left of its group is killed.
 * - The task never outlives its worker: it is started through PROCESS_SUPERVISOR
 *   (supervisor.ts), whose watchdog in the task's group SIGKILLs the group when the worker
 *   process is gone or at timeoutS + killGraceMs + SUPERVISOR_SLACK_MS, even if this
 *   process is frozen. Spawn errors are found up front (`checkProgram`), since the shell,
 *   not node, executes the program.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { constants as osConstants } from "node:os";
import type { Execution, ExecutionResult, Executor, RunIdentity, TaskSpec } from "./types.ts";
import type { ExecutorConfig } from "./options.ts";
import { OutputTail } from "./output-tail.ts";
import { taskEnv, validateTask } from "./identity.ts";
import { ResultLatch, errorResult, finishedExecution, messageOf } from "./settle.ts";
import { PROCESS_SUPERVISOR, checkProgram } from "./supervisor.ts";

/** After the main process exits, how long to wait for stdio to close before giving up on it. */
const STDIO_DRAIN_MS = 1000;
/** The supervisor's deadline trails the executor's own (timeout, then grace) by this much. */
export const SUPERVISOR_SLACK_MS = 1000;
const DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin";
/** The name the supervising shell runs under ($0; shows in error messages of the shell). */
const SUPERVISOR_NAME = "kairos-supervisor";

type StopReason = "timed_out" | "killed";

function signalExitCode(signal: NodeJS.Signals | null): number | null {
  if (signal === null) return null;
  const n = osConstants.signals[signal];
  return typeof n === "number" ? 128 + n : null;
}

class ProcessExecution implements Execution {
  readonly result: Promise<ExecutionResult>;
  readonly #latch = new ResultLatch();
  readonly #cfg: ExecutorConfig;
  readonly #tail: OutputTail;
  readonly #child: ChildProcess;
  readonly #timeoutMs: number;
  #startedAtMs: number;
  #stopReason: StopReason | undefined;
  #exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  #cancels: (() => void)[] = [];

  constructor(cfg: ExecutorConfig, task: TaskSpec, id: RunIdentity) {
    this.#cfg = cfg;
    this.result = this.#latch.promise;
    this.#tail = new OutputTail(cfg.outputTailBytes);
    this.#startedAtMs = cfg.clock.now();
    this.#timeoutMs = task.timeoutS * 1000;
    const [program, ...rest] = task.args as [string, ...string[]];
    const workerPath = process.env["PATH"] ?? DEFAULT_PATH;
    const env: Record<string, string> = { PATH: workerPath, ...taskEnv(task, id) };
    const deadlineS = (
      (task.timeoutS * 1000 + cfg.process.killGraceMs + SUPERVISOR_SLACK_MS) /
      1000
    ).toFixed(3);
    this.#child = spawn(
      "/bin/sh",
      [
        "-c",
        PROCESS_SUPERVISOR,
        SUPERVISOR_NAME,
        workerPath,
        String(process.pid),
        deadlineS,
        program,
        ...rest,
      ],
      {
        env,
        detached: true,
        stdio: ["ignore", "pipe", "pipe"],
        ...(cfg.process.cwd === undefined ? {} : { cwd: cfg.process.cwd }),
      },
    );
    const child = this.#child;
    child.stdout?.on("data", (d: Buffer) => this.#tail.write(d));
    child.stderr?.on("data", (d: Buffer) => this.#tail.write(d));
    child.on("error", (e: NodeJS.ErrnoException) => this.#onError(e));
    child.once("spawn", () => {
      this.#startedAtMs = cfg.clock.now();
      this.#cancels.push(cfg.clock.setTimer(task.timeoutS * 1000, () => this.#stop("timed_out")));
    });
    child.once("exit", (code, signal) => {
      this.#exit = { code, signal };
      this.#signalGroup("SIGKILL"); // leftovers of the tree die with their leader, as in a container
      this.#cancels.push(cfg.clock.setTimer(STDIO_DRAIN_MS, () => this.#finish()));
    });
    child.once("close", () => this.#finish());
  }

  kill(_reason: string, opts?: { immediate?: boolean }): Promise<void> {
    if (opts?.immediate) {
      // SIGKILL alone: no SIGTERM first, which a task could catch and exit 0 on in between — an
      // exit code 0 after an immediate kill then means the task had ended by itself before it
      // (worker.ts `endedBeforeKill`), never that the kill let it finish.
      if (!this.#latch.settled && this.#exit === undefined) this.#stopReason ??= "killed";
      this.#signalGroup("SIGKILL");
    } else {
      this.#stop("killed");
    }
    return this.result.then(() => undefined);
  }

  #onError(e: NodeJS.ErrnoException): void {
    if (this.#child.pid !== undefined) return; // a late signalling error; exit/close still come
    // The program itself was checked in start(); what failed here is the supervising shell.
    const r = errorResult(
      "executor_failure",
      `could not spawn the supervisor /bin/sh: ${messageOf(e)}`,
      this.#cfg.clock.now(),
    );
    this.#settle({ ...r, startedAtMs: this.#startedAtMs });
  }

  #stop(reason: StopReason): void {
    if (this.#latch.settled || this.#exit !== undefined || this.#stopReason !== undefined) return;
    this.#stopReason = reason;
    this.#signalGroup("SIGTERM");
    this.#cancels.push(
      this.#cfg.clock.setTimer(this.#cfg.process.killGraceMs, () => this.#signalGroup("SIGKILL")),
    );
  }

  #signalGroup(signal: NodeJS.Signals): void {
    const pid = this.#child.pid;
    if (pid === undefined) return;
    try {
      process.kill(-pid, signal);
    } catch {
      // ESRCH: the group is already gone.
    }
  }

  #finish(): void {
    if (this.#exit === undefined) return; // "close" without "exit" only follows a spawn error
    const { code, signal } = this.#exit;
    // SIGKILL after the timeout with no stop of ours: the supervisor's deadline fired first.
    const supervisorDeadline =
      signal === "SIGKILL" && this.#cfg.clock.now() - this.#startedAtMs >= this.#timeoutMs;
    this.#child.stdout?.destroy();
    this.#child.stderr?.destroy();
    this.#settle({
      outcome: this.#stopReason ?? (supervisorDeadline ? "timed_out" : "exited"),
      exitCode: code ?? signalExitCode(signal),
      output: this.#tail.text(),
      startedAtMs: this.#startedAtMs,
      finishedAtMs: this.#cfg.clock.now(),
    });
  }

  #settle(r: ExecutionResult): void {
    for (const cancel of this.#cancels.splice(0)) cancel();
    this.#latch.settle(r);
  }
}

/** Runs tasks as local child processes (development and tests; not isolated). */
export class ProcessExecutor implements Executor {
  readonly kind = "process" as const;
  readonly #cfg: ExecutorConfig;
  readonly #live = new Map<Execution, { runId: string; attempt: number }>();
  #closed = false;

  constructor(cfg: ExecutorConfig) {
    this.#cfg = cfg;
  }

  start(task: TaskSpec, id: RunIdentity): Execution {
    const now = this.#cfg.clock.now();
    if (this.#closed)
      return finishedExecution(errorResult("executor_failure", "executor is closed", now));
    const invalid = validateTask(task, true);
    if (invalid) return finishedExecution(errorResult(invalid.class, invalid.message, now));
    const path = task.env["PATH"] ?? process.env["PATH"] ?? DEFAULT_PATH;
    const unrunnable = checkProgram(task.args[0]!, path, this.#cfg.process.cwd ?? process.cwd());
    if (unrunnable)
      return finishedExecution(errorResult(unrunnable.class, unrunnable.message, now));
    let exec: ProcessExecution;
    try {
      exec = new ProcessExecution(this.#cfg, task, id);
    } catch (e) {
      // spawn throws synchronously for malformed arguments (e.g. invalid option types).
      return finishedExecution(
        errorResult("invalid_task", `could not spawn: ${messageOf(e)}`, now),
      );
    }
    this.#live.set(exec, { runId: id.runId, attempt: id.attempt });
    void exec.result.then(() => this.#live.delete(exec));
    return exec;
  }

  async reapOrphans(isLive: (runId: string, attempt: number) => boolean): Promise<number> {
    const doomed = [...this.#live].filter(([, k]) => !isLive(k.runId, k.attempt)).map(([e]) => e);
    await Promise.all(doomed.map((e) => e.kill("orphan: lease no longer held")));
    return doomed.length;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#live.keys()].map((e) => e.kill("executor closed")));
  }
}
