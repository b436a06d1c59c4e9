/**
 * Sustained benchmark (`npm run bench -- sustained [--rate 200] [--seconds 10] [--schedulers 1]
 * [--spawn] [--tenants 10] [--overlap skip|allow] [--lookahead-ms MS] [--slots N]
 * [--raw-seconds 5] [--raw-in-flight 512] [--no-md]`): a steady stream of R runs per second for
 * S seconds, through the path a user takes, and the raw KV write ceiling of the same nats-server.
 *
 * - Set-up: R×S one-shot `at` jobs (overlap `skip` by default, the API's default), created
 *   through the jobs service (job actors) like the burst benchmark, round-robin over T tenants
 *   whose `max_concurrent_runs` is raised to R×S. Job i is due at T0 + i·(S/(R·S)) s, so the due
 *   instants are spread evenly (millisecond precision) over [T0, T0+S). T0 is chosen after
 *   creation (estimated at 1,000 jobs/s) plus the look-ahead plus 10 s, so preparation happens in
 *   steady state during the window, not at creation; a WARNING is printed if creation overran.
 *   The look-ahead is the product default unless `--lookahead-ms` is given.
 * - Cluster: one nats-server, one worker process (noop executor), and either one in-process
 *   scheduler node (the default: `node --cpu-prof` on the bench profiles the scheduler) or, with
 *   `--schedulers S` (S > 1) or `--spawn`, S scheduler processes (`kairos node --roles scheduler`,
 *   as in production; their own default mailbox limit) plus an in-process API-only node that
 *   creates the jobs. Tenants are created and their quotas raised over an admin connection.
 * - Measured from the run records (one list at the end): started, lag = first attempt's
 *   started_at − scheduled_for; achieved runs/s = started ÷ max(S, last start − first start).
 *   The schedulers' KV operations (`kairos_kv_op_seconds` counts, `list` left out: that is this
 *   benchmark reading) from the end of creation to the end, per started run — from the in-process
 *   registry, or from each spawned scheduler's /metrics.
 * - Raw KV ceiling: after the window, with every node still up, the bench writes as fast as it
 *   can to a scratch bucket of the same server (distinct keys, a value the size of the average
 *   run record, `--raw-in-flight` puts outstanding) for `--raw-seconds`, and reports puts/s.
 *   Compare achieved runs/s × kv_ops_per_run with it.
 */
import { monitorEventLoopDelay, performance, type IntervalHistogram } from "node:perf_hooks";
import { Kvm } from "@nats-io/kv";
import type { KvEntry, KvStore } from "../src/cluster/kv.ts";
import { systemClock } from "../src/lib/clock.ts";
import { systemRandom } from "../src/lib/random.ts";
import { decode, encode } from "../src/cluster/codec.ts";
import { makeNodeConfig } from "../src/cluster/config.ts";
import { openBuckets, type Buckets } from "../src/cluster/buckets.ts";
import { assign } from "../src/cluster/placement.ts";
import { freePort } from "../src/dev/nats-launcher.ts";
import { DEFAULT_JOB_CONFIG } from "../src/job-state/job-types.ts";
import { NatsJobsService } from "../src/service/nats-service.ts";
import type { JobSpec, RunView } from "../src/protocol/model.ts";
import { executions, firstStartedAt } from "./run-starts.ts";
import { registry } from "../src/metrics/index.ts";
import { startKairos, type KairosProcess } from "../src/server/start.ts";
import { KvTenantDirectory } from "../src/tenants/index.ts";
import { startNats, type NatsFixture } from "../test/support/nats.ts";
import { RUN_LINES, spawnNode, type NodeProc } from "../test/support/nodes.ts";
import { appendSection, machine } from "./report.ts";

const PARTITIONS = 64;

/**
 * Every run record, one listing per partition, each tried again (up to 10 times) when it times
 * out: one listing of 100,000 records timed out on a server still busy with the window's writes,
 * and the whole run died on it (as the burst benchmark once did).
 */
