/**
 * One seeded simulation of a Kairos cluster: 3 scheduler nodes, 2–3 workers, 2–3 tenants and a
 * handful of jobs, composed from the REAL pieces (KairosNode with its membership, partition
 * manager, actor host and router; the job actor and its shell; the tenant actor; WorkerDirectory;
 * Worker) exactly as src/server/start.ts wires them — but on the simulation's bus, KV views and
 * clock (test/sim/sim-bus.ts, faulty-kv.ts, sim-clock.ts) with seeded randomness.
 *
 * The seed decides everything: the jobs, task durations, the fault events (crash + restart,
 * graceful stop, pause, isolation of a node or worker, worker crash, KV timeouts, message loss,
 * duplication and delay) and every random choice inside the pieces. Faults stop before the end
 * (a quiet tail), then the final invariants run (invariants.ts).
 */
import { KairosNode } from "../../src/server/node.ts";
import type { Buckets } from "../../src/cluster/buckets.ts";
import { makeNodeConfig, type NodeConfig } from "../../src/cluster/config.ts";
import { MemoryKv } from "../../src/cluster/kv-memory.ts";
import { ActorRouter } from "../../src/cluster/router.ts";
import { DEFAULT_JOB_CONFIG, type JobActorConfig } from "../../src/jobs/job-actor.ts";
import { jobRegistration } from "../../src/jobs/job-shell.ts";
import { TENANT_ACTOR } from "../../src/jobs/ids.ts";
import { tenantRegistration } from "../../src/jobs/tenant-shell.ts";
import { fleetRegistration } from "../../src/jobs/fleet-shell.ts";
import { FAIR_REPORT_MS } from "../../src/jobs/fleet-actor.ts";
import { NatsJobsService } from "../../src/jobs/nats-service.ts";
import type { JobSpec, Overlap } from "../../src/jobs/model.ts";
import { seededRandom, type Random } from "../../src/lib/random.ts";
import { WorkerDirectory } from "../../src/jobs/worker-directory.ts";
import { Worker } from "../../src/worker/worker.ts";
import { Ledger, SimExecutor, type SimSandbox } from "./executor.ts";
import { KvView, NO_KV_FAULTS, type KvFaults } from "./faulty-kv.ts";
import { Checker, Trace, saturatedTenants, type JobUnderTest, type Violation } from "./invariants.ts";
import { DEFAULT_RETENTION } from "../../src/jobs/retention.ts";
import { RunRetention } from "../../src/jobs/run-retention.ts";
import { SimBus, type BusFaults, type SimEndpoint } from "./sim-bus.ts";
import { SimClock, SimProcess } from "./sim-clock.ts";

export interface SimOptions {
  seed: number;
  /** Simulated time, ms (default 110 s). */
  durationMs?: number;
  /** Faults stop this long before the end (default 35 s). */
  quietTailMs?: number;
  /** Self-test: a broken executor reports every execution under one fence (breaks invariant a). */
  brokenExecutor?: boolean;
  /** No fault events (background delays stay). */
  noFaults?: boolean;
  /**
   * Re-opens hole 1 (one fence offered to several workers) through the production code's
   * test-only switch JobActorConfig.testOnlyHole1 (src/jobs/job-actor.ts).
   */
  reopenHole1?: boolean;
  /**
   * Silent leases lapse without a probe (the twelfth session's breach), through the production
   * code's test-only switch JobActorConfig.testOnlyNoProbe: invariant h's self-test.
   */
  skipProbes?: boolean;
  /**
   * What kills a task whose worker is frozen (test/sim/executor.ts): by default each worker is
   * seeded `docker` (container lease countdown) or `process` (supervisor watching the worker), as
   * production runs them; `none` is for self-tests (nothing does).
   */
  sandbox?: SimSandbox;
  /** Receives every trace event as it happens. */
  echo?: (line: string) => void;
}

export interface SimResult {
  seed: number;
  violations: Violation[];
  stats: { executions: number; runs: number; faults: string[]; simMs: number; digest: string };
}

