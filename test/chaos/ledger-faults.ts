/**
 * The ledger chaos test's faults (kinds: test/chaos/ledger-types.ts). Each returns its records
 * with every process it touched (`hits`); the caller waits for the cluster to be whole and stamps
 * the recovery time on the hits still open. Processes come back under their own ids: a worker
 * restarted by a roll is the rolling deploy with stable ids that production runs (docs/deploy.md).
 */
import { DEFAULTS } from "../../src/cluster/config.ts";
import type { CutMode } from "../support/tcp-proxy.ts";
import { Cluster, RUN_PATH_BUCKETS, delay, type Slot } from "./ledger-cluster.ts";
import {
  CLUSTER_ONLY,
  NATS_KINDS,
  SINGLE_KINDS,
  type FaultKind,
  type FaultRecord,
  type Hit,
} from "./ledger-types.ts";

/** The partition lease TTL the nodes run with (the product default: the harness sets none). */
const PARTITION_LEASE_TTL_MS = DEFAULTS.leaseTtlMs;
/** How long a roll waits for the cluster to be whole after each step before going on. */
const STEP_RECOVERY_MS = 45_000;
/** A drained worker gets this long to exit before it is killed (its own drain timeout is 60 s). */
const DRAIN_EXIT_MS = 120_000;

const pick = <T>(rng: () => number, xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)]!;
const between = (rng: () => number, lo: number, hi: number) => lo + rng() * (hi - lo);

/** The kinds a run with this many NATS servers can inject. */
export function kindsFor(natsServers: 1 | 3, kinds: readonly FaultKind[]): FaultKind[] {
  return kinds.filter((k) => natsServers === 3 || !CLUSTER_ONLY.has(k));
}

interface Ctx {
  c: Cluster;
  rng: () => number;
  ttl: number;
  /** Targets taken by a fault running at the same time (two at once). */
  busy: Set<string>;
  log: (line: string) => void;
}

function freeSlot(x: Ctx, slots: Slot[]): Slot {
  const free = slots.filter((s) => !x.busy.has(s.id));
  const s = pick(x.rng, free.length > 0 ? free : slots);
  x.busy.add(s.id);
  return s;
}

const natsTarget = (c: Cluster, i: number) => `nats:${c.serverName(i)}`;
const indexOf = (c: Cluster, name: string | undefined): number | undefined => {
  const i = c.nats.servers.findIndex((_s, j) => c.serverName(j) === name);
  return i >= 0 ? i : undefined;
};

/** Injects `kind`; resolves once it is lifted (every process back or resumed), with its record(s). */
export async function injectFault(
  c: Cluster,
  rng: () => number,
  ttl: number,
  kind: FaultKind,
  log: (line: string) => void,
): Promise<FaultRecord[]> {
  const x: Ctx = { c, rng, ttl, busy: new Set(), log };
  switch (kind) {
    case "two_at_once":
      return twoAtOnce(x);
    case "rolling_workers_drain":
    case "rolling_workers_kill9":
    case "rolling_schedulers":
      return [await roll(x, kind)];
    default:
      return [await single(x, kind)];
  }
}

async function twoAtOnce(x: Ctx): Promise<FaultRecord[]> {
  const singles = kindsFor(x.c.o.natsServers, SINGLE_KINDS);
  const k1 = pick(x.rng, singles);
  // At most one NATS server at a time: two of three down is beyond what the cluster tolerates.
  const k2 = pick(
    x.rng,
    singles.filter((k) => !(NATS_KINDS.has(k) && NATS_KINDS.has(k1))),
  );
  const offset = Math.round(between(x.rng, 0, 1500));
  const [a, b] = await Promise.all([single(x, k1), delay(offset).then(() => single(x, k2))]);
  a.detail += `; with ${k2} ${offset} ms later`;
  b.detail += `; with ${k1} ${offset} ms earlier`;
  return [a, b];
}