async function listRunRecords(runs: KvStore): Promise<KvEntry[]> {
  const all: KvEntry[] = [];
  for (let p = 0; p < PARTITIONS; p++) {
    for (let attempt = 1; ; attempt++) {
      try {
        all.push(...(await runs.list(`${p}.>`))); // `<p>.>` holds run records only (dead letters: dl.*)
        break;
      } catch (e) {
        if (attempt >= 10) throw e;
        console.log(`listing partition ${p}'s run records failed (${String(e)}); trying again`);
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  }
  return all;
}
/** Disabled jobs created first to measure the creation rate on this machine, now. */
const CALIBRATION_JOBS = 1000;

interface Options {
  rate: number;
  seconds: number;
  schedulers: number;
  spawn: boolean;
  tenants: number;
  overlap: "skip" | "allow";
  /** undefined: the product default (DEFAULT_JOB_CONFIG.lookaheadMs), not passed to the nodes. */
  lookaheadMs: number | undefined;
  slots: number;
  rawSeconds: number;
  rawInFlight: number;
  md: boolean;
}

function options(args: string[]): Options {
  const num = (name: string, dflt: number): number => {
    const i = args.indexOf(`--${name}`);
    const v = i >= 0 ? Number(args[i + 1]) : dflt;
    if (!Number.isFinite(v) || v <= 0)
      throw new Error(`--${name} must be a positive number, got ${args[i + 1]}`);
    return v;
  };
  const oi = args.indexOf("--overlap");
  const overlap = oi >= 0 ? args[oi + 1] : "skip";
  if (overlap !== "skip" && overlap !== "allow")
    throw new Error(`--overlap must be skip or allow, got ${overlap}`);
  const rate = num("rate", 200);
  const seconds = num("seconds", 10);
  const schedulers = Math.floor(num("schedulers", 1));
  return {
    rate,
    seconds,
    schedulers,
    overlap,
    spawn: schedulers > 1 || args.includes("--spawn"),
    tenants: Math.floor(num("tenants", 10)),
    lookaheadMs: args.includes("--lookahead-ms") ? num("lookahead-ms", 0) : undefined,
    slots: Math.floor(num("slots", Math.max(100_000, Math.ceil(rate * seconds)))),
    rawSeconds: num("raw-seconds", 5),
    rawInFlight: Math.floor(num("raw-in-flight", 512)),
    md: !args.includes("--no-md"),
  };
}

const pct = (sorted: number[], p: number): number | null =>
  sorted.length === 0
    ? null
    : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Sums a Prometheus text exposition's samples of `name` per value of `labels` (joined by a space,
 * e.g. "update kairos_runs" for ["op", "bucket"]; all other labels summed).
 */
function samples(texts: string[], name: string, ...labels: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  // A series may have no labels at all (the per-tenant metrics without --metrics-tenant-labels).
  const re = new RegExp(`^${name}(?:\\{([^}]*)\\})? (\\S+)$`, "gm");
  for (const text of texts) {
    for (const m of text.matchAll(re)) {
      const v = labels
        .map((label) => new RegExp(`${label}="([^"]*)"`).exec(m[1] ?? "")?.[1] ?? "")
        .join(" ");
      out[v] = (out[v] ?? 0) + Number(m[2]);
    }
  }
  return out;
}
const total = (r: Record<string, number>, skip: string[] = []) =>
  Object.entries(r)
    .filter(([k]) => !skip.includes(k))
    .reduce((a, [, v]) => a + v, 0);

/** The running cluster, whichever way the schedulers run. */
interface Cluster {
  readonly svc: NatsJobsService;
  readonly admin: Buckets;
  readonly describe: string;
  /** The /metrics text of every scheduler (in-process: this process's registry). */
  metrics(): Promise<string[]>;
  /** In-process scheduler only: its event-loop delay. */
  readonly loop: IntervalHistogram | undefined;
  stop(): Promise<void>;
}

async function startCluster(o: Options, nats: NatsFixture): Promise<Cluster> {
  const adminNc = await nats.connect("sustained-admin");
  const admin = await openBuckets(adminNc, { clusterName: "kairos", replicas: 1 });
  const job = o.lookaheadMs !== undefined ? { lookaheadMs: o.lookaheadMs } : {};
  const lookaheadArgs =
    o.lookaheadMs !== undefined ? ["--lookahead-ms", String(o.lookaheadMs)] : [];
  const procs: KairosProcess[] = [];
  const nodes: NodeProc[] = [];
  const stopAll = async () => {
    await Promise.all(nodes.map((n) => n.stop()));
    for (const p of procs.reverse()) await p.stop();
    await adminNc.close();
  };
  try {
    // The worker is its own process, as in production (its event loop only starts and reports runs).
    const worker = spawnNode({
      natsUrl: nats.url,
      creds: nats.credsFor(["worker"]),
      nodeId: "sustained-worker",
      roles: "worker",
      partitions: PARTITIONS,
      extraArgs: ["--executor", "noop", "--slots", String(o.slots)],
      ignoreLines: RUN_LINES,
    });
    nodes.push(worker);
    if (!o.spawn) {
      const proc = await startKairos(
        makeNodeConfig({
          natsUrl: nats.url,
          natsAuth: { credsFile: nats.credsFor(["api", "scheduler"]) },
          nodeId: "sustained",
          roles: ["api", "scheduler"],
          partitions: PARTITIONS,
          // The noop worker's slots are believed (the default limit is a Docker host's, 1,024).
          maxWorkerSlots: Math.max(1_024, o.slots),
        }),
        { executor: "noop", workerSlots: o.slots, apiHost: "127.0.0.1", apiPort: 0, job },
      );
      procs.push(proc);
      await worker.waitFor((e) => e.type === "node_started", 30_000, "worker started");
      while (proc.node.heldPartitions().length !== proc.node.partitions) await sleep(50);
      const loop = monitorEventLoopDelay({ resolution: 10 });
      return {
        svc: new NatsJobsService(
          proc.node.router,
          proc.node.buckets,
          proc.node.partitions,
          systemRandom,
        ),
        admin,
        loop,
        stop: stopAll,
        describe: `one api+scheduler node in-process (mailbox limit 100,000), ${PARTITIONS} partitions`,
        metrics: async () => [await registry.metrics()],
      };
    }
    const ids = Array.from({ length: o.schedulers }, (_, i) => `sustained-s${i}`);
    const ports: number[] = [];
    for (const nodeId of ids) {
      const port = await freePort();
      ports.push(port);
      nodes.push(
        spawnNode({
          natsUrl: nats.url,
          creds: nats.credsFor(["scheduler"]),
          nodeId,
          roles: "scheduler",
          partitions: PARTITIONS,
          extraArgs: [
            "--metrics-port",
            String(port),
            "--max-worker-slots",
            String(Math.max(1_024, o.slots)),
            ...lookaheadArgs,
          ],
          env: { KAIROS_LOG_LEVEL: "warn" },
        }),
      );
    }
    // The jobs are created through an API-only node, as an API request would.
    const api = await startKairos(
      makeNodeConfig({
        natsUrl: nats.url,
        natsAuth: { credsFile: nats.credsFor(["api"]) },
        nodeId: "sustained-api",
        roles: ["api"],
        partitions: PARTITIONS,
      }),
      { executor: "noop", workerSlots: 0, apiHost: "127.0.0.1", apiPort: 0, job },
    );
    procs.push(api);
    await worker.waitFor((e) => e.type === "node_started", 60_000, "worker started");
    await waitBalanced(admin, ids, nodes);
    return {
      svc: new NatsJobsService(
        api.node.router,
        api.node.buckets,
        api.node.partitions,
        systemRandom,
      ),
      admin,
      loop: undefined,
      stop: stopAll,
      describe: `${o.schedulers} scheduler process(es) (\`kairos node --roles scheduler\`, default mailbox limit) and an in-process API-only node creating the jobs, ${PARTITIONS} partitions`,
      metrics: () =>
        Promise.all(ports.map(async (p) => (await fetch(`http://127.0.0.1:${p}/metrics`)).text())),
    };
  } catch (e) {
    await stopAll();
    throw e;
  }
}

/** Waits until every partition's lease is held by its rendezvous owner among `ids`. */
async function waitBalanced(admin: Buckets, ids: string[], nodes: NodeProc[]): Promise<void> {
  const want = assign(PARTITIONS, ids);
  const deadline = performance.now() + 90_000;
  for (;;) {
    const owners = new Map(
      (await admin.leases.list(">")).map((e) => [e.key, decode<{ owner: string }>(e.value).owner]),
    );
    if (want.every((n, p) => owners.get(`p.${p}`) === n)) return;
    const exited = await Promise.race([
      Promise.any(nodes.map((n) => n.exited)),
      sleep(0).then(() => undefined),
    ]);
    if (exited !== undefined)
      throw new Error(`a node exited (code ${exited}) while the schedulers took their partitions`);
    if (performance.now() > deadline) {
      throw new Error(
        `schedulers did not take their partitions within 90 s (held as wanted: ${want.filter((n, p) => owners.get(`p.${p}`) === n).length}/${PARTITIONS})`,
      );
    }
    await sleep(250);
  }
}

/** Creates the tenants with their concurrency and job caps raised to `cap` (no admin quota command yet). */
async function createTenants(admin: Buckets, count: number, cap: number): Promise<string[]> {
  const dir = new KvTenantDirectory(admin.tenants, { clock: systemClock, authCacheTtlMs: 0 });
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    const { tenant } = await dir.createTenant(`sustained${i}`);
    const e = (await admin.tenants.get(`t.${tenant.tenant_id}`))!;
    const r = await admin.tenants.update(
      `t.${tenant.tenant_id}`,
      encode({
        ...decode<Record<string, unknown>>(e.value),
        max_concurrent_runs: cap,
        max_jobs: cap,
      }),
      e.revision,
    );
    if (!r.ok) throw new Error(`raising ${tenant.tenant_id}'s quotas: ${r.conflict}`);
    out.push(tenant.tenant_id);
  }
  return out;
}

