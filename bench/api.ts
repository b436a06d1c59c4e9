/**
 * The customer API under load (`npm run bench -- api [--jobs 10000] [--batch-jobs 20000]
 * [--in-flight 64] [--page-reads 200] [--no-md]`): one `kairos node --roles api,scheduler` on a
 * real nats-server, one tenant, default settings except the per-tenant request rate (off,
 * `--rate-limit 0`, so the figure is the node's, not the limiter's) and the tenant's `max_jobs`
 * (raised to fit the jobs).
 *
 * 1. `--jobs` creates one by one (`POST /v1/jobs`), `--in-flight` at once: creates a second and
 *    each create's latency.
 * 2. `--batch-jobs` more through `POST /v1/jobs:batch`, 1,000 a request, 4 requests at once.
 * 3. the list: the first page (`GET /v1/jobs?limit=50`, `--page-reads` reads one at a time) and
 *    a walk of every job 100 at a time (the total and each page's latency).
 * 4. filtered lists, `--page-reads` reads of each first page: by a part of the name
 *    (`name=bench-7`, about 1 job in 9), by state (`state=paused`: 1 job in 10 is created
 *    paused) and by both; then a walk of every paused job 100 at a time (pages may be short: a
 *    request examines at most 5,000 jobs). Each filter's latency and KV operations a page (from
 *    the node's metrics: the catalog's chunk reads are `get tenants`) are printed beside the
 *    pooled figure.
 * A page's p99 is of `--page-reads` reads (of fewer than 100 it is the slowest read alone, which
 * one GC pause decides); `max` is printed beside it.
 * The KV operations of the one-by-one creates are counted from the node's metrics
 * (`kairos_kv_op_seconds_count` by operation and bucket, per create). Jobs are due far in the
 * future (`{at}` in 2100): nothing fires meanwhile. The last line printed is a JSON summary.
 */
import { performance } from "node:perf_hooks";
import { startKairosFixture } from "../test/support/kairos.ts";
import { apiCaller, intOption, quantile, wantsMarkdown } from "./options.ts";
import { appendSection, machine } from "./report.ts";

function parseArgs(args: string[]) {
  const int = (name: string, dflt: number): number => intOption(args, name, dflt);
  return {
    jobs: int("jobs", 10_000),
    batchJobs: int("batch-jobs", 20_000),
    inFlight: int("in-flight", 64),
    pageReads: int("page-reads", 200),
    md: wantsMarkdown(args),
  };
}

const BATCH = 1000;
const BATCHES_IN_FLIGHT = 4;

const spec = (i: number) => ({
  name: `bench-${i}`,
  enabled: i % 10 !== 0,
  schedule: { at: "2100-01-01T00:00:00Z" },
  task: { image: "busybox", args: ["true"], timeout_s: 10 },
});

function quantiles(ms: number[]): { p50: number; p99: number; max: number } {
  const s = [...ms].sort((a, b) => a - b);
  const q = (p: number) => Math.round(quantile(s, p) * 10) / 10;
  return { p50: q(0.5), p99: q(0.99), max: q(1) };
}

/** `kairos_kv_op_seconds_count` of a node, by `<op> <bucket>`. */
async function kvOps(metricsUrl: string): Promise<Map<string, number>> {
  const text = await (await fetch(metricsUrl)).text();
  const out = new Map<string, number>();
  for (const m of text.matchAll(
    /^kairos_kv_op_seconds_count\{([^}]*)\} (\d+(?:\.\d+)?(?:e[+-]?\d+)?)$/gm,
  )) {
    const labels = Object.fromEntries(
      [...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1]!, l[2]!]),
    );
    out.set(`${labels["op"]} ${labels["bucket"]}`, Number(m[2]));
  }
  return out;
}

/** KV operations per item between two `kvOps` readings, by `<op> <bucket>` (0.01 precision). */
function perItem(
  before: Map<string, number>,
  afterOps: Map<string, number>,
  n: number,
): Record<string, number> {
  const out: Record<string, number> = {};
  let total = 0;
  for (const [k, v] of afterOps) {
    const d = v - (before.get(k) ?? 0);
    if (d <= 0) continue;
    out[k.replace(/ \S*_/, " ")] = Math.round((d / n) * 100) / 100;
    total += d;
  }
  out["total"] = Math.round((total / n) * 100) / 100;
  return out;
}

