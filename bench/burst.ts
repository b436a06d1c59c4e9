/**
 * Burst benchmark (`npm run bench -- burst [--jobs 10000] [--overlap skip|allow] [--slots max(100000, jobs)]
 * [--lookahead-ms 300000] [--tenants 10] [--schedulers 1] [--workers 1] [--dashboard off|idle|poll]
 * [--no-md]`): the headline
 * "on time" figure. N one-shot `at` jobs, all due at the same instant T (overlap `skip` by
 * default, the API's default; both policies get look-ahead, the product default of 5 min), on one
 * in-process scheduler node (plus S − 1 spawned ones) and W worker processes with the `noop`
 * executor, on a real nats-server with authorization on. Dispatch lag = the attempt's actual
 * start − scheduled_for, from the run records. Tenants, their quotas (max_concurrent_runs and
 * max_jobs raised to N) and the jobs are set up through an admin connection and the jobs service
 * (job actors), not HTTP, to keep set-up short. Last line: one JSON object (jobs, overlap,
 * started, succeeded, failed, duplicates, lost, lag_ms, kv_ops_per_run, …). `--dashboard poll`
 * adds an API node and one open dashboard's reads of the first tenant during the burst
 * (dashboard-poller.ts); `idle` the same node without reads, the baseline for it.
 */
import { writeFile } from "node:fs/promises";
import { Session } from "node:inspector/promises";
import { writeHeapSnapshot } from "node:v8";
import { monitorEventLoopDelay, performance } from "node:perf_hooks";
import { systemClock } from "../src/lib/clock.ts";
import { systemRandom } from "../src/lib/random.ts";
import { decode, encode } from "../src/cluster/codec.ts";
import { makeNodeConfig } from "../src/cluster/config.ts";
import { NatsJobsService } from "../src/service/nats-service.ts";
import { DEFAULT_JOB_CONFIG } from "../src/job-state/job-types.ts";
import type { JobSpec, RunView } from "../src/protocol/model.ts";
import { executions, firstStartedAt } from "./run-starts.ts";
import { settledTimes } from "./settled.ts";
import { startKairos } from "../src/server/start.ts";
import { startNats } from "../test/support/nats.ts";
import { RUN_LINES, spawnNode } from "../test/support/nodes.ts";
import { appendSection, machine } from "./report.ts";
import { startDashboardPoller, type DashboardPoller } from "./dashboard-poller.ts";
import { RUNS_POLL_MS, STATS_POLL_MS } from "../src/dashboard/poll-intervals.js";
import { registry } from "../src/metrics/index.ts";
import { freePort } from "../src/dev/nats-launcher.ts";
import { openBuckets } from "../src/cluster/buckets.ts";
import { ActorRouter } from "../src/cluster/router.ts";
import { KvTenantDirectory } from "../src/tenants/index.ts";
import { FLEET_ACTOR, FLEET_ID, type FleetStatus } from "../src/slots/fleet-actor.ts";
import { TENANT_ACTOR } from "../src/protocol/ids.ts";
import { workerAdvertWildcard, type WorkerAdvert } from "../src/protocol/worker.ts";

/** The longest the benchmark waits after the due second for every run to end (see `deadline`). */
const DRAIN_BOUND_MS = 300_000;

/** A worker's stdout buffer (MiB): its ~3 lines per run must all reach this process's count. */
const WORKER_LOG_BUFFER_MB = 2048;

/**
 * KV operations this process has made so far, by "op bucket" (kairos_kv_op_seconds counts; the
 * scheduler runs in-process), e.g. `{"update kairos_runs": 3}`.
 */
async function kvOps(): Promise<Record<string, number>> {
  const m = (await registry.getMetricsAsJSON()).find((x) => x.name === "kairos_kv_op_seconds");
  const out: Record<string, number> = {};
  for (const v of (m?.values ?? []) as {
    metricName?: string;
    labels: Record<string, string | number>;
    value: number;
  }[]) {
    const k = `${String(v.labels["op"])} ${String(v.labels["bucket"])}`;
    if (v.metricName?.endsWith("_count")) out[k] = (out[k] ?? 0) + v.value;
  }
  return out;
}

/** Sums "op bucket" counts by op. */
function byOp(counts: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(counts)) {
    const op = k.split(" ")[0]!;
    out[op] = (out[op] ?? 0) + v;
  }
  return out;
}