function jobSpec(o: Options, atMs: number, enabled: boolean): JobSpec {
  return {
    name: null,
    schedule: { at: new Date(atMs).toISOString() },
    task: { image: "noop", args: ["noop"], env: {}, timeout_s: 60 },
    retry: { max_attempts: 1, backoff: "exponential", base_s: 10, max_s: 3600 },
    overlap: o.overlap,
    misfire: { policy: "run_once", starting_deadline_s: null },
    flex_window_s: 0,
    enabled,
  };
}

/** Creates `n` jobs, 64 in flight, job i from `spec(i)`, round-robin over the tenants; returns seconds taken. */
async function createJobs(
  c: Cluster,
  tenants: string[],
  n: number,
  spec: (i: number) => JobSpec,
): Promise<number> {
  const t = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (next < n) {
        const i = next++;
        await c.svc.createJob(tenants[i % tenants.length]!, spec(i));
      }
    }),
  );
  return (performance.now() - t) / 1000;
}

/**
 * Until every run succeeded or failed (or the deadline), samples the schedulers' started count
 * (dispatch-lag observations) once a second; returns the runs started in each second of the window.
 */
async function watchWindow(o: Options, c: Cluster, n: number, t0Ms: number): Promise<number[]> {
  const perSecond: number[] = [];
  let last: number | undefined;
  const deadline = t0Ms + o.seconds * 1000 + 120_000;
  while (systemClock.now() < deadline) {
    await sleep(1000 - ((systemClock.now() - t0Ms + 100_000_000) % 1000));
    if (systemClock.now() < t0Ms) continue;
    const texts = await c.metrics();
    const started = total(samples(texts, "kairos_dispatch_lag_seconds_count", "tenant"));
    const ended = total(samples(texts, "kairos_attempts_total", "outcome"));
    if (last !== undefined && systemClock.now() <= t0Ms + o.seconds * 1000 + 500)
      perSecond.push(started - last);
    last = started;
    if (ended >= n) break;
  }
  return perSecond;
}

