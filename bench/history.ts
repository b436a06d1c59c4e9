/**
 * Bounded history benchmark (`npm run bench -- history [--runs 100000] [--keep 1000]
 * [--limit 50] [--reps 5] [--no-md]`), on one real nats-server started for the run:
 *
 * 1. set-up: `--runs` terminal run records of ONE job written straight to the runs bucket (keys
 *    `<partition>.<tenant>.<job>.<run_id>`, one occurrence a minute, the stored record form), its
 *    runs index as the job shell writes it (a chunk per 64 records, `writeRunIndexChunk`) and its
 *    job state (the index's counter and pending ids) in the actors bucket.
 * 2. one runs page (`--limit`, newest first) with all of them present, three ways: the listing
 *    of a plain KV `list` (every record of the job: a watch that replays every value,
 *    then decode, sort, slice), the key listing that followed (`legacyRunsPage`: the job's keys,
 *    headers only, ordered from the run ids, then `limit + 1` values; still what a job created
 *    before the index gets) and `NatsJobsService.listRuns` now (the job actor's index, the chunks the page
 *    spans, `limit + 1` records); plus a page from the middle of the history by cursor. The KV
 *    operations of each indexed page are counted.
 * 3. retention (`--keep` newest, `RunRetention.prune`, every excess record and chunk purged).
 * 4. the same page reads again on the retained history.
 * Each page figure is the median of `--reps` reads (after one unreported warm-up read). The last
 * line printed is a JSON summary.
 *
 * Appends a section with the machine, the commit and the figures to BENCHMARKS.md (unless --no-md).
 */
import { execFile } from "node:child_process";
import { performance } from "node:perf_hooks";
import { promisify } from "node:util";
import { openBuckets } from "../src/cluster/buckets.ts";
import { partitionOf } from "../src/cluster/placement.ts";
import type { ActorRouter } from "../src/cluster/router.ts";
import { encode } from "../src/cluster/codec.ts";
import type { KvStore } from "../src/cluster/kv.ts";
import { JOB_ACTOR, jobActorId, runIdFor, runKey } from "../src/protocol/ids.ts";
import { activeRunsReply, emptyJobState, type JobState } from "../src/job-state/job-state.ts";
import type { JobSpec, RunView } from "../src/protocol/model.ts";
import { NatsJobsService } from "../src/service/nats-service.ts";
import { retentionConfig } from "../src/history/retention.ts";
import { RUN_INDEX_CHUNK, runIdSuffix } from "../src/history/run-index.ts";
import { listRunIndex, writeRunIndexChunk } from "../src/history/run-index-store.ts";
import { encodeCursor, legacyRunsPage } from "../src/history/run-pages.ts";
import { encodeRunRecord, runView } from "../src/history/run-record.ts";
import { RunRetention } from "../src/history/run-retention.ts";
import { seededRandom } from "../src/lib/random.ts";
import { formatUtc } from "../src/schedule/index.ts";
import { startNats } from "../test/support/nats.ts";
import { intOption, quantile, wantsMarkdown } from "./options.ts";
import { appendSection, machine } from "./report.ts";

const exec = promisify(execFile);
const TENANT = "tbench";
const JOB = "j0000000000benchx";
const PARTITIONS = 64;
const T0 = Date.UTC(2026, 0, 1);

function parseArgs(args: string[]) {
  const int = (name: string, dflt: number): number => intOption(args, name, dflt);
  return {
    runs: int("runs", 100_000),
    keep: int("keep", 1_000),
    limit: int("limit", 50),
    reps: int("reps", 5),
    md: wantsMarkdown(args),
  };
}

function record(i: number): RunView {
  const ms = T0 + i * 60_000;
  const at = new Date(ms + 200).toISOString();
  return {
    run_id: runIdFor(JOB, ms),
    job_id: JOB,
    tenant_id: TENANT,
    scheduled_for: formatUtc(ms),
    trigger: "schedule",
    status: "succeeded",
    attempt: 1,
    attempts: [
      {
        attempt: 1,
        worker: "w1",
        started_at: at,
        finished_at: at,
        outcome: "succeeded",
        exit_code: 0,
        output_tail: "ok\n",
      },
    ] as unknown as RunView["attempts"],
    created_at: new Date(ms).toISOString(),
    started_at: at,
    finished_at: at,
    next_attempt_at: null,
    result: { exit_code: 0 } as unknown as RunView["result"],
    reason: null,
  };
}

