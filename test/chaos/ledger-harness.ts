/**
 * The ledger chaos engine, shared by test/chaos/ledger.test.ts (short variant, in `npm test`) and
 * test/chaos/ledger-run.ts (`npm run chaos -- --minutes 20`).
 *
 * Real processes: one nats-server, scheduler nodes (the first also serves the API) and worker
 * nodes, each worker reaching NATS through its own loopback TCP proxy (so it can be cut off).
 * Jobs fire every few seconds (cron with a seconds field, mixed overlap and misfire policies,
 * a few tenants, one with a low max_concurrent_runs). Every execution writes to a ledger the
 * test owns:
 *   - process executor: the task itself appends `start|end|killed <run> <attempt> <fence>
 *     <worker> <epoch_ms> <tenant> <pid>` lines (`killed` from a TERM trap);
 *   - docker executor: the engine's event stream (container start / die, kairos.* labels).
 * A seeded schedule of faults runs meanwhile: kill -9 of a scheduler / of a worker (with its
 * task process groups, as when its machine dies; the kill time closes their executions),
 * SIGTERM of a scheduler, SIGSTOP of a worker past the run lease TTL, a NATS server restart
 * (same port, same store), and a worker cut off from NATS through its proxy past the lease TTL.
 * Each faulted process is restarted with the same node id.
 *
 * Then faults stop, the cluster must recover (events and polling with deadlines), the jobs are
 * paused and the invariants are checked:
 *   (a) no attempt (run_id, fence) executes more than once (on two workers, or twice);
 *   (b) no two executions of one run overlap in time;
 *   (c) every occurrence of each job between its first and its last checked scheduled time has
 *       exactly one run record;
 *   (d) no run is still non-terminal once the lease TTL plus the retry bound has passed;
 *   (e) no tenant has more distinct runs executing at once than its max_concurrent_runs;
 *   (f) no run executes again after one of its executions ended by itself (its end line; in
 *       Docker a die with exit code 0 — any other exit is `killed`), unless that execution's
 *       worker had a fault or NATS restarted in between (`checkRunAgain`).
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openBuckets } from "../../src/cluster/buckets.ts";
import { decode, encode } from "../../src/cluster/codec.ts";
import { connectNats } from "../../src/cluster/nats.ts";
import { launchNatsServer, type NatsServerHandle } from "../../src/dev/nats-launcher.ts";
import { writeNatsAuthFiles, type NatsAuthFiles } from "../../src/dev/nats-auth-files.ts";
import type { Role } from "../../src/cluster/config.ts";
import { systemClock } from "../../src/lib/clock.ts";
import { KvTenantDirectory } from "../../src/tenants/index.ts";
import type { TenantRecord } from "../../src/tenants/directory.ts";
import { runIdFor } from "../../src/jobs/ids.ts";
import { apiClient } from "../support/kairos.ts";
import { spawnNode, type NodeProc } from "../support/nodes.ts";
import { startTcpProxy, type CutMode, type TcpProxy } from "../support/tcp-proxy.ts";
import { dockerClient, removeWorkerContainers, TEST_IMAGE } from "../support/docker-image.ts";

// ---------------------------------------------------------------------------------------------
// Options and report

export const FAULT_KINDS = ["kill9_scheduler", "sigterm_scheduler", "kill9_worker", "sigstop_worker", "nats_restart", "cut_worker"] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface ChaosOptions {
  seed: number;
  executor: "process" | "docker";
  schedulers: number;
  workers: number;
  slots: number;
  partitions: number;
  /** Jobs per tenant; the last tenant gets `cap` as max_concurrent_runs. */
  tenants: { name: string; jobs: number; cap?: number }[];
  runLeaseTtlMs: number;
  /**
   * `--keep-runs` for scheduler nodes (run retention per job). Unset: the product default (1,000
   * finished runs per job), which holds a job's whole ledger for runs up to about 50 minutes at
   * the smallest step; a longer run passes more, or its checker would see pruned records as lost.
   */
  keepRuns?: number;
  /** Faults: either a fixed list (run in this order) or a duration with random kinds. */
  faults: { list: FaultKind[] } | { durationMs: number; kinds: readonly FaultKind[] };
  /** Time between the starts of two faults (a fault also waits for the previous recovery). */
  faultEveryMs: number;
  /** Task body duration range (seconds, between start and end lines). */
  taskSeconds: [number, number];
  /** Every `every`-th job runs longer than the run lease TTL (heartbeats must keep it alive). */
  longTasks?: { every: number; seconds: number };
  /** Cron second steps to pick from (each divides 60). */
  steps: number[];
  log: (line: string) => void;
}

export interface FaultRecord {
  kind: FaultKind;
  target: string;
  atMs: number;
  /** When the fault was lifted (process restarted, resumed, healed). */
  liftedMs: number;
  /** When the cluster was whole again (or undefined: recovery deadline passed). */
  recoveredMs: number | undefined;
  detail: string;
}

export interface Exec {
  run: string;
  attempt: number;
  fence: number;
  worker: string;
  tenant: string;
  key: string;
  startMs: number;
  endMs: number | undefined;
  /** How the execution ended: its own end line, a TERM trap, the test's kill -9, or not at all. */
  how: "end" | "killed" | "kill9" | "gone" | "open";
}

export interface Violation {
  invariant: "a" | "b" | "c" | "d" | "e" | "f";
  text: string;
  faults: string[];
}

export interface ChaosReport {
  seed: number;
  executor: string;
  wallMs: number;
  faultPhaseMs: number;
  faults: Record<string, number>;
  faultsTotal: number;
  recoveryTimeouts: number;
  jobs: number;
  occurrences: number;
  runs: number;
  runsByStatus: Record<string, number>;
  attempts: number;
  /** Attempt outcomes in the run records (lease_lost shows the faults bit). */
  attemptOutcomes: Record<string, number>;
  executions: number;
  openExecutions: number;
  invariants: { a_attempt_twice: number; b_run_overlap: number; c_missing: number; c_duplicate: number; d_stuck: number; e_over_cap: number | null; f_run_again: number };
  tenantMaxConcurrent: Record<string, { cap: number | null; maxSeen: number }>;
  violations: number;
  examples: Violation[];
}

