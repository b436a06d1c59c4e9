/**
 * The dashboard's pages on a big tenant (`npm run bench -- pages [--jobs 10000] [--runs 100000]
 * [--samples 100]`): one `kairos node --roles api,scheduler` on a real nats-server, one tenant
 * holding `--jobs` jobs and `--runs` run records, then the API calls each dashboard page makes,
 * one at a time as one user's browser makes them, timed `--samples` times each (p50/p99/max):
 *
 * - Jobs: `GET /v1/jobs?limit=20` (the first page, and pages deep into the list by cursor);
 * - a job: `GET /v1/jobs/{id}` and its runs `GET /v1/jobs/{id}/runs?limit=20`;
 * - Runs (the tenant's): `GET /v1/runs?limit=20` (first page, deep pages, `status=failed`);
 * - a run: `GET /v1/runs/{id}`.
 *
 * Seeding: the jobs through the product (`POST /v1/jobs:batch`, 1,000 a request); the run records
 * NOT through the product — a run per job actor decision would take far longer than the measure —
 * but through the store APIs the product's record writes use: each record `create`d in the runs
 * bucket under its key, and its id appended to the tenant's runs log (`TenantRunLog`, what every
 * scheduler node does for the records its job actors create). So the job pages' own runs lists
 * (which go through the job's runs index in its actor state) show the runs made by `POST
 * /v1/jobs/{id}/runs` on `RUN_NOW_JOBS` jobs, `RUN_NOWS` each. Jobs are due in 2100: nothing
 * fires. A deep page is one by a cursor 25, 50, … pages in, or on a shorter list by any page's
 * cursor; on a list of one page it is not measured (null). The last line printed is a JSON summary
 * (`ok`: every p99 measured within 300 ms).
 */
import { performance } from "node:perf_hooks";
import { startKairosFixture } from "../test/support/kairos.ts";
import { openBuckets } from "../src/cluster/buckets.ts";
import { partitionOf } from "../src/cluster/placement.ts";
import { systemClock } from "../src/lib/clock.ts";
import { JOB_ACTOR, jobActorId, runIdFor, runKey } from "../src/protocol/ids.ts";
import type { RunStatus, RunView } from "../src/protocol/model.ts";
import { encodeRunRecord } from "../src/history/run-record.ts";
import { TenantRunLog } from "../src/history/tenant-run-log.ts";
import { apiCaller } from "./options.ts";

const PARTITIONS = 8; // the fixture's default
const BATCH = 1000;
const PAGE = 20; // the dashboard's page size
const RUN_NOW_JOBS = 10;
const RUN_NOWS = 5;
const LIMIT_MS = 300;

function parseArgs(args: string[]) {
  const int = (name: string, dflt: number): number => {
    const i = args.indexOf(`--${name}`);
    if (i < 0) return dflt;
    const v = Number(args[i + 1]);
    if (!Number.isInteger(v) || v < 1)
      throw new Error(`--${name} must be a positive integer, got ${args[i + 1]}`);
    return v;
  };
  return { jobs: int("jobs", 10_000), runs: int("runs", 100_000), samples: int("samples", 100) };
}

function quantiles(ms: number[]): { p50: number; p99: number; max: number } {
  const s = [...ms].sort((a, b) => a - b);
  const q = (p: number) =>
    Math.round(s[Math.min(s.length - 1, Math.floor(p * s.length))]! * 10) / 10;
  return { p50: q(0.5), p99: q(0.99), max: Math.round(s[s.length - 1]! * 10) / 10 };
}

/** Runs `n` tasks `width` at once. */
async function lanes(n: number, width: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const lane = async () => {
    for (let i = next++; i < n; i = next++) await task(i);
  };
  await Promise.all(Array.from({ length: Math.min(width, n) }, lane));
}

const STATUSES: RunStatus[] = ["succeeded", "succeeded", "succeeded", "failed", "timed_out"];

function record(tenantId: string, jobId: string, i: number): RunView {
  const at = Date.UTC(2026, 11, 1) + i * 1000;
  const iso = new Date(at).toISOString();
  return {
    run_id: runIdFor(jobId, at),
    job_id: jobId,
    tenant_id: tenantId,
    scheduled_for: iso,
    trigger: "schedule",
    status: STATUSES[i % STATUSES.length]!,
    attempt: 1,
    attempts: [],
    created_at: iso,
    started_at: iso,
    finished_at: iso,
    next_attempt_at: null,
    result: { exit_code: 0, output: "ok\n" },
    reason: null,
  };
}

