/**
 * A dashboard left open on a tenant, for the burst benchmark (`--dashboard poll`): the reads one
 * browser tab makes, at the dashboard's own intervals (src/dashboard/poll-intervals.js), one of
 * each at the due second itself (the worst phase) — the tenant's Runs page
 * (`GET /v1/runs?limit=20`), a job's page (`GET /v1/jobs/{id}/runs?limit=20`; the job's own read
 * once) and the Activity charts (`GET /v1/stats`) — all three at once, so more than any one open
 * page reads. Each read's latency, by endpoint and by when it started against
 * the due second, and any failure are kept for the report.
 *
 * The poller runs in a process of its own (`startDashboardPoller` forks this file), as a browser
 * would: in the benchmark's own process its HTTP client and JSON parsing took the measured
 * scheduler's event loop at the due second, which no real dashboard does.
 */
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import { RUNS_POLL_MS, STATS_POLL_MS } from "../src/dashboard/poll-intervals.js";

/** Reads that start within this window around the due second are counted apart. */
const DUE_WINDOW_MS: readonly [number, number] = [-1_000, 5_000];

interface Quantiles {
  n: number;
  p50: number;
  p99: number;
  max: number;
}

export interface PollerSummary {
  reads: number;
  failed: number;
  ms: { p50: number; p99: number; max: number };
  /** By endpoint (`runs`, `job_runs`, `stats`, `jobs`, `job`): all reads, and those near due. */
  by_endpoint: Record<string, { all: Quantiles; near_due: Quantiles }>;
  /** Each read started within 1 s of the due second: when (ms from it) and how long it took. */
  around_due: { endpoint: string; at_ms: number; ms: number }[];
  first_error?: string;
}

export interface DashboardPoller {
  stop(): Promise<PollerSummary>;
}

/** Polling in this process (the forked poller's body). */
interface LocalPoller {
  stop(): PollerSummary;
}

function quantiles(xs: readonly number[]): Quantiles {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p: number) =>
    s.length === 0 ? 0 : Math.round(s[Math.min(s.length - 1, Math.floor(p * s.length))]!);
  return { n: s.length, p50: q(0.5), p99: q(0.99), max: Math.round(s.at(-1) ?? 0) };
}

/** How long the forked poller may take to start or to sum up before it counts as failed. */
const CHILD_DEADLINE_MS = 30_000;

/** Messages between the benchmark and its forked poller (`start` in, `started` and `summary` out). */
type ToPoller = { kind: "start"; url: string; apiKey: string; dueMs: number } | { kind: "stop" };
type FromPoller = { kind: "started" } | { kind: "summary"; summary: PollerSummary };

/**
 * Starts polling as one open dashboard does, in a process of its own; `stop` ends it and sums up.
 * `dueMs`: the burst's due second (epoch ms), for the reads near it.
 */
