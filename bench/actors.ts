/**
 * Actor runtime benchmark (`npm run bench -- actors [--n 20000] [--c 64] [--ids 1000]
 * [--timers 1000000] [--actors 100000] [--partitions 64] [--no-md]`), on one real nats-server
 * started for the run (test/support/nats.ts) and stopped at the end:
 *
 * 1. request/reply throughput: 3 in-process KairosNodes (scheduler role) on the server, once all
 *    partitions are held as placement wants; N counter `get`s, then N `inc`s with unique request
 *    ids, through `node.router.request` at concurrency C over `--ids` counters (requests rotate
 *    over the three nodes' routers); next to raw NATS request/reply (a queue-group echo
 *    subscriber on each node's connection, same request payload, same concurrency), measured
 *    before and after the actor runs (after one unreported raw warm-up run). The ratio uses the
 *    mean of the two raw runs.
 * 2. activation from KV: `--actors` counter states written to the actors bucket
 *    (`counter.<partition>.<id>`, msgpack `{s, e, w}` as the host stores them), then one fresh
 *    node with a `loadOnAcquire` counter type acquires every partition and activates them all.
 * 3. a TimerQueue with `--timers` pending timers on the system clock: heap delta (after GC) for
 *    keys, payloads and queue entries; arm cost per schedule(); fire cost measured by arming all
 *    timers for one instant and timing the host-timer callback that fires them.
 *
 * Appends a section with the machine and the measured figures to BENCHMARKS.md (unless --no-md).
 */
import { execFile } from "node:child_process";
import { performance } from "node:perf_hooks";
import { promisify } from "node:util";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { counterActor } from "../src/actors/counter.ts";
import { actorRegistrations } from "../src/actors/index.ts";
import type { ActorRegistration } from "../src/actors/host.ts";
import { openBuckets } from "../src/cluster/buckets.ts";
import { encode } from "../src/cluster/codec.ts";
import { makeNodeConfig, type NodeConfig } from "../src/cluster/config.ts";
import type { NodeEvent } from "../src/cluster/events.ts";
import { KairosNode } from "../src/server/node.ts";
import { assign, partitionOf } from "../src/cluster/placement.ts";
import { TimerQueue } from "../src/cluster/timer-queue.ts";
import { systemClock } from "../src/lib/clock.ts";
import { systemRandom } from "../src/lib/random.ts";
import { startNats, type NatsFixture } from "../test/support/nats.ts";
import { intOption, quantile, wantsMarkdown } from "./options.ts";
import { appendSection, machine } from "./report.ts";

const exec = promisify(execFile);

interface Options {
  n: number;
  c: number;
  ids: number;
  timers: number;
  actors: number;
  partitions: number;
  md: boolean;
}

function parseArgs(args: string[]): Options {
  const int = (name: string, dflt: number): number => intOption(args, name, dflt);
  return {
    n: int("n", 20_000),
    c: int("c", 64),
    ids: int("ids", 1_000),
    timers: int("timers", 1_000_000),
    actors: int("actors", 100_000),
    partitions: int("partitions", 64),
    md: wantsMarkdown(args),
  };
}

/** Forces a full GC: `global.gc` under --expose-gc, else exposed at run time through V8 flags. */
function gcFunction(): { gc: () => void; how: string } {
  const g = (globalThis as { gc?: () => void }).gc;
  if (typeof g === "function") return { gc: g, how: "global.gc (--expose-gc)" };
  setFlagsFromString("--expose-gc");
  const fn = runInNewContext("gc") as (() => void) | undefined;
  if (typeof fn === "function")
    return { gc: fn, how: "gc exposed at run time (v8.setFlagsFromString)" };
  return { gc: () => undefined, how: "none (heap figures include garbage)" };
}

interface Rate {
  perSec: number;
  p50Ms: number;
  p99Ms: number;
  ms: number;
}

/** Runs `n` calls of `fn` with `c` in flight; per-call latency and overall rate. */
async function drive(n: number, c: number, fn: (i: number) => Promise<unknown>): Promise<Rate> {
  const lat = new Float64Array(n);
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(c, n) }, async () => {
      while (next < n) {
        const i = next++;
        const s = performance.now();
        await fn(i);
        lat[i] = performance.now() - s;
      }
    }),
  );
  const ms = performance.now() - t0;
  lat.sort();
  return { perSec: (n / ms) * 1000, p50Ms: quantile(lat, 0.5), p99Ms: quantile(lat, 0.99), ms };
}