const CLUSTER = "sim";
const START_MS = Date.UTC(2026, 0, 5, 12, 0, 0);
const PARTITIONS = 8;
const JOB_CFG: JobActorConfig = { ...DEFAULT_JOB_CONFIG, leaseTtlMs: 4000, lookaheadMs: 2000, redispatchDelayMs: 500 };
const WORKER_HB_MS = Math.max(250, Math.floor(JOB_CFG.leaseTtlMs / 4));

/** An independent random stream per purpose, so one consumer's draws never shift another's. */
function stream(seed: number, k: number): Random {
  let h = (seed ^ 0x9e3779b9) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0;
  h = (h + Math.imul(k + 1, 0xc2b2ae35)) >>> 0;
  return seededRandom(h ^ (h >>> 13));
}

const between = (r: Random, lo: number, hi: number) => lo + Math.floor(r.next() * (hi - lo + 1));
const pick = <T>(r: Random, xs: readonly T[]): T => xs[Math.floor(r.next() * xs.length)]!;

function nodeConfig(nodeId: string, roles: NodeConfig["roles"]): NodeConfig {
  return makeNodeConfig({
    natsUrl: "sim://", nodeId, clusterName: CLUSTER, roles, partitions: PARTITIONS,
    heartbeatIntervalMs: 500, failureTimeoutMs: 2000, leaseTtlMs: 3000, leaseRenewIntervalMs: 700,
    leaseSafetyMarginMs: 800, partitionTickMs: 250, actorIdleMs: 20_000, requestDeadlineMs: 10_000,
  });
}

interface Proc {
  readonly id: string;
  readonly kind: "scheduler" | "worker";
  gen: number;
  process: SimProcess;
  kv: KvView;
  ep: SimEndpoint;
  node: KairosNode;
  executor?: SimExecutor;
  up: boolean;
}

export class SimCluster {
  readonly sim = new SimClock(START_MS);
  readonly trace = new Trace(() => this.sim.now(), START_MS);
  readonly ledger = new Ledger();
  readonly shared: Buckets;
  readonly bus: SimBus;
  readonly checker: Checker;
  readonly procs = new Map<string, Proc>();
  readonly jobs: JobUnderTest[] = [];
  readonly faultLog: string[] = [];
  router: ActorRouter | undefined;
  readonly #o: SimOptions;
  readonly #caps = new Map<string, number>();
  get caps(): ReadonlyMap<string, number> {
    return this.#caps;
  }
  #streams = 100;
  #busFaults: BusFaults = { loss: 0, dup: 0, delayMs: [0, 15] };
  #kvFaults: KvFaults = { ...NO_KV_FAULTS, delayMs: [0, 4] };