/** Writes as fast as it can to a scratch bucket for `seconds`, `inFlight` puts outstanding. */
async function rawKvWrites(
  nats: NatsFixture,
  seconds: number,
  inFlight: number,
  bytes: number,
): Promise<{ puts: number; errors: number; perS: number }> {
  const nc = await nats.connect("sustained-raw");
  try {
    const kv = await new Kvm(nc).create("sustained_scratch", { history: 1 });
    const value = new Uint8Array(bytes).fill(120);
    let puts = 0;
    let errors = 0;
    let next = 0;
    const t = performance.now();
    const end = t + seconds * 1000;
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (performance.now() < end) {
          try {
            await kv.put(`k.${next++}`, value);
            puts++;
          } catch {
            errors++;
          }
        }
      }),
    );
    const perS = puts / ((performance.now() - t) / 1000);
    await kv.destroy();
    return { puts, errors, perS };
  } finally {
    await nc.close();
  }
}

interface Analysis {
  started: number;
  achieved: number;
  failed: number;
  lost: number;
  notStarted: number;
  duplicates: number;
  lags: number[];
  statuses: string;
  errors: string;
  avgRecordBytes: number;
}

function analyse(o: Options, n: number, entries: { value: Uint8Array }[]): Analysis {
  const runs = entries.map((e) => decode<RunView>(e.value));
  const started = runs.flatMap((r) => {
    const at = firstStartedAt(r);
    return at === undefined ? [] : [{ at: Date.parse(at), r }];
  });
  const starts = started.map((x) => x.at);
  const lags = started.map((x) => x.at - Date.parse(x.r.scheduled_for)).sort((a, b) => a - b);
  // (A loop, not Math.max(...starts): hundreds of thousands of arguments overflow the stack.)
  let first = Infinity;
  let last = -Infinity;
  for (const t of starts) {
    first = Math.min(first, t);
    last = Math.max(last, t);
  }
  const spanS = starts.length > 0 ? (last - first) / 1000 : 0;
  const perJob = new Map<string, number>();
  for (const r of runs) perJob.set(r.job_id, (perJob.get(r.job_id) ?? 0) + 1);
  const byStatus = new Map<string, number>();
  for (const r of runs) byStatus.set(r.status, (byStatus.get(r.status) ?? 0) + 1);
  const reasons = new Map<string, number>();
  for (const r of runs)
    for (const a of r.attempts)
      if (a.error) {
        const k = a.error.replace(/[0-9a-f-]{8,}|\d+/g, "#");
        reasons.set(k, (reasons.get(k) ?? 0) + 1);
      }
  return {
    started: lags.length,
    achieved: Number((lags.length / Math.max(o.seconds, spanS)).toFixed(1)),
    failed: runs.filter((r) => r.status === "failed" || r.status === "timed_out").length,
    lost: n - perJob.size,
    notStarted: runs.length - started.length,
    // A second run of a one-shot job, or a second attempt of a run with max_attempts 1.
    duplicates:
      [...perJob.values()].reduce((a, k) => a + k - 1, 0) +
      runs.filter((r) => executions(r) > 1).length,
    lags,
    statuses: [...byStatus].map(([k, v]) => `${k} ${v}`).join(", "),
    errors: [...reasons]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 8)
      .map(([k, v]) => `${v}× ${k}`)
      .join("; "),
    avgRecordBytes:
      entries.length > 0
        ? Math.round(entries.reduce((a, e) => a + e.value.length, 0) / entries.length)
        : 512,
  };
}

