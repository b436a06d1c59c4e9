/**
 * A dashboard left open on a tenant, for the burst benchmark (`--dashboard poll`): the reads one
 * browser tab makes, at the dashboard's own intervals (src/dashboard/*.js) — the tenant's Runs
 * page (`GET /v1/runs?limit=20`, every 2 s), a job's page (`GET /v1/jobs/{id}/runs?limit=20`,
 * every 2 s; the job's own read once) and the Activity charts (`GET /v1/stats`, every 5 s) — all
 * three at once, so more than any one open page reads. Each read's latency and any failure are
 * kept for the report.
 */
import { performance } from "node:perf_hooks";

/** The dashboard's polling intervals (runs.js POLL_MS, charts.js POLL_MS). */
const RUNS_POLL_MS = 2_000;
const STATS_POLL_MS = 5_000;

export interface PollerSummary {
  reads: number;
  failed: number;
  ms: { p50: number; p99: number; max: number };
  first_error?: string;
}

export interface DashboardPoller {
  stop(): PollerSummary;
}

/** Starts polling as one open dashboard does; `stop` ends it and sums up. */
export async function startDashboardPoller(url: string, apiKey: string): Promise<DashboardPoller> {
  const ms: number[] = [];
  let failed = 0;
  let firstError: string | undefined;
  const get = async (path: string): Promise<unknown> => {
    const t0 = performance.now();
    try {
      const res = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${apiKey}` } });
      const body: unknown = await res.json();
      if (res.status !== 200) throw new Error(`${path}: ${res.status} ${JSON.stringify(body)}`);
      ms.push(performance.now() - t0);
      return body;
    } catch (e) {
      failed++;
      firstError ??= String(e);
      return undefined;
    }
  };
  const first = (await get("/v1/jobs?limit=20")) as { jobs?: { job_id: string }[] } | undefined;
  const jobId = first?.jobs?.[0]?.job_id;
  if (jobId !== undefined) await get(`/v1/jobs/${jobId}`);
  const timers: NodeJS.Timeout[] = [];
  let stopped = false;
  const every = (periodMs: number, path: string) => {
    const tick = async () => {
      if (stopped) return;
      await get(path);
      if (!stopped) timers.push(setTimeout(() => void tick(), periodMs));
    };
    void tick();
  };
  every(RUNS_POLL_MS, "/v1/runs?limit=20");
  if (jobId !== undefined) every(RUNS_POLL_MS, `/v1/jobs/${jobId}/runs?limit=20`);
  every(STATS_POLL_MS, "/v1/stats");
  return {
    stop() {
      stopped = true;
      for (const t of timers) clearTimeout(t);
      const s = [...ms].sort((a, b) => a - b);
      const q = (p: number) =>
        s.length === 0 ? 0 : Math.round(s[Math.min(s.length - 1, Math.floor(p * s.length))]!);
      return {
        reads: ms.length,
        failed,
        ms: { p50: q(0.5), p99: q(0.99), max: Math.round(s.at(-1) ?? 0) },
        ...(firstError === undefined ? {} : { first_error: firstError }),
      };
    },
  };
}
