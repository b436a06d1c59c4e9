/**
 * Bounded history benchmark (`npm run bench -- history [--runs 100000] [--keep 1000]
 * [--limit 50] [--reps 5] [--no-md]`), on one real nats-server started for the run:
 *
 * 1. set-up: `--runs` terminal run records of ONE job written straight to the runs bucket (keys
 *    `<partition>.<tenant>.<job>.<run_id>`, one occurrence a minute, the stored record form).
 * 2. one runs page (`--limit`, newest first) with all of them present, two ways: the listing
 *    before issue 11 (a KV `list` of every record of the job: a watch that replays every value,
 *    then decode, sort, slice) and `NatsJobsService.listRuns` now (the job's keys, headers only,
 *    ordered from the run ids, then `limit + 1` values).
 * 3. retention (`--keep` newest, `RunRetention.prune`, every excess record purged in one pass).
 * 4. the same two page reads again on the retained history.
 * Each page figure is the median of `--reps` reads (after one unreported warm-up read).
 *
 * Appends a section with the machine and the figures to BENCHMARKS.md (unless --no-md).
 */
import { execFile } from "node:child_process";
import { performance } from "node:perf_hooks";
import { promisify } from "node:util";
import { openBuckets } from "../src/cluster/buckets.ts";
import { partitionOf } from "../src/cluster/placement.ts";
import type { ActorRouter } from "../src/cluster/router.ts";
import { JOB_ACTOR, jobActorId, runIdFor, runKey } from "../src/jobs/ids.ts";
import type { RunView } from "../src/jobs/model.ts";
import { NatsJobsService } from "../src/jobs/nats-service.ts";
import { retentionConfig } from "../src/jobs/retention.ts";
import { encodeRunRecord, runView } from "../src/jobs/run-record.ts";
import { RunRetention } from "../src/jobs/run-retention.ts";
import { seededRandom } from "../src/lib/random.ts";
import { formatUtc } from "../src/schedule/index.ts";
import { startNats } from "../test/support/nats.ts";
import { appendSection, machine } from "./report.ts";

const exec = promisify(execFile);
const TENANT = "tbench";
const JOB = "j0000000000benchx";
const PARTITIONS = 64;
const T0 = Date.UTC(2026, 0, 1);

function parseArgs(args: string[]) {
  const int = (name: string, dflt: number): number => {
    const i = args.indexOf(`--${name}`);
    if (i < 0) return dflt;
    const v = Number(args[i + 1]);
    if (!Number.isInteger(v) || v < 1) throw new Error(`--${name} must be a positive integer, got ${args[i + 1]}`);
    return v;
  };
  return { runs: int("runs", 100_000), keep: int("keep", 1_000), limit: int("limit", 50), reps: int("reps", 5), md: !args.includes("--no-md") };
}

