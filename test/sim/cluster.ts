/**
 * One seeded simulation of a Kairos cluster: 3 scheduler nodes, 2–3 workers, 2–3 tenants and a
 * handful of jobs, composed from the REAL pieces (KairosNode with its membership, partition
 * manager and, at production settings, its lease keeper's thread (lease-thread.ts); the actor
 * host and router; the job actor and its shell; the tenant actor; WorkerDirectory; Worker)
 * exactly as src/server/start.ts wires them — but on the simulation's bus, KV views and clocks
 * (sim-bus.ts, faulty-kv.ts, sim-clock.ts) with seeded randomness.
 *
 * The seed decides everything: its settings (profiles.ts: short, or production's), the jobs,
 * task durations, the fault events (faults.ts), the users' commands (commands.ts) and every
 * random choice inside the pieces. Faults and commands stop before the end (a quiet tail), then
 * the final invariants run (invariants.ts, record-check.ts).
 */
import { KairosNode } from "../../src/server/node.ts";
import type { Buckets } from "../../src/cluster/buckets.ts";
import { makeNodeConfig, type NodeConfig } from "../../src/cluster/config.ts";
import { MAX_UNSTARTED_ATTEMPTS } from "../../src/jobs/job-actor.ts";
import { MAX_GIVEN_BACK } from "../../src/runs/run-lifecycle.ts";
import type { JobFaults } from "../../src/job-state/faults.ts";
import { jobRegistration } from "../../src/jobs/job-shell.ts";
import { JOB_ACTOR, TENANT_ACTOR, jobActorId } from "../../src/protocol/ids.ts";
import { DEFAULT_MAX_WAITING_RUNS } from "../../src/protocol/service.ts";
import { partitionOf } from "../../src/cluster/placement.ts";
import { tenantRegistration } from "../../src/slots/tenant-shell.ts";
import { fleetRegistration } from "../../src/slots/fleet-shell.ts";
import { FAIR_REPORT_MS } from "../../src/slots/fleet-actor.ts";
import type { Random } from "../../src/lib/random.ts";
import { between, stream } from "./draw.ts";
import { WorkerDirectory } from "../../src/slots/worker-directory.ts";
import { Worker } from "../../src/worker/worker.ts";
import { DEFAULT_RETENTION } from "../../src/history/retention.ts";
import { RunRetention } from "../../src/history/run-retention.ts";
import { Ledger, SimExecutor, type SimSandbox } from "./executor.ts";
import { HistoryKv, KvView, NO_KV_FAULTS, type KvFaults } from "./faulty-kv.ts";
import { NatsJobsService } from "../../src/service/nats-service.ts";
import {
  Checker,
  Trace,
  saturatedTenants,
  type FaultKind,
  type JobUnderTest,
  type Violation,
} from "./invariants.ts";
import { SimBus, type BusFaults, type SimEndpoint } from "./sim-bus.ts";
import { HostClock, SimClock, SimProcess } from "./sim-clock.ts";
import { SimLeaseThread } from "./lease-thread.ts";
import { PROFILES, profileNamed, type ProfileName, type SimProfile } from "./profiles.ts";
import { SimClient, planCommands } from "./commands.ts";
import { planFaults } from "./faults.ts";
import { checkListing, recordIds } from "./list-check.ts";

export interface SimOptions {
  seed: number;
  /** The settings (default: chosen by the seed). */
  profile?: ProfileName;
  /** Simulated time, ms (default: the profile's). */
  durationMs?: number;
  /** Faults and commands stop this long before the end (default: the profile's). */
  quietTailMs?: number;
  /** Self-test: a broken executor reports every execution under one fence (breaks invariant a). */
  brokenExecutor?: boolean;
  /** No fault events and no commands (background delays stay). */
  noFaults?: boolean;
  /**
   * Defences of the job actor switched off (src/job-state/faults.ts), for the self-tests of the
   * invariants: one fence offered to several workers (a), silent leases lapsing without a probe (h).
   */
  faults?: JobFaults;
  /**
   * What kills a task whose worker is frozen (test/sim/executor.ts): by default each worker is
   * seeded `docker` (container lease countdown) or `process` (supervisor watching the worker), as
   * production runs them; `none` is for self-tests (nothing does).
   */
  sandbox?: SimSandbox;
  /** Only these fault kinds (default: every kind the profile has). */
  faultKinds?: readonly FaultKind[];
  /** Receives every trace event as it happens. */
  echo?: (line: string) => void;
}