  constructor(o: SimOptions) {
    this.#o = o;
    const m = (n: string) => new MemoryKv(`${CLUSTER}_${n}`);
    this.shared = { cluster: m("cluster"), leases: m("leases"), nodes: m("nodes"), actors: m("actors"), runs: m("runs"), tenants: m("tenants"), idempotency: m("idem") };
    this.bus = new SimBus({ clock: this.sim, random: stream(o.seed, 1), faults: this.#busFaults });
    this.bus.tap = (e) => {
      if (e.kind !== "cut" && !e.subject.endsWith(".hb")) this.trace.add(`bus ${e.kind} ${e.from}→${e.to} ${e.subject}`);
    };
    this.checker = new Checker(this.trace, () => this.sim.now(), START_MS, this.#caps);
  }

  #rng(): Random {
    return stream(this.#o.seed, this.#streams++);
  }

  #log(who: string) {
    return (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => {
      if (level === "error") this.trace.add(`${who} ERROR ${msg} ${extra ? JSON.stringify(extra) : ""}`);
    };
  }

  /** Starts (or restarts) a process: a new SimProcess, endpoint, KV view and node. */
  start(id: string, kind: Proc["kind"]): void {
    const prev = this.procs.get(id);
    const gen = (prev?.gen ?? 0) + 1;
    const process = new SimProcess(this.sim, `${id}#${gen}`, between(this.#rng(), -150, 150));
    const ep = this.bus.endpoint(id, process);
    const kv = new KvView({ clock: this.sim, random: this.#rng(), host: process, faults: this.#kvFaults });
    kv.tap = (e) => this.trace.add(`kv ${e.kind} ${id} ${e.bucket} ${e.op} ${e.key}`);
    const log = this.#log(id);
    const node = new KairosNode(nodeConfig(id, kind === "scheduler" ? ["scheduler"] : ["worker"]), {
      clock: process.clock, random: this.#rng(), log, incarnation: `${id}-${gen}`,
      transport: { bus: ep, buckets: kv.buckets(this.shared), close: async () => ep.close() },
    });
    node.events.on((e) => {
      if (e.type === "partition_acquired" || e.type === "partition_lost" || e.type === "partition_released" || e.type === "write_fenced") {
        this.trace.add(`${id} ${e.type} ${JSON.stringify({ ...e, type: undefined })}`);
      }
    });
    const p: Proc = { id, kind, gen, process, kv, ep, node, up: true };
    this.procs.set(id, p);
    if (kind === "scheduler") this.#composeScheduler(p);
    const started = node.start().then(async () => {
      if (kind === "worker") await this.#startWorker(p);
    });
    started.catch((e: unknown) => this.trace.add(`${id} start failed: ${String(e)}`));
    this.trace.add(`${id} started (incarnation ${id}-${gen})`);
  }

  /** Mirrors src/server/start.ts: job actors (with retention), tenant and fleet actors (fair shares), the worker directory. */
  #composeScheduler(p: Proc): void {
    const { process } = p;
    const directory = new WorkerDirectory(process.clock, this.#rng(), WORKER_HB_MS * 3, { optimistic: true });
    const log = this.#log(p.id);
    p.node.onConnected((n) => {
      directory.start(n.nc, CLUSTER);
      // The test-only switches that re-open hole 1 and the breach probes closed (src/jobs/job-actor.ts).
      n.register(jobRegistration({ ...JOB_CFG, ...(this.#o.reopenHole1 ? { testOnlyHole1: true } : {}), ...(this.#o.skipProbes ? { testOnlyNoProbe: true } : {}) }, {
        nc: n.nc, clusterName: CLUSTER, runs: n.buckets.runs, router: () => n.router, workers: directory, log,
        tenantMaxConcurrent: async (id) => this.#caps.get(id),
        nowS: () => Math.floor(process.clock.now() / 1000),
        nowMs: () => process.clock.now(),
        sleep: (ms) => new Promise((r) => process.clock.setTimer(ms, r)),
        defer: (fn, ms) => void process.clock.setTimer(ms, fn),
        // Bounded history as production runs it: a prune pass on the first terminal run after
        // a job comes to a node, among the run path's own writes.
        retention: new RunRetention(DEFAULT_RETENTION, { runs: n.buckets.runs, actors: n.buckets.actors, nowMs: () => process.clock.now(), log }),
      }));
      n.register(tenantRegistration(n.buckets.actors, undefined, { reportMs: FAIR_REPORT_MS }, process.clock));
      n.register(fleetRegistration(() => directory.capacity()));
    });
  }

  async #startWorker(p: Proc): Promise<void> {
    // Separate streams: the sandbox kind is the machine's (the same across restarts), and neither
    // draw shifts the others.
    const k = Number(p.id.slice(1));
    const sandbox = this.#o.sandbox ?? (stream(this.#o.seed, 3 + k).next() < 0.5 ? "docker" : "process");
    if (p.gen === 1) this.trace.add(`${p.id} sandbox ${sandbox}`);
    const executor = new SimExecutor({
      workerId: p.id, sim: this.sim, process: p.process, random: this.#rng(), ledger: this.ledger,
      sandbox, watchdogRandom: stream(this.#o.seed, 1000 + 100 * k + p.gen),
      // A fifth of the tasks end as they start (`Execution.ended`, the noop executor's path).
      endedRandom: stream(this.#o.seed, 1_000_000 + 100 * k + p.gen), endedRate: 0.2,
      durationMs: [300, 4000], failRate: 0.1, ...(this.#o.brokenExecutor ? { broken: true } : {}),
    });
    p.executor = executor;
    const worker = new Worker({
      workerId: p.id, clusterName: CLUSTER, slots: 2, heartbeatIntervalMs: WORKER_HB_MS, completionDeadlineMs: 60_000,
      nc: p.node.nc, router: p.node.router, executor, clock: p.process.clock, log: this.#log(p.id),
      inboxes: "shared", // no NATS credentials in the simulation: `_INBOX.` replies (reply-guard.ts)
      onEvent: (e) => this.trace.add(`${p.id} worker ${e.type} ${e.run_id} attempt ${e.attempt}`),
    });
    await worker.start();
  }

  /** Crash: the process stops at once — no goodbye, no lease release, its tasks die. */
  crash(id: string): void {
    const p = this.procs.get(id);
    if (!p?.up) return;
    p.up = false;
    p.process.kill();
    p.ep.close();
    p.executor?.crashAll();
    this.trace.add(`${id} CRASHED`);
  }

  /** Graceful stop (SIGTERM): hand partitions off, say goodbye, then the process is gone. */
  stop(id: string): void {
    const p = this.procs.get(id);
    if (!p?.up) return;
    p.up = false;
    this.trace.add(`${id} stopping gracefully`);
    p.node.stop().then(
      () => this.trace.add(`${id} stopped`),
      (e: unknown) => this.trace.add(`${id} stop failed: ${String(e)}`),
    ).finally(() => {
      p.process.kill();
      p.executor?.crashAll();
    });
  }

  /** A fault on `subject` (a process id, "bus" or "kv"; invariant h exempts a worker's own and the bus's, invariants.ts). */
  #fault(atMs: number, subject: string, what: string, apply: () => void, durationMs: number, undo: () => void): void {
    this.faultLog.push(`${(atMs / 1000).toFixed(1)}s ${what} for ${(durationMs / 1000).toFixed(1)}s`);
    this.sim.setTimer(atMs, () => {
      this.trace.add(`FAULT ${what} (${(durationMs / 1000).toFixed(1)} s)`);
      const over = this.checker.faultBegins(subject);
      apply();
      this.sim.setTimer(durationMs, () => {
        this.trace.add(`FAULT over: ${what}`);
        undo();
        over();
      });
    });
  }

  /** Chooses this seed's fault events within [fromMs, toMs). */
  planFaults(fromMs: number, toMs: number): void {
    const r = this.#rng();
    const schedulers = ["n1", "n2", "n3"];
    const workers = [...this.procs.values()].filter((p) => p.kind === "worker").map((p) => p.id);
    const n = between(r, 4, 8);
    for (let i = 0; i < n; i++) {
      const at = between(r, fromMs, toMs - 12_000);
      const kind = pick(r, ["crash", "stop", "pause", "pause_worker", "isolate", "isolate_worker", "crash_worker", "kv_timeouts", "lossy_bus"] as const);
      const node = pick(r, schedulers);
      const worker = pick(r, workers);
      switch (kind) {
        case "crash":
          this.#fault(at, node, `crash ${node}`, () => this.crash(node), between(r, 1000, 8000), () => this.#restart(node, "scheduler"));
          break;
        case "stop":
          this.#fault(at, node, `graceful stop ${node}`, () => this.stop(node), between(r, 1000, 8000), () => this.#restart(node, "scheduler"));
          break;
        case "pause":
        case "pause_worker": {
          const id = kind === "pause" ? node : worker;
          this.#fault(at, id, `pause ${id}`, () => this.procs.get(id)?.process.pause(), between(r, 2000, 12_000), () => this.procs.get(id)?.process.resume());
          break;
        }
        case "isolate":
        case "isolate_worker": {
          const id = kind === "isolate" ? node : worker;
          let heal = () => {};
          this.#fault(at, id, `isolate ${id} (bus and KV)`, () => {
            heal = this.bus.isolate(id);
            this.procs.get(id)?.kv.setUnavailable(true);
          }, between(r, 2000, 10_000), () => {
            heal();
            this.procs.get(id)?.kv.setUnavailable(false);
          });
          break;
        }
        case "crash_worker":
          this.#fault(at, worker, `crash ${worker}`, () => this.crash(worker), between(r, 1000, 5000), () => this.#restart(worker, "worker"));
          break;
        case "kv_timeouts":
          this.#fault(at, "kv", "KV timeouts (5%)", () => this.#setKv({ timeout: 0.05 }), between(r, 3000, 10_000), () => this.#setKv({ timeout: 0 }));
          break;
        case "lossy_bus":
          this.#fault(at, "bus", "lossy bus (5% loss, 5% dup, 0-200 ms delay)", () => this.#setBus({ loss: 0.05, dup: 0.05, delayMs: [0, 200] }), between(r, 3000, 15_000), () => this.#setBus({ loss: 0, dup: 0, delayMs: [0, 15] }));
          break;
      }
    }
  }

  #restart(id: string, kind: Proc["kind"]): void {
    const p = this.procs.get(id);
    if (p?.up) return;
    if (p && p.process.state !== "dead") {
      // A graceful stop that has not finished (e.g. it met a paused process): a restart of the
      // service kills what is left of the old process first, as a supervisor would. (Left
      // alive, its paused endpoint kept queue subscriptions that swallowed requests forever.)
      p.process.kill();
      p.ep.close();
      p.executor?.crashAll();
      this.trace.add(`${id} old incarnation killed before restart`);
    }
    this.start(id, kind);
  }

  #setKv(f: Partial<KvFaults>): void {
    this.#kvFaults = { ...this.#kvFaults, ...f };
    for (const p of this.procs.values()) p.kv.faults = { ...this.#kvFaults, unavailable: p.kv.faults.unavailable };
  }

  #setBus(f: Partial<BusFaults>): void {
    this.#busFaults = { ...this.#busFaults, ...f };
    this.bus.faults = this.#busFaults;
  }

  /** The seed's tenants and jobs (tenant "ta" has a cap of 2). */
  planJobs(r: Random): { tenant: string; spec: JobSpec }[] {
    this.#caps.set("ta", 2);
    this.#caps.set("tb", 100);
    const tenants = ["ta", "tb", ...(r.next() < 0.5 ? ["tc"] : [])];
    if (tenants.includes("tc")) this.#caps.set("tc", 100);
    const spec = (schedule: JobSpec["schedule"], overlap: Overlap): JobSpec => ({
      name: null, schedule, overlap, enabled: true, flex_window_s: 0,
      task: { image: "sim", args: [], env: {}, timeout_s: 20 },
      retry: { max_attempts: 3, backoff: "exponential", base_s: 1, max_s: 4 },
      misfire: { policy: "run_all", starting_deadline_s: null },
    });
    // Overlap=queue needs a period above the mean task time, or its backlog grows without bound.
    const cron = (o: Overlap) => ({ cron: `*/${pick(r, o === "queue" ? [5, 6] : [3, 4, 5, 6])} * * * * *`, time_zone: "UTC" });
    const out: { tenant: string; spec: JobSpec }[] = [];
    for (const overlap of ["allow", "skip", "queue"] as const) out.push({ tenant: "ta", spec: spec(cron(overlap), overlap) });
    const tb = pick(r, ["allow", "skip", "queue"] as const);
    out.push({ tenant: "tb", spec: spec(cron(tb), tb) });
    out.push({ tenant: "tb", spec: spec({ at: new Date(START_MS + between(r, 20, 60) * 1000).toISOString() }, "skip") });
    const tc = pick(r, ["allow", "skip", "queue"] as const);
    if (tenants.includes("tc")) out.push({ tenant: "tc", spec: spec(cron(tc), tc) });
    return out;
  }

  /** Creates the jobs through the job actors' `create` (NatsJobsService), retrying until done. */
  async createJobs(): Promise<void> {
    const r = this.#rng();
    const client = new SimProcess(this.sim, "client", 0);
    const ep = this.bus.endpoint("client", client);
    const router = new ActorRouter({ nc: ep, clusterName: CLUSTER, clock: client.clock, random: this.#rng(), partitions: PARTITIONS, deadlineMs: 10_000 });
    this.router = router;
    const service = new NatsJobsService(router, this.shared, PARTITIONS, this.#rng());
    for (const { tenant, spec } of this.planJobs(r)) {
      for (let attempt = 0; attempt < 20; attempt++) {
        try {
          const { job } = await service.createJob(tenant, spec, `sim-${this.jobs.length}`);
          this.jobs.push({ tenant, jobId: job.job_id, spec });
          if (spec.overlap === "skip") this.checker.skipJobs.add(job.job_id);
          this.trace.add(`created job ${tenant}/${job.job_id} (${"cron" in spec.schedule ? spec.schedule.cron : spec.schedule.at}, ${spec.overlap})`);
          break;
        } catch (e) {
          this.trace.add(`create failed (${String(e)}); retrying`);
          await new Promise<void>((res) => client.clock.setTimer(1000, res));
        }
      }
    }
  }
}

/** Runs one seed to the end and checks the invariants. */
export async function runSimulation(o: SimOptions): Promise<SimResult> {
  const c = new SimCluster(o);
  const duration = o.durationMs ?? 110_000;
  const quiet = o.quietTailMs ?? 35_000;
  c.trace.echo = o.echo;
  await c.checker.watchStore(c.shared);
  c.checker.watchLedger(c.ledger);
  for (const id of ["n1", "n2", "n3"]) c.start(id, "scheduler");
  const workers = stream(o.seed, 2).next() < 0.5 ? 2 : 3;
  for (let i = 1; i <= workers; i++) c.start(`w${i}`, "worker");
  if (!o.noFaults) c.planFaults(5000, duration - quiet);
  await c.sim.runUntil(START_MS + 1500);
  const creating = c.createJobs();
  let created = false;
  void creating.then(() => (created = true));
  await c.sim.runUntil(START_MS + duration);
  if (!created) c.checker.fail("occurrence_lost", "create", "the jobs were not all created within the simulation");
  // For the report: what each tenant actor believes at the end (slots held, runs waiting).
  // A tenant's effective cap is the lower of its max_concurrent and its fair share of the fleet.
  const limits = new Map(c.caps);
  const status = Promise.all([...new Set(c.jobs.map((j) => j.tenant))].map(async (t) => {
    const s = await c.router?.request({ type: TENANT_ACTOR, id: t }, { kind: "status" }, { deadlineMs: 1500 }).catch((e: unknown) => String(e));
    c.trace.add(`tenant ${t} at the end: ${JSON.stringify(s)}`);
    const share = (s as { share?: number } | undefined)?.share;
    if (typeof share === "number" && share > 0 && share < (limits.get(t) ?? Infinity)) limits.set(t, share);
  }));
  await c.sim.runUntil(START_MS + duration + 2000);
  await status;
  // Occurrences due in the last seconds may not have fired yet; runs need time to finish.
  // A run created before faults stopped has had 3 × (task 4 s + lease 4 s) + backoffs + slack.
  const saturated = saturatedTenants(c.ledger.all, limits, START_MS + duration);
  await c.checker.final(c.shared, c.jobs, START_MS + duration - 5000, START_MS + duration - quiet, saturated);
  for (const p of c.procs.values()) if (p.up) c.crash(p.id);
  const runs = (await c.shared.runs.list(">")).length;
  const digest = fnv(c.ledger.all.map((x) => `${x.runId}|${x.attempt}|${x.fence}|${x.worker}|${x.startMs}|${x.endMs}|${x.outcome}`).join("\n"));
  return { seed: o.seed, violations: c.checker.violations, stats: { executions: c.ledger.all.length, runs, faults: c.faultLog, simMs: duration, digest } };
}

/** FNV-1a of the ledger: two runs of one seed must agree on it (determinism). */
function fnv(s: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h.toString(16);
}