export const TERMINAL = new Set(["succeeded", "failed", "timed_out", "cancelled", "skipped", "missed"]);
const OVERLAPS = ["skip", "queue", "allow", "replace"] as const;
const MISFIRES = ["run_once", "run_all", "skip"] as const;
const MAX_ATTEMPTS = 3;
const BACKOFF_S = 1;

// ---------------------------------------------------------------------------------------------
// Small helpers

/** mulberry32: a seeded PRNG so a failing schedule can be replayed with its seed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const pick = <T>(rng: () => number, xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)]!;
const between = (rng: () => number, lo: number, hi: number) => lo + rng() * (hi - lo);

const delay = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls `check` (state re-read) until it returns a value or the deadline passes (then undefined). */
async function pollUntil<T>(check: () => Promise<T | undefined> | T | undefined, timeoutMs: number, everyMs = 100): Promise<T | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch {
      // state not readable yet (e.g. the API node restarting): poll again
    }
    if (Date.now() > deadline) return undefined;
    await delay(everyMs);
  }
}

/** Child pids of `pid` (from /proc), so a worker's task process groups can die with it. */
function childPids(pid: number): number[] {
  const out: number[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === pid) out.push(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** Kills every process whose environment carries `marker` (stray tasks after a failure). */
function killByEnvMarker(marker: string): number {
  let n = 0;
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d) || Number(d) === process.pid) continue;
    try {
      if (!readFileSync(`/proc/${d}/environ`, "utf8").split("\0").includes(marker)) continue;
      process.kill(Number(d), "SIGKILL");
      n++;
    } catch {
      // gone, or not ours to read
    }
  }
  return n;
}

const iso = (ms: number) => new Date(ms).toISOString();

// ---------------------------------------------------------------------------------------------
// The cluster of real processes

interface Slot { id: string; roles: string; proc: NodeProc; proxy?: TcpProxy }

class Cluster {
  readonly dir: string;
  readonly ledger: string;
  readonly marker: string;
  nats!: NatsServerHandle;
  natsAuth: NatsAuthFiles | undefined;
  natsPort = 0;
  readonly schedulers: Slot[] = [];
  readonly workers: Slot[] = [];
  readonly all: NodeProc[] = [];
  /** kill -9 times of each worker (closing the executions it left without an end line). */
  readonly killTimes = new Map<string, number[]>();
  apiUrl = "";
  /** Cut-offs so far: they alternate between a silent black hole and a reset. */
  cuts = 0;
  #stopped = false;

  constructor(readonly o: ChaosOptions, readonly tag: string) {
    this.dir = mkdtempSync(join(tmpdir(), "kairos-ledger-"));
    this.ledger = join(this.dir, "ledger.log");
    writeFileSync(this.ledger, "");
    this.marker = `CHAOS_LEDGER=${this.ledger}`;
  }

  async startNats(): Promise<void> {
    // Authorization on, as in production (one pinned user per worker); a restart on the same port keeps the same users.
    this.natsAuth ??= writeNatsAuthFiles(join(this.dir, "nats-auth"), ["kairos"], Array.from({ length: this.o.workers }, (_, i) => `${this.tag}w${i + 1}`));
    this.nats = await launchNatsServer({ storeDir: join(this.dir, "nats"), auth: this.natsAuth, ...(this.natsPort ? { port: this.natsPort } : {}) });
    this.natsPort = this.nats.port;
  }