async function single(x: Ctx, kind: FaultKind): Promise<FaultRecord> {
  const { c, rng, ttl } = x;
  const atMs = Date.now();
  const rec = (target: string, detail: string, hard: boolean): FaultRecord => ({
    kind,
    target,
    atMs,
    liftedMs: Date.now(),
    recoveredMs: undefined,
    detail,
    hits: [{ target, atMs, untilMs: undefined, hard }],
  });
  switch (kind) {
    case "kill9_scheduler": {
      const s = freeSlot(x, c.schedulers);
      await c.kill9(s);
      const down = Math.round(between(rng, 500, 3000));
      await delay(down); // the dead time is part of the fault plan
      await c.respawn(s);
      return rec(s.id, `down ${down} ms`, true);
    }
    case "sigterm_scheduler": {
      const s = freeSlot(x, c.schedulers);
      await c.stopNode(s);
      await c.respawn(s);
      return rec(s.id, "stopped and restarted", false);
    }
    case "sigstop_scheduler": {
      const s = freeSlot(x, c.schedulers);
      const hold = Math.round(PARTITION_LEASE_TTL_MS + between(rng, 500, 3000));
      s.proc.signal("SIGSTOP");
      await delay(hold);
      s.proc.signal("SIGCONT");
      return rec(
        s.id,
        `paused ${hold} ms (partition lease TTL ${PARTITION_LEASE_TTL_MS} ms)`,
        true,
      );
    }
    case "kill9_worker": {
      const w = freeSlot(x, c.workers);
      const tasks = await c.hardKillWorker(w);
      const down = Math.round(between(rng, 500, 3000));
      await delay(down);
      await c.respawn(w);
      return rec(w.id, `${tasks} task group(s) killed with it, down ${down} ms`, true);
    }
    case "sigstop_worker": {
      const w = freeSlot(x, c.workers);
      const hold = Math.round(ttl + between(rng, 1500, 4000));
      c.freezeTimes.set(w.id, [...(c.freezeTimes.get(w.id) ?? []), Date.now()]);
      w.proc.signal("SIGSTOP");
      await delay(hold);
      w.proc.signal("SIGCONT");
      return rec(w.id, `paused ${hold} ms (run lease TTL ${ttl} ms)`, true);
    }
    case "cut_worker": {
      const w = freeSlot(x, c.workers);
      const mode: CutMode = c.cuts++ % 2 === 0 ? "blackhole" : "reset";
      const hold = Math.round(ttl + between(rng, 1500, 4000));
      for (const p of w.proxies) p.cut(mode);
      await delay(hold);
      for (const p of w.proxies) p.heal();
      return rec(w.id, `cut (${mode}) ${hold} ms (run lease TTL ${ttl} ms)`, true);
    }
    case "nats_restart": {
      const i = Math.floor(rng() * c.nats.servers.length);
      c.natsDown.add(i);
      try {
        await c.nats.servers[i]!.stop(); // SIGTERM (SIGKILL after 5 s)
        await c.nats.start(i); // on the same ports, name and store
      } finally {
        c.natsDown.delete(i);
      }
      return rec(
        natsTarget(c, i),
        "stopped (SIGTERM) and restarted on the same port and store",
        true,
      );
    }
    case "sigstop_nats": {
      const { i, why } = await natsVictim(x);
      const hold = Math.round(between(rng, 2000, 10_000));
      c.natsDown.add(i);
      await c.nats.pause(i);
      await delay(hold);
      c.nats.resume(i);
      c.natsDown.delete(i);
      return rec(natsTarget(c, i), `${why} paused ${hold} ms`, true);
    }
    case "kill9_nats_meta_leader":
    case "kill9_nats_stream_leader":
    case "kill9_nats_follower": {
      const { i, why } = await natsVictim(x, kind);
      c.natsDown.add(i);
      try {
        await c.nats.kill(i);
        const down = Math.round(between(rng, 500, 3000));
        await delay(down);
        await c.nats.start(i);
        return rec(
          natsTarget(c, i),
          `${why} killed (-9), down ${down} ms, restarted on its port and store`,
          true,
        );
      } finally {
        c.natsDown.delete(i);
      }
    }
    case "rolling_workers_drain":
    case "rolling_workers_kill9":
    case "rolling_schedulers":
    case "two_at_once":
      throw new Error(`${kind} is not a single-process fault`);
  }
}

