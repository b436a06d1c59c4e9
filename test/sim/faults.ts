/**
 * The simulation's fault events: a seed draws n of them (its profile's range) at random times in
 * the fault window, each of a kind and on a subject, for a duration; `undo` ends it.
 *
 * | kind | what happens |
 * | --- | --- |
 * | crash | kill -9 of a scheduler or a worker; restarted (same id) 1–8 s later |
 * | stop | SIGTERM of a scheduler: partitions handed off, goodbye; restarted 1–8 s later |
 * | restart | a worker killed and restarted at once under its own id (0.2–3 s): a new process with an empty memory, while it holds runs prepared ahead |
 * | drain_restart | a worker's rolling restart: SIGTERM (drain: prepared runs given back, running ones finish or are handed back at the drain timeout), then the same id again |
 * | pause | SIGSTOP of a process (a scheduler with its lease thread) for 2–12 s |
 * | stall | a scheduler's main event loop blocked for 2–20 s while its lease thread runs on (production settings); past `leaseMainStallMs` (15 s) the thread stops renewing |
 * | isolate | a process cut from the bus and the KV store |
 * | isolate_bus | a process reaches the KV store but not the bus |
 * | isolate_kv | a process reaches the bus but not the KV store |
 * | cut | the bus between two processes (a scheduler and a worker, or two schedulers) |
 * | thread_cut | a scheduler's lease thread loses the KV store, its main thread does not |
 * | thread_death | a scheduler's lease thread dies (the keeper falls back to renewing inline) |
 * | kv_timeouts | 5 % of KV operations time out, half of them applied |
 * | kv_stale | a quarter of the reads a replica may answer (`get` with `{ from: "replica" }`, `scan`) answered by a follower up to 2 s behind |
 * | kv_stale_all | (not drawn by default; an experiment) the same for every read, leader reads too |
 * | lossy_bus | 5 % loss, 5 % duplication, 0–200 ms delay on the bus |
 * | clock_step | a host's wall clock steps 1–30 s either way (beyond every margin); stepped back at the end |
 * | clock_drift | a host's wall clock drifts 20–300 ms a second either way (up to 9 s off); its error taken back at the end |
 */
import type { Random } from "../../src/lib/random.ts";
import type { FaultKind } from "./invariants.ts";
import type { SimCluster } from "./cluster.ts";
import { between, pick } from "./draw.ts";

export const ALL_FAULTS: readonly FaultKind[] = [
  "crash",
  "stop",
  "restart",
  "drain_restart",
  "pause",
  "stall",
  "isolate",
  "isolate_bus",
  "isolate_kv",
  "cut",
  "thread_cut",
  "thread_death",
  "kv_timeouts",
  "kv_stale",
  "kv_stale_all",
  "lossy_bus",
  "clock_step",
  "clock_drift",
];

/**
 * What a seed draws from unless told otherwise (`--faults`): every kind but `kv_stale_all`, the
 * experiment of answering every read by a lagging replica — reads that decide are the leader's
 * (src/cluster/kv.ts `ReadOptions`); before they were, `kv_stale_all`'s bugs were the system's.
 */
export const DEFAULT_FAULTS: readonly FaultKind[] = ALL_FAULTS.filter((k) => k !== "kv_stale_all");

/** Faults that need the lease keeper's thread (production settings). */
const THREAD_FAULTS: ReadonlySet<FaultKind> = new Set(["stall", "thread_cut", "thread_death"]);

/** Draws and arms this seed's faults within [fromMs, toMs) of its start (simulation time offsets). */
export function planFaults(
  c: SimCluster,
  r: Random,
  fromMs: number,
  toMs: number,
  only?: readonly FaultKind[],
): void {
  const threads = c.profile.node.leaseRenewer === "thread";
  const kinds = (only ?? DEFAULT_FAULTS).filter((k) => threads || !THREAD_FAULTS.has(k));
  if (kinds.length === 0) return;
  const schedulers = ["n1", "n2", "n3"];
  const workers = [...c.procs.values()].filter((p) => p.kind === "worker").map((p) => p.id);
  const n = between(r, c.profile.faults[0], c.profile.faults[1]);
  for (let i = 0; i < n; i++) {
    const at = between(r, fromMs, toMs - 12_000);
    const kind = pick(r, kinds);
    const node = pick(r, schedulers);
    const worker = pick(r, workers);
    const anyone = r.next() < 0.5 ? node : worker;
    arm(c, r, at, kind, node, worker, anyone);
  }
}