  #args(worker: boolean): string[] {
    const a = ["--run-lease-ttl-ms", String(this.o.runLeaseTtlMs)];
    if (worker) a.push("--executor", this.o.executor, "--slots", String(this.o.slots));
    else if (this.o.keepRuns !== undefined) a.push("--keep-runs", String(this.o.keepRuns));
    return a;
  }

  spawn(slot: { id: string; roles: string; proxy?: TcpProxy }): NodeProc {
    const worker = slot.roles.includes("worker");
    const proc = spawnNode({
      natsUrl: slot.proxy ? slot.proxy.url : this.nats.url,
      creds: slot.roles === "worker" ? this.natsAuth!.credsForWorker(slot.id) : this.natsAuth!.credsFor(slot.roles.split(",") as Role[]),
      nodeId: slot.id, roles: slot.roles, partitions: this.o.partitions, extraArgs: this.#args(worker),
    });
    this.all.push(proc);
    return proc;
  }

  async start(): Promise<void> {
    await this.startNats();
    for (let i = 1; i <= this.o.schedulers; i++) {
      const id = `${this.tag}s${i}`;
      const roles = i === 1 ? "api,scheduler" : "scheduler";
      this.schedulers.push({ id, roles, proc: this.spawn({ id, roles }) });
    }
    for (let i = 1; i <= this.o.workers; i++) {
      const id = `${this.tag}w${i}`;
      const proxy = await startTcpProxy(this.natsPort);
      this.workers.push({ id, roles: "worker", proxy, proc: this.spawn({ id, roles: "worker", proxy }) });
    }
    const api = this.schedulers[0]!.proc;
    const e = (await api.waitFor((ev) => (ev.type as string) === "api_listening", 60_000, "api listening")) as unknown as { api_url: string };
    this.apiUrl = e.api_url;
    if (!(await this.whole(60_000))) throw new Error("cluster did not come up within 60 s");
  }

  /** Live schedulers own every partition exactly once and every process has started. */
  isWhole(): boolean {
    const owners = new Map<number, number>();
    for (const s of this.schedulers) for (const p of s.proc.held()) owners.set(p, (owners.get(p) ?? 0) + 1);
    if (owners.size !== this.o.partitions || [...owners.values()].some((n) => n !== 1)) return false;
    return [...this.schedulers, ...this.workers].every((s) => s.proc.events.some((e) => e.type === "node_started"));
  }

  async whole(timeoutMs: number): Promise<boolean> {
    return (await pollUntil(() => (this.isWhole() ? true : undefined), timeoutMs, 50)) === true;
  }

  async respawn(slot: Slot): Promise<void> {
    slot.proc = this.spawn(slot);
    if (slot.roles.includes("api")) {
      const e = (await slot.proc.waitFor((ev) => (ev.type as string) === "api_listening", 60_000, "api listening")) as unknown as { api_url: string };
      this.apiUrl = e.api_url;
    }
  }

  /** kill -9 of a worker and of its task process groups (as when its machine dies). */
  async hardKillWorker(slot: Slot): Promise<number> {
    slot.proc.signal("SIGSTOP"); // no new task can be spawned while its children are collected
    const kids = childPids(slot.proc.pid);
    for (const k of kids) {
      try {
        process.kill(-k, "SIGKILL");
      } catch {
        // already gone
      }
    }
    slot.proc.signal("SIGKILL");
    await slot.proc.exited;
    const at = Date.now();
    this.killTimes.set(slot.id, [...(this.killTimes.get(slot.id) ?? []), at]);
    return kids.length;
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    await Promise.all(this.all.map((p) => p.stop().catch(() => null)));
    killByEnvMarker(this.marker);
    for (const w of this.workers) await w.proxy?.close();
    if (this.o.executor === "docker") await Promise.all(this.workers.map((w) => removeWorkerContainers(w.id).catch(() => undefined)));
    await this.nats?.stop().catch(() => undefined);
  }

  removeDir(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Jobs

interface JobInfo {
  jobId: string;
  tenant: string;
  step: number;
  overlap: string;
  misfire: string;
  firstMs: number;
  /** The newest occurrence known to be fired by a healthy cluster (set before pausing). */
  lastCheckedMs: number;
}

interface RunRec {
  run_id: string;
  job_id: string;
  scheduled_for: string;
  status: string;
  trigger: string;
  attempts: { worker: string | null; started_at: string | null; finished_at: string | null; outcome: string | null }[];
  reason: string | null;
}

function taskScript(): string {
  // The trap is armed before the start line, so a TERM never leaves a start without a close.
  return [
    'line() { echo "$1 $KAIROS_RUN_ID $KAIROS_ATTEMPT $KAIROS_FENCE $KAIROS_WORKER_ID $(date +%s%3N) $TENANT $$" >> "$CHAOS_LEDGER"; }',
    "trap 'line killed; exit 143' TERM",
    "line start",
    'sleep "$D" & wait $!',
    "line end",
  ].join("\n");
}

function taskFor(o: ChaosOptions, tenant: string, seconds: number, ledger: string): Record<string, unknown> {
  if (o.executor === "docker") {
    return { image: TEST_IMAGE, args: ["/bin/sh", "-c", `sleep ${Math.max(1, Math.round(seconds))}`], timeout_s: 20 };
  }
  return {
    image: "ledger", args: ["/bin/sh", "-c", taskScript()], timeout_s: 20,
    env: { CHAOS_LEDGER: ledger, D: seconds.toFixed(1), TENANT: tenant },
  };
}

/** Calls the API through whatever node serves it now, retrying while it is unavailable. */
async function call<T>(c: Cluster, key: string, method: string, path: string, body?: unknown, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  for (;;) {
    try {
      const res = await apiClient(c.apiUrl, key).call<T>(method, path, body);
      if (res.status < 400) return res.body;
      if (res.status < 500 && res.status !== 429) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`, { cause: "client" });
      last = `${res.status} ${JSON.stringify(res.body)}`;
    } catch (e) {
      if ((e as Error).cause === "client") throw e;
      last = String(e); // the API node is restarting: try again
    }
    if (Date.now() > deadline) throw new Error(`${method} ${path}: no answer within ${timeoutMs} ms (${last})`);
    await delay(200);
  }
}

async function allRuns(c: Cluster, key: string, jobId: string): Promise<RunRec[]> {
  const out: RunRec[] = [];
  let cursor: string | null = null;
  do {
    const q: string = `/v1/jobs/${jobId}/runs?limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
    const page: { runs: RunRec[]; next_cursor: string | null } = await call(c, key, "GET", q);
    out.push(...page.runs);
    cursor = page.next_cursor;
  } while (cursor);
  return out;
}

/** Occurrences of `*\/step * * * * *` (UTC) in [from, to]. */
function grid(step: number, fromMs: number, toMs: number): number[] {
  const out: number[] = [];
  for (let t = Math.ceil(fromMs / 1000) * 1000; t <= toMs; t += 1000) {
    if ((Math.floor(t / 1000) % 60) % step === 0) out.push(t);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Ledger

/**
 * Watches the pids of started tasks that wrote no end line yet and records when each is gone: a
 * task killed with SIGKILL (a worker fencing itself kills without grace) cannot write a `killed`
 * line, so its end is taken from the OS (within one poll interval, i.e. conservatively late).
 */
class PidWatcher {
  readonly gone = new Map<string, number>();
  #timer: NodeJS.Timeout | undefined;
  #offset = 0;
  readonly #open = new Map<string, number>();
  constructor(private readonly path: string) {}
  start(): void {
    this.#timer = setInterval(() => this.#poll(), 100);
    this.#timer.unref();
  }
  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#poll();
  }
  #poll(): void {
    let text = "";
    try {
      const all = readFileSync(this.path, "utf8");
      text = all.slice(this.#offset);
      const last = text.lastIndexOf("\n");
      if (last < 0) text = "";
      else {
        text = text.slice(0, last + 1);
        this.#offset += last + 1;
      }
    } catch {
      return;
    }
    for (const line of text.split("\n")) {
      const f = line.trim().split(/\s+/);
      if (f.length < 8) continue;
      const [kind, run, , fence, worker, , , pid] = f as [string, string, string, string, string, string, string, string];
      const key = `${run}/${fence}/${worker}/${pid}`;
      if (kind === "start") this.#open.set(key, Number(pid));
      else this.#open.delete(key);
    }
    const now = Date.now();
    for (const [key, pid] of this.#open) {
      if (!executing(pid)) {
        this.gone.set(key, now);
        this.#open.delete(key);
      }
    }
  }
}

/**
 * Whether a task process still executes. A zombie does not: a task SIGKILLed by its supervisor
 * while its worker is frozen (SIGSTOP) stays a zombie until the worker resumes and reaps it, and
 * `kill(pid, 0)` still succeeds on it — that made every frozen-worker kill look like an overlap.
 */
export function executing(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && state !== "X";
  } catch {
    try {
      process.kill(pid, 0); // no /proc: the best this platform offers
      return !existsSync("/proc/self/stat");
    } catch {
      return false;
    }
  }
}

function readProcessLedger(path: string, gone?: ReadonlyMap<string, number>): Exec[] {
  const execs = new Map<string, Exec>();
  for (const line of readFileSync(path, "utf8").split("\n")) {
    const f = line.trim().split(/\s+/);
    if (f.length < 8) continue;
    const [kind, run, attempt, fence, worker, ms, tenant, pid] = f as [string, string, string, string, string, string, string, string];
    const key = `${run}/${fence}/${worker}/${pid}`;
    if (kind === "start") {
      execs.set(key, { run, attempt: Number(attempt), fence: Number(fence), worker, tenant, key, startMs: Number(ms), endMs: undefined, how: "open" });
    } else if ((kind === "end" || kind === "killed") && execs.has(key)) {
      const e = execs.get(key)!;
      if (e.endMs === undefined) {
        e.endMs = Number(ms);
        e.how = kind;
      } else if (kind === "killed" && e.how === "end") {
        // A TERM between the end line and the shell's exit: the trap exits 143, the worker saw a
        // kill (and its run may be retried). The end time stays the first line's.
        e.how = "killed";
      }
    }
  }
  for (const e of execs.values()) {
    const g = gone?.get(e.key);
    if (e.endMs === undefined && g !== undefined) {
      e.endMs = g;
      e.how = "gone";
    }
  }
  return [...execs.values()];
}

/** Collects container start/die events of managed containers as executions. */
class DockerLedger {
  readonly execs = new Map<string, Exec>();
  #stream: (NodeJS.ReadableStream & { destroy?: () => void }) | undefined;

  async start(): Promise<void> {
    this.#stream = await dockerClient().getEvents({
      filters: { type: ["container"], event: ["start", "die"], label: ["kairos.managed=true"] },
    });
    let buf = "";
    this.#stream.on("data", (d: Buffer) => {
      buf += d.toString("utf8");
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.trim()) this.#onEvent(JSON.parse(line) as DockerEvent);
      }
    });
    this.#stream.on("error", () => undefined);
  }

  #onEvent(ev: DockerEvent): void {
    const a = ev.Actor?.Attributes ?? {};
    const id = ev.Actor?.ID ?? ev.id ?? "";
    const ms = ev.timeNano ? Math.floor(ev.timeNano / 1e6) : (ev.time ?? 0) * 1000;
    const action = ev.Action ?? ev.status;
    if (action === "start") {
      this.execs.set(id, {
        run: a["kairos.run_id"] ?? "?", attempt: Number(a["kairos.attempt"]), fence: Number(a["kairos.fence"]),
        worker: a["kairos.worker_id"] ?? "?", tenant: a["kairos.tenant_id"] ?? "?", key: id, startMs: ms, endMs: undefined, how: "open",
      });
    } else if (action === "die") {
      const e = this.execs.get(id);
      if (e && e.endMs === undefined) {
        e.endMs = ms;
        // Its own end (exit 0, `sleep` done) or a kill (self-fencing, a cancel: 137, 143).
        e.how = a["exitCode"] === "0" ? "end" : "killed";
      }
    }
  }

  open(): number {
    return [...this.execs.values()].filter((e) => e.endMs === undefined).length;
  }

  stop(): void {
    this.#stream?.destroy?.();
  }
}

