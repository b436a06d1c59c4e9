/**
 * KV read cost benchmark (`npm run bench -- kv-reads [--reads 4000] [--keys 1000] [--bytes 400]
 * [--no-md]`): a leader read (`KvStore.get`, answered by the stream leader) against a replica read
 * (`{ from: "replica" }`, a direct get) on a 3-server nats-server cluster with an R3 bucket, as
 * production runs it.
 *
 * `--keys` keys of `--bytes` bytes are written, then `--reads` random gets are timed for each of:
 * the client connected to the stream leader's server or to a follower's, one read at a time or
 * 64 in flight, leader or replica read. A figure is reads per second and the latency p50/p99 of
 * single reads. The last line printed is a JSON summary.
 *
 * Appends a section with the machine, the commit and the figures to BENCHMARKS.md (unless --no-md).
 */
import { execFile } from "node:child_process";
import { loadavg } from "node:os";
import { performance } from "node:perf_hooks";
import { promisify } from "node:util";
import { jetstreamManager } from "@nats-io/jetstream";
import { openBuckets } from "../src/cluster/buckets.ts";
import { REPLICA_READ, type KvStore, type ReadOptions } from "../src/cluster/kv.ts";
import { connectNats } from "../src/cluster/nats.ts";
import { seededRandom } from "../src/lib/random.ts";
import { startNatsCluster } from "../test/support/nats.ts";
import { intOption, quantile, wantsMarkdown } from "./options.ts";
import { timedPool } from "./pool.ts";
import { appendSection, machine } from "./report.ts";

const exec = promisify(execFile);
const CLUSTER = "kvbench";

function parseArgs(args: string[]) {
  const int = (name: string, dflt: number): number => intOption(args, name, dflt);
  return {
    reads: int("reads", 4000),
    keys: int("keys", 1000),
    bytes: int("bytes", 400),
    md: wantsMarkdown(args),
  };
}

interface Figure {
  server: "leader" | "follower";
  inFlight: number;
  read: "leader" | "replica";
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
}

/** `reads` gets of random keys, `inFlight` at a time; the latency of each and the rate. */
async function measure(
  kv: KvStore,
  keys: number,
  reads: number,
  inFlight: number,
  opts: ReadOptions,
): Promise<{ perSecond: number; p50Ms: number; p99Ms: number }> {
  const random = seededRandom(inFlight * 7 + (opts.from === "replica" ? 1 : 0));
  const lat: number[] = [];
  const ms = await timedPool(reads, inFlight, async () => {
    const key = `k.${Math.floor(random.next() * keys)}`;
    const s = performance.now();
    if ((await kv.get(key, opts)) === null) throw new Error(`${key}: no value`);
    lat.push(performance.now() - s);
  });
  lat.sort((a, b) => a - b);
  const r = (x: number) => Math.round(x * 100) / 100;
  return {
    perSecond: Math.round((reads / ms) * 1000),
    p50Ms: r(quantile(lat, 0.5)),
    p99Ms: r(quantile(lat, 0.99)),
  };
}

export async function run(args: string[]): Promise<void> {
  const o = parseArgs(args);
  const fx = await startNatsCluster(3, { clusters: [CLUSTER] });
  const figures: Figure[] = [];
  try {
    const admin = await fx.connect("kv-bench-setup");
    const setup = await openBuckets(admin, { clusterName: CLUSTER, replicas: 3 });
    const value = new Uint8Array(o.bytes).fill(120);
    for (let i = 0; i < o.keys; i += 100)
      await Promise.all(
        Array.from({ length: Math.min(100, o.keys - i) }, (_, j) =>
          setup.runs.put(`k.${i + j}`, value),
        ),
      );
    const leaderName = (
      await (await jetstreamManager(admin)).streams.info(`KV_${setup.runs.bucket}`)
    ).cluster?.leader;
    const leaderIndex = Math.max(
      0,
      fx.servers.findIndex((_, i) => `s${i}` === leaderName),
    );
    await admin.close();
    for (const server of ["leader", "follower"] as const) {
      const at = server === "leader" ? leaderIndex : (leaderIndex + 1) % 3;
      const nc = await connectNats({
        url: fx.servers[at]!.url,
        name: `kv-bench-${server}`,
        credsFile: fx.credsFor("admin"),
      });
      try {
        const kv = (await openBuckets(nc, { clusterName: CLUSTER, replicas: 3 })).runs;
        for (const inFlight of [1, 64]) {
          for (const read of ["replica", "leader"] as const) {
            await measure(
              kv,
              o.keys,
              Math.min(500, o.reads),
              inFlight,
              read === "replica" ? REPLICA_READ : {},
            ); // warm-up
            const m = await measure(
              kv,
              o.keys,
              o.reads,
              inFlight,
              read === "replica" ? REPLICA_READ : {},
            );
            figures.push({ server, inFlight, read, ...m });
            console.log(
              `connected to the ${server}'s server, ${String(inFlight).padStart(2)} in flight, ${read.padEnd(7)} read: ${String(m.perSecond).padStart(6)} reads/s, p50 ${m.p50Ms} ms, p99 ${m.p99Ms} ms`,
            );
          }
        }
      } finally {
        await nc.close();
      }
    }
  } finally {
    await fx.stop();
  }
  console.log(JSON.stringify({ bench: "kv-reads", ...o, figures }));
  if (!o.md) return;
  const commit = (
    await exec("git", ["rev-parse", "--short", "HEAD"]).catch(() => ({ stdout: "unknown" }))
  ).stdout.trim();
  await appendSection(
    `KV reads: leader against replica (${new Date().toISOString().slice(0, 10)})`,
    [
      `machine: ${machine()}; ${(await exec("nats-server", ["--version"]).catch(() => ({ stdout: "nats-server: ?" }))).stdout.trim()}, 3 servers on loopback, R3 bucket`,
      `commit ${commit}; \`npm run bench -- kv-reads --reads ${o.reads} --keys ${o.keys} --bytes ${o.bytes}\`; load average at the end ${loadavg()
        .map((x) => x.toFixed(1))
        .join(", ")} (a shared machine: compare the rows with each other, not across runs)`,
    ],
    figures.map(
      (f) =>
        `${f.server.padEnd(8)} server, ${String(f.inFlight).padStart(2)} in flight, ${f.read.padEnd(7)} read: ${String(f.perSecond).padStart(6)}/s  p50 ${f.p50Ms} ms  p99 ${f.p99Ms} ms`,
    ),
  );
}