export async function startDashboardPoller(
  url: string,
  apiKey: string,
  dueMs: number,
): Promise<DashboardPoller> {
  const child = fork(fileURLToPath(import.meta.url), [], {
    execArgv: ["--import", "tsx"],
    env: { ...process.env, KAIROS_DASHBOARD_POLLER: "1" },
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const next = (kind: FromPoller["kind"]) =>
    new Promise<FromPoller>((resolve, reject) => {
      const t = setTimeout(() => {
        child.kill("SIGKILL");
        reject(new Error(`dashboard poller: no ${kind} within ${CHILD_DEADLINE_MS} ms`));
      }, CHILD_DEADLINE_MS);
      child.once("exit", (code) => {
        clearTimeout(t);
        reject(new Error(`dashboard poller exited (${code}) before ${kind}`));
      });
      child.on("message", (m: FromPoller) => {
        if (m.kind !== kind) return;
        clearTimeout(t);
        resolve(m);
      });
    });
  const started = next("started");
  child.send({ kind: "start", url, apiKey, dueMs } satisfies ToPoller);
  await started;
  return {
    async stop() {
      const summary = next("summary");
      child.send({ kind: "stop" } satisfies ToPoller);
      const m = await summary;
      if (m.kind !== "summary") throw new Error("dashboard poller: no summary");
      return m.summary;
    },
  };
}

/** Polls in this process (the forked child). */
async function pollHere(url: string, apiKey: string, dueMs: number): Promise<LocalPoller> {
  const reads: { endpoint: string; atMs: number; ms: number }[] = [];
  let failed = 0;
  let firstError: string | undefined;
  const get = async (endpoint: string, path: string): Promise<unknown> => {
    const atMs = Date.now() - dueMs;
    const t0 = performance.now();
    try {
      const res = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${apiKey}` } });
      const body: unknown = await res.json();
      if (res.status !== 200) throw new Error(`${path}: ${res.status} ${JSON.stringify(body)}`);
      reads.push({ endpoint, atMs, ms: performance.now() - t0 });
      return body;
    } catch (e) {
      failed++;
      firstError ??= String(e);
      return undefined;
    }
  };
  const first = (await get("jobs", "/v1/jobs?limit=20")) as
    { jobs?: { job_id: string }[] } | undefined;
  const jobId = first?.jobs?.[0]?.job_id;
  if (jobId !== undefined) await get("job", `/v1/jobs/${jobId}`);
  const timers: NodeJS.Timeout[] = [];
  let stopped = false;
  // After a first read at once (a page opened), reads on a grid anchored at the due second —
  // dueMs + k·period — so one of each lands exactly when the burst is dispatched: the worst phase
  // an open dashboard can have (a free-running poll drifts, and may miss the few tens of ms the
  // dispatch takes). A read still in flight at a slot skips it: a page never overlaps its reads.
  const untilSlot = (periodMs: number): number => {
    const now = Date.now();
    return dueMs + Math.floor((now - dueMs) / periodMs + 1) * periodMs - now;
  };
  const every = (periodMs: number, endpoint: string, path: string) => {
    const tick = async () => {
      if (stopped) return;
      await get(endpoint, path);
      if (!stopped) timers.push(setTimeout(() => void tick(), untilSlot(periodMs)));
    };
    void tick();
  };
  every(RUNS_POLL_MS, "runs", "/v1/runs?limit=20");
  if (jobId !== undefined) every(RUNS_POLL_MS, "job_runs", `/v1/jobs/${jobId}/runs?limit=20`);
  every(STATS_POLL_MS, "stats", "/v1/stats");
  return {
    stop() {
      stopped = true;
      for (const t of timers) clearTimeout(t);
      const all = quantiles(reads.map((r) => r.ms));
      const byEndpoint: PollerSummary["by_endpoint"] = {};
      for (const endpoint of new Set(reads.map((r) => r.endpoint))) {
        const mine = reads.filter((r) => r.endpoint === endpoint);
        byEndpoint[endpoint] = {
          all: quantiles(mine.map((r) => r.ms)),
          near_due: quantiles(
            mine
              .filter((r) => r.atMs >= DUE_WINDOW_MS[0] && r.atMs < DUE_WINDOW_MS[1])
              .map((r) => r.ms),
          ),
        };
      }
      return {
        reads: reads.length,
        failed,
        ms: { p50: all.p50, p99: all.p99, max: all.max },
        by_endpoint: byEndpoint,
        around_due: reads
          .filter((r) => Math.abs(r.atMs) <= 1_000)
          .map((r) => ({ endpoint: r.endpoint, at_ms: r.atMs, ms: Math.round(r.ms) })),
        ...(firstError === undefined ? {} : { first_error: firstError }),
      };
    },
  };
}

// The forked poller: started by `startDashboardPoller`, answers over IPC, exits when stopped.
if (process.env["KAIROS_DASHBOARD_POLLER"] === "1" && process.send) {
  let poller: LocalPoller | undefined;
  process.on("message", (m: ToPoller) => {
    if (m.kind === "start" && poller === undefined) {
      void pollHere(m.url, m.apiKey, m.dueMs).then((p) => {
        poller = p;
        process.send!({ kind: "started" } satisfies FromPoller);
      });
    } else if (m.kind === "stop") {
      const summary: PollerSummary = poller?.stop() ?? {
        reads: 0,
        failed: 0,
        ms: { p50: 0, p99: 0, max: 0 },
        by_endpoint: {},
        around_due: [],
        first_error: "stopped before it started",
      };
      process.send!({ kind: "summary", summary } satisfies FromPoller, () => process.exit(0));
    }
  });
  process.on("disconnect", () => process.exit(0));
}