type Raw = Awaited<ReturnType<typeof rawKvWrites>>;

/** The human lines and the JSON summary (the requested keys first). */
function report(
  o: Options,
  c: Cluster,
  a: Analysis,
  perSecond: number[],
  kvByOp: Record<string, number>,
  kvPerRun: number,
  raw: Raw,
): { lines: string[]; summary: Record<string, unknown> } {
  const lag = {
    p50: pct(a.lags, 50),
    p90: pct(a.lags, 90),
    p99: pct(a.lags, 99),
    max: a.lags[a.lags.length - 1] ?? null,
  };
  const steady = [...perSecond].sort((x, y) => x - y);
  const writes = total(kvByOp, ["list", "get"]);
  const lines = [
    `offered ${o.rate} runs/s for ${o.seconds} s (${Math.round(o.rate * o.seconds)} one-shot jobs, overlap ${o.overlap}, ${o.tenants} tenants, ${o.spawn ? `${o.schedulers} spawned` : "1 in-process"} scheduler(s))`,
    `started ${a.started}; achieved ${a.achieved} runs/s (started ÷ max(S, last start − first start)); failed ${a.failed}; lost ${a.lost}; never started ${a.notStarted}; duplicates ${a.duplicates}`,
    `runs started per wall-clock second of the window (scheduler metrics): min ${pct(steady, 0)}, p50 ${pct(steady, 50)}, max ${pct(steady, 100)} over ${steady.length} s`,
    `dispatch lag (start − scheduled_for) ms: p50 ${lag.p50}, p90 ${lag.p90}, p99 ${lag.p99}, max ${lag.max}, min ${a.lags[0] ?? null}`,
    `scheduler KV operations per started run: ${kvPerRun} (${Object.entries(kvByOp)
      .filter(([k, v]) => k !== "list" && v > 0)
      .map(([k, v]) => `${k} ${v}`)
      .join(", ")}); writes per run ${(writes / Math.max(1, a.started)).toFixed(2)}`,
    `raw KV writes, same nats-server, ${o.rawInFlight} in flight for ${o.rawSeconds} s, ${a.avgRecordBytes}-byte values (the average run record): ${raw.perS.toFixed(0)} puts/s (${raw.puts} puts, ${raw.errors} errors)`,
    `ceiling implied for this path: ${(raw.perS / Math.max(0.01, kvPerRun)).toFixed(0)} runs/s (raw puts/s ÷ KV operations per run); achieved × ops per run = ${(a.achieved * kvPerRun).toFixed(0)} KV ops/s`,
    `run statuses at the end: ${a.statuses}`,
  ];
  if (c.loop)
    lines.push(
      `scheduler event-loop delay during the window: p99 ${Math.round(c.loop.percentile(99) / 1e6)} ms, max ${Math.round(c.loop.max / 1e6)} ms`,
    );
  if (a.errors) lines.push(`attempt errors: ${a.errors}`);
  const summary = {
    rate: o.rate,
    seconds: o.seconds,
    started: a.started,
    achieved_runs_per_s: a.achieved,
    failed: a.failed,
    lost: a.lost,
    duplicates: a.duplicates,
    lag_ms: lag,
    kv_ops_per_run: kvPerRun,
    raw_kv_puts_per_s: Math.round(raw.perS),
    schedulers: o.schedulers,
    spawned: o.spawn,
    overlap: o.overlap,
    not_started: a.notStarted,
    kv_ops_by_op: kvByOp,
  };
  return { lines, summary };
}