interface DockerEvent {
  Action?: string;
  status?: string;
  id?: string;
  time?: number;
  timeNano?: number;
  Actor?: { ID?: string; Attributes?: Record<string, string> };
}

// ---------------------------------------------------------------------------------------------
// Invariants

function faultsNear(faults: FaultRecord[], atMs: number, workers: string[], ttl: number): string[] {
  return faults
    .filter((f) => atMs >= f.atMs - 2000 && atMs <= (f.recoveredMs ?? f.liftedMs) + 2 * ttl + 5000)
    .map((f) => `${f.kind}(${f.target}${workers.includes(f.target) ? ", involved" : ""}) at ${iso(f.atMs)}`);
}

/** Closes executions left without an end: at their worker's next kill -9, else at `endMs`. */
export function closeOpen(execs: Exec[], killTimes: Map<string, number[]>, endMs: number): number {
  let open = 0;
  for (const e of execs) {
    if (e.endMs !== undefined) continue;
    const k = (killTimes.get(e.worker) ?? []).filter((t) => t >= e.startMs).sort((a, b) => a - b)[0];
    if (k !== undefined) {
      e.endMs = k;
      e.how = "kill9";
    } else {
      e.endMs = endMs;
      open++;
    }
  }
  return open;
}

export function checkAttempts(execs: Exec[], faults: FaultRecord[], ttl: number): { a: Violation[]; b: Violation[] } {
  const a: Violation[] = [];
  const b: Violation[] = [];
  const byFence = new Map<string, Exec[]>();
  const byRun = new Map<string, Exec[]>();
  for (const e of execs) {
    byFence.set(`${e.run}/${e.fence}`, [...(byFence.get(`${e.run}/${e.fence}`) ?? []), e]);
    byRun.set(e.run, [...(byRun.get(e.run) ?? []), e]);
  }
  const desc = (e: Exec) => `attempt ${e.attempt} fence ${e.fence} on ${e.worker} ${iso(e.startMs)}..${e.endMs === undefined ? "?" : iso(e.endMs)} (${e.how})`;
  for (const [k, es] of byFence) {
    if (es.length < 2) continue;
    const workers = [...new Set(es.map((e) => e.worker))];
    a.push({
      invariant: "a",
      text: `attempt ${k} executed ${es.length} times on ${workers.join(", ")}: ${es.map(desc).join("; ")}`,
      faults: faultsNear(faults, es[1]!.startMs, workers, ttl),
    });
  }
  for (const [run, es] of byRun) {
    const sorted = [...es].sort((x, y) => x.startMs - y.startMs);
    for (let i = 0; i < sorted.length; i++) {
      for (let j = i + 1; j < sorted.length; j++) {
        const x = sorted[i]!;
        const y = sorted[j]!;
        if (y.startMs < (x.endMs ?? Number.POSITIVE_INFINITY)) {
          const why = x.fence === y.fence
            ? "the same attempt twice"
            : x.fence > y.fence
              ? "an older attempt started after a newer one was running"
              : "a newer attempt started while an older execution was still running";
          b.push({
            invariant: "b",
            text: `run ${run}: ${desc(x)} overlaps ${desc(y)} by ${(x.endMs ?? 0) - y.startMs} ms (${why})`,
            faults: faultsNear(faults, y.startMs, [x.worker, y.worker], ttl),
          });
        }
      }
    }
  }
  return { a, b };
}

