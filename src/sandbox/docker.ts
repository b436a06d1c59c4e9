/**
 * The `docker` executor: one locked-down container per attempt (settings in docker-spec.ts,
 * reasons in docs/sandbox.md), driven through dockerode.
 *
 * Life of an attempt: image by the pull policy (docker-image.ts) → its Entrypoint/Cmd → create
 * → attach (before start, so no output is lost) → start → timer(timeoutS) → wait → inspect on
 * failure (OOMKilled, or the supervisor's OOM marker) → drain output → remove (force). The container carries its own deadline
 * (supervisor.ts: PID 1 is a mounted static busybox that kills the task at timeoutS + grace)
 * and a `kairos.deadline_ms` label; every executor sweeps expired containers of ANY worker. Every engine call is awaited inside one try/catch, so an
 * engine failure becomes `outcome: "error"`, never an unhandled rejection.
 * Each attempt is a DockerExecution (docker-execution.ts); this module holds the executor: starts,
 * the sweep of expired containers and the reaping of orphans at start.
 */
import type Dockerode from "dockerode";
import type { Execution, Executor, RunIdentity, TaskSpec } from "./types.ts";
import type { ExecutorConfig } from "./options.ts";
import { validateTask } from "./identity.ts";
import { errorResult, finishedExecution, messageOf } from "./settle.ts";
import { LABEL, resolveLimits, type TaskEgress } from "./docker-spec.ts";
import { statusOf, withTimeout } from "./docker-errors.ts";
import { KairosError } from "../lib/errors.ts";
import { DockerExecution } from "./docker-execution.ts";
import { ImageProvider } from "./docker-image.ts";

/** How long past its deadline label a container may linger before any worker's sweep removes it. */
export const SWEEP_MARGIN_MS = 30_000;

/** Runs each attempt in its own locked-down container. Construct through `createExecutor("docker", …)`. */
export class DockerExecutor implements Executor {
  readonly kind = "docker" as const;
  readonly #docker: Dockerode;
  readonly #cfg: ExecutorConfig;
  readonly #images: ImageProvider;
  readonly #live = new Map<Execution, { runId: string; attempt: number }>();
  readonly #egress: TaskEgress | undefined;
  #closed = false;
  #cancelSweep: () => void = () => {};

  /** `egress`: the task network and its proxy (executor.ts), for tasks with network egress. */
  constructor(docker: Dockerode, cfg: ExecutorConfig, egress?: TaskEgress) {
    this.#docker = docker;
    this.#cfg = cfg;
    this.#egress = egress;
    this.#images = new ImageProvider(
      docker,
      cfg.docker.pull,
      cfg.docker.engineTimeoutMs,
      cfg.clock,
    );
    if (cfg.docker.sweepIntervalMs > 0) this.#scheduleSweep(0);
  }

  #scheduleSweep(delayMs: number): void {
    this.#cancelSweep = this.#cfg.clock.setTimer(delayMs, () => {
      void this.sweepExpired()
        .catch(() => 0) // engine down: the next sweep tries again
        .then(() => {
          if (!this.#closed) this.#scheduleSweep(this.#cfg.docker.sweepIntervalMs);
        });
    });
  }

  /**
   * Second line of defence behind the in-container deadline: force-removes every Kairos
   * container of ANY worker on this engine whose `kairos.deadline_ms` label is more than
   * SWEEP_MARGIN_MS in the past (running past its deadline, or exited and never removed
   * because its worker died). Runs at construction and every `docker.sweepIntervalMs`.
   */
  async sweepExpired(): Promise<number> {
    const list = await withTimeout(
      this.#docker.listContainers({
        all: true,
        filters: { label: [`${LABEL.managed}=true`, LABEL.deadlineMs] },
      }),
      this.#cfg.docker.engineTimeoutMs,
      "list containers",
      this.#cfg.clock,
    );
    const cutoff = this.#cfg.clock.now() - SWEEP_MARGIN_MS;
    let removed = 0;
    for (const c of list) {
      const deadline = Number(c.Labels[LABEL.deadlineMs]);
      if (!Number.isFinite(deadline) || deadline > cutoff) continue;
      try {
        await withTimeout(
          this.#docker.getContainer(c.Id).remove({ force: true, v: true }),
          this.#cfg.docker.engineTimeoutMs,
          "remove",
          this.#cfg.clock,
        );
        removed++;
      } catch {
        // 404: removed concurrently (e.g. by another worker's sweep); otherwise the next sweep retries.
      }
    }
    return removed;
  }

  start(task: TaskSpec, id: RunIdentity): Execution {
    const now = this.#cfg.clock.now();
    if (this.#closed)
      return finishedExecution(errorResult("executor_failure", "executor is closed", now));
    const invalid = validateTask(task, false);
    if (invalid) return finishedExecution(errorResult(invalid.class, invalid.message, now));
    if (typeof task.image !== "string" || task.image.trim() === "")
      return finishedExecution(errorResult("invalid_task", "task.image is required", now));
    const limits = resolveLimits(task, this.#cfg.docker);
    if ("class" in limits) return finishedExecution(errorResult(limits.class, limits.message, now));
    if (task.egress !== undefined && this.#egress === undefined)
      return finishedExecution(
        errorResult(
          "invalid_task",
          "the task asks for network egress, but this worker has no task network (kairos node --task-network)",
          now,
        ),
      );
    const exec = new DockerExecution(
      this.#docker,
      this.#images,
      this.#cfg,
      task,
      id,
      limits,
      this.#egress,
    );
    this.#live.set(exec, { runId: id.runId, attempt: id.attempt });
    void exec.result.then(() => this.#live.delete(exec));
    return exec;
  }

  async reapOrphans(isLive: (runId: string, attempt: number) => boolean): Promise<number> {
    let list: Dockerode.ContainerInfo[];
    try {
      list = await withTimeout(
        this.#docker.listContainers({
          all: true,
          filters: { label: [`${LABEL.managed}=true`, `${LABEL.workerId}=${this.#cfg.workerId}`] },
        }),
        this.#cfg.docker.engineTimeoutMs,
        "list containers",
        this.#cfg.clock,
      );
    } catch (e) {
      throw new KairosError(
        "unavailable",
        `could not list this worker's containers: ${messageOf(e)}`,
        { cause: e },
      );
    }
    const mine = new Map([...this.#live].map(([exec, k]) => [`${k.runId}/${k.attempt}`, exec]));
    let reaped = 0;
    for (const c of list) {
      const runId = c.Labels[LABEL.runId] ?? "";
      const attempt = Number(c.Labels[LABEL.attempt]);
      if (isLive(runId, attempt)) continue;
      const exec = mine.get(`${runId}/${attempt}`);
      try {
        if (exec) await exec.kill("orphan: lease no longer held");
        else
          await withTimeout(
            this.#docker.getContainer(c.Id).remove({ force: true, v: true }),
            this.#cfg.docker.engineTimeoutMs,
            "remove",
            this.#cfg.clock,
          );
        reaped++;
      } catch (e) {
        if (statusOf(e) === 404) reaped++; // removed concurrently: it is gone either way
      }
    }
    return reaped;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#cancelSweep();
    await Promise.all([...this.#live.keys()].map((e) => e.kill("executor closed")));
    await this.#egress?.proxy.close();
  }
}