export interface SimResult {
  seed: number;
  profile: ProfileName;
  violations: Violation[];
  stats: {
    executions: number;
    runs: number;
    faults: string[];
    commands: number;
    simMs: number;
    digest: string;
    /** h's documented exception: executions after one that exited 0 whose worker could not report it. */
    atLeastOnce: number;
    /** i's documented exception: attempts counted unexecuted past MAX_UNSTARTED_ATTEMPTS. */
    unstartedCap: number;
    /** c/p's: runs recorded as their execution ended after a fault lost their stop. */
    lostStops: number;
  };
}

const CLUSTER = "sim";
const PARTITIONS = 8;

interface Proc {
  readonly id: string;
  readonly kind: "scheduler" | "worker";
  gen: number;
  process: SimProcess;
  kv: KvView;
  ep: SimEndpoint;
  node: KairosNode;
  executor?: SimExecutor;
  worker?: Worker;
  /** The lease keeper's thread (production settings) and its process and KV connection. */
  thread?: { t: SimLeaseThread; process: SimProcess; kv: KvView };
  up: boolean;
}

export class SimCluster {
  readonly sim: SimClock;
  readonly trace: Trace;
  readonly ledger = new Ledger();
  readonly shared: Buckets;
  readonly bus: SimBus;
  readonly checker: Checker;
  readonly procs = new Map<string, Proc>();
  /** Each host's wall clock (a restarted process keeps its host's). */
  readonly clocks = new Map<string, HostClock>();
  readonly jobs: JobUnderTest[] = [];
  readonly faultLog: string[] = [];
  readonly profile: SimProfile;
  readonly o: SimOptions;
  client!: SimClient;
  readonly #caps = new Map<string, number>();
  get caps(): ReadonlyMap<string, number> {
    return this.#caps;
  }
  #streams = 100;
  #busFaults: BusFaults = { loss: 0, dup: 0, delayMs: [0, 15] };
  #kvFaults: KvFaults = { ...NO_KV_FAULTS, delayMs: [0, 4] };
  /** The schedulers' clock offsets over time: the largest either way, and the largest ahead. */
  readonly #skewSamples: { atMs: number; absMs: number; aheadMs: number }[] = [];