/**
 * (f) A run executed again after one of its executions ended by itself (its end line, or exit 0
 * in Docker) — the breach of the twelfth session: an ended attempt's report waited past its
 * owner's lease, which guessed "never started" and offered the run again. Exempt: a fault on that
 * execution's worker (kill -9, SIGSTOP, cut off) or a NATS restart between its start and the new
 * start — then a re-run is the documented gap (an attempt never heard to start, its worker gone
 * or silent, is presumed unstarted; ARCHITECTURE.md, Known gaps).
 */
export function checkRunAgain(execs: Exec[], faults: FaultRecord[], ttl: number): Violation[] {
  const f: Violation[] = [];
  const byRun = new Map<string, Exec[]>();
  for (const e of execs) byRun.set(e.run, [...(byRun.get(e.run) ?? []), e]);
  // A fault whose cluster never recovered in time stays open (its effects may last).
  const faulted = (worker: string, fromMs: number, toMs: number) => faults.some((x) =>
    (x.target === worker || x.kind === "nats_restart") && x.atMs <= toMs && (x.recoveredMs ?? Number.POSITIVE_INFINITY) >= fromMs);
  for (const [run, es] of byRun) {
    const sorted = [...es].sort((x, y) => x.startMs - y.startMs);
    // Every execution that ended by itself, not only the first: one excused must not hide another.
    let found: { done: Exec; again: Exec } | undefined;
    for (const done of sorted.filter((x) => x.how === "end")) {
      const again = sorted.find((y) => y.startMs >= done.endMs! && !faulted(done.worker, done.startMs, y.startMs));
      if (again) {
        found = { done, again };
        break;
      }
    }
    if (!found) continue;
    const { done, again } = found;
    f.push({
      invariant: "f",
      text: `run ${run}: attempt ${again.attempt} fence ${again.fence} on ${again.worker} started ${iso(again.startMs)} after attempt ${done.attempt} fence ${done.fence} on ${done.worker} ended by itself ${iso(done.endMs!)}, with no fault on that worker or NATS between`,
      faults: faultsNear(faults, again.startMs, [done.worker, again.worker], ttl),
    });
  }
  return f;
}

/** Most distinct runs of each tenant executing at once, and the episodes above its cap. */
export function checkTenantCaps(execs: Exec[], caps: Map<string, number>, faults: FaultRecord[], ttl: number): { max: Map<string, number>; e: Violation[] } {
  const max = new Map<string, number>();
  const e: Violation[] = [];
  const byTenant = new Map<string, Exec[]>();
  for (const x of execs) byTenant.set(x.tenant, [...(byTenant.get(x.tenant) ?? []), x]);
  for (const [tenant, xs] of byTenant) {
    const points = xs.flatMap((x) => [{ t: x.startMs, d: 1, x }, { t: x.endMs ?? Number.POSITIVE_INFINITY, d: -1, x }]);
    points.sort((p, q) => p.t - q.t || p.d - q.d); // an end at the same ms as a start counts first
    const openRuns = new Map<string, number>();
    let peak = 0;
    let over = false;
    const cap = caps.get(tenant);
    for (const p of points) {
      const n = (openRuns.get(p.x.run) ?? 0) + p.d;
      if (n <= 0) openRuns.delete(p.x.run);
      else openRuns.set(p.x.run, n);
      peak = Math.max(peak, openRuns.size);
      if (cap !== undefined && openRuns.size > cap && !over) {
        over = true;
        e.push({
          invariant: "e",
          text: `tenant ${tenant} (cap ${cap}) had ${openRuns.size} runs executing at ${iso(p.t)}: ${[...openRuns.keys()].join(", ")}`,
          faults: faultsNear(faults, p.t, [], ttl),
        });
      }
      if (cap !== undefined && openRuns.size <= cap) over = false;
    }
    max.set(tenant, peak);
  }
  return { max, e };
}

// ---------------------------------------------------------------------------------------------
// The run