/** Runs `n` tasks with `lanes` at once; each task's latency in ms. */
async function lanes(
  n: number,
  width: number,
  task: (i: number) => Promise<void>,
): Promise<number[]> {
  const ms: number[] = [];
  let next = 0;
  const lane = async () => {
    for (let i = next++; i < n; i = next++) {
      const t0 = performance.now();
      await task(i);
      ms.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, n) }, lane));
  return ms;
}

export async function run(args: string[]): Promise<void> {
  const o = parseArgs(args);
  const fx = await startKairosFixture();
  try {
    const node = fx.spawn("api-bench", "api,scheduler", [
      "--rate-limit",
      "0",
      "--metrics-port",
      "0",
    ]);
    const url = await fx.apiUrl(node);
    const metricsUrl = await fx.metricsUrl(node);
    const t = await fx.newTenant("bench");
    await fx.tenants.setQuota(t.tenant_id, { max_jobs: o.jobs + o.batchJobs + 1000 });
    const api = apiCaller(url, t.api_key);
    const call = (method: string, path: string, body?: unknown): Promise<unknown> =>
      api(method, path, body);
    // Every list read, to name the slowest with their wall-clock time (to match with the node's
    // log, its GC trace, the forecast's refresh at :30 of each minute).
    const reads: { at: number; ms: number; path: string }[] = [];
    const read = async (path: string): Promise<unknown> => {
      const at = Date.now();
      const p0 = performance.now();
      const out = await call("GET", path);
      reads.push({ at, ms: performance.now() - p0, path });
      return out;
    };

    // 1. One by one.
    const opsBefore = await kvOps(metricsUrl);
    let t0 = performance.now();
    const createMs = await lanes(o.jobs, o.inFlight, async (i) => {
      await call("POST", "/v1/jobs", spec(i));
    });
    const createS = (performance.now() - t0) / 1000;
    const kvPerCreate = perItem(opsBefore, await kvOps(metricsUrl), o.jobs);

    // 2. Batches.
    const batches = Math.ceil(o.batchJobs / BATCH);
    t0 = performance.now();
    let failed = 0;
    const batchMs = await lanes(batches, BATCHES_IN_FLIGHT, async (b) => {
      const n = Math.min(BATCH, o.batchJobs - b * BATCH);
      const r = (await call("POST", "/v1/jobs:batch", {
        jobs: Array.from({ length: n }, (_, i) => ({ job: spec(o.jobs + b * BATCH + i) })),
      })) as { failed: number };
      failed += r.failed;
    });
    const batchS = (performance.now() - t0) / 1000;
    if (failed > 0) throw new Error(`${failed} items of the batches failed`);

    // 3. Lists.
    const firstMs = await lanes(o.pageReads, 1, async () => {
      await read("/v1/jobs?limit=50");
    });
    const walkMs: number[] = [];
    let listed = 0;
    let cursor: string | null = null;
    t0 = performance.now();
    do {
      const p0 = performance.now();
      const page = (await read(
        `/v1/jobs?limit=100${cursor !== null ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
      )) as { jobs: unknown[]; next_cursor: string | null };
      walkMs.push(performance.now() - p0);
      listed += page.jobs.length;
      cursor = page.next_cursor;
    } while (cursor !== null);
    const walkS = (performance.now() - t0) / 1000;
    const total = o.jobs + o.batchJobs;
    if (listed !== total) throw new Error(`the walk listed ${listed} jobs of ${total}`);

    // 4. Filtered lists.
    const filteredMs: number[] = [];
    const byQuery: Record<
      string,
      { ms: ReturnType<typeof quantiles>; kv: Record<string, number> }
    > = {};
    for (const q of ["name=bench-7", "state=paused", "name=bench-7&state=paused"]) {
      const before = await kvOps(metricsUrl);
      const ms = await lanes(o.pageReads, 1, async () => {
        await read(`/v1/jobs?limit=50&${q}`);
      });
      byQuery[q] = { ms: quantiles(ms), kv: perItem(before, await kvOps(metricsUrl), o.pageReads) };
      filteredMs.push(...ms);
    }
    const pausedMs: number[] = [];
    let paused = 0;
    cursor = null;
    t0 = performance.now();
    do {
      const p0 = performance.now();
      const page = (await read(
        `/v1/jobs?limit=100&state=paused${cursor !== null ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
      )) as { jobs: unknown[]; next_cursor: string | null };
      pausedMs.push(performance.now() - p0);
      paused += page.jobs.length;
      cursor = page.next_cursor;
    } while (cursor !== null);
    const pausedWalkS = (performance.now() - t0) / 1000;
    const wantPaused = Math.ceil(total / 10);
    if (paused !== wantPaused)
      throw new Error(`the walk of paused jobs listed ${paused} of ${wantPaused}`);

    const summary = {
      bench: "api",
      jobs: o.jobs,
      batch_jobs: o.batchJobs,
      in_flight: o.inFlight,
      page_reads: o.pageReads,
      creates_per_s: Math.round(o.jobs / createS),
      create_ms: quantiles(createMs),
      batch_jobs_per_s: Math.round(o.batchJobs / batchS),
      batch_request_ms: quantiles(batchMs),
      tenant_jobs: total,
      first_page_ms: quantiles(firstMs),
      walk_s: Math.round(walkS * 10) / 10,
      walk_page_ms: quantiles(walkMs),
      filtered_first_page_ms: quantiles(filteredMs),
      filtered_by_query: byQuery,
      paused_walk_s: Math.round(pausedWalkS * 100) / 100,
      paused_walk_page_ms: quantiles(pausedMs),
      paused_walk_pages: pausedMs.length,
      kv_ops_per_create: kvPerCreate,
    };
    const lines = [
      `creates one by one: ${summary.creates_per_s}/s (${o.inFlight} in flight), p50 ${summary.create_ms.p50} ms, p99 ${summary.create_ms.p99} ms`,
      `batch creates: ${summary.batch_jobs_per_s} jobs/s (${BATCH} a request, ${BATCHES_IN_FLIGHT} at once), request p50 ${summary.batch_request_ms.p50} ms`,
      `list with ${total} jobs: first page (50 jobs, ${o.pageReads} reads) p50 ${summary.first_page_ms.p50} ms, p99 ${summary.first_page_ms.p99} ms, max ${summary.first_page_ms.max} ms; walk of every job 100 a page ${summary.walk_s} s (page p50 ${summary.walk_page_ms.p50} ms, p99 ${summary.walk_page_ms.p99} ms)`,
      `filtered first pages (name, state, both; ${o.pageReads} reads each): p50 ${summary.filtered_first_page_ms.p50} ms, p99 ${summary.filtered_first_page_ms.p99} ms, max ${summary.filtered_first_page_ms.max} ms; walk of the ${wantPaused} paused jobs ${summary.paused_walk_s} s in ${pausedMs.length} pages (p50 ${summary.paused_walk_page_ms.p50} ms, p99 ${summary.paused_walk_page_ms.p99} ms)`,
      ...Object.entries(byQuery).map(
        ([q, r]) =>
          `  ${q}: p50 ${r.ms.p50} ms, p99 ${r.ms.p99} ms, max ${r.ms.max} ms; KV operations a page: ${Object.entries(
            r.kv,
          )
            .map(([k, v]) => `${k} ${v}`)
            .join(", ")}`,
      ),
      `slowest list reads: ${[...reads]
        .sort((a, b) => b.ms - a.ms)
        .slice(0, 6)
        .map(
          (r) => `${Math.round(r.ms)} ms at ${new Date(r.at).toISOString()} ${r.path.slice(0, 60)}`,
        )
        .join("; ")}`,
      `KV operations per create: ${Object.entries(kvPerCreate)
        .map(([k, v]) => `${k} ${v}`)
        .join(", ")}`,
    ];
    for (const l of lines) console.log(l);
    if (o.md)
      await appendSection(
        `api (${new Date().toISOString().slice(0, 10)})`,
        [machine(), `npm run bench -- api ${args.join(" ")}`.trim()],
        lines,
      );
    console.log(JSON.stringify(summary));
  } finally {
    await fx.stop();
  }
}