function arm(
  c: SimCluster,
  r: Random,
  at: number,
  kind: FaultKind,
  node: string,
  worker: string,
  anyone: string,
): void {
  const proc = (id: string) => c.procs.get(id);
  switch (kind) {
    case "crash":
      return c.fault(
        at,
        [anyone],
        kind,
        `crash ${anyone}`,
        () => c.crash(anyone),
        between(r, 1000, anyone === node ? 8000 : 5000),
        () => c.restart(anyone),
      );
    case "stop":
      return c.fault(
        at,
        [node],
        kind,
        `graceful stop ${node}`,
        () => c.stop(node),
        between(r, 1000, 8000),
        () => c.restart(node),
      );
    case "restart":
      return c.fault(
        at,
        [worker],
        kind,
        `restart ${worker} under its own id`,
        () => c.crash(worker),
        between(r, 200, 3000),
        () => c.restart(worker),
      );
    case "drain_restart": {
      const drain = between(r, c.profile.drainTimeoutMs[0], c.profile.drainTimeoutMs[1]);
      // The new process starts once the old one has exited (a supervisor's restart), polled.
      const whenEnded = () =>
        c.ended(worker) ? c.restart(worker) : c.sim.setTimer(100, whenEnded);
      return c.fault(
        at,
        [worker],
        kind,
        `rolling restart of ${worker} (drain ${(drain / 1000).toFixed(1)} s)`,
        () => c.stop(worker, drain),
        drain + 500,
        whenEnded,
      );
    }
    case "pause":
      return c.fault(
        at,
        [anyone],
        kind,
        `pause ${anyone}`,
        () => {
          proc(anyone)?.process.pause();
          proc(anyone)?.thread?.process.pause();
        },
        between(r, 2000, 12_000),
        () => {
          proc(anyone)?.process.resume();
          proc(anyone)?.thread?.process.resume();
        },
      );
    case "stall":
      return c.fault(
        at,
        [node],
        kind,
        `stall ${node}'s main loop (lease thread runs)`,
        () => proc(node)?.process.pause(),
        between(r, 2000, 20_000),
        () => proc(node)?.process.resume(),
      );
    case "isolate":
    case "isolate_bus":
    case "isolate_kv": {
      let heal = () => {};
      const bus = kind !== "isolate_kv";
      const kv = kind !== "isolate_bus";
      const what =
        kind === "isolate"
          ? "bus and KV"
          : bus
            ? "bus only: KV reachable"
            : "KV only: bus reachable";
      return c.fault(
        at,
        [anyone],
        kind,
        `isolate ${anyone} (${what})`,
        () => {
          if (bus) heal = c.bus.isolate(anyone);
          if (kv) setKvUnavailable(c, anyone, true, true);
        },
        between(r, 2000, 10_000),
        () => {
          heal();
          if (kv) setKvUnavailable(c, anyone, false, true);
        },
      );
    }
    case "cut": {
      const other =
        r.next() < 0.5
          ? worker
          : pick(
              r,
              ["n1", "n2", "n3"].filter((x) => x !== node),
            );
      let heal = () => {};
      return c.fault(
        at,
        [node, other],
        kind,
        `cut the bus between ${node} and ${other}`,
        () => (heal = c.bus.partition([node], [other])),
        between(r, 2000, 10_000),
        () => heal(),
      );
    }
    case "thread_cut":
      return c.fault(
        at,
        [node],
        kind,
        `cut ${node}'s lease thread from KV`,
        () => setKvUnavailable(c, node, true, false),
        between(r, 2000, 12_000),
        () => setKvUnavailable(c, node, false, false),
      );
    case "thread_death":
      return c.fault(
        at,
        [node],
        kind,
        `${node}'s lease thread dies`,
        () => proc(node)?.thread?.t.kill(),
        1,
        () => {},
      );
    case "kv_timeouts":
      return c.fault(
        at,
        ["kv"],
        kind,
        "KV timeouts (5%)",
        () => c.setKv({ timeout: 0.05 }),
        between(r, 3000, 10_000),
        () => c.setKv({ timeout: 0 }),
      );
    case "kv_stale":
    case "kv_stale_all": {
      const every = kind === "kv_stale_all";
      return c.fault(
        at,
        ["kv"],
        kind,
        `stale KV reads (25% of ${every ? "every read" : "replica reads"}, up to 2 s behind)`,
        () => c.setKv({ stale: { share: 0.25, lagMs: 2000, everyRead: every } }),
        between(r, 3000, 15_000),
        () => c.setKv({ stale: null }),
      );
    }
    case "lossy_bus":
      return c.fault(
        at,
        ["bus"],
        kind,
        "lossy bus (5% loss, 5% dup, 0-200 ms delay)",
        () => c.setBus({ loss: 0.05, dup: 0.05, delayMs: [0, 200] }),
        between(r, 3000, 15_000),
        () => c.setBus({ loss: 0, dup: 0, delayMs: [0, 15] }),
      );
    case "clock_step": {
      const step = (r.next() < 0.5 ? -1 : 1) * between(r, 1000, 30_000);
      const host = c.hostClock(anyone);
      return c.fault(
        at,
        [anyone],
        kind,
        `${anyone}'s clock steps ${step > 0 ? "+" : ""}${(step / 1000).toFixed(1)} s`,
        () => host.step(step),
        between(r, 2000, 40_000),
        () => host.step(-step),
      );
    }
    case "clock_drift": {
      const rate = (r.next() < 0.5 ? -1 : 1) * between(r, 20, 300);
      const host = c.hostClock(anyone);
      let end = () => {};
      return c.fault(
        at,
        [anyone],
        kind,
        `${anyone}'s clock drifts ${rate} ms/s`,
        () => (end = host.drift(rate)),
        between(r, 3000, 30_000),
        () => end(),
      );
    }
  }
}

/** A process's KV connection(s): the main thread's and, with `thread`, its lease thread's too. */
function setKvUnavailable(c: SimCluster, id: string, v: boolean, main: boolean): void {
  const p = c.procs.get(id);
  if (!p) return;
  if (main) p.kv.setUnavailable(v);
  p.thread?.kv.setUnavailable(v);
}
