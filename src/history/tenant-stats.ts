/**
 * A tenant's live figures from the answers of the scheduler nodes (pure): checks each answer's
 * shape (`parseNodeStats`: an answer that is not one is dropped, as if the node had not
 * answered), then sums them step by step — runs started, lag histograms (percentiles taken after
 * the sum), runs waiting — and the forecasts minute by minute. The series is the last
 * `STATS_POINTS` complete steps before `nowMs`; the current step is still filling and is left out.
 */
import {
  STATS_FORECAST_MINUTES,
  STATS_POINTS,
  STATS_STEP_MS,
  type NodeStatsPoint,
  type NodeTenantStats,
  type TenantStatsPoint,
  type TenantStatsView,
} from "../protocol/stats.ts";
import { LAG_BOUNDS_MS, lagQuantileMs } from "./tenant-series.ts";

const MINUTE_MS = 60_000;
const isCount = (x: unknown): x is number =>
  typeof x === "number" && Number.isSafeInteger(x) && x >= 0;
const isPair = (x: unknown): x is [number, number] =>
  Array.isArray(x) && x.length === 2 && isCount(x[0]) && isCount(x[1]);

function isPoint(x: unknown): x is NodeStatsPoint {
  if (x === null || typeof x !== "object") return false;
  const p = x as Record<string, unknown>;
  return (
    isCount(p.t) &&
    p.t % STATS_STEP_MS === 0 &&
    isCount(p.started) &&
    Array.isArray(p.lag) &&
    p.lag.length <= LAG_BOUNDS_MS.length + 1 &&
    p.lag.every((e) => isPair(e) && e[0] <= LAG_BOUNDS_MS.length) &&
    (p.waiting === null || isPair(p.waiting))
  );
}

/** A node's answer if it has the shape of one (bounded: at most `STATS_POINTS` steps), else undefined. */
export function parseNodeStats(x: unknown): NodeTenantStats | undefined {
  if (x === null || typeof x !== "object") return undefined;
  const a = x as Record<string, unknown>;
  const f = a.forecast as Record<string, unknown> | null | undefined;
  const forecastOk =
    f === null ||
    (f !== undefined &&
      typeof f === "object" &&
      isCount(f.start_ms) &&
      Array.isArray(f.per_minute) &&
      f.per_minute.length <= STATS_FORECAST_MINUTES &&
      f.per_minute.every(isCount));
  const ok =
    a.v === 1 &&
    typeof a.node === "string" &&
    isCount(a.now_ms) &&
    Array.isArray(a.points) &&
    a.points.length <= STATS_POINTS &&
    a.points.every(isPoint) &&
    isPair(a.waiting_now) &&
    forecastOk;
  return ok ? (x as NodeTenantStats) : undefined;
}

const seconds = (ms: number | null): number | null => (ms === null ? null : Math.round(ms) / 1000);

function addLag(into: Map<number, number>, lag: readonly [number, number][]): void {
  for (const [b, n] of lag) into.set(b, (into.get(b) ?? 0) + n);
}

/** Sums the forecasts minute by minute from the current minute; null when no node had one. */
function mergeForecast(
  answers: readonly NodeTenantStats[],
  nowMs: number,
): TenantStatsView["forecast"] {
  const from = Math.floor(nowMs / MINUTE_MS) * MINUTE_MS;
  const perMinute = new Array<number>(STATS_FORECAST_MINUTES).fill(0);
  let any = false;
  for (const a of answers) {
    if (a.forecast === null) continue;
    any = true;
    const offset = Math.round((a.forecast.start_ms - from) / MINUTE_MS);
    a.forecast.per_minute.forEach((n, m) => {
      const i = m + offset;
      if (i >= 0 && i < STATS_FORECAST_MINUTES) perMinute[i]! += n;
    });
  }
  if (!any) return null;
  return {
    from: new Date(from).toISOString(),
    per_minute: perMinute,
    total: perMinute.reduce((x, y) => x + y, 0),
  };
}

/** The tenant's figures from the nodes' answers (already parsed); `asked`: nodes asked. */
export function mergeTenantStats(
  tenantId: string,
  nowMs: number,
  answers: readonly NodeTenantStats[],
  asked: number,
): TenantStatsView {
  const last = Math.floor(nowMs / STATS_STEP_MS) * STATS_STEP_MS - STATS_STEP_MS;
  const first = last - (STATS_POINTS - 1) * STATS_STEP_MS;
  const steps = Array.from({ length: STATS_POINTS }, (_, i) => ({
    started: 0,
    lag: new Map<number, number>(),
    waiting: null as number | null,
    t: first + i * STATS_STEP_MS,
  }));
  const allLag = new Map<number, number>();
  const waiting = { slot: 0, worker: 0 };
  for (const a of answers) {
    waiting.slot += a.waiting_now[0];
    waiting.worker += a.waiting_now[1];
    for (const p of a.points) {
      const step = steps[(p.t - first) / STATS_STEP_MS];
      if (step === undefined) continue;
      step.started += p.started;
      addLag(step.lag, p.lag);
      addLag(allLag, p.lag);
      if (p.waiting !== null) step.waiting = (step.waiting ?? 0) + p.waiting[0] + p.waiting[1];
    }
  }
  const series: TenantStatsPoint[] = steps.map((s) => ({
    at: new Date(s.t).toISOString(),
    started: s.started,
    started_per_s: s.started / (STATS_STEP_MS / 1000),
    lag_p50_s: seconds(lagQuantileMs(s.lag, 0.5)),
    lag_p99_s: seconds(lagQuantileMs(s.lag, 0.99)),
    waiting: s.waiting,
  }));
  return {
    tenant_id: tenantId,
    at: new Date(nowMs).toISOString(),
    step_s: STATS_STEP_MS / 1000,
    series,
    totals: {
      started: series.reduce((n, s) => n + s.started, 0),
      lag_p50_s: seconds(lagQuantileMs(allLag, 0.5)),
      lag_p99_s: seconds(lagQuantileMs(allLag, 0.99)),
    },
    waiting,
    forecast: mergeForecast(answers, nowMs),
    nodes: { asked, answered: answers.length },
    partial: answers.length < asked,
  };
}