const SPEC: JobSpec = {
  name: null,
  schedule: { cron: "* * * * *", time_zone: "UTC" },
  task: { image: "busybox", args: ["true"], env: {}, timeout_s: 60 },
  retry: { max_attempts: 1, backoff: "exponential", base_s: 1, max_s: 60 },
  overlap: "skip",
  misfire: { policy: "skip", starting_deadline_s: null },
  flex_window_s: 0,
  enabled: true,
};

/** Counts a store's reads (`get`), for the KV operations of a page. */
function countGets(kv: KvStore): () => number {
  let n = 0;
  const get = kv.get.bind(kv);
  kv.get = (key) => (n++, get(key));
  return () => n;
}

const median = (xs: number[]) =>
  quantile(
    [...xs].sort((a, b) => a - b),
    0.5,
  );

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
  let last: Record<string, unknown> = {};
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
    say(
      `set-up: ${o.runs.toLocaleString("en")} run records of one job written in ${((performance.now() - t) / 1000).toFixed(1)} s`,
    );

    // The job's runs index, as the job shell writes it: a chunk per RUN_INDEX_CHUNK records.
    t = performance.now();
    const ids = Array.from({ length: o.runs }, (_, i) => runIdSuffix(JOB, record(i).run_id));
    const chunks = Math.floor(o.runs / RUN_INDEX_CHUNK);
    const ctx = {
      address: { type: JOB_ACTOR, id: jobActorId(TENANT, JOB) },
      partition: p,
      epoch: 1,
    };
    for (let seq = 0; seq < chunks; seq++)
      await writeRunIndexChunk(buckets.runs, ctx, {
        kind: "write_run_index",
        seq,
        ids: ids.slice(seq * RUN_INDEX_CHUNK, (seq + 1) * RUN_INDEX_CHUNK),
      });
    const state: JobState = {
      ...emptyJobState(),
      job: {
        tenant_id: TENANT,
        job_id: JOB,
        spec: SPEC,
        version: 1,
        created_at_ms: T0,
        updated_at_ms: T0,
        request_hash: "bench",
      },
      index: { seq: chunks, pending: ids.slice(chunks * RUN_INDEX_CHUNK) },
    };
    await buckets.actors.put(
      `${JOB_ACTOR}.${p}.${jobActorId(TENANT, JOB)}`,
      encode({ s: state, e: 1, w: "bench" }),
    );
    say(
      `set-up: its runs index, ${chunks.toLocaleString("en")} chunks of ${RUN_INDEX_CHUNK} + ${o.runs - chunks * RUN_INDEX_CHUNK} pending ids in the job state, written in ${((performance.now() - t) / 1000).toFixed(1)} s`,
    );

    // listRuns asks the job actor for its index and active runs (answered from its memory; in a
    // cluster one NATS round trip, not a KV read). There is no actor here: this stands in for it.
    const router = {
      request: async (_to: unknown, msg: { kind: string }) => {
        if (msg.kind !== "active_runs") throw new Error(`unexpected request ${msg.kind}`);
        return activeRunsReply(state);
      },
    } as unknown as ActorRouter;
    const service = new NatsJobsService(router, buckets, PARTITIONS, seededRandom(1));
    const gets = [countGets(buckets.runs), countGets(buckets.actors)];
    const reads = () => gets.reduce((a, f) => a + f(), 0);
    const before = async () => {
      const runs = (await buckets.runs.list(filter))
        .map((e) => runView(e.value))
        .sort(
          (a, b) =>
            b.scheduled_for.localeCompare(a.scheduled_for) || b.run_id.localeCompare(a.run_id),
        );
      return runs.slice(0, o.limit);
    };
    const keysPage = async () =>
      (await legacyRunsPage(buckets.runs, p, TENANT, JOB, { limit: o.limit })).items;
    const now = async () => (await service.listRuns(TENANT, JOB, { limit: o.limit })).items;
    const deep = (records: number) => async () =>
      (
        await service.listRuns(TENANT, JOB, {
          limit: o.limit,
          cursor: encodeCursor(["ix", String(o.runs - Math.floor(records / 2))]),
        })
      ).items; // half-way down what is kept
    const check = async () => {
      const [a, b, c] = [await before(), await keysPage(), await now()];
      const show = (xs: RunView[]) => JSON.stringify(xs.map((r) => r.run_id));
      if (show(a) !== show(b) || show(a) !== show(c)) throw new Error("the listings disagree");
      return a.length;
    };
    const opsOf = async (fn: () => Promise<unknown>) => {
      const r0 = reads();
      await fn();
      return reads() - r0;
    };

    const summary: Record<string, unknown> = {
      bench: "history",
      runs: o.runs,
      keep: o.keep,
      limit: o.limit,
      reps: o.reps,
    };
    const pageOf = async (label: string, records: number) => {
      const n = await check();
      const old = await timed(o.reps, before);
      const keys = await timed(o.reps, keysPage);
      const cur = await timed(o.reps, now);
      const mid = await timed(o.reps, deep(records));
      const ops = await opsOf(now);
      const midOps = await opsOf(deep(records));
      say(
        `${label}: one runs page (limit ${o.limit}, ${n} items) of a job with ${records.toLocaleString("en")} records, median of ${o.reps}:`,
      );
      say(`  ${"list every record (no runs index)".padEnd(52)}${old.toFixed(1).padStart(10)} ms`);
      say(
        `  ${`keys, then ${o.limit + 1} values (the key listing)`.padEnd(52)}${keys.toFixed(1).padStart(10)} ms`,
      );
      say(
        `  ${`runs index, first page (listRuns now: ${ops} KV reads + 1 actor request)`.padEnd(52)}${cur.toFixed(1).padStart(10)} ms`,
      );
      say(
        `  ${`runs index, a page mid-history (${midOps} KV reads)`.padEnd(52)}${mid.toFixed(1).padStart(10)} ms`,
      );
      summary[label.replace(/ /g, "_")] = {
        records,
        list_all_ms: round(old),
        keys_ms: round(keys),
        index_ms: round(cur),
        index_mid_ms: round(mid),
        index_kv_reads: ops,
        index_mid_kv_reads: midOps,
      };
    };
    await pageOf("before retention", o.runs);

    const cfg = retentionConfig({ keepRuns: o.keep, maxAgeMs: 0, maxDeletesPerPass: 1_000_000 });
    const retention = new RunRetention(cfg, {
      runs: buckets.runs,
      nowMs: () => Date.now(),
      log: () => undefined,
    });
    t = performance.now();
    const left = await retention.prune(p, jobActorId(TENANT, JOB), new Set());
    const pruneS = (performance.now() - t) / 1000;
    const kept = (await buckets.runs.keys!(filter)).length;
    const chunksKept = (await listRunIndex(buckets.runs, p, TENANT, JOB)).length;
    say(
      `retention (keep ${o.keep.toLocaleString("en")}): ${(o.runs - kept).toLocaleString("en")} records and ${(chunks - chunksKept).toLocaleString("en")} index chunks purged in ${pruneS.toFixed(1)} s, ${kept.toLocaleString("en")} records and ${chunksKept} chunks kept, ${left} left for a later pass`,
    );
    if (kept !== Math.min(o.keep, o.runs))
      throw new Error(`retention kept ${kept}, expected ${o.keep}`);
    summary.retention = {
      purged: o.runs - kept,
      chunks_purged: chunks - chunksKept,
      seconds: round(pruneS),
      kept,
      chunks_kept: chunksKept,
    };

    await pageOf("after retention", kept);
    t = performance.now();
    await retention.prune(p, jobActorId(TENANT, JOB), new Set());
    const steady = performance.now() - t;
    say(
      `a steady-state prune pass over ${kept.toLocaleString("en")} keys with nothing to purge: ${steady.toFixed(1)} ms`,
    );
    summary.steady_prune_ms = round(steady);
    last = summary;
    await nc.close();
  } finally {
    await fixture.stop();
  }
  const totalS = (performance.now() - t0) / 1000;
  console.log(`total ${totalS.toFixed(1)} s`);
  if (o.md) {
    const nats = await exec("nats-server", ["--version"]);
    const commit = await exec("git", ["rev-parse", "--short", "HEAD"]).then(
      (r) => r.stdout.trim(),
      () => "unknown",
    );
    await appendSection(
      "history (a runs page through the runs index, before and after retention)",
      [
        `date: ${new Date().toUTCString()}`,
        `machine: ${machine()}, ${nats.stdout.trim()}`,
        `command: \`npm run bench -- history${args.length ? " " + args.join(" ") : ""}\` (whole run ${totalS.toFixed(0)} s), commit ${commit}`,
        "one nats-server (JetStream, file store in a temp dir, R1 buckets) started for the run; client and server share the machine",
      ],
      out,
    );
  }
  console.log(JSON.stringify({ ...last, total_s: round(totalS) }));
}

const round = (x: number) => Math.round(x * 10) / 10;