/** Resolves when `cond()` holds, re-checked on every event of the given nodes; rejects after `timeoutMs`. */
function until(
  nodes: KairosNode[],
  cond: () => boolean,
  timeoutMs: number,
  phase: string,
  state: () => string,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const offs: (() => void)[] = [];
    const done = (err?: Error) => {
      for (const off of offs) off();
      cancel();
      if (err) reject(err);
      else resolve();
    };
    const cancel = systemClock.setTimer(timeoutMs, () =>
      done(new Error(`${phase}: not reached within ${timeoutMs} ms; state: ${state()}`)),
    );
    const check = () => {
      if (cond()) done();
    };
    for (const n of nodes) offs.push(n.events.on(check));
    check();
  });
}

function makeNode(
  nats: NatsFixture,
  cluster: string,
  nodeId: string,
  partitions: number,
  regs: ActorRegistration[],
  lease: Partial<NodeConfig> = {},
): KairosNode {
  const node = new KairosNode(
    makeNodeConfig({
      natsUrl: nats.url,
      natsAuth: { credsFile: nats.credsFor(["scheduler"]) },
      clusterName: cluster,
      nodeId,
      roles: ["scheduler"],
      partitions,
      ...lease,
    }),
    {
      clock: systemClock,
      random: systemRandom,
      log: (level, msg, extra) => {
        if (level !== "info")
          console.error(`[${nodeId}] ${level}: ${msg} ${extra ? JSON.stringify(extra) : ""}`);
      },
    },
  );
  for (const r of regs) node.register(r);
  return node;
}

const f1 = (x: number) => x.toFixed(1);
const f0 = (x: number) => Math.round(x).toLocaleString("en-US");
const mb = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);

// --- 1. request/reply ---------------------------------------------------------------------------

async function requestReply(nats: NatsFixture, o: Options, out: string[]): Promise<void> {
  const ids = ["bench-a", "bench-b", "bench-c"];
  const nodes = ids.map((id) => makeNode(nats, "rr", id, o.partitions, actorRegistrations()));
  const tStart = performance.now();
  for (const n of nodes) await n.start();
  const P = nodes[0]!.partitions;
  const want = assign(P, ids);
  const placed = () =>
    nodes.every((n) => {
      const held = n.heldPartitions();
      return (
        held.length === want.filter((w) => w === n.config.nodeId).length &&
        held.every((p) => want[p] === n.config.nodeId)
      );
    });
  await until(nodes, placed, 30_000, "3 nodes holding their partitions", () =>
    nodes.map((n) => `${n.config.nodeId}:${n.heldPartitions().length}`).join(" "),
  );
  const held = nodes.reduce((s, n) => s + n.heldPartitions().length, 0);
  out.push(
    `1. request/reply, 3 in-process nodes, ${P} partitions (held: ${nodes.map((n) => n.heldPartitions().length).join("+")} = ${held}, placed in ${f0(performance.now() - tStart)} ms from the first start)`,
  );

  const counterIds = Array.from({ length: o.ids }, (_, i) => `c${i}`);
  const payload = encode({
    t: "counter",
    i: counterIds[counterIds.length - 1],
    m: { kind: "get" },
  });
  // The raw path on connections of its own: a scheduler's credentials allow only its own
  // subjects (least privilege), and a refused subscription must not reach the nodes' connections.
  const echo = await Promise.all([0, 1, 2].map((i) => nats.connect(`bench-echo-${i}`)));
  const subs = echo.map((nc) =>
    nc.subscribe("bench.echo", {
      queue: "echo",
      callback: (e, m) => {
        if (e) throw e;
        m.respond(m.data);
      },
    }),
  );
  await Promise.all(echo.map((nc) => nc.flush()));
  const raw = () =>
    drive(o.n, o.c, (i) => echo[i % 3]!.request("bench.echo", payload, { timeout: 10_000 }));
  const warm = await drive(o.ids, o.c, (i) =>
    nodes[i % 3]!.router.request({ type: "counter", id: counterIds[i]! }, { kind: "get" }),
  );
  await raw(); // warm-up of the raw path (JIT), not reported
  const raw1 = await raw();
  const get = await drive(o.n, o.c, (i) =>
    nodes[i % 3]!.router.request({ type: "counter", id: counterIds[i % o.ids]! }, { kind: "get" }),
  );
  const inc = await drive(o.n, o.c, (i) =>
    nodes[i % 3]!.router.request(
      { type: "counter", id: counterIds[i % o.ids]! },
      { kind: "inc", by: 1, reqId: `r${i}` },
    ),
  );
  const raw2 = await raw();
  const rawMean = (raw1.perSec + raw2.perSec) / 2;
  // Every increment must have been applied exactly once: the counters sum to N.
  let sum = 0;
  for (const [i, id] of counterIds.entries())
    sum += (
      await nodes[i % 3]!.router.request<{ value: number }>(
        { type: "counter", id },
        { kind: "get" },
      )
    ).value;
  for (const s of subs) s.unsubscribe();
  await Promise.all(echo.map((nc) => nc.close()));
  const line = (name: string, r: Rate) =>
    `   ${name.padEnd(34)} ${f0(r.perSec).padStart(7)} req/s  p50 ${r.p50Ms.toFixed(2)} ms  p99 ${r.p99Ms.toFixed(2)} ms`;
  out.push(
    `   N=${o.n} requests per run, concurrency ${o.c}, ${o.ids} counters, request payload ${payload.length} B`,
    line(`activation warm-up (${o.ids} gets)`, warm),
    line("raw NATS request/reply (before)", raw1),
    line("actor get", get),
    line("actor inc (unique reqIds, CAS write)", inc),
    line("raw NATS request/reply (after)", raw2),
    `   ratio actor get / raw NATS: ${(get.perSec / rawMean).toFixed(3)}   actor inc / raw NATS: ${(inc.perSec / rawMean).toFixed(3)}`,
    `   check: sum of counters after the inc run = ${sum} (expected ${o.n})`,
  );
  await Promise.all(nodes.map((n) => n.stop()));
}