/** Samples this process's heap allocations for `ms` and writes what is still live then to `file` (V8 sampling heap profile). */
async function sampleHeap(file: string, ms: number): Promise<void> {
  const session = new Session();
  session.connect();
  try {
    await session.post("HeapProfiler.startSampling", { samplingInterval: 64 * 1024 });
    await new Promise((r) => setTimeout(r, ms));
    const { profile } = await session.post("HeapProfiler.getSamplingProfile");
    await writeFile(file, JSON.stringify(profile));
    console.log(`heap sample written to ${file}`);
  } catch (e) {
    console.log(`heap sample failed: ${String(e)}`);
  } finally {
    session.disconnect();
  }
}

function arg(args: string[], name: string, dflt: number): number {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : dflt;
}
const pct = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

export async function run(args: string[]): Promise<void> {
  const jobs = arg(args, "jobs", 10_000);
  // The fleet's slots: by default enough for every due run at once (a prepared run holds its
  // worker slot until it starts), at least 100,000.
  const slots = arg(args, "slots", Math.max(100_000, jobs));
  const lookaheadMs = arg(args, "lookahead-ms", DEFAULT_JOB_CONFIG.lookaheadMs);
  const tenantCount = arg(args, "tenants", 10);
  const workerCount = arg(args, "workers", 1);
  const schedulerCount = arg(args, "schedulers", 1);
  if (
    !Number.isInteger(workerCount) ||
    workerCount < 1 ||
    !Number.isInteger(schedulerCount) ||
    schedulerCount < 1
  )
    throw new Error("--workers and --schedulers must be integers >= 1");
  const di = args.indexOf("--dashboard");
  const dashboard = di >= 0 ? args[di + 1] : "off";
  if (dashboard !== "off" && dashboard !== "idle" && dashboard !== "poll")
    throw new Error(`--dashboard must be off, idle or poll, got ${dashboard}`);
  const oi = args.indexOf("--overlap");
  const overlap = oi >= 0 ? args[oi + 1] : "skip";
  if (overlap !== "skip" && overlap !== "allow")
    throw new Error(`--overlap must be skip or allow, got ${overlap}`);
  process.env["KAIROS_LOG_LEVEL"] ??= "warn";
  const nats = await startNats();
  // The schedulers believe each noop worker's slots (the default limit is a Docker host's, 1,024).
  const maxWorkerSlots = Math.max(1_024, Math.ceil(slots / workerCount));
  const proc = await startKairos(
    makeNodeConfig({
      natsUrl: nats.url,
      natsAuth: { credsFile: nats.credsFor(["scheduler"]) },
      nodeId: "burst",
      roles: ["scheduler"],
      partitions: 64,
      maxWorkerSlots,
    }),
    {
      executor: "noop",
      workerSlots: slots,
      apiHost: "127.0.0.1",
      apiPort: 0,
      job: { lookaheadMs },
    },
  );
  // Partitions the in-process scheduler lost, with the reason and when (a lost partition's jobs
  // are reloaded: under saturation this decides how many runs start).
  const lostPartitions: { atMs: number; reason: string }[] = [];
  proc.node.events.on((e) => {
    if (e.type === "partition_lost")
      lostPartitions.push({ atMs: systemClock.now(), reason: e.reason });
  });
  // The worker is its own process, as in production (its event loop only starts and reports runs).
  const perWorker = Math.ceil(slots / workerCount);
  // Executions per run as the workers saw them (their `worker_started` lines, not the run
  // records): a start the owner never recorded is counted here (README, "Known limitations").
  const workerStarts = new Map<string, number>();
  const countStart = (line: string): void => {
    if (!line.includes('"evt":"worker_started"')) return;
    const m = /"run_id":"([^"]+)"/.exec(line);
    if (m) workerStarts.set(m[1]!, (workerStarts.get(m[1]!) ?? 0) + 1);
  };
  const workers = Array.from({ length: workerCount }, (_, i) =>
    spawnNode({
      natsUrl: nats.url,
      creds: nats.credsFor(["worker"]),
      nodeId: `burst-worker${i}`,
      roles: "worker",
      partitions: 64,
      extraArgs: ["--executor", "noop", "--slots", String(perWorker)],
      ignoreLines: RUN_LINES,
      onIgnoredLine: countStart,
      // This process reads their lines while it schedules: with the default 16 MiB a worker drops
      // about a quarter of its start lines under 200,000 runs. Read to the end before the report.
      env: { KAIROS_LOG_BUFFER_MB: String(WORKER_LOG_BUFFER_MB) },
    }),
  );
  // Further scheduler nodes are processes of their own (placement spreads the partitions); their
  // KV operations are read from their /metrics.
  const metricsPorts = await Promise.all(
    Array.from({ length: schedulerCount - 1 }, () => freePort()),
  );
  const schedulers = metricsPorts.map((port, i) =>
    spawnNode({
      natsUrl: nats.url,
      creds: nats.credsFor(["scheduler"]),
      nodeId: `burst-sched${i + 1}`,
      roles: "scheduler",
      partitions: 64,
      extraArgs: [
        "--metrics-port",
        String(port),
        "--metrics-host",
        "127.0.0.1",
        "--lookahead-ms",
        String(lookaheadMs),
        "--max-worker-slots",
        String(maxWorkerSlots),
      ],
    }),
  );
  // --dashboard idle|poll: an API node (its own process), for a dashboard left open on a tenant
  // (poll: dashboard-poller.ts from 15 s before the due second to the end, a read of each of its
  // endpoints at the due second itself; idle: the same node, no reads — the baseline to compare
  // with).
  const apiNode =
    dashboard === "off"
      ? undefined
      : spawnNode({
          natsUrl: nats.url,
          creds: nats.credsFor(["api"]),
          nodeId: "burst-api",
          roles: "api",
          partitions: 64,
          extraArgs: ["--api-port", "0", "--rate-limit", "0"],
        });
  // The spawned schedulers' /metrics texts (one that does not answer gives "": it counts nothing this time).
  const scrapeAll = () =>
    Promise.all(
      metricsPorts.map((port) =>
        fetch(`http://127.0.0.1:${port}/metrics`).then(
          (r) => r.text(),
          () => "",
        ),
      ),
    );
  const kvOpsAll = async (): Promise<Record<string, number>> => {
    const out = await kvOps();
    for (const text of await scrapeAll()) {
      for (const m of text.matchAll(
        /^kairos_kv_op_seconds_count\{op="([a-z]+)",bucket="([^"]+)"\} (\d+)/gm,
      )) {
        const k = `${m[1]!} ${m[2]!}`;
        out[k] = (out[k] ?? 0) + Number(m[3]);
      }
    }
    return out;
  };
  // Runs ended so far: attempts that succeeded plus runs dead-lettered (kairos_attempts_total
  // {outcome="succeeded"}, kairos_dead_letters_total), in this process and the others. (All
  // attempts would count a run twice when an unstarted attempt's lease expired first.) A
  // scheduler whose /metrics does not answer counts nothing this time.
  const runsEnded = async (): Promise<number> => {
    const json = await registry.getMetricsAsJSON();
    const sum = (name: string, pick: (labels: Record<string, string | number>) => boolean) =>
      (
        (json.find((x) => x.name === name)?.values ?? []) as {
          labels: Record<string, string | number>;
          value: number;
        }[]
      )
        .filter((v) => pick(v.labels))
        .reduce((a, v) => a + v.value, 0);
    let n =
      sum("kairos_attempts_total", (l) => l["outcome"] === "succeeded") +
      sum("kairos_dead_letters_total", () => true);
    for (const text of await scrapeAll()) {
      for (const x of text.matchAll(
        /^kairos_attempts_total\{[^}]*outcome="succeeded"[^}]*\} (\d+)/gm,
      ))
        n += Number(x[1]);
      // Without --metrics-tenant-labels the dead-letter counter has no labels at all.
      for (const x of text.matchAll(/^kairos_dead_letters_total(?:\{[^}]*\})? (\d+)/gm))
        n += Number(x[1]);
    }
    return n;
  };
  const closers: (() => Promise<void>)[] = [];
  let summary: object | undefined;
  try {
    for (const w of workers)
      await w.waitFor((e) => e.type === "node_started", 30_000, "worker started");
    for (const x of schedulers)
      await x.waitFor((e) => e.type === "node_started", 30_000, "scheduler started");
    // Placement settled: every partition held, by exactly one of the scheduler nodes.
    const settled = () => {
      const sets = [new Set(proc.node.heldPartitions()), ...schedulers.map((x) => x.held())];
      return (
        sets.reduce((a, x) => a + x.size, 0) === proc.node.partitions &&
        new Set(sets.flatMap((x) => [...x])).size === proc.node.partitions
      );
    };
    while (!settled()) await new Promise((r) => setTimeout(r, 100));
    // Set-up as an operator and an API node would do it: tenants, quotas and jobs through an admin
    // connection (the scheduler's own credentials may not write tenants).
    let dueMsForGaps = Number.POSITIVE_INFINITY;
    const adminNc = await nats.connect("burst-admin", "admin");
    closers.push(() => adminNc.drain());
    const admin = await openBuckets(adminNc, { clusterName: "kairos", replicas: 1 });
    const tenantDir = new KvTenantDirectory(admin.tenants, { clock: systemClock });
    // The workers' slot adverts as a listener with nothing else to do sees them (its own
    // connection): the longest silence of each worker from 10 s before the due second on. A
    // scheduler forgets a worker silent for 3 heartbeat intervals (its capacity drops to 0).
    const advertGaps = new Map<string, { lastMs: number; maxGapMs: number; atMs: number }>();
    const advertSub = adminNc.subscribe(workerAdvertWildcard("kairos"), {
      callback: (e, m) => {
        if (e) return;
        const id = decode<WorkerAdvert>(m.data).worker_id;
        const now = systemClock.now();
        const g = advertGaps.get(id);
        if (g && now - g.lastMs > g.maxGapMs && now >= dueMsForGaps - 10_000)
          Object.assign(g, { maxGapMs: now - g.lastMs, atMs: now });
        if (g) g.lastMs = now;
        else advertGaps.set(id, { lastMs: now, maxGapMs: 0, atMs: now });
      },
    });
    closers.push(async () => advertSub.unsubscribe());
    const adminRouter = new ActorRouter({
      nc: adminNc,
      clusterName: "kairos",
      clock: systemClock,
      random: systemRandom,
      partitions: proc.node.partitions,
    });
    // Jobs spread over several tenants: one tenant actor hands out its tenant's slots serially,
    // so spreading the jobs keeps one tenant actor from being the bound.
    const tenants: string[] = [];
    let firstKey = "";
    for (let i = 0; i < tenantCount; i++) {
      const { tenant, apiKey } = await tenantDir.createTenant(`burst${i}`);
      if (i === 0) firstKey = apiKey;
      const tkv = admin.tenants;
      const e = (await tkv.get(`t.${tenant.tenant_id}`))!;
      await tkv.update(
        `t.${tenant.tenant_id}`,
        encode({
          ...decode<Record<string, unknown>>(e.value),
          max_concurrent_runs: jobs,
          max_jobs: jobs,
        }),
        e.revision,
      );
      tenants.push(tenant.tenant_id);
    }
    const svc = new NatsJobsService(adminRouter, admin, proc.node.partitions, systemRandom);
    // Creation runs at ~2,500 jobs/s here; the runs are then prepared during the look-ahead.
    const setupS = lookaheadMs / 1000 + 10 + Math.ceil(jobs / 1000);
    const dueMs = Math.ceil((systemClock.now() + setupS * 1000) / 1000) * 1000;
    dueMsForGaps = dueMs;
    const spec: JobSpec = {
      name: null,
      schedule: { at: new Date(dueMs).toISOString() },
      task: { image: "noop", args: ["noop"], env: {}, timeout_s: 60 },
      retry: { max_attempts: 1, backoff: "exponential", base_s: 10, max_s: 3600 },
      overlap,
      misfire: { policy: "run_once", starting_deadline_s: null },
      flex_window_s: 0,
      enabled: true,
    };
    const t0 = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        while (next < jobs) {
          const i = next++;
          await svc.createJob(tenants[i % tenants.length]!, spec);
        }
      }),
    );
    const createS = (performance.now() - t0) / 1000;
    const opsBefore = await kvOpsAll();
    console.log(
      `created ${jobs} jobs in ${createS.toFixed(1)} s (${(jobs / createS).toFixed(0)}/s); all due at ${new Date(dueMs).toISOString()}`,
    );
    if (systemClock.now() > dueMs - lookaheadMs)
      console.log("WARNING: set-up ran into the look-ahead window; lags include set-up");
    // The scheduler's event loop: a long stall starves lease renewals and heartbeats.
    const loop = monitorEventLoopDelay({ resolution: 10 });
    loop.enable();
    // Diagnostics: KAIROS_BENCH_HEAP_SAMPLE=FILE writes V8's sampling heap profile of this process
    // (the in-process scheduler) from 5 s before the due second to 20 s after it: the allocation
    // sites of what is still live then (what grows under the burst). Off by default.
    const heapSampleFile = process.env["KAIROS_BENCH_HEAP_SAMPLE"];
    const heapSample =
      heapSampleFile === undefined
        ? undefined
        : setTimeout(
            () => void sampleHeap(heapSampleFile, 25_000),
            Math.max(0, dueMs - 5_000 - systemClock.now()),
          );
    // KAIROS_BENCH_HEAP_SNAPSHOT=FILE writes a heap snapshot of this process 5 s before the due
    // second (every run prepared: what a loaded job actor costs). Off by default; it stalls the
    // process while it writes.
    const snapshotFile = process.env["KAIROS_BENCH_HEAP_SNAPSHOT"];
    const snapshot =
      snapshotFile === undefined
        ? undefined
        : setTimeout(
            () => console.log(`heap snapshot written to ${writeHeapSnapshot(snapshotFile)}`),
            Math.max(0, dueMs - 5_000 - systemClock.now()),
          );
    // Until every run has ended (the schedulers' counters), at most 300 s after the due second — the
    // peer script's default drain bound (../shared/peers, `--max-drain`). A run's record shows its
    // start only once its end is written (records are written at creation and end): with all
    // 200,000 started on time by the workers, the owners can still be settling their reports 120 s
    // after the due second, and a 120 s bound would read them as not started.
    const deadline = dueMs + DRAIN_BOUND_MS;
    // The slot economy seen from inside, 10 s before and 10 s after the due second, on its own
    // timers: the fleet's capacity and shares, each tenant's grants (a throttle shows here first;
    // before the due second: whether the look-ahead prepared every run).
    const economyAt = [-10_000, 10_000].map((offsetMs) =>
      setTimeout(
        () => {
          void (async () => {
            const fleet = await proc.node.router
              .request<FleetStatus>(
                { type: FLEET_ACTOR, id: FLEET_ID },
                { kind: "status" },
                { deadlineMs: 5_000 },
              )
              .catch((e: unknown) => String(e));
            const perTenant = await Promise.all(
              tenants.map((t) =>
                proc.node.router
                  .request({ type: TENANT_ACTOR, id: t }, { kind: "status" }, { deadlineMs: 5_000 })
                  .catch((e: unknown) => String(e)),
              ),
            );
            console.log(
              `slot economy at due ${offsetMs < 0 ? "-" : "+"} ${Math.abs(offsetMs) / 1000} s: ${JSON.stringify({ fleet, tenants: perTenant })}`,
            );
          })();
        },
        Math.max(0, dueMs + offsetMs - systemClock.now()),
      ),
    );
    let poller: Promise<DashboardPoller> | undefined;
    const pollerAt =
      dashboard === "poll" && apiNode
        ? setTimeout(
            () => {
              poller = (async () =>
                startDashboardPoller(
                  (
                    (await apiNode.waitFor(
                      (ev) => (ev as { type: string }).type === "api_listening",
                      30_000,
                      "api listening",
                    )) as unknown as { api_url: string }
                  ).api_url,
                  firstKey,
                  dueMs,
                ))();
            },
            Math.max(0, dueMs - 15_000 - systemClock.now()),
          )
        : undefined;
    // Progress from the schedulers' own counters (attempts ended), not by listing the run records:
    // a listing of 200,000 records every second ran in the measured scheduler's process and on its
    // NATS connection, and took a large part of what it measured. One listing at the end.
    while (systemClock.now() < deadline) {
      await new Promise((r) => setTimeout(r, 1000));
      if (systemClock.now() < dueMs) continue;
      if ((await runsEnded()) >= jobs) break;
    }
    for (const t of economyAt) clearTimeout(t);
    if (pollerAt !== undefined) clearTimeout(pollerAt);
    const dashboardReads = poller === undefined ? undefined : await (await poller).stop();
    if (heapSample !== undefined) clearTimeout(heapSample);
    if (snapshot !== undefined) clearTimeout(snapshot);
    loop.disable();
    let runs: RunView[] = [];
    for (let tries = 1; ; tries++) {
      // One listing per partition: a single listing of 200,000 records timed out counting its keys.
      const all: RunView[] = [];
      try {
        for (let p = 0; p < proc.node.partitions; p++) {
          // (`<p>.>` holds run records only: the dead-letter keys start with `dl.`/`ob.`.)
          for (const x of await proc.node.buckets.runs.list(`${p}.>`))
            all.push(decode<RunView>(x.value));
        }
        runs = all;
        break;
      } catch (e) {
        // The server may still be busy: a listing that times out is tried again.
        if (tries >= 10) throw e;
        console.log(`listing the run records failed (${String(e)}); trying again`);
      }
    }
    // Run end → terminal record visible through the API (its store time in the runs stream).
    const settleMs = await settledTimes(adminNc, "kairos_runs").catch((e: unknown) => {
      console.log(`reading the settle times failed: ${String(e)}`);
      return [] as number[];
    });
    const lags = runs
      .flatMap((r) => {
        const at = firstStartedAt(r);
        return at === undefined ? [] : [Date.parse(at) - Date.parse(r.scheduled_for)];
      })
      .sort((a, b) => a - b);
    const done = runs.filter((r) => r.status === "succeeded").length;
    const failed = runs.filter((r) => r.status === "failed" || r.status === "timed_out").length;
    const leaseLost = runs.filter((r) => r.attempts.some((a) => a.outcome === "lease_lost")).length;
    const opsAfter = await kvOpsAll();
    // The scheduler's KV operations from the end of set-up to the end (reads, writes, grant keys),
    // per started run; `list` (this benchmark polling the runs bucket) is left out.
    const kvByOpBucket = Object.fromEntries(
      Object.entries(opsAfter)
        .map(([k, v]) => [k, v - (opsBefore[k] ?? 0)])
        .filter(([, v]) => v !== 0),
    ) as Record<string, number>;
    const kvByOp = byOp(kvByOpBucket);
    const loopMs = { p99: Math.round(loop.percentile(99) / 1e6), max: Math.round(loop.max / 1e6) };
    const lines = [
      `jobs due in the same second: ${jobs} (overlap ${overlap}, ${tenantCount} tenants, ${schedulerCount} scheduler(s), ${workerCount} worker(s)); started: ${lags.length}; succeeded: ${done}; dead-lettered: ${failed}; runs with a lease_lost attempt: ${leaseLost}`,
      `dispatch lag (start − scheduled_for) ms: p50 ${pct(lags, 50)}, p90 ${pct(lags, 90)}, p99 ${pct(lags, 99)}, max ${lags[lags.length - 1]}, min ${lags[0]}`,
    ];
    const byStatus = new Map<string, number>();
    for (const r of runs) byStatus.set(r.status, (byStatus.get(r.status) ?? 0) + 1);
    lines.push(
      `settled (run end → terminal record visible through the API) ms: p50 ${pct(settleMs, 50)}, p99 ${pct(settleMs, 99)}, max ${settleMs.at(-1) ?? null} (${settleMs.length} runs)`,
    );
    lines.push(
      `scheduler event-loop delay during the burst: p99 ${loopMs.p99} ms, max ${loopMs.max} ms`,
    );
    lines.push(`run statuses at the end: ${[...byStatus].map(([k, v]) => `${k} ${v}`).join(", ")}`);
    // What the workers logged about attempts the owner may have re-offered, by 10 s from the due
    // second (`time` ISO or epoch ms): `offer_expired` — an attempt not started, dropped for want
    // of a fresh acknowledgement; `self_fenced` — a started one killed for the same; `lease_lost`
    // — killed on the owner's answer; `stale_fence` — a completion report answered `stale_fence`
    // or `not_found` (a refused result, or a copy of a report already settled). Before the due
    // second no completion of the burst exists.
    // Every line the workers wrote, read: stop them (they drain and flush at exit) and read to the end.
    await Promise.all(workers.map((w) => w.stop(120_000)));
    await Promise.all(workers.map((w) => w.outputEnded));
    const dropped = workers.reduce(
      (n, w) => n + Number(/kairos: (\d+) log lines dropped/.exec(w.stderr())?.[1] ?? 0),
      0,
    );
    lines.push(
      `worker log lines dropped (their stdout buffer full; the counts below miss them): ${dropped}`,
    );
    // Also `report_given_up` — a report still unsettled past the worker's completion deadline (its
    // completion kept for a probe) — and the probes, by their answer (`probe_dropped`: those of
    // the `not_started` the probe itself dropped; `probe_started`: a result lost).
    const kinds = [
      "offer_expired",
      "self_fenced",
      "lease_lost",
      "stale_fence",
      "report_given_up",
      "probe_dropped",
      "probe_ended",
      "probe_running",
      "probe_started",
      "probe_not_started",
      "probe_unknown",
    ] as const;
    const byKind = new Map<string, Map<number, number>>();
    for (const w of workers) {
      for (const e of w.events as unknown as { type: string; time?: number | string }[]) {
        const kind = e.type.startsWith("worker_") ? e.type.slice(7) : "";
        if (!(kinds as readonly string[]).includes(kind)) continue;
        const at = typeof e.time === "string" ? Date.parse(e.time) : e.time;
        if (at === undefined || !Number.isFinite(at)) continue;
        const m = byKind.get(kind) ?? new Map<number, number>();
        const bucket = Math.floor((at - dueMs) / 10_000) * 10;
        m.set(bucket, (m.get(bucket) ?? 0) + 1);
        byKind.set(kind, m);
      }
    }
    const startedTwice = [...workerStarts.values()].filter((n) => n > 1).length;
    lines.push(
      `runs the workers started more than once (their own start lines): ${startedTwice} of ${workerStarts.size}`,
    );
    for (const [kind, m] of byKind) {
      const total = [...m.values()].reduce((a, b) => a + b, 0);
      lines.push(
        `worker ${kind}: ${total}, by seconds from the due second: ${[...m]
          .sort((a, b) => a[0] - b[0])
          .map(([s, n]) => `[${s}, ${s + 10}) ${n}`)
          .join("; ")}`,
      );
    }
    if (lostPartitions.length > 0) {
      const why = new Map<string, number>();
      // Reasons with their numbers (ms) folded, and the largest number seen per reason.
      const most = new Map<string, number>();
      for (const l of lostPartitions) {
        const k = l.reason.replace(/\d+ ms/g, "# ms");
        why.set(k, (why.get(k) ?? 0) + 1);
        const n = Number(/(\d+) ms/.exec(l.reason)?.[1] ?? Number.NaN);
        if (Number.isFinite(n)) most.set(k, Math.max(most.get(k) ?? 0, n));
      }
      const rel = (ms: number) => `${((ms - dueMs) / 1000).toFixed(1)} s`;
      lines.push(
        `partitions lost by the in-process scheduler: ${lostPartitions.length} (${[...why].map(([k, v]) => `${v}× ${k}${most.has(k) ? ` [largest # ${most.get(k)}]` : ""}`).join("; ")}), from ${rel(lostPartitions[0]!.atMs)} to ${rel(lostPartitions.at(-1)!.atMs)} after the due second`,
      );
    }
    const gapOf = [...advertGaps].map(
      ([id, g]) =>
        `${id} ${g.maxGapMs} ms (ending at due + ${((g.atMs - dueMs) / 1000).toFixed(1)} s)`,
    );
    lines.push(
      `longest silence of each worker's slot adverts from due − 10 s (a listener on its own connection): ${gapOf.join(", ") || "none heard"}`,
    );
    const reasons = new Map<string, number>();
    for (const r of runs)
      for (const a of r.attempts)
        if (a.error) {
          const k = a.error.replace(/[0-9a-f-]{8,}|\d+/g, "#");
          reasons.set(k, (reasons.get(k) ?? 0) + 1);
        }
    if (reasons.size > 0)
      lines.push(
        `attempt errors: ${[...reasons]
          .sort((a, b) => b[1] - a[1])
          .slice(0, 8)
          .map(([k, v]) => `${v}× ${k}`)
          .join("; ")}`,
      );
    if (dashboard !== "off")
      lines.push(
        `dashboard ${dashboard}${
          dashboardReads
            ? `: ${dashboardReads.reads} reads (GET /v1/runs and a job's runs every ${RUNS_POLL_MS / 1000} s, /v1/stats every ${STATS_POLL_MS / 1000} s), ${dashboardReads.failed} failed, ms p50 ${dashboardReads.ms.p50}, p99 ${dashboardReads.ms.p99}, max ${dashboardReads.ms.max}${dashboardReads.first_error ? ` (first error: ${dashboardReads.first_error})` : ""}; by endpoint (all | started from 1 s before the due second to 5 s after): ${Object.entries(
                dashboardReads.by_endpoint,
              )
                .map(
                  ([k, v]) =>
                    `${k} n ${v.all.n} p50 ${v.all.p50} p99 ${v.all.p99} max ${v.all.max} | n ${v.near_due.n} p50 ${v.near_due.p50} max ${v.near_due.max}`,
                )
                .join("; ")}; started within 1 s of the due second (ms from it, took): ${
                dashboardReads.around_due
                  .map((r) => `${r.endpoint} ${r.at_ms} (${r.ms})`)
                  .join(", ") || "none"
              }`
            : ""
        }`,
      );
    for (const l of lines) console.log(l);
    summary = {
      dashboard: { mode: dashboard, ...(dashboardReads ?? {}) },
      jobs,
      overlap,
      started: lags.length,
      succeeded: done,
      failed,
      lease_lost_runs: leaseLost,
      lost: jobs - runs.length,
      duplicates: runs.filter((r) => executions(r) > 1).length,
      worker_started_twice: startedTwice,
      worker_runs_started: workerStarts.size,
      worker_log_lines_dropped: dropped,
      worker_reports_given_up: [...(byKind.get("report_given_up")?.values() ?? [])].reduce(
        (a, b) => a + b,
        0,
      ),
      worker_probes_started: [...(byKind.get("probe_started")?.values() ?? [])].reduce(
        (a, b) => a + b,
        0,
      ),
      event_loop_ms: loopMs,
      partitions_lost: lostPartitions.length,
      advert_max_gap_ms: Math.max(0, ...[...advertGaps.values()].map((g) => g.maxGapMs)),
      kv_ops_per_run: Number(
        (
          Object.entries(kvByOp)
            .filter(([k]) => k !== "list")
            .reduce((a, [, v]) => a + v, 0) / Math.max(1, lags.length)
        ).toFixed(2),
      ),
      kv_ops_by_op: kvByOp,
      // Per started run, by operation and bucket: which writes a change adds or saves.
      kv_ops_per_run_by_bucket: Object.fromEntries(
        Object.entries(kvByOpBucket).map(([k, v]) => [
          k,
          Number((v / Math.max(1, lags.length)).toFixed(3)),
        ]),
      ),
      lag_ms: {
        p50: pct(lags, 50),
        p90: pct(lags, 90),
        p99: pct(lags, 99),
        max: lags[lags.length - 1] ?? null,
      },
      settled_ms: { p50: pct(settleMs, 50), p99: pct(settleMs, 99), max: settleMs.at(-1) ?? null },
    };
    if (!args.includes("--no-md")) {
      await appendSection(
        "burst (top-of-the-second dispatch lag, noop executor)",
        [
          `date: ${new Date().toISOString()}; machine: ${machine()}`,
          `command: \`npm run bench -- burst --jobs ${jobs} --overlap ${overlap} --tenants ${tenantCount} --schedulers ${schedulerCount} --workers ${workerCount}\` (look-ahead ${lookaheadMs} ms; ${schedulerCount} scheduler node(s), one in-process, 64 partitions; ${workerCount} worker process(es), noop executor, ${slots} slots in all; one nats-server; all on this machine)`,
          `job creation through job actors: ${createS.toFixed(1)} s (${(jobs / createS).toFixed(0)} jobs/s)`,
        ],
        lines,
        false,
      );
    }
  } finally {
    for (const c of closers) await c().catch(() => undefined);
    await Promise.all(
      [...workers, ...schedulers, ...(apiNode ? [apiNode] : [])].map((x) => x.stop()),
    );
    await proc.stop();
    await nats.stop();
  }
  // Last, after everything has stopped: the in-process scheduler logs while it shuts down, and
  // a 200,000-job run would otherwise end on such a log line instead of the JSON.
  console.log(JSON.stringify(summary));
}