  constructor(o: SimOptions) {
    this.o = o;
    this.profile = profileNamed(o.profile ?? PROFILES[stream(o.seed, 4).next() < 0.5 ? 0 : 1]);
    this.sim = new SimClock(this.profile.startMs);
    this.trace = new Trace(() => this.sim.now(), this.profile.startMs);
    const m = (n: string) => new HistoryKv(`${CLUSTER}_${n}`, this.sim);
    this.shared = {
      cluster: m("cluster"),
      leases: m("leases"),
      nodes: m("nodes"),
      actors: m("actors"),
      runs: m("runs"),
      tenants: m("tenants"),
      idempotency: m("idem"),
    };
    this.bus = new SimBus({ clock: this.sim, random: stream(o.seed, 1), faults: this.#busFaults });
    this.bus.tap = (e) => {
      if (e.kind !== "cut" && !e.subject.endsWith(".hb"))
        this.trace.add(`bus ${e.kind} ${e.from}→${e.to} ${e.subject}`);
    };
    this.checker = new Checker(this.trace, () => this.sim.now(), this.profile.startMs, this.#caps);
    // An offer names its owner's clock when it is made: by the worker's acceptance (a look-ahead
    // window and a lease of slack before it), however long before the start that was.
    this.checker.schedulersAheadMs = (acceptedAtMs) =>
      this.schedulerSkewDuring(
        Math.min(acceptedAtMs, this.sim.now()) -
          this.profile.job.lookaheadMs -
          this.profile.job.leaseTtlMs,
        this.sim.now(),
        true,
      );
    this.checker.partitionOfJob = (tenant, job) =>
      partitionOf({ type: JOB_ACTOR, id: jobActorId(tenant, job) }, PARTITIONS);
  }

  rng(): Random {
    return stream(this.o.seed, this.#streams++);
  }

  #log(who: string) {
    return (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => {
      if (level === "error")
        this.trace.add(`${who} ERROR ${msg} ${extra ? JSON.stringify(extra) : ""}`);
    };
  }

  #nodeConfig(nodeId: string, roles: NodeConfig["roles"]): NodeConfig {
    return makeNodeConfig({
      natsUrl: "sim://",
      nodeId,
      clusterName: CLUSTER,
      roles,
      partitions: PARTITIONS,
      ...this.profile.node,
    });
  }

  /** The host clock of `id` (made on first use: a skew of ±150 ms, inside every margin). */
  hostClock(id: string): HostClock {
    let c = this.clocks.get(id);
    if (!c) {
      c = new HostClock(this.sim, between(stream(this.o.seed, 5000 + this.clocks.size), -150, 150));
      this.clocks.set(id, c);
    }
    return c;
  }

  /** Samples the schedulers' clocks every 100 ms (a drift moves them between faults' edges). */
  watchClocks(): void {
    const tick = () => {
      this.noteClocks();
      this.sim.setTimer(100, tick);
    };
    tick();
  }

  /** Notes the schedulers' clock offsets (record-check's windows, j's allowance); call after a clock changes. */
  noteClocks(): void {
    let abs = 0;
    let ahead = 0;
    for (const [id, c] of this.clocks) {
      if (this.procs.get(id)?.kind !== "scheduler") continue;
      const off = c.offsetMs();
      abs = Math.max(abs, Math.abs(off));
      ahead = Math.max(ahead, off);
    }
    this.#skewSamples.push({ atMs: this.sim.now(), absMs: abs, aheadMs: ahead });
  }

  /** The furthest any scheduler's wall clock had read by true time `atMs` (sampled every 100 ms). */
  schedulersReadBy(atMs: number): number {
    let max = atMs;
    for (const x of this.#skewSamples)
      if (x.atMs <= atMs) max = Math.max(max, x.atMs + x.aheadMs + 100);
    return max;
  }

  /** The largest offset (either way) of a scheduler's clock at some time in [fromMs, toMs] (sampled every 100 ms). */
  schedulerSkewDuring(fromMs: number, toMs: number, ahead = false): number {
    let max = 0;
    for (const x of this.#skewSamples)
      if (x.atMs >= fromMs - 100 && x.atMs <= toMs + 100)
        max = Math.max(max, ahead ? x.aheadMs : x.absMs);
    return max;
  }

  /** Starts (or restarts) a process: a new SimProcess, endpoint, KV view and node. */
  start(id: string, kind: Proc["kind"]): void {
    const prev = this.procs.get(id);
    const gen = (prev?.gen ?? 0) + 1;
    const clock = this.hostClock(id);
    const process = new SimProcess(this.sim, `${id}#${gen}`, clock);
    const ep = this.bus.endpoint(id, process);
    const kv = new KvView({
      clock: this.sim,
      random: this.rng(),
      host: process,
      faults: this.#kvFaults,
    });
    kv.tap = (e) => this.trace.add(`kv ${e.kind} ${id} ${e.bucket} ${e.op} ${e.key}`);
    const log = this.#log(id);
    const p: Proc = {
      id,
      kind,
      gen,
      process,
      kv,
      ep,
      node: undefined as unknown as KairosNode,
      up: true,
    };
    const config = this.#nodeConfig(id, kind === "scheduler" ? ["scheduler"] : ["worker"]);
    const node = new KairosNode(config, {
      clock: process.clock,
      random: this.rng(),
      log,
      incarnation: `${id}-${gen}`,
      transport: { bus: ep, buckets: kv.buckets(this.shared), close: async () => ep.close() },
      ...(kind === "scheduler" && config.leaseRenewer === "thread"
        ? {
            leaseThread: (data) => {
              const tp = new SimProcess(this.sim, `${id}#${gen}/leases`, clock);
              const tkv = new KvView({
                clock: this.sim,
                random: this.rng(),
                host: tp,
                faults: { ...this.#kvFaults, unavailable: kv.faults.unavailable },
              });
              const t = new SimLeaseThread({
                sim: this.sim,
                main: process,
                thread: tp,
                kv: tkv.buckets(this.shared).leases,
                data,
              });
              p.thread = { t, process: tp, kv: tkv };
              return t;
            },
          }
        : {}),
    });
    p.node = node;
    node.events.on((e) => {
      if (
        e.type === "partition_acquired" ||
        e.type === "partition_lost" ||
        e.type === "partition_released" ||
        e.type === "write_fenced"
      ) {
        this.trace.add(`${id} ${e.type} ${JSON.stringify({ ...e, type: undefined })}`);
      }
    });
    this.procs.set(id, p);
    if (kind === "scheduler") this.#composeScheduler(p);
    const started = node.start().then(async () => {
      if (kind === "worker") await this.#startWorker(p);
    });
    started.catch((e: unknown) => this.trace.add(`${id} start failed: ${String(e)}`));
    this.trace.add(`${id} started (incarnation ${id}-${gen}, clock ${clock.offsetMs()} ms)`);
    this.noteClocks();
  }

  /** Mirrors src/server/start.ts: job actors (with retention), tenant and fleet actors (fair shares), the worker directory. */
  #composeScheduler(p: Proc): void {
    const { process } = p;
    const directory = new WorkerDirectory(
      process.clock,
      this.rng(),
      this.profile.workerHeartbeatMs * 3,
      { optimistic: true },
    );
    const log = this.#log(p.id);
    p.node.onConnected((n) => {
      directory.start(n.nc, CLUSTER);
      n.register(
        jobRegistration(
          this.profile.job,
          {
            log,
            clock: process.clock,
            workers: { nc: n.nc, clusterName: CLUSTER, directory },
            history: {
              runs: n.buckets.runs,
              // Bounded history as production runs it: a prune pass on the first terminal run after
              // a job comes to a node, among the run path's own writes.
              retention: new RunRetention(DEFAULT_RETENTION, {
                runs: n.buckets.runs,
                actors: n.buckets.actors,
                nowMs: () => process.clock.now(),
                log,
              }),
            },
            slots: {
              router: () => n.router,
              tenantMaxConcurrent: async (id) => this.#caps.get(id),
              defer: (fn, ms) => void process.clock.setTimer(ms, fn),
            },
          },
          this.o.faults,
        ),
      );
      n.register(
        tenantRegistration(
          n.buckets.actors,
          undefined,
          { reportMs: FAIR_REPORT_MS },
          process.clock,
        ),
      );
      n.register(fleetRegistration(() => directory.capacity()));
    });
  }

  async #startWorker(p: Proc): Promise<void> {
    // Separate streams: the sandbox kind is the machine's (the same across restarts), and neither
    // draw shifts the others.
    const k = Number(p.id.slice(1));
    const sandbox =
      this.o.sandbox ?? (stream(this.o.seed, 3 + k).next() < 0.5 ? "docker" : "process");
    if (p.gen === 1) this.trace.add(`${p.id} sandbox ${sandbox}`);
    const executor = new SimExecutor({
      workerId: p.id,
      sim: this.sim,
      process: p.process,
      random: this.rng(),
      ledger: this.ledger,
      sandbox,
      watchdogRandom: stream(this.o.seed, 1000 + 100 * k + p.gen),
      // A fifth of the tasks end as they start (`Execution.ended`, the noop executor's path).
      endedRandom: stream(this.o.seed, 1_000_000 + 100 * k + p.gen),
      endedRate: 0.2,
      durationMs: [300, 4000],
      failRate: 0.1,
      ...(this.o.brokenExecutor ? { broken: true } : {}),
    });
    p.executor = executor;
    const worker = new Worker({
      workerId: p.id,
      clusterName: CLUSTER,
      slots: this.profile.workerSlots,
      heartbeatIntervalMs: this.profile.workerHeartbeatMs,
      completionDeadlineMs: 60_000,
      nc: p.node.nc,
      router: p.node.router,
      executor,
      clock: p.process.clock,
      random: this.rng(),
      log: this.#log(p.id),
      inboxes: "shared", // no NATS credentials in the simulation: `_INBOX.` replies (reply-guard.ts)
      onEvent: (e) => {
        this.trace.add(`${p.id} worker ${e.type} ${e.run_id} attempt ${e.attempt}`);
        this.checker.workerEvent(p.id, e);
      },
    });
    p.worker = worker;
    await worker.start();
  }

  /** Crash (kill -9): the process stops at once — no goodbye, no lease release, its tasks die. */
  crash(id: string): void {
    const p = this.procs.get(id);
    if (!p?.up) return;
    p.up = false;
    this.#kill(p);
    this.trace.add(`${id} CRASHED`);
  }

  #kill(p: Proc): void {
    p.process.kill();
    p.thread?.process.kill();
    p.ep.close();
    p.executor?.crashAll();
  }

  /**
   * Graceful stop (SIGTERM), as src/server/start.ts does it: a worker drains (its prepared
   * attempts given back, running ones finish or are handed back at `drainTimeoutMs`) and stops;
   * then the node hands its partitions off, says goodbye, and the process is gone.
   */
  stop(id: string, drainTimeoutMs = 0): void {
    const p = this.procs.get(id);
    if (!p?.up) return;
    p.up = false;
    this.trace.add(`${id} stopping gracefully`);
    const worker = p.worker;
    const drained = worker
      ? worker.drain(drainTimeoutMs).then(() => worker.stop())
      : Promise.resolve();
    drained
      .then(() => p.node.stop())
      .then(
        () => this.trace.add(`${id} stopped`),
        (e: unknown) => this.trace.add(`${id} stop failed: ${String(e)}`),
      )
      .finally(() => this.#kill(p));
  }

  /** The process of `id` is gone (or going): a new one starts under the same id, on the same host. */
  restart(id: string): void {
    const p = this.procs.get(id);
    if (p?.up) return;
    if (p && p.process.state !== "dead") {
      // A graceful stop that has not finished (e.g. it met a paused process): a restart of the
      // service kills what is left of the old process first, as a supervisor would. (Left
      // alive, its paused endpoint kept queue subscriptions that swallowed requests forever.)
      this.#kill(p);
      this.trace.add(`${id} old incarnation killed before restart`);
    }
    this.start(id, p?.kind ?? (id.startsWith("w") ? "worker" : "scheduler"));
  }

  /** Whether `id`'s process has ended (a graceful stop finished, or a crash). */
  ended(id: string): boolean {
    const p = this.procs.get(id);
    return p !== undefined && !p.up && p.process.state === "dead";
  }

  /**
   * A fault on `subjects` (process ids, "bus" or "kv") from `atMs` for `durationMs`; invariant h
   * reads which kinds keep a worker from reporting (invariants.ts `blocksReports`).
   */
  fault(
    atMs: number,
    subjects: readonly string[],
    kind: FaultKind,
    what: string,
    apply: () => void,
    durationMs: number,
    undo: () => void,
  ): void {
    this.faultLog.push(
      `${(atMs / 1000).toFixed(1)}s ${what} for ${(durationMs / 1000).toFixed(1)}s`,
    );
    this.sim.setTimer(atMs, () => {
      this.trace.add(`FAULT ${what} (${(durationMs / 1000).toFixed(1)} s)`);
      const over = this.checker.faultBegins(subjects, kind);
      apply();
      this.noteClocks();
      this.sim.setTimer(durationMs, () => {
        this.trace.add(`FAULT over: ${what}`);
        this.noteClocks(); // a drift's largest error is at its end
        undo();
        this.noteClocks();
        over();
      });
    });
  }

  setKv(f: Partial<KvFaults>): void {
    this.#kvFaults = { ...this.#kvFaults, ...f };
    for (const p of this.procs.values()) {
      p.kv.faults = {
        ...this.#kvFaults,
        unavailable: p.kv.faults.unavailable,
        stale: p.kv.faults.stale,
      };
      if (p.thread)
        p.thread.kv.faults = {
          ...this.#kvFaults,
          unavailable: p.thread.kv.faults.unavailable,
          stale: p.thread.kv.faults.stale,
        };
    }
  }

  setBus(f: Partial<BusFaults>): void {
    this.#busFaults = { ...this.#busFaults, ...f };
    this.bus.faults = this.#busFaults;
  }

  /** Creates the jobs through the job actors' `create` (NatsJobsService), retrying until done. */
  async createJobs(): Promise<void> {
    const { caps, jobs } = this.profile.plan(this.rng());
    for (const [t, cap] of caps) this.#caps.set(t, cap);
    for (const { tenant, spec } of jobs) {
      for (let attempt = 0; attempt < 20; attempt++) {
        try {
          const { job } = await this.client.service.createJob(
            tenant,
            spec,
            `sim-${this.jobs.length}`,
          );
          this.jobs.push({ tenant, jobId: job.job_id, spec });
          if (spec.overlap === "skip") this.checker.skipJobs.add(job.job_id);
          this.trace.add(
            `created job ${tenant}/${job.job_id} (${"cron" in spec.schedule ? spec.schedule.cron : spec.schedule.at}, ${spec.overlap}, max_attempts ${spec.retry.max_attempts})`,
          );
          break;
        } catch (e) {
          this.trace.add(`create failed (${String(e)}); retrying`);
          await this.client.sleep(1000);
        }
      }
    }
  }
}

/** Runs one seed to the end and checks the invariants. */
export async function runSimulation(o: SimOptions): Promise<SimResult> {
  const c = new SimCluster(o);
  const { profile } = c;
  const t0 = profile.startMs;
  const duration = o.durationMs ?? profile.durationMs;
  const quiet = o.quietTailMs ?? profile.quietTailMs;
  c.trace.echo = o.echo;
  c.trace.add(`seed ${o.seed}: profile ${profile.name}`);
  await c.checker.watchStore(c.shared);
  c.checker.watchLedger(c.ledger);
  c.client = new SimClient({
    sim: c.sim,
    bus: c.bus,
    shared: c.shared,
    cluster: CLUSTER,
    partitions: PARTITIONS,
    random: () => c.rng(),
    trace: (l) => c.trace.add(l),
  });
  for (const id of ["n1", "n2", "n3"]) c.start(id, "scheduler");
  c.watchClocks();
  const workers = stream(o.seed, 2).next() < 0.5 ? 2 : 3;
  for (let i = 1; i <= workers; i++) c.start(`w${i}`, "worker");
  const faultsFrom = 5000;
  const faultsTo = duration - quiet;
  if (!o.noFaults) planFaults(c, c.rng(), faultsFrom, faultsTo, o.faultKinds);
  await c.sim.runUntil(t0 + 1500);
  const creating = c.createJobs();
  let created = false;
  void creating.then(() => {
    created = true;
    if (o.noFaults) return;
    const r = c.rng();
    const n = between(r, profile.commands[0], profile.commands[1]);
    for (const cmd of planCommands(
      r,
      c.jobs,
      n,
      Math.max(c.sim.now(), t0 + faultsFrom),
      t0 + faultsTo,
    ))
      c.client.schedule(cmd);
  });
  await c.sim.runUntil(t0 + duration);
  if (!created)
    c.checker.fail(
      "occurrence_lost",
      "create",
      "the jobs were not all created within the simulation",
    );
  // For the report: what each tenant actor believes at the end (slots held, runs waiting).
  // A tenant's effective cap is the lower of its max_concurrent and its fair share of the fleet.
  const limits = new Map(c.caps);
  const status = Promise.all(
    [...new Set(c.jobs.map((j) => j.tenant))].map(async (t) => {
      const s = await c.client.router
        .request({ type: TENANT_ACTOR, id: t }, { kind: "status" }, { deadlineMs: 1500 })
        .catch((e: unknown) => String(e));
      c.trace.add(`tenant ${t} at the end: ${JSON.stringify(s)}`);
      const share = (s as { share?: number } | undefined)?.share;
      if (typeof share === "number" && share > 0 && share < (limits.get(t) ?? Infinity))
        limits.set(t, share);
    }),
  );
  await c.sim.runUntil(t0 + duration + 2000);
  await status;
  await checkListAtEnd(c);
  // Occurrences due in the last seconds may not have fired yet; runs need time to finish.
  const saturated = saturatedTenants(c.ledger.all, limits, t0 + duration);
  await c.checker.final(c.shared, c.ledger, {
    jobs: c.jobs,
    commands: c.client.log,
    windowEndMs: t0 + duration - 5000,
    checkedAtMs: c.sim.now(),
    stuckBeforeMs: t0 + duration - quiet,
    saturated,
    skewDuring: (from, to) => c.schedulerSkewDuring(from, to),
    firedBy: (t) => c.schedulersReadBy(t),
    leaseTtlMs: profile.job.leaseTtlMs,
    drainGraceMs: profile.job.drainGraceMs,
    lookaheadMs: profile.job.lookaheadMs,
    maxUnstarted: MAX_UNSTARTED_ATTEMPTS,
    maxGivenBack: MAX_GIVEN_BACK,
    killSlackMs: profile.workerHeartbeatMs + 1000,
    maxWaitingRuns: profile.job.maxWaitingRuns,
    // The simulation's tenants keep the default bound (their records set no other).
    tenantMaxWaiting: () => DEFAULT_MAX_WAITING_RUNS,
  });
  for (const p of c.procs.values()) if (p.up) c.crash(p.id);
  const runs = (await c.shared.runs.list(">")).length;
  const digest = fnv(
    c.ledger.all
      .map(
        (x) =>
          `${x.runId}|${x.attempt}|${x.fence}|${x.worker}|${x.startMs}|${x.endMs}|${x.outcome}`,
      )
      .join("\n"),
  );
  return {
    seed: o.seed,
    profile: profile.name,
    violations: c.checker.violations,
    stats: {
      executions: c.ledger.all.length,
      runs,
      faults: c.faultLog,
      commands: c.client.log.length,
      simMs: duration,
      digest,
      atLeastOnce: c.checker.atLeastOnce.length,
      unstartedCap: c.checker.unstartedCap,
      lostStops: c.checker.lostStops.length,
    },
  };
}

/** FNV-1a of the ledger: two runs of one seed must agree on it (determinism). */
function fnv(s: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h.toString(16);
}

/** The runs list against the store's records (list-check.ts), paged while the owners run. */
async function checkListAtEnd(c: SimCluster): Promise<void> {
  const before = await recordIds(c.shared.runs, c.jobs);
  const deleted = new Set(c.client.log.filter((x) => x.kind === "delete").map((x) => x.jobId));
  // Paged as an API node whose NATS server hosts a replica fallen minutes behind (seen after a
  // server was killed or paused): half of its replica reads answer from up to 5 minutes ago.
  const behind = new KvView({
    clock: c.sim,
    random: c.rng(),
    faults: { ...NO_KV_FAULTS, stale: { share: 0.5, lagMs: 300_000 } },
  });
  const service = new NatsJobsService(
    c.client.router,
    behind.buckets(c.shared),
    PARTITIONS,
    c.rng(),
  );
  let done = false;
  void checkListing(service, c.jobs, deleted, before, (i, s, d) => c.checker.fail(i, s, d))
    .catch((e: unknown) => c.checker.fail("run_unlisted", "listing", `not read: ${String(e)}`))
    .finally(() => {
      done = true;
    });
  for (let n = 0; n < 60 && !done; n++) await c.sim.runUntil(c.sim.now() + 1000);
  if (!done) c.checker.fail("run_unlisted", "listing", "the runs lists were not read in 60 s");
}