/**
 * Which NATS server a fault hits: the meta leader, the leader of a run-path bucket's stream, a
 * follower of one (not the meta leader), or — for a pause, and on a single server — any.
 */
async function natsVictim(x: Ctx, kind?: FaultKind): Promise<{ i: number; why: string }> {
  const { c, rng } = x;
  const n = c.nats.servers.length;
  if (n === 1) return { i: 0, why: "the server" };
  const role =
    kind === "kill9_nats_meta_leader"
      ? "meta"
      : kind === "kill9_nats_stream_leader"
        ? "leader"
        : kind === "kill9_nats_follower"
          ? "follower"
          : pick(rng, ["meta", "leader", "follower", "any"] as const);
  const meta = indexOf(c, c.metaLeader);
  const also = (i: number) => (role !== "meta" && i === meta ? " (also the meta leader)" : "");
  if (role === "meta" && meta !== undefined)
    return { i: meta, why: `meta leader ${c.serverName(meta)}` };
  if (role === "leader" || role === "follower") {
    const bucket = pick(rng, RUN_PATH_BUCKETS);
    const info = await c.streamInfo(bucket);
    const leader = indexOf(c, info?.leader);
    if (role === "leader" && leader !== undefined)
      return {
        i: leader,
        why: `leader of the ${bucket} stream ${c.serverName(leader)}${also(leader)}`,
      };
    const followers = (info?.replicas ?? [])
      .map((r) => indexOf(c, r.name))
      .filter((i): i is number => i !== undefined && i !== meta);
    if (role === "follower" && followers.length > 0) {
      const i = pick(rng, followers);
      return { i, why: `follower of the ${bucket} stream ${c.serverName(i)}` };
    }
  }
  const i = Math.floor(rng() * n);
  return {
    i,
    why: `server ${c.serverName(i)}${role === "any" ? "" : ` (no ${role} known)`}${also(i)}`,
  };
}

/** Every worker (or scheduler) in turn, under its own id; the next once the cluster is whole. */
async function roll(
  x: Ctx,
  kind: "rolling_workers_drain" | "rolling_workers_kill9" | "rolling_schedulers",
): Promise<FaultRecord> {
  const { c, rng } = x;
  const atMs = Date.now();
  const hits: Hit[] = [];
  const steps: string[] = [];
  const slots = kind === "rolling_schedulers" ? c.schedulers : c.workers;
  for (const s of slots) {
    const at = Date.now();
    let what: string;
    if (kind === "rolling_workers_kill9") {
      const tasks = await c.hardKillWorker(s);
      const down = Math.round(between(rng, 300, 1500));
      await delay(down);
      what = `killed (${tasks} task group(s)), down ${down} ms`;
    } else {
      const old = s.proc;
      await c.stopNode(s, DRAIN_EXIT_MS);
      const drained = old.events.find((e) => (e.type as string) === "worker_drained") as unknown as
        { finished?: number; handed_back?: number; dropped?: number } | undefined;
      what = drained
        ? `drained in ${Date.now() - at} ms (finished ${drained.finished ?? "?"}, handed back ${drained.handed_back ?? "?"}, dropped ${drained.dropped ?? "?"})`
        : `stopped in ${Date.now() - at} ms`;
    }
    await c.respawn(s);
    const whole = await c.whole(STEP_RECOVERY_MS);
    hits.push({
      target: s.id,
      atMs: at,
      untilMs: whole ? Date.now() : undefined,
      hard: kind === "rolling_workers_kill9",
    });
    steps.push(
      `${s.id} ${what}, whole ${whole ? `after ${Date.now() - at} ms` : `NOT within 45 s (${c.lastUnwhole})`}`,
    );
    x.log(`  ${kind} step: ${steps[steps.length - 1]}`);
  }
  return {
    kind,
    target: kind === "rolling_schedulers" ? "schedulers" : "workers",
    atMs,
    liftedMs: Date.now(),
    recoveredMs: undefined,
    detail: steps.join("; "),
    hits,
  };
}