export async function runLedgerChaos(o: ChaosOptions, onCluster?: (stop: () => Promise<void>) => void): Promise<ChaosReport> {
  const t0 = Date.now();
  const rng = prng(o.seed);
  const tag = `L${(o.seed % 100_000).toString(36)}${process.pid.toString(36)}`;
  const c = new Cluster(o, tag);
  onCluster?.(() => c.stop());
  const dockerLedger = o.executor === "docker" ? new DockerLedger() : undefined;
  const faults: FaultRecord[] = [];
  try {
    o.log(`seed ${o.seed}; ledger ${c.ledger}`);
    if (dockerLedger) await dockerLedger.start();
    await c.start();
    o.log(`cluster up: ${o.schedulers} schedulers, ${o.workers} workers (${o.executor}) in ${Date.now() - t0} ms`);

    // Tenants (through the real tenant directory), one with a low cap set on its record.
    const nc = await connectNats({ url: c.nats.url, name: "ledger-chaos", credsFile: c.natsAuth!.credsFor("admin") });
    const keys = new Map<string, string>();
    const tenantIds = new Map<string, string>();
    const caps = new Map<string, number>();
    try {
      const b = await openBuckets(nc, { clusterName: "kairos", replicas: 1 });
      const dir = new KvTenantDirectory(b.tenants, { clock: systemClock, authCacheTtlMs: 0 });
      for (const t of o.tenants) {
        const r = await dir.createTenant(`${t.name}-${tag}`.toLowerCase());
        keys.set(t.name, r.apiKey);
        tenantIds.set(t.name, r.tenant.tenant_id);
        if (t.cap !== undefined) {
          const entry = await b.tenants.get(`t.${r.tenant.tenant_id}`);
          const rec = decode<TenantRecord>(entry!.value);
          const w = await b.tenants.update(`t.${r.tenant.tenant_id}`, encode({ ...rec, max_concurrent_runs: t.cap }), entry!.revision);
          if (!w.ok) throw new Error(`could not set the cap of tenant ${t.name}`);
          caps.set(o.executor === "docker" ? r.tenant.tenant_id : t.name, t.cap);
        }
      }
    } finally {
      await nc.close();
    }

    // Jobs.
    const jobs: JobInfo[] = [];
    for (const t of o.tenants) {
      for (let i = 0; i < t.jobs; i++) {
        const step = pick(rng, o.steps);
        const overlap = OVERLAPS[jobs.length % OVERLAPS.length]!;
        const misfire = pick(rng, MISFIRES);
        const long = o.longTasks !== undefined && jobs.length % o.longTasks.every === o.longTasks.every - 1;
        const secs = long ? o.longTasks!.seconds : between(rng, o.taskSeconds[0], o.taskSeconds[1]);
        const job = await call<{ job_id: string; next_run_at: string }>(c, keys.get(t.name)!, "POST", "/v1/jobs", {
          name: `${t.name}-${i}`, schedule: { cron: `*/${step} * * * * *`, time_zone: "UTC" },
          task: taskFor(o, t.name, secs, c.ledger), overlap, misfire: { policy: misfire },
          retry: { max_attempts: MAX_ATTEMPTS, backoff: "fixed", base_s: BACKOFF_S, max_s: BACKOFF_S },
        });
        jobs.push({ jobId: job.job_id, tenant: t.name, step, overlap, misfire, firstMs: Date.parse(job.next_run_at), lastCheckedMs: 0 });
      }
    }
    o.log(`${jobs.length} jobs created for ${o.tenants.length} tenants`);

    const pids = dockerLedger ? undefined : new PidWatcher(c.ledger);
    pids?.start();
    const executions = (): Exec[] => (dockerLedger ? [...dockerLedger.execs.values()] : readProcessLedger(c.ledger, pids?.gone));
    const ended = () => executions().filter((e) => e.endMs !== undefined).length;
    const progress = async (n: number, timeoutMs: number): Promise<boolean> => {
      const target = ended() + n;
      return (await pollUntil(() => (ended() >= target ? true : undefined), timeoutMs, 200)) === true;
    };
    if (!(await progress(Math.min(10, jobs.length), 60_000))) throw new Error("no executions finished within 60 s of creating the jobs");
    o.log(`warm: ${ended()} executions finished`);

    // Faults.
    const plan: FaultKind[] = "list" in o.faults ? [...o.faults.list] : [];
    const faultPhaseStart = Date.now();
    const faultPhaseEnd = "durationMs" in o.faults ? faultPhaseStart + o.faults.durationMs : Number.POSITIVE_INFINITY;
    const kinds = "kinds" in o.faults ? o.faults.kinds : FAULT_KINDS;
    let recoveryTimeouts = 0;
    for (let i = 0; ; i++) {
      let kind: FaultKind | undefined;
      if ("list" in o.faults) kind = plan[i];
      else if (Date.now() < faultPhaseEnd) kind = pick(rng, kinds);
      if (kind === undefined) break;
      const f = await injectFault(c, o, rng, kind);
      const recovered = await c.whole(45_000);
      f.recoveredMs = recovered ? Date.now() : undefined;
      if (!recovered) recoveryTimeouts++;
      faults.push(f);
      o.log(`fault ${faults.length} ${f.kind} ${f.target} (${f.detail}): lifted after ${f.liftedMs - f.atMs} ms, ${recovered ? `whole after ${f.recoveredMs! - f.liftedMs} ms` : "NOT whole within 45 s"}`);
      // Pacing: the next fault starts `faultEveryMs` after this one started.
      const wait = f.atMs + o.faultEveryMs - Date.now();
      if (wait > 0) await delay(wait);
    }
    const faultPhaseMs = Date.now() - faultPhaseStart;

    // Settle: whole, working, and every job has fired after recovery.
    if (!(await c.whole(60_000))) o.log("WARNING: cluster not whole 60 s after the last fault");
    const healthyFrom = Date.now();
    const fired = new Map<string, number>();
    const allFired = await pollUntil(async () => {
      for (const j of jobs) {
        if (fired.has(j.jobId)) continue;
        const page = await call<{ runs: RunRec[] }>(c, keys.get(j.tenant)!, "GET", `/v1/jobs/${j.jobId}/runs?limit=1`);
        const newest = page.runs[0];
        if (newest && Date.parse(newest.scheduled_for) >= healthyFrom + 1000) fired.set(j.jobId, Date.parse(newest.scheduled_for));
      }
      return fired.size === jobs.length ? true : undefined;
    }, 60_000, 500);
    if (!allFired) o.log(`WARNING: only ${fired.size}/${jobs.length} jobs fired after recovery`);
    for (const j of jobs) {
      // The newest recorded occurrence: everything before it was enumerated by a healthy owner.
      j.lastCheckedMs = fired.get(j.jobId) ?? healthyFrom - 30_000;
    }
    for (const j of jobs) await call(c, keys.get(j.tenant)!, "PATCH", `/v1/jobs/${j.jobId}`, { enabled: false });
    const pausedAt = Date.now();
    o.log(`jobs paused; ${ended()} executions finished so far`);

    // (d): every run terminal within lease TTL + retry bound (+ a slot re-ask period and slack).
    const maxTask = Math.max(o.taskSeconds[1], o.longTasks?.seconds ?? 0) * 1000 + (o.executor === "docker" ? 3000 : 0);
    const boundMs = 2 * o.runLeaseTtlMs + MAX_ATTEMPTS * (BACKOFF_S * 2000 + o.runLeaseTtlMs + maxTask + 1000) + 10_000 + 5_000;
    const runsOf = new Map<string, RunRec[]>();
    const allTerminal = await pollUntil(async () => {
      for (const j of jobs) {
        const prev = runsOf.get(j.jobId);
        if (prev && prev.every((r) => TERMINAL.has(r.status))) continue;
        runsOf.set(j.jobId, await allRuns(c, keys.get(j.tenant)!, j.jobId));
      }
      return [...runsOf.values()].every((rs) => rs.every((r) => TERMINAL.has(r.status))) ? true : undefined;
    }, boundMs, 1000);
    const stuck = [...runsOf.values()].flat().filter((r) => !TERMINAL.has(r.status));
    o.log(`${allTerminal ? "all runs terminal" : `${stuck.length} runs still active`} ${Date.now() - pausedAt} ms after pausing (bound ${boundMs} ms)`);
    // Re-read everything once more for the final picture.
    for (const j of jobs) runsOf.set(j.jobId, await allRuns(c, keys.get(j.tenant)!, j.jobId));
    // An occurrence the listing lacks is looked up by its run id too: a record the listing missed
    // and a record never written are different bugs.
    const direct = new Map<string, string>();
    for (const j of jobs) {
      const listed = new Set((runsOf.get(j.jobId) ?? []).map((r) => Date.parse(r.scheduled_for)));
      for (const t of grid(j.step, j.firstMs, j.lastCheckedMs)) {
        if (listed.has(t)) continue;
        const runId = runIdFor(j.jobId, t);
        direct.set(`${j.jobId}@${t}`, await call<RunRec>(c, keys.get(j.tenant)!, "GET", `/v1/runs/${runId}`).then((r) => `GET ${runId}: ${r.status}`, (e: unknown) => `GET ${runId}: ${String(e).slice(0, 120)}`));
      }
    }

    // Stop the cluster (remaining tasks are killed: their TERM trap / die event closes them).
    await c.stop();
    if (dockerLedger) {
      await pollUntil(() => (dockerLedger.open() === 0 ? true : undefined), 15_000, 200);
      dockerLedger.stop();
    }
    pids?.stop();
    const endMs = Date.now();
    const execs = executions();
    const openExecutions = closeOpen(execs, c.killTimes, endMs);

    // Invariants.
    const violations: Violation[] = [];
    const { a, b } = checkAttempts(execs, faults, o.runLeaseTtlMs);
    violations.push(...a, ...b);
    let cMissing = 0;
    let cDup = 0;
    let occurrences = 0;
    for (const j of jobs) {
      const rs = runsOf.get(j.jobId) ?? [];
      const bySched = new Map<number, RunRec[]>();
      for (const r of rs) bySched.set(Date.parse(r.scheduled_for), [...(bySched.get(Date.parse(r.scheduled_for)) ?? []), r]);
      for (const t of grid(j.step, j.firstMs, j.lastCheckedMs)) {
        occurrences++;
        const n = bySched.get(t)?.length ?? 0;
        if (n === 0) {
          cMissing++;
          violations.push({ invariant: "c", text: `job ${j.jobId} (${j.tenant}, */${j.step}, overlap ${j.overlap}, misfire ${j.misfire}): no run record for ${iso(t)} (${direct.get(`${j.jobId}@${t}`) ?? "?"})`, faults: faultsNear(faults, t, [], o.runLeaseTtlMs) });
        } else if (n > 1) {
          cDup++;
          violations.push({ invariant: "c", text: `job ${j.jobId}: ${n} run records for ${iso(t)}: ${bySched.get(t)!.map((r) => `${r.run_id} ${r.status}`).join(", ")}`, faults: faultsNear(faults, t, [], o.runLeaseTtlMs) });
        }
      }
    }
    for (const r of stuck) {
      violations.push({ invariant: "d", text: `run ${r.run_id} (job ${r.job_id}, ${r.scheduled_for}) still ${r.status} ${boundMs} ms after pausing; attempts ${JSON.stringify(r.attempts.map((x) => [x.worker, x.outcome]))}`, faults: [] });
    }
    const { max, e } = checkTenantCaps(execs, caps, faults, o.runLeaseTtlMs);
    violations.push(...e);
    const f = checkRunAgain(execs, faults, o.runLeaseTtlMs);
    violations.push(...f);

    const runs = [...runsOf.values()].flat();
    const runsByStatus: Record<string, number> = {};
    for (const r of runs) runsByStatus[r.status] = (runsByStatus[r.status] ?? 0) + 1;
    const attemptOutcomes: Record<string, number> = {};
    for (const r of runs) for (const x of r.attempts) attemptOutcomes[x.outcome ?? "none"] = (attemptOutcomes[x.outcome ?? "none"] ?? 0) + 1;
    const faultCounts: Record<string, number> = {};
    for (const f of faults) faultCounts[f.kind] = (faultCounts[f.kind] ?? 0) + 1;
    const tenantMaxConcurrent: ChaosReport["tenantMaxConcurrent"] = {};
    for (const t of o.tenants) {
      const k = o.executor === "docker" ? tenantIds.get(t.name)! : t.name;
      tenantMaxConcurrent[t.name] = { cap: t.cap ?? null, maxSeen: max.get(k) ?? 0 };
    }
    const hasCap = o.tenants.some((t) => t.cap !== undefined);
    return {
      seed: o.seed, executor: o.executor, wallMs: Date.now() - t0, faultPhaseMs,
      faults: faultCounts, faultsTotal: faults.length, recoveryTimeouts,
      jobs: jobs.length, occurrences, runs: runs.length, runsByStatus,
      attempts: runs.reduce((n, r) => n + r.attempts.length, 0),
      attemptOutcomes,
      executions: execs.length, openExecutions,
      invariants: {
        a_attempt_twice: a.length, b_run_overlap: b.length, c_missing: cMissing, c_duplicate: cDup,
        d_stuck: stuck.length, e_over_cap: hasCap ? e.length : null, f_run_again: f.length,
      },
      tenantMaxConcurrent,
      violations: violations.length,
      examples: violations,
    };
  } finally {
    dockerLedger?.stop();
    await c.stop();
    if (process.env["KAIROS_CHAOS_KEEP"] === "1") o.log(`kept ${c.dir}`);
    else c.removeDir();
  }
}