export async function run(args: string[]): Promise<void> {
  const o = options(args);
  const n = Math.round(o.rate * o.seconds);
  process.env["KAIROS_LOG_LEVEL"] ??= "warn";
  const nats = await startNats();
  let last: object | undefined;
  let cluster: Cluster | undefined;
  try {
    cluster = await startCluster(o, nats);
    const calibration = Math.min(n, CALIBRATION_JOBS);
    const tenants = await createTenants(cluster.admin, o.tenants, n + calibration);
    const lookaheadMs = o.lookaheadMs ?? DEFAULT_JOB_CONFIG.lookaheadMs;
    // The creation rate depends on the machine and its load: measure it on disabled jobs (never
    // due), then start the window a whole look-ahead (+10 s) after creation should end at 3/4 of
    // that rate, so runs are prepared during the window and not at creation.
    const far = systemClock.now() + 365 * 86_400_000;
    const calS = await createJobs(cluster, tenants, calibration, () => jobSpec(o, far, false));
    const estimateS = n / (0.75 * (calibration / calS));
    const t0Ms =
      Math.ceil((systemClock.now() + lookaheadMs + 10_000 + estimateS * 1000) / 1000) * 1000;
    const spacingMs = (o.seconds * 1000) / n;
    console.log(
      `calibration: ${calibration} disabled jobs in ${calS.toFixed(1)} s (${(calibration / calS).toFixed(0)}/s); creating ${n} jobs, estimated ${estimateS.toFixed(0)} s`,
    );
    const createS = await createJobs(cluster, tenants, n, (i) =>
      jobSpec(o, t0Ms + Math.floor(i * spacingMs), true),
    );
    console.log(
      `created ${n} jobs in ${createS.toFixed(1)} s (${(n / createS).toFixed(0)}/s); due evenly from ${new Date(t0Ms).toISOString()} for ${o.seconds} s (${o.rate}/s); look-ahead ${lookaheadMs} ms`,
    );
    if (systemClock.now() > t0Ms - lookaheadMs)
      console.log(
        "WARNING: creation ran into the look-ahead window; the first runs were prepared during set-up",
      );
    const textsBefore = await cluster.metrics();
    const opsBefore = samples(textsBefore, "kairos_kv_op_seconds_count", "op");
    const bucketsBefore = samples(textsBefore, "kairos_kv_op_seconds_count", "op", "bucket");
    cluster.loop?.enable();
    const perSecond = await watchWindow(o, cluster, n, t0Ms);
    cluster.loop?.disable();
    const textsAfter = await cluster.metrics();
    const opsAfter = samples(textsAfter, "kairos_kv_op_seconds_count", "op");
    const kvByOp = Object.fromEntries(
      Object.entries(opsAfter).map(([k, v]) => [k, v - (opsBefore[k] ?? 0)]),
    );
    const kvByOpBucket = Object.fromEntries(
      Object.entries(samples(textsAfter, "kairos_kv_op_seconds_count", "op", "bucket"))
        .map(([k, v]) => [k, v - (bucketsBefore[k] ?? 0)])
        .filter(([, v]) => v !== 0),
    ) as Record<string, number>;
    const a = analyse(o, n, await listRunRecords(cluster.admin.runs));
    const kvOps = total(kvByOp, ["list"]);
    const kvPerRun = Number((kvOps / Math.max(1, a.started)).toFixed(2));
    const raw = await rawKvWrites(nats, o.rawSeconds, o.rawInFlight, a.avgRecordBytes);
    const { lines, summary: base } = report(o, cluster, a, perSecond, kvByOp, kvPerRun, raw);
    // Per started run, by operation and bucket: which writes a change adds or saves.
    const summary = {
      ...base,
      kv_ops_per_run_by_bucket: Object.fromEntries(
        Object.entries(kvByOpBucket).map(([k, v]) => [
          k,
          Number((v / Math.max(1, a.started)).toFixed(3)),
        ]),
      ),
    };
    for (const l of lines) console.log(l);
    if (o.md) {
      await appendSection(
        `sustained (${o.rate} runs/s for ${o.seconds} s, noop executor)`,
        [
          `date: ${new Date().toISOString()}; machine: ${machine()}`,
          `command: \`npm run bench -- ${args.join(" ")}\` (${cluster.describe}; one worker process, noop executor, ${o.slots} slots; one nats-server; all on this machine)`,
          `job creation through job actors: ${createS.toFixed(1)} s (${(n / createS).toFixed(0)} jobs/s)`,
        ],
        lines,
        false,
      );
    }
    last = summary;
  } finally {
    await cluster?.stop();
    await nats.stop();
  }
  // Last, after everything has stopped (the in-process scheduler logs while it shuts down).
  console.log(JSON.stringify(last));
}
