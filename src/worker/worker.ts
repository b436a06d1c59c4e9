/**
 * The worker: one per worker process. It advertises its free slots by heartbeat, accepts
 * attempts offered by job actors (the claim), starts each at its due time from its own timer,
 * runs it through the sandbox executor, heartbeats its attempts in batches (one request per
 * partition, src/cluster/router.ts `requestMany`) to the owning job actors, kills one on
 * `lease_lost`, and reports completion with the fence (accepting `stale_fence`: someone else
 * owns the run now). On start it kills containers of its own left by an earlier incarnation.
 */
import type { Bus, BusSubscription } from "../cluster/bus.ts";
import type { Clock } from "../lib/clock.ts";
import { isKairosError } from "../lib/errors.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { ActorRouter } from "../cluster/router.ts";
import type { Completion } from "../jobs/job-actor.ts";
import { JOB_ACTOR } from "../jobs/ids.ts";
import type { Execution, Executor, ExecutionResult } from "../sandbox/index.ts";
import { formatUtc } from "../schedule/index.ts";
import { workerSubject } from "./directory.ts";
import type { CancelRequest, StartReply, StartRequest } from "./protocol.ts";

export interface WorkerOptions {
  workerId: string;
  clusterName: string;
  slots: number;
  heartbeatIntervalMs: number;
  /** How long completion reports are retried before giving up (the lease then expires). */
  completionDeadlineMs: number;
  nc: Bus;
  router: ActorRouter;
  executor: Executor;
  clock: Clock;
  log: (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;
  /** Test hook: observe lifecycle (accepted, started, lease_lost, completed, stale_fence). */
  onEvent?: (e: { type: string; run_id: string; attempt: number }) => void;
}

interface Lease {
  req: StartRequest;
  execution?: Execution;
  startedAtMs?: number;
  lost: boolean;
}

export class Worker {
  readonly #o: WorkerOptions;
  readonly #leases = new Map<string, Lease>();
  #subs: BusSubscription[] = [];
  #cancelBeat: (() => void) | undefined;
  #stopping = false;

  constructor(o: WorkerOptions) {
    this.#o = o;
  }