// --- 2. timers ----------------------------------------------------------------------------------

async function timers(o: Options, out: string[]): Promise<void> {
  const { gc, how } = gcFunction();
  const n = o.timers;
  const FIRE = { kind: "fire" };
  const heap = () => {
    gc();
    gc();
    return process.memoryUsage().heapUsed;
  };
  const h0 = heap();
  const keys = Array.from({ length: n }, (_, i) => `${i % 64}|job|tenant-${i % 100}/job-${i}|next`);
  const payloads = keys.map((_, i) => ({
    type: "job",
    id: `tenant-${i % 100}/job-${i}`,
    msg: FIRE,
  }));
  const h1 = heap();
  const q = new TimerQueue<{ type: string; id: string; msg: unknown }>(
    systemClock,
    () => undefined,
  );
  const base = systemClock.now() + 3_600_000;
  const t0 = performance.now();
  for (let i = 0; i < n; i++) q.schedule(keys[i]!, base + (i % 60_000), payloads[i]!);
  const armMs = performance.now() - t0;
  const h2 = heap();
  q.stop();
  out.push(
    `3. TimerQueue with ${f0(n)} pending timers (system clock); GC: ${how}`,
    `   heap: keys+payloads ${mb(h1 - h0)} MB, queue entries ${mb(h2 - h1)} MB (${f1((h2 - h1) / n)} B/timer), total ${mb(h2 - h0)} MB (${f1((h2 - h0) / n)} B/timer)`,
    `   arm: ${f0(armMs)} ms for ${f0(n)} schedule() calls = ${((armMs * 1000) / n).toFixed(2)} µs/timer (keys and payloads built beforehand; dues spread over 60 s)`,
  );

  // Fire: every timer due at one instant D, after arming is over; time the host-timer callback.
  let fired = 0;
  let first = 0;
  let last = 0;
  let dueAt = 0;
  const all = new Promise<void>((resolve) => {
    const q2 = new TimerQueue<unknown>(systemClock, () => {
      if (fired++ === 0) first = performance.now();
      if (fired === n) {
        last = performance.now();
        resolve();
      }
    });
    const due = systemClock.now() + Math.ceil(armMs * 2) + 500;
    for (let i = 0; i < n; i++) q2.schedule(keys[i]!, due, payloads[i]);
    dueAt = due;
  });
  await all;
  const fireMs = last - first;
  out.push(
    `   fire: ${f0(n)} timers due at one instant fired in ${f0(fireMs)} ms = ${((fireMs * 1e6) / n / 1000).toFixed(2)} µs/timer` +
      ` (${f0((n / fireMs) * 1000)} timers/s; empty callback); first fire ${f0(performance.timeOrigin + first - dueAt)} ms after the due instant`,
  );
}

