/**
 * The ledger chaos test's cluster of real processes: one nats-server or a 3-server NATS cluster
 * (R3 buckets; servers do not advertise each other's client URLs, so a worker cut off through its
 * proxies stays cut off), scheduler nodes (the first also serves the API) and worker nodes. Every
 * node is given every server's URL; each worker reaches each server through a loopback TCP proxy
 * of its own. Processes come back under their own ids.
 *
 * `whole()` is the recovery condition between faults: every live scheduler's partitions held
 * exactly once, every node started, and — on a cluster — every bucket's stream led and its
 * replicas current, and a meta leader known (from the servers' logs: the JetStream API names no
 * meta leader to a non-system user).
 */
import { readdirSync, readFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Role } from "../../src/cluster/config.ts";
import { bucketName } from "../../src/cluster/buckets.ts";
import { startNats, startNatsCluster, type NatsFixture } from "../support/nats.ts";
import { spawnNode, type NodeProc } from "../support/nodes.ts";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.ts";
import { removeWorkerContainers } from "../support/docker-image.ts";

export const delay = (ms: number): Promise<void> => new Promise<void>((r) => setTimeout(r, ms));

/** Polls `check` (state re-read) until it returns a value or the deadline passes (then undefined). */
export async function pollUntil<T>(
  check: () => Promise<T | undefined> | T | undefined,
  timeoutMs: number,
  everyMs = 100,
): Promise<T | undefined> {
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

export interface Slot {
  id: string;
  roles: string;
  proc: NodeProc;
  proxies: TcpProxy[];
  /** The test stops or kills this process: its exit is not a crash. */
  expectExit: boolean;
}

/** A node that exited by itself (restarted a second later under its id, as an orchestrator would). */
export interface Crash {
  id: string;
  atMs: number;
  code: number | null;
  stderr: string;
}

/** How long after a crash the node is started again. */
const CRASH_RESTART_MS = 1000;

export interface ClusterOptions {
  executor: "process" | "docker";
  /** 1: one nats-server, R1 buckets; 3: a 3-server cluster, R3 buckets. */
  natsServers: 1 | 3;
  schedulers: number;
  workers: number;
  slots: number;
  partitions: number;
  runLeaseTtlMs: number;
  keepRuns?: number;
  log: (line: string) => void;
}

/** The buckets whose streams a NATS fault may pick (the run path's). */
export const RUN_PATH_BUCKETS = ["leases", "actors", "runs", "tenants"] as const;
const ALL_BUCKETS = ["cluster", "leases", "nodes", "actors", "runs", "tenants", "idem"] as const;

export class Cluster {
  readonly dir: string;
  readonly ledger: string;
  readonly marker: string;
  nats!: NatsFixture;
  readonly schedulers: Slot[] = [];
  readonly workers: Slot[] = [];
  readonly all: NodeProc[] = [];
  /** kill -9 times of each worker (closing the executions it left without an end line). */
  readonly killTimes = new Map<string, number[]>();
  /**
   * SIGSTOP times of each worker: its tasks' watchdogs kill them within a poll (a frozen worker's
   * tasks die, src/sandbox/supervisor.ts) — one just spawned may die before its first line.
   */
  readonly freezeTimes = new Map<string, number[]>();
  apiUrl = "";
  /** Cut-offs so far: they alternate between a silent black hole and a reset. */
  cuts = 0;
  /** The JetStream meta leader's server name, from the servers' logs (a cluster only). */
  metaLeader: string | undefined;
  /** NATS servers (by index) stopped, killed or paused by a fault right now. */
  readonly natsDown = new Set<number>();
  /** Nodes that exited by themselves. */
  readonly crashes: Crash[] = [];
  /** The last reason `whole` saw for the cluster not being whole. */
  lastUnwhole = "";
  /** Node processes that have exited. */
  readonly #gone = new WeakSet<NodeProc>();
  #admin: NatsConnection | undefined;
  #jsm: JetStreamManager | undefined;
  #stopped = false;

  constructor(
    readonly o: ClusterOptions,
    readonly tag: string,
  ) {
    this.dir = mkdtempSync(join(tmpdir(), "kairos-ledger-"));
    this.ledger = join(this.dir, "ledger.log");
    writeFileSync(this.ledger, "");
    this.marker = `CHAOS_LEDGER=${this.ledger}`;
  }

  get replicas(): 1 | 3 {
    return this.o.natsServers;
  }

  /** The name of NATS server `i` (a cluster's servers are s0, s1, s2). */
  serverName(i: number): string {
    return `s${i}`;
  }

  #onNatsLog(i: number, line: string): void {
    if (line.includes("Self is new JetStream cluster metadata leader"))
      this.metaLeader = this.serverName(i);
    else {
      const m = /JetStream cluster new metadata leader: ([^/\s]+)\//.exec(line);
      if (m) this.metaLeader = m[1];
    }
  }

  async #startNats(): Promise<void> {
    // Authorization on, as in production: each worker runs as its own pinned user (worker-<id>).
    const workers = Array.from({ length: this.o.workers }, (_, i) => `${this.tag}w${i + 1}`);
    const opts = {
      onLog: (i: number, line: string) => this.#onNatsLog(i, line),
      noAdvertise: true,
      workers,
    };
    this.nats = this.o.natsServers === 3 ? await startNatsCluster(3, opts) : await startNats(opts);
    this.#admin = await this.nats.connect("ledger-chaos-admin");
    this.#jsm = await jetstreamManager(this.#admin, { timeout: 3000 });
  }

  /** An admin connection (fixtures, stream info). */
  get admin(): NatsConnection {
    return this.#admin!;
  }

  #args(worker: boolean): string[] {
    const a = [
      "--run-lease-ttl-ms",
      String(this.o.runLeaseTtlMs),
      "--replicas",
      String(this.replicas),
    ];
    if (worker) a.push("--executor", this.o.executor, "--slots", String(this.o.slots));
    else if (this.o.keepRuns !== undefined) a.push("--keep-runs", String(this.o.keepRuns));
    return a;
  }

  #spawn(slot: { id: string; roles: string; proxies: TcpProxy[] }): NodeProc {
    const worker = slot.roles.includes("worker");
    const proc = spawnNode({
      natsUrl: slot.proxies.length > 0 ? slot.proxies.map((p) => p.url).join(",") : this.nats.url,
      creds: this.nats.credsForNode(slot.id, slot.roles.split(",") as Role[]),
      nodeId: slot.id,
      roles: slot.roles,
      partitions: this.o.partitions,
      extraArgs: this.#args(worker),
    });
    this.all.push(proc);
    return proc;
  }

  /** A slot with its node started. */
  #launch(base: { id: string; roles: string; proxies: TcpProxy[] }): Slot {
    const slot: Slot = { ...base, proc: this.#spawn(base), expectExit: false };
    this.#watch(slot);
    return slot;
  }

  /** Follows the slot's current process: one that exits by itself is a crash, restarted under its id. */
  #watch(slot: Slot): void {
    const proc = slot.proc;
    if (slot.roles.includes("api")) {
      proc
        .waitFor((ev) => (ev.type as string) === "api_listening", 120_000, "api listening")
        .then(
          (e) => {
            if (slot.proc === proc) this.apiUrl = (e as unknown as { api_url: string }).api_url;
          },
          () => undefined, // it never listened (killed or crashed first): `whole` and the API calls notice
        );
    }
    void proc.exited.then((code) => {
      this.#gone.add(proc);
      if (this.#stopped || slot.proc !== proc || slot.expectExit) return;
      // The error's own line first (a stack's tail alone does not say what failed), then the tail.
      const err = proc.stderr();
      const first = /^.*(Error|error)[^\n]*$/m.exec(err)?.[0] ?? "";
      const crash = {
        id: slot.id,
        atMs: Date.now(),
        code,
        stderr: `${first.slice(0, 400)} … ${err.slice(-400)}`,
      };
      this.crashes.push(crash);
      this.o.log(
        `CRASH: ${slot.id} exited by itself (code ${code}); restarted in ${CRASH_RESTART_MS} ms; stderr: ${JSON.stringify(crash.stderr)}`,
      );
      setTimeout(() => {
        if (!this.#stopped && slot.proc === proc) void this.respawn(slot);
      }, CRASH_RESTART_MS);
    });
  }

  /** kill -9 of a node (its exit is expected). */
  async kill9(slot: Slot): Promise<void> {
    slot.expectExit = true;
    slot.proc.signal("SIGKILL");
    await slot.proc.exited;
  }

  /** SIGTERM (a worker drains) and wait for the exit; SIGKILL after `killAfterMs`. */
  async stopNode(slot: Slot, killAfterMs?: number): Promise<void> {
    slot.expectExit = true;
    await slot.proc.stop(killAfterMs);
  }

  async start(): Promise<void> {
    await this.#startNats();
    for (let i = 1; i <= this.o.schedulers; i++) {
      this.schedulers.push(
        this.#launch({
          id: `${this.tag}s${i}`,
          roles: i === 1 ? "api,scheduler" : "scheduler",
          proxies: [],
        }),
      );
    }
    for (let i = 1; i <= this.o.workers; i++) {
      const proxies = await Promise.all(this.nats.servers.map((s) => startTcpProxy(s.port)));
      this.workers.push(this.#launch({ id: `${this.tag}w${i}`, roles: "worker", proxies }));
    }
    if (!(await this.whole(90_000)))
      throw new Error(`cluster did not come up within 90 s: ${this.lastUnwhole}`);
    if (this.apiUrl === "") throw new Error("the API node never said where it listens");
  }

  /** Why the processes are not whole yet (undefined: live schedulers own every partition exactly once and every process has started). */
  processesUnwhole(): string | undefined {
    const owners = new Map<number, number>();
    for (const s of this.schedulers)
      for (const p of s.proc.held()) owners.set(p, (owners.get(p) ?? 0) + 1);
    if (owners.size !== this.o.partitions)
      return `${owners.size} of ${this.o.partitions} partitions held`;
    const twice = [...owners].filter(([, n]) => n !== 1).map(([p]) => p);
    if (twice.length > 0) return `partitions ${twice.join(", ")} held by two schedulers`;
    const down = [...this.schedulers, ...this.workers].filter(
      (s) => !s.proc.events.some((e) => e.type === "node_started"),
    );
    if (down.length === 0 && this.apiUrl === "")
      return "the API node has not said where it listens";
    return down.length > 0
      ? `${down.map((s) => `${s.id} not started (last events ${JSON.stringify(s.proc.events.slice(-3))}; stderr ${JSON.stringify(s.proc.stderr().slice(-300))})`).join(", ")}`
      : undefined;
  }

  /** A stream's leader and its replicas' names, current or not (undefined: no answer). */
  async streamInfo(
    bucket: string,
  ): Promise<
    { leader: string | undefined; replicas: { name: string; current: boolean }[] } | undefined
  > {
    try {
      const info = await this.#jsm!.streams.info(`KV_${bucketName("kairos", bucket)}`);
      return {
        leader: info.cluster?.leader,
        replicas: (info.cluster?.replicas ?? []).map((r) => ({ name: r.name, current: r.current })),
      };
    } catch {
      return undefined;
    }
  }

  /** Why NATS is not whole yet (undefined: every server runs, a meta leader is known, each bucket's stream is led with all its replicas current). */
  async natsUnwhole(): Promise<string | undefined> {
    if (this.natsDown.size > 0)
      return `NATS server(s) ${[...this.natsDown].map((i) => this.serverName(i)).join(", ")} down or paused`;
    if (this.o.natsServers === 1) return undefined;
    if (this.metaLeader === undefined) return "no meta leader logged";
    for (const b of ALL_BUCKETS) {
      const s = await this.streamInfo(b);
      if (!s) return `no stream info for ${b}`;
      if (s.leader === undefined) return `stream ${b}: no leader`;
      if (s.replicas.length !== this.o.natsServers - 1 || s.replicas.some((r) => !r.current))
        return `stream ${b}: leader ${s.leader}, replicas ${JSON.stringify(s.replicas)}`;
    }
    return undefined;
  }

  async whole(timeoutMs: number): Promise<boolean> {
    return (
      (await pollUntil(
        async () => {
          const why = this.processesUnwhole() ?? (await this.natsUnwhole());
          this.lastUnwhole = why ?? "";
          return why === undefined ? true : undefined;
        },
        timeoutMs,
        this.o.natsServers === 3 ? 200 : 50,
      )) === true
    );
  }

  /**
   * Starts the slot's node again under its id (a live one — restarted after a crash meanwhile —
   * is killed first: never two processes with one id). The API node's new URL is taken from its
   * `api_listening` event.
   */
  async respawn(slot: Slot): Promise<void> {
    if (!this.#exited(slot.proc)) await this.kill9(slot);
    slot.proc = this.#spawn(slot);
    slot.expectExit = false;
    this.#watch(slot);
  }

  #exited(p: NodeProc): boolean {
    return this.#gone.has(p);
  }

  /** kill -9 of a worker and of its task process groups (as when its machine dies). */
  async hardKillWorker(slot: Slot): Promise<number> {
    slot.expectExit = true;
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
    for (const w of this.workers) for (const p of w.proxies) await p.close();
    if (this.o.executor === "docker")
      await Promise.all(
        this.workers.map((w) => removeWorkerContainers(w.id).catch(() => undefined)),
      );
    await this.#admin?.close().catch(() => undefined);
    await this.nats?.stop().catch(() => undefined);
  }

  removeDir(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}