  async start(): Promise<void> {
    const { nc, clusterName, workerId } = this.#o;
    const reaped = await this.#o.executor.reapOrphans(() => false);
    if (reaped > 0) this.#o.log("warn", `killed ${reaped} orphaned task(s) of an earlier incarnation`);
    this.#subs.push(
      nc.subscribe(workerSubject(clusterName, workerId, "start"), {
        callback: (_e, m) => {
          m.respond(encode(this.#offer(decode<StartRequest>(m.data))));
        },
      }),
      nc.subscribe(workerSubject(clusterName, workerId, "cancel"), {
        callback: (_e, m) => this.#cancel(decode<CancelRequest>(m.data)),
      }),
    );
    this.#beat();
  }

  /** Stops taking work; running attempts are killed (their leases expire and they are retried). */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#cancelBeat?.();
    for (const s of this.#subs) s.unsubscribe();
    await Promise.all([...this.#leases.values()].map((l) => this.#kill(l, "worker stopping")));
    await this.#o.executor.close();
  }

  #key(runId: string, attempt: number): string {
    return `${runId}#${attempt}`;
  }

  #offer(req: StartRequest): StartReply {
    if (this.#stopping) return { accepted: false, reason: "stopping" };
    const k = this.#key(req.run_id, req.attempt);
    const existing = this.#leases.get(k);
    if (existing) {
      if (existing.req.fence === req.fence) return { accepted: true };
      return { accepted: false, reason: "attempt already running here" };
    }
    if (this.#leases.size >= this.#o.slots) return { accepted: false, reason: "no free slot" };
    const lease: Lease = { req, lost: false };
    this.#leases.set(k, lease);
    this.#enqueueStart(lease, req.start_at_ms);
    this.#o.onEvent?.({ type: "accepted", run_id: req.run_id, attempt: req.attempt });
    return { accepted: true };
  }

  /** Attempts due at the same instant share one timer and start in one tight loop (bursts). */
  readonly #due = new Map<number, Lease[]>();
  #enqueueStart(lease: Lease, atMs: number): void {
    const group = this.#due.get(atMs);
    if (group) {
      group.push(lease);
      return;
    }
    this.#due.set(atMs, [lease]);
    const fire = () => {
      const early = atMs - this.#o.clock.now();
      if (early > 0) {
        // Host timers may fire a millisecond early; never start before the due time.
        this.#o.clock.setTimer(early, fire);
        return;
      }
      const leases = this.#due.get(atMs) ?? [];
      this.#due.delete(atMs);
      for (const l of leases) this.#run(l);
      // One batched heartbeat reports every start (status running, started_at).
      void this.#heartbeatAll();
    };
    this.#o.clock.setTimer(Math.max(0, atMs - this.#o.clock.now()), fire);
  }

  #run(lease: Lease): void {
    if (lease.lost || this.#stopping) return;
    const { req } = lease;
    lease.startedAtMs = this.#o.clock.now();
    lease.execution = this.#o.executor.start(
      { image: req.task.image, args: req.task.args, env: req.task.env, timeoutS: req.task.timeout_s,
        ...(req.task.resources ? { resources: { ...(req.task.resources.memory_mb ? { memoryMb: req.task.resources.memory_mb } : {}), ...(req.task.resources.cpus ? { cpus: req.task.resources.cpus } : {}), ...(req.task.resources.pids ? { pids: req.task.resources.pids } : {}) } } : {}) },
      { runId: req.run_id, attempt: req.attempt, jobId: req.job_id, tenantId: req.tenant_id, scheduledFor: formatUtc(req.scheduled_for_ms), workerId: this.#o.workerId, fence: req.fence },
    );
    this.#o.onEvent?.({ type: "started", run_id: req.run_id, attempt: req.attempt });
    lease.execution.result.then(
      (r) => this.#complete(lease, r),
      (e: unknown) => this.#o.log("error", "execution failed unexpectedly", { run_id: req.run_id, err: String(e) }),
    );
  }

  /** One batched heartbeat for every running attempt: one NATS request per partition. */
  async #heartbeatAll(): Promise<void> {
    const live = [...this.#leases.values()].filter((l) => l.execution && !l.lost);
    if (live.length === 0) return;
    const results = await this.#o.router.requestMany(
      live.map((l) => ({
        to: { type: JOB_ACTOR, id: l.req.job_actor },
        msg: { kind: "heartbeat", run_id: l.req.run_id, fence: l.req.fence, worker: this.#o.workerId, ...(l.startedAtMs !== undefined ? { started_at_ms: l.startedAtMs } : {}) },
      })),
      { deadlineMs: this.#o.heartbeatIntervalMs },
    );
    await Promise.all(results.map(async (r, i) => {
      const l = live[i]!;
      const tracked = this.#leases.get(this.#key(l.req.run_id, l.req.attempt)) === l;
      if (tracked && !r.ok && (r.e.code === "lease_lost" || r.e.code === "not_found")) {
        this.#o.onEvent?.({ type: "lease_lost", run_id: l.req.run_id, attempt: l.req.attempt });
        await this.#kill(l, "lease lost");
      }
    }));
  }

  async #complete(lease: Lease, r: ExecutionResult): Promise<void> {
    const { req } = lease;
    this.#leases.delete(this.#key(req.run_id, req.attempt));
    if (lease.lost) return;
    const c: Completion = {
      outcome: r.outcome, exit_code: r.exitCode, output: r.output,
      error: r.error ? { class: r.error.class, message: r.error.message, retryable: r.error.retryable } : null,
      started_at_ms: r.startedAtMs, finished_at_ms: r.finishedAtMs,
    };
    try {
      await this.#o.router.request({ type: JOB_ACTOR, id: req.job_actor }, {
        kind: "complete", run_id: req.run_id, fence: req.fence, worker: this.#o.workerId, ...c,
      }, { deadlineMs: this.#o.completionDeadlineMs });
      this.#o.onEvent?.({ type: "completed", run_id: req.run_id, attempt: req.attempt });
    } catch (e) {
      if (isKairosError(e, "stale_fence") || isKairosError(e, "not_found")) {
        this.#o.onEvent?.({ type: "stale_fence", run_id: req.run_id, attempt: req.attempt });
        return;
      }
      this.#o.log("warn", "could not report completion; the lease will expire and the run be retried", { run_id: req.run_id, err: String(e) });
    }
  }

  #cancel(c: CancelRequest): void {
    for (const l of this.#leases.values()) {
      if (l.req.run_id === c.run_id && l.req.fence === c.fence) void this.#kill(l, "cancelled by the scheduler");
    }
  }

  async #kill(lease: Lease, why: string): Promise<void> {
    lease.lost = true;
    this.#leases.delete(this.#key(lease.req.run_id, lease.req.attempt));
    if (lease.execution) await lease.execution.kill(why);
  }

  #beat(): void {
    if (this.#stopping) return;
    const { nc, clusterName, workerId, slots } = this.#o;
    if (!nc.isClosed()) {
      nc.publish(`kairos.${clusterName}.worker.hb`, encode({ worker_id: workerId, slots, free: Math.max(0, slots - this.#leases.size), executor: this.#o.executor.kind }));
    }
    void this.#heartbeatAll();
    this.#cancelBeat = this.#o.clock.setTimer(this.#o.heartbeatIntervalMs, () => this.#beat());
  }
}