function record(i: number): RunView {
  const ms = T0 + i * 60_000;
  const at = new Date(ms + 200).toISOString();
  return {
    run_id: runIdFor(JOB, ms), job_id: JOB, tenant_id: TENANT, scheduled_for: formatUtc(ms), trigger: "schedule", status: "succeeded",
    attempt: 1, attempts: [{ attempt: 1, worker: "w1", started_at: at, finished_at: at, outcome: "succeeded", exit_code: 0, output_tail: "ok\n" }] as unknown as RunView["attempts"],
    created_at: new Date(ms).toISOString(), started_at: at, finished_at: at, next_attempt_at: null, result: { exit_code: 0 } as unknown as RunView["result"], reason: null,
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function timed(reps: number, fn: () => Promise<unknown>): Promise<number> {
  await fn(); // warm-up
  const ms: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t = performance.now();
    await fn();
    ms.push(performance.now() - t);
  }
  return median(ms);
}

export async function run(args: string[]): Promise<void> {
  const o = parseArgs(args);
  const t0 = performance.now();
  const fixture = await startNats();
  const out: string[] = [];
  const say = (line: string) => {
    out.push(line);
    console.log(line);
  };
  try {
    const nc = await fixture.connect("bench");
    const buckets = await openBuckets(nc, { clusterName: "hist", replicas: 1 });
    const p = partitionOf({ type: JOB_ACTOR, id: jobActorId(TENANT, JOB) }, PARTITIONS);
    const filter = `${p}.${TENANT}.${JOB}.*`;

    let t = performance.now();
    let next = 0;
    const writer = async () => {
      while (next < o.runs) {
        const i = next++;
        const r = record(i);
        await buckets.runs.put(runKey(p, TENANT, JOB, r.run_id), encodeRunRecord(r, 1));
      }
    };
    await Promise.all(Array.from({ length: 256 }, writer));
    say(`set-up: ${o.runs.toLocaleString("en")} run records of one job written in ${((performance.now() - t) / 1000).toFixed(1)} s`);

    // The stub router answers listRuns' getJob (the 404 check); everything else is the real service.
    const router = { request: async () => ({ job: { job_id: JOB } }) } as unknown as ActorRouter;
    const service = new NatsJobsService(router, buckets, PARTITIONS, seededRandom(1));
    const before = async () => {
      const runs = (await buckets.runs.list(filter)).map((e) => runView(e.value))
        .sort((a, b) => b.scheduled_for.localeCompare(a.scheduled_for) || b.run_id.localeCompare(a.run_id));
      return runs.slice(0, o.limit);
    };
    const now = async () => (await service.listRuns(TENANT, JOB, { limit: o.limit })).items;
    const check = async () => {
      const [a, b] = [await before(), await now()];
      if (JSON.stringify(a.map((r) => r.run_id)) !== JSON.stringify(b.map((r) => r.run_id))) throw new Error("the two listings disagree");
      return a.length;
    };

    const pageOf = async (label: string, records: number) => {
      const n = await check();
      const old = await timed(o.reps, before);
      const cur = await timed(o.reps, now);
      say(`${label}: one runs page (limit ${o.limit}, ${n} items) of a job with ${records.toLocaleString("en")} records, median of ${o.reps}:`);
      say(`  ${"list every record (before issue 11)".padEnd(40)}${old.toFixed(1).padStart(10)} ms`);
      say(`  ${`keys, then ${o.limit + 1} values (listRuns now)`.padEnd(40)}${cur.toFixed(1).padStart(10)} ms`);
    };
    await pageOf("before retention", o.runs);

    const cfg = retentionConfig({ keepRuns: o.keep, maxAgeMs: 0, maxDeletesPerPass: 1_000_000 });
    const retention = new RunRetention(cfg, { runs: buckets.runs, nowMs: () => Date.now(), log: () => undefined });
    t = performance.now();
    const left = await retention.prune(p, jobActorId(TENANT, JOB), new Set());
    const pruneS = (performance.now() - t) / 1000;
    const kept = (await buckets.runs.keys!(filter)).length;
    say(`retention (keep ${o.keep.toLocaleString("en")}): ${(o.runs - kept).toLocaleString("en")} records purged in ${pruneS.toFixed(1)} s (${Math.round((o.runs - kept) / pruneS).toLocaleString("en")}/s), ${kept.toLocaleString("en")} kept, ${left} left for a later pass`);
    if (kept !== Math.min(o.keep, o.runs)) throw new Error(`retention kept ${kept}, expected ${o.keep}`);

    await pageOf("after retention", kept);
    t = performance.now();
    await retention.prune(p, jobActorId(TENANT, JOB), new Set());
    say(`a steady-state prune pass over ${kept.toLocaleString("en")} keys with nothing to purge: ${(performance.now() - t).toFixed(1)} ms`);
    await nc.close();
  } finally {
    await fixture.stop();
  }
  const totalS = (performance.now() - t0) / 1000;
  console.log(`total ${totalS.toFixed(1)} s`);
  if (!o.md) return;
  const nats = await exec("nats-server", ["--version"]);
  await appendSection("history (bounded history: a runs page before and after retention)", [
    `date: ${new Date().toUTCString()}`,
    `machine: ${machine()}, ${nats.stdout.trim()}`,
    `command: \`npm run bench -- history${args.length ? " " + args.join(" ") : ""}\` (whole run ${totalS.toFixed(0)} s)`,
    "one nats-server (JetStream, file store in a temp dir, R1 buckets) started for the run; client and server share the machine",
  ], out);
}
