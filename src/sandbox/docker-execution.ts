/**
 * One attempt in its own container, from image to removal (the life of an attempt: docker.ts).
 *
 * Gotchas: `kill()` may arrive in any phase; before start the container is removed without
 * running. The timeout and `kill()` send SIGKILL (a shell as PID 1 ignores SIGTERM). A note
 * naming the reason is appended to the output tail for oom, timed_out and killed attempts.
 */
import { Writable } from "node:stream";
import { chmodSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type Dockerode from "dockerode";
import type { Execution, ExecutionResult, Outcome, RunIdentity, TaskSpec } from "./types.ts";
import type { ExecutorConfig } from "./options.ts";
import { OutputTail } from "./output-tail.ts";
import { ResultLatch, errorResult, messageOf } from "./settle.ts";
import {
  CONTAINER_DEADLINE_GRACE_S,
  containerSpec,
  effectiveCommand,
  imageVolumes,
  type ResolvedLimits,
  type TaskEgress,
} from "./docker-spec.ts";
import type { EgressGrant } from "./egress-proxy.ts";
import { MARK_NOT_EXECUTABLE, MARK_NOT_FOUND, leaseFileContent, oomMarked } from "./supervisor.ts";
import {
  classifyEngineError,
  classifyPullFailure,
  engineMessage,
  statusOf,
  withTimeout,
  type EnginePhase,
} from "./docker-errors.ts";
import { imageCarriesName } from "./image-policy.ts";
import { PullFailure, type ImageProvider } from "./docker-image.ts";

/** After the container exits, how long to wait for the attach stream to deliver the rest. */
const OUTPUT_DRAIN_MS = 2000;
/** Bytes of output kept apart from the tail to read the supervisor's marker line. */
const PROBE_BYTES = 512;

type StopReason = "timed_out" | "killed";

class PhaseError extends Error {
  constructor(
    readonly phase: EnginePhase,
    override readonly cause: unknown,
  ) {
    super(`${phase}: ${messageOf(cause)}`);
  }
}

export class DockerExecution implements Execution {
  readonly result: Promise<ExecutionResult>;
  readonly #latch = new ResultLatch();
  readonly #docker: Dockerode;
  readonly #images: ImageProvider;
  readonly #cfg: ExecutorConfig;
  readonly #task: TaskSpec;
  /** Aborts a pull under way when the attempt is stopped. */
  readonly #abort = new AbortController();
  /** The registry digest of the image this attempt runs (docker-image.ts), once known. */
  #imageDigest: string | undefined;
  readonly #tail: OutputTail;
  readonly #probe = new OutputTail(PROBE_BYTES);
  #container: Dockerode.Container | undefined;
  #running = false;
  #exited = false;
  #stopReason: StopReason | undefined;
  #startedAtMs: number;
  readonly #egress: TaskEgress | undefined;
  /** The attempt's admission to the egress proxy, from create to removal. */
  #grant: EgressGrant | undefined;

  constructor(
    docker: Dockerode,
    images: ImageProvider,
    cfg: ExecutorConfig,
    task: TaskSpec,
    id: RunIdentity,
    limits: ResolvedLimits,
    egress?: TaskEgress,
  ) {
    this.#docker = docker;
    this.#images = images;
    this.#cfg = cfg;
    this.#task = task;
    this.#egress = egress;
    this.#tail = new OutputTail(cfg.outputTailBytes);
    this.#startedAtMs = cfg.clock.now();
    this.result = this.#latch.promise;
    void this.#run(id, limits).then((r) => {
      this.#grant?.close(); // the container is gone: cut whatever it left open
      this.#latch.settle(r);
      if (this.#leaseDir !== undefined) rmSync(this.#leaseDir, { recursive: true, force: true });
    });
  }

  /** The container id once created (for tests and diagnostics). */
  get containerId(): string | undefined {
    return this.#container?.id;
  }

  kill(_reason: string): Promise<void> {
    this.#stop("killed");
    return this.result.then(() => undefined);
  }

  // The lease file (TaskSpec.leaseMs, supervisor.ts): renewed in place by rename, so the
  // container's watchdog never reads a half-written value.
  #leaseDir: string | undefined;
  #leaseSeq = 0;
  #leaseUntilMono = 0;

  renewLease(validForMs: number): void {
    this.#leaseUntilMono = this.#cfg.clock.monoMs() + validForMs;
    this.#writeLease();
  }

  #writeLease(): void {
    const dir = this.#leaseDir;
    if (dir === undefined || this.#latch.settled) return;
    try {
      const tmp = join(dir, `until.${++this.#leaseSeq}`);
      writeFileSync(
        tmp,
        leaseFileContent(this.#leaseSeq, this.#leaseUntilMono - this.#cfg.clock.monoMs()),
      );
      renameSync(tmp, join(dir, "until"));
    } catch (e) {
      // Not renewed: the container's countdown runs out and kills it (safe, never longer).
      this.#cfg.log("warn", "could not renew a container's lease file", { dir, err: messageOf(e) });
    }
  }

  #quick<T>(p: Promise<T>, what: string): Promise<T> {
    return withTimeout(p, this.#cfg.docker.engineTimeoutMs, what, this.#cfg.clock);
  }

  #stop(reason: StopReason): void {
    if (this.#latch.settled || this.#exited || this.#stopReason !== undefined) return;
    this.#stopReason = reason;
    this.#abort.abort();
    if (this.#running) void this.#killContainer();
  }

  async #killContainer(): Promise<void> {
    try {
      await this.#quick(this.#container!.kill(), "kill");
    } catch {
      // 404/409: already gone or not running. Otherwise wait() still ends it or remove(force) will.
    }
  }

  async #run(id: RunIdentity, limits: ResolvedLimits): Promise<ExecutionResult> {
    const at: { phase: EnginePhase } = { phase: "pull" };
    try {
      const prepared = await this.#prepare(id, limits, at);
      if ("result" in prepared) return prepared.result;
      return await this.#execute(prepared.spec, at);
    } catch (e) {
      // Stopped during a pull (aborted) or another engine call: the stop is the outcome.
      if (this.#stopReason !== undefined && !this.#exited)
        return this.#ended(this.#stopReason, null);
      return this.#engineFailure(e, at.phase, id);
    } finally {
      this.#running = false;
      await this.#remove();
    }
  }

  /**
   * Provides the image by the pull policy (docker-image.ts), checks its name, volumes and command,
   * and writes the lease file: the container's spec, or the result that ends the attempt before
   * any container exists. A failed pull is a `PullFailure`; any other engine error is of `create`.
   */
  async #prepare(
    id: RunIdentity,
    limits: ResolvedLimits,
    at: { phase: EnginePhase },
  ): Promise<{ result: ExecutionResult } | { spec: Dockerode.ContainerCreateOptions }> {
    const clock = this.#cfg.clock;
    at.phase = "create";
    const provided = await this.#images.provide(
      this.#task.image,
      id.tenantId,
      this.#task.registryAuth,
      this.#abort.signal,
    );
    const image = provided.info;
    if (!imageCarriesName(this.#task.image, image.RepoTags, image.RepoDigests)) {
      // The engine resolved the reference as an image ID (prefix), which could be any tenant's image.
      this.#cfg.log(
        "warn",
        "task image resolved to an image that does not carry its name; refused",
        { run_id: id.runId, image: this.#task.image, image_id: image.Id },
      );
      return {
        result: errorResult(
          "image_not_found",
          `image ${this.#task.image} is not available on this worker (name images by repository and tag or digest, not by ID)`,
          clock.now(),
        ),
      };
    }
    const volumes = imageVolumes(image.Config?.Volumes, this.#task.image, this.#cfg.docker);
    if (!Array.isArray(volumes))
      return { result: errorResult(volumes.class, volumes.message, clock.now()) };
    const command = effectiveCommand(this.#task.args, image.Config?.Entrypoint, image.Config?.Cmd);
    if (command.length === 0) {
      return {
        result: errorResult(
          "invalid_task",
          `no command: the task has no args and image ${this.#task.image} defines none`,
          clock.now(),
        ),
      };
    }
    const deadlineAtMs =
      clock.now() +
      (this.#task.timeoutS + CONTAINER_DEADLINE_GRACE_S) * 1000 +
      2 * this.#cfg.docker.engineTimeoutMs;
    if (this.#task.leaseMs !== undefined) {
      mkdirSync(this.#cfg.docker.leaseRoot, { recursive: true, mode: 0o755 });
      this.#leaseDir = mkdtempSync(join(this.#cfg.docker.leaseRoot, `${id.runId}-${id.attempt}-`));
      chmodSync(this.#leaseDir, 0o755); // the container's (unprivileged) user reads it
      if (this.#leaseUntilMono === 0) this.#leaseUntilMono = clock.monoMs() + this.#task.leaseMs;
      this.#writeLease();
    }
    this.#imageDigest = provided.digest;
    if (this.#task.egress !== undefined && this.#egress !== undefined) {
      this.#grant = this.#egress.proxy.open(
        { runId: id.runId, attempt: id.attempt, jobId: id.jobId, tenantId: id.tenantId },
        this.#task.egress.allow,
      );
    }
    const spec = containerSpec(this.#task, id, limits, this.#cfg.docker, this.#cfg.workerId, {
      imageId: image.Id,
      command,
      deadlineAtMs,
      volumes,
      ...(this.#leaseDir !== undefined ? { leaseDir: this.#leaseDir } : {}),
      ...(this.#grant !== undefined && this.#egress !== undefined
        ? { egress: { network: this.#egress.network, proxyUrl: this.#grant.proxyUrl } }
        : {}),
    });
    return { spec };
  }

  /** Creates, attaches, starts and awaits the container: the attempt's result. */
  async #execute(
    spec: Dockerode.ContainerCreateOptions,
    at: { phase: EnginePhase },
  ): Promise<ExecutionResult> {
    const clock = this.#cfg.clock;
    this.#container = await this.#quick(this.#docker.createContainer(spec), "create");
    if (this.#stopReason !== undefined) return this.#ended(this.#stopReason, null);
    at.phase = "run";
    const { drained } = await this.#attach(this.#container);
    at.phase = "start";
    this.#startedAtMs = clock.now();
    await this.#quick(this.#container.start(), "start");
    this.#running = true;
    // The countdown began somewhere during start: restate what is left from now.
    this.#writeLease();
    at.phase = "run";
    const cancelTimer = clock.setTimer(this.#task.timeoutS * 1000, () => this.#stop("timed_out"));
    if (this.#stopReason !== undefined) void this.#killContainer(); // kill() raced with start
    const waited = (await this.#container.wait()) as { StatusCode?: number };
    cancelTimer();
    this.#running = false;
    this.#exited = true; // from here on the outcome is fixed; a late kill() only waits
    const exitCode = typeof waited.StatusCode === "number" ? waited.StatusCode : null;
    const engineOom = exitCode !== 0 && (await this.#oomKilled(this.#container));
    let cancelDrain = (): void => {};
    await Promise.race([
      drained,
      new Promise<void>((resolve) => (cancelDrain = clock.setTimer(OUTPUT_DRAIN_MS, resolve))),
    ]);
    cancelDrain();
    // The engine's flag can miss a kill (its OOM event after the exit): the supervisor's marker does not.
    const oom = engineOom || (exitCode !== 0 && oomMarked(this.#probe.text()));
    const unrunnable = this.#stopReason === undefined ? this.#unrunnable(exitCode) : undefined;
    if (unrunnable)
      return {
        ...unrunnable,
        startedAtMs: this.#startedAtMs,
        output: this.#tail.text(),
        ...(this.#imageDigest !== undefined ? { imageDigest: this.#imageDigest } : {}),
      };
    // SIGKILL after the timeout with no stop of ours: the container's own deadline fired first.
    const ownDeadline =
      exitCode === 137 && clock.now() - this.#startedAtMs >= this.#task.timeoutS * 1000;
    return this.#ended(
      this.#stopReason ?? (oom ? "oom" : ownDeadline ? "timed_out" : "exited"),
      exitCode,
    );
  }

  /** An engine error (or one of ours) in `phase`: logged for the operator, classified for the tenant. */
  #engineFailure(e: unknown, phase: EnginePhase, id: RunIdentity): ExecutionResult {
    const clock = this.#cfg.clock;
    const cause = e instanceof PhaseError ? e.cause : e;
    const failedPhase =
      e instanceof PullFailure ? "pull" : e instanceof PhaseError ? e.phase : phase;
    const err =
      e instanceof PullFailure
        ? classifyPullFailure(e, this.#task.image)
        : classifyEngineError(cause, failedPhase, this.#task.image);
    // The tenant sees err.message; the engine's own words stay in the operator's log.
    this.#cfg.log("warn", "docker attempt failed", {
      run_id: id.runId,
      attempt: id.attempt,
      image: this.#task.image,
      phase: failedPhase,
      class: err.class,
      engine_status: e instanceof PullFailure ? e.status : statusOf(cause),
      engine_message: engineMessage(cause),
      ...(e instanceof PullFailure
        ? { registry: e.registry, with_credential: e.withCredential }
        : {}),
    });
    return {
      ...errorResult(err.class, err.message, clock.now(), err.retryable),
      startedAtMs: this.#startedAtMs,
      output: this.#tail.text(),
      ...(this.#imageDigest !== undefined ? { imageDigest: this.#imageDigest } : {}),
    };
  }

  /** Attaches to stdout+stderr before start; resolves the returned promise when the stream ends. */
  async #attach(container: Dockerode.Container): Promise<{ drained: Promise<void> }> {
    const stream = await this.#quick(
      container.attach({ stream: true, stdout: true, stderr: true, logs: false }),
      "attach",
    );
    const sink = new Writable({
      write: (chunk: Buffer, _enc, cb) => {
        this.#tail.write(chunk);
        this.#probe.write(chunk);
        cb();
      },
    });
    this.#docker.modem.demuxStream(stream, sink, sink);
    const drained = new Promise<void>((resolve) => {
      stream.once("end", () => resolve());
      stream.once("close", () => resolve());
      stream.once("error", () => resolve());
    });
    return { drained };
  }

  /** The supervisor's verdict that the command cannot run (exit 127/126 + its marker line), as today's start error. */
  #unrunnable(exitCode: number | null): ExecutionResult | undefined {
    const last = this.#probe.text().trimEnd().split("\n").pop() ?? "";
    const now = this.#cfg.clock.now();
    if (exitCode === 127 && last.startsWith(MARK_NOT_FOUND)) {
      return errorResult(
        "invalid_task",
        `cannot execute the task's command in ${this.#task.image}: not found: ${last.slice(MARK_NOT_FOUND.length)}`,
        now,
      );
    }
    if (exitCode === 126 && last.startsWith(MARK_NOT_EXECUTABLE)) {
      return errorResult(
        "permission_denied",
        `permission denied starting the task in ${this.#task.image}: ${last.slice(MARK_NOT_EXECUTABLE.length)} is not executable`,
        now,
      );
    }
    return undefined;
  }

  async #oomKilled(container: Dockerode.Container): Promise<boolean> {
    try {
      const info = await this.#quick(container.inspect(), "inspect");
      return info.State.OOMKilled === true;
    } catch {
      return false; // the exit code still reports the failure
    }
  }

  async #remove(): Promise<void> {
    if (!this.#container) return;
    try {
      await this.#quick(this.#container.remove({ force: true, v: true }), "remove");
    } catch {
      // 404: already gone. Otherwise the orphan reaper finds it by its labels.
    }
  }

  #ended(outcome: Outcome, exitCode: number | null): ExecutionResult {
    const note =
      outcome === "oom"
        ? `container killed: out of memory (OOM, limit ${this.#task.resources?.memoryMb ?? this.#cfg.docker.defaultMemoryMb} MiB)`
        : outcome === "timed_out"
          ? `container killed: timeout of ${this.#task.timeoutS}s exceeded`
          : outcome === "killed"
            ? "container killed: attempt stopped by the worker (lease lost or cancelled)"
            : undefined;
    if (note !== undefined) this.#tail.write(`\n[kairos] ${note}\n`);
    return {
      outcome,
      exitCode,
      output: this.#tail.text(),
      startedAtMs: this.#startedAtMs,
      finishedAtMs: this.#cfg.clock.now(),
      ...(this.#imageDigest !== undefined ? { imageDigest: this.#imageDigest } : {}),
    };
  }
}