// --- 3. activation from KV ----------------------------------------------------------------------

const LOADER_LEASE = {
  leaseTtlMs: 60_000,
  leaseRenewIntervalMs: 10_000,
  leaseSafetyMarginMs: 10_000,
  leaseMainStallMs: 60_000,
} as const;

async function activation(nats: NatsFixture, o: Options, out: string[]): Promise<void> {
  const cluster = "act";
  const P = o.partitions;
  const nc = await nats.connect("bench-writer");
  const buckets = await openBuckets(nc, { clusterName: cluster, replicas: 1 });
  await buckets.cluster.create("config", encode({ partitions: P, createdBy: "bench" }));
  const tw = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: 256 }, async () => {
      while (next < o.actors) {
        const i = next++;
        const id = `c${i}`;
        const p = partitionOf({ type: "counter", id }, P);
        await buckets.actors.put(
          `counter.${p}.${id}`,
          encode({ s: { value: i % 1000, recent: [] }, e: 1, w: "bench-writer" }),
        );
      }
    }),
  );
  const setupMs = performance.now() - tw;
  await nc.drain();

  // A long lease: the partition manager does not renew a partition while its onAcquired load
  // runs, so with the default 4 s lease a load longer than ttl - margin (3 s) loses every
  // partition for good (reported as a runtime bug). 60 s keeps this a measure of loading.
  const node = makeNode(
    nats,
    cluster,
    "bench-loader",
    P,
    [{ definition: { ...counterActor, loadOnAcquire: true } }],
    LOADER_LEASE,
  );
  let activated = 0;
  let heldAtMs = 0;
  const t0 = performance.now();
  node.events.on((e: NodeEvent) => {
    if (e.type === "actor_activated") activated++;
    if (e.type === "partition_acquired" && node.heldPartitions().length === P && heldAtMs === 0)
      heldAtMs = performance.now() - t0;
  });
  const { gc } = gcFunction();
  gc();
  const heap0 = process.memoryUsage().heapUsed;
  await node.start();
  await until(
    [node],
    () => activated >= o.actors && node.heldPartitions().length === P,
    120_000,
    "activation of every actor",
    () => `activated ${activated}, held ${node.heldPartitions().length}`,
  );
  const ms = performance.now() - t0;
  gc();
  const heap1 = process.memoryUsage().heapUsed;
  out.push(
    `2. activation from KV of ${f0(o.actors)} counters over ${P} partitions (one node, loadOnAcquire, lease ttl ${LOADER_LEASE.leaseTtlMs / 1000} s)`,
    `   set-up: ${f0(o.actors)} KV puts at concurrency 256 in ${f0(setupMs)} ms (${f0((o.actors / setupMs) * 1000)} puts/s)`,
    `   node start → all ${P} partitions held: ${f0(heldAtMs)} ms; → all ${f0(activated)} actors active: ${f0(ms)} ms = ${f0((o.actors / ms) * 1000)} actors/s` +
      ` (host reports ${f0(node.host?.activeCount ?? 0)} active; heap after GC +${mb(heap1 - heap0)} MB = ${f0((heap1 - heap0) / o.actors)} B/actor)`,
  );
  await node.stop();
}

export async function run(args: string[]): Promise<void> {
  const o = parseArgs(args);
  const fixture = await startNats({ clusters: ["rr", "act"] });
  const out: string[] = [];
  const t0 = performance.now();
  try {
    await requestReply(fixture, o, out);
    console.log(out.join("\n"));
    const mark = out.length;
    await activation(fixture, o, out);
    console.log(out.slice(mark).join("\n"));
    const mark2 = out.length;
    await timers(o, out);
    console.log(out.slice(mark2).join("\n"));
  } finally {
    await fixture.stop();
  }
  const totalS = (performance.now() - t0) / 1000;
  console.log(`total ${totalS.toFixed(1)} s`);
  if (!o.md) return;
  const nats = await exec("nats-server", ["--version"]);
  await appendSection(
    "actors (runtime: request/reply, timers, activation)",
    [
      `date: ${new Date().toUTCString()}`,
      `machine: ${machine()}, ${nats.stdout.trim()}`,
      `command: \`npm run bench -- actors${args.length ? " " + args.join(" ") : ""}\` (whole run ${totalS.toFixed(0)} s)`,
      "one nats-server (JetStream, file store in a temp dir, R1 buckets) started for the run; nodes, clients and the\n  server share the same 2 cores",
    ],
    out,
  );
}