export async function run(args: string[]): Promise<void> {
  const o = parseArgs(args);
  const fx = await startKairosFixture({ partitions: PARTITIONS });
  try {
    const node = fx.spawn("pages-bench", "api,scheduler", ["--rate-limit", "0"]);
    const url = await fx.apiUrl(node);
    const t = await fx.newTenant("bench");
    await fx.tenants.setQuota(t.tenant_id, { max_jobs: o.jobs + 1000 });
    const call = apiCaller(url, t.api_key);

    // Seed: jobs through the product, 4 batches at once.
    let t0 = performance.now();
    const jobIds: string[] = [];
    await lanes(Math.ceil(o.jobs / BATCH), 4, async (b) => {
      const n = Math.min(BATCH, o.jobs - b * BATCH);
      const r = await call<{ results: { status: number; job?: { job_id: string } }[] }>(
        "POST",
        "/v1/jobs:batch",
        {
          jobs: Array.from({ length: n }, (_, i) => ({
            job: {
              name: `bench-${b * BATCH + i}`,
              schedule: { at: "2100-01-01T00:00:00Z" },
              task: { image: "busybox", args: ["true"], timeout_s: 10 },
            },
          })),
        },
      );
      for (const x of r.results) if (x.job) jobIds.push(x.job.job_id);
    });
    if (jobIds.length !== o.jobs) throw new Error(`created ${jobIds.length} of ${o.jobs} jobs`);
    const jobsSeedS = (performance.now() - t0) / 1000;

    // Seed: run records through the store APIs (see the header), 256 writes at once.
    t0 = performance.now();
    const buckets = await openBuckets(fx.nc, { clusterName: "kairos", replicas: 1 });
    const log = new TenantRunLog(
      () => buckets.runs,
      systemClock,
      () => undefined,
    );
    await lanes(o.runs, 256, async (i) => {
      const jobId = jobIds[i % jobIds.length]!;
      const r = record(t.tenant_id, jobId, i);
      const p = partitionOf({ type: JOB_ACTOR, id: jobActorId(t.tenant_id, jobId) }, PARTITIONS);
      const w = await buckets.runs.create(
        runKey(p, t.tenant_id, jobId, r.run_id),
        encodeRunRecord(r, 1),
      );
      if (!w.ok) throw new Error(`run record ${r.run_id} exists`);
      log.created(r);
    });
    await log.flush();
    const runsSeedS = (performance.now() - t0) / 1000;
    // Run-nows through the product on a few jobs: their own runs lists.
    const runNowJobs = jobIds.slice(0, RUN_NOW_JOBS);
    const runIds: string[] = [];
    for (const j of runNowJobs)
      for (let k = 0; k < RUN_NOWS; k++)
        runIds.push((await call<{ run_id: string }>("POST", `/v1/jobs/${j}/runs`)).run_id);

    // Cursors deep into the lists, by walking them once: every 25th page's, or on a list of fewer
    // than 26 pages every page's but the first (none when the list fits on one page).
    const deepCursors = async (path: string, n: number) => {
      const every: string[] = [];
      const deep: string[] = [];
      let cursor: string | null = null;
      for (let i = 0; i < n * 25 && deep.length < n; i++) {
        const sep = path.includes("?") ? "&" : "?";
        const page: { next_cursor: string | null } = await call(
          "GET",
          cursor === null ? path : `${path}${sep}cursor=${encodeURIComponent(cursor)}`,
        );
        cursor = page.next_cursor;
        if (cursor === null) break;
        every.push(cursor);
        if (i % 25 === 24) deep.push(cursor);
      }
      return deep.length > 0 ? deep : every;
    };
    const jobCursors = await deepCursors(`/v1/jobs?limit=${PAGE}`, 20);
    const runCursors = await deepCursors(`/v1/runs?limit=${PAGE}`, 20);

    // The measure: each call `samples` times, one at a time.
    const time = async (paths: (i: number) => string): Promise<ReturnType<typeof quantiles>> => {
      const ms: number[] = [];
      for (let i = 0; i < o.samples; i++) {
        const s = performance.now();
        await call("GET", paths(i));
        ms.push(performance.now() - s);
      }
      return quantiles(ms);
    };
    const pick = <T>(xs: readonly T[], i: number): T => xs[(i * 7919) % xs.length]!;
    /** A deep page by one of `cursors`; null (not measured) when the list has one page only. */
    const timeDeep = (path: string, cursors: readonly string[]) =>
      cursors.length === 0
        ? Promise.resolve(null)
        : time((i) => `${path}&cursor=${encodeURIComponent(pick(cursors, i))}`);
    const figures = {
      jobs_first_page: await time(() => `/v1/jobs?limit=${PAGE}`),
      jobs_deep_page: await timeDeep(`/v1/jobs?limit=${PAGE}`, jobCursors),
      job: await time((i) => `/v1/jobs/${pick(jobIds, i)}`),
      job_runs: await time((i) => `/v1/jobs/${pick(runNowJobs, i)}/runs?limit=${PAGE}`),
      job_runs_seeded_job: await time((i) => `/v1/jobs/${pick(jobIds, i)}/runs?limit=${PAGE}`),
      tenant_runs_first_page: await time(() => `/v1/runs?limit=${PAGE}`),
      tenant_runs_deep_page: await timeDeep(`/v1/runs?limit=${PAGE}`, runCursors),
      tenant_runs_failed: await time(() => `/v1/runs?limit=${PAGE}&status=failed`),
      run: await time((i) => `/v1/runs/${pick(runIds, i)}`),
    };
    const worst = Math.max(...Object.values(figures).map((f) => f?.p99 ?? 0));
    for (const [name, f] of Object.entries(figures))
      console.log(
        f === null
          ? `${name.padEnd(24)} not measured: the list fits on one page`
          : `${name.padEnd(24)} p50 ${f.p50} ms  p99 ${f.p99} ms  max ${f.max} ms`,
      );
    console.log(
      `seeded ${o.jobs} jobs in ${jobsSeedS.toFixed(1)} s (POST /v1/jobs:batch), ${o.runs} run records in ${runsSeedS.toFixed(1)} s (store APIs); worst p99 ${worst} ms (limit ${LIMIT_MS} ms)`,
    );
    console.log(
      JSON.stringify({
        bench: "pages",
        jobs: o.jobs,
        runs: o.runs,
        samples: o.samples,
        seed_s: { jobs: jobsSeedS, runs: runsSeedS },
        ms: figures,
        worst_p99_ms: worst,
        ok: worst <= LIMIT_MS,
      }),
    );
  } finally {
    await fx.stop();
  }
}