async function injectFault(c: Cluster, o: ChaosOptions, rng: () => number, kind: FaultKind): Promise<FaultRecord> {
  const ttl = o.runLeaseTtlMs;
  const atMs = Date.now();
  const rec = (target: string, detail: string): FaultRecord => ({ kind, target, atMs, liftedMs: Date.now(), recoveredMs: undefined, detail });
  switch (kind) {
    case "kill9_scheduler": {
      const s = pick(rng, c.schedulers);
      s.proc.signal("SIGKILL");
      await s.proc.exited;
      const down = Math.round(between(rng, 500, 3000));
      await delay(down); // the dead time is part of the fault plan
      await c.respawn(s);
      return rec(s.id, `down ${down} ms`);
    }
    case "sigterm_scheduler": {
      const s = pick(rng, c.schedulers);
      await s.proc.stop();
      await c.respawn(s);
      return rec(s.id, "stopped and restarted");
    }
    case "kill9_worker": {
      const w = pick(rng, c.workers);
      const tasks = await c.hardKillWorker(w);
      const down = Math.round(between(rng, 500, 3000));
      await delay(down);
      await c.respawn(w);
      return rec(w.id, `${tasks} task group(s) killed with it, down ${down} ms`);
    }
    case "sigstop_worker": {
      const w = pick(rng, c.workers);
      const hold = Math.round(ttl + between(rng, 1500, 4000));
      w.proc.signal("SIGSTOP");
      await delay(hold);
      w.proc.signal("SIGCONT");
      return rec(w.id, `paused ${hold} ms (run lease TTL ${ttl} ms)`);
    }
    case "nats_restart": {
      await c.nats.stop();
      await c.startNats();
      return rec(`nats:${c.natsPort}`, "stopped (SIGTERM) and restarted on the same port and store");
    }
    case "cut_worker": {
      const w = pick(rng, c.workers);
      const mode: CutMode = c.cuts++ % 2 === 0 ? "blackhole" : "reset";
      const hold = Math.round(ttl + between(rng, 1500, 4000));
      w.proxy!.cut(mode);
      await delay(hold);
      w.proxy!.heal();
      return rec(w.id, `cut (${mode}) ${hold} ms (run lease TTL ${ttl} ms)`);
    }
  }
}

/** A human report; the last line is one JSON object with the figures. */
export function formatReport(r: ChaosReport, maxExamples = 10): string {
  const lines: string[] = [];
  lines.push(`== ledger chaos (${r.executor}), seed ${r.seed}, ${(r.wallMs / 1000).toFixed(0)} s wall, fault phase ${(r.faultPhaseMs / 1000).toFixed(0)} s`);
  lines.push(`faults: ${r.faultsTotal} (${Object.entries(r.faults).map(([k, n]) => `${k} ${n}`).join(", ")}); recovery timeouts ${r.recoveryTimeouts}`);
  lines.push(`jobs ${r.jobs}, occurrences checked ${r.occurrences}, run records ${r.runs} (${Object.entries(r.runsByStatus).map(([k, n]) => `${k} ${n}`).join(", ")})`);
  lines.push(`attempts (API) ${r.attempts} (${Object.entries(r.attemptOutcomes).map(([k, n]) => `${k} ${n}`).join(", ")}), executions (ledger) ${r.executions}, executions never closed ${r.openExecutions}`);
  const inv = r.invariants;
  lines.push(`(a) attempt executed twice:        ${inv.a_attempt_twice}`);
  lines.push(`(b) executions of a run overlap:   ${inv.b_run_overlap}`);
  lines.push(`(c) occurrence without a record:   ${inv.c_missing}; with several records: ${inv.c_duplicate}`);
  lines.push(`(d) run stuck non-terminal:        ${inv.d_stuck}`);
  lines.push(`(e) tenant above its cap:          ${inv.e_over_cap ?? "not checked (no cap)"}`);
  lines.push(`(f) run again after it ended:      ${inv.f_run_again}`);
  for (const [t, m] of Object.entries(r.tenantMaxConcurrent)) lines.push(`    tenant ${t}: cap ${m.cap ?? "default"}, most runs executing at once ${m.maxSeen}`);
  for (const v of r.examples.slice(0, maxExamples)) lines.push(`  [${v.invariant}] ${v.text}${v.faults.length ? `\n        near: ${v.faults.join("; ")}` : ""}`);
  if (r.examples.length > maxExamples) lines.push(`  … ${r.examples.length - maxExamples} more`);
  const { examples: _examples, ...figures } = r;
  lines.push(JSON.stringify(figures));
  return lines.join("\n");
}

/** Sanity helper for the runner: does `date +%s%3N` give milliseconds here? */
export function ledgerClockWorks(): boolean {
  const r = spawnSync("/bin/sh", ["-c", "date +%s%3N"], { encoding: "utf8" });
  return /^\d{13}$/.test(r.stdout.trim());
}
