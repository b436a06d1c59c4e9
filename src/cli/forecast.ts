/**
 * `kairos admin forecast [--hours H] [--max-jobs N] [--json]`: runs due per minute over the next
 * H hours across the whole cluster, with a per-tenant breakdown. It reads every job's stored
 * state from KV (the actors bucket, as the API's job lists do) and runs the same pure forecast
 * as the schedulers' `kairos_forecast_runs_due` gauge (src/service/forecast.ts), so for the next
 * hour it equals the sum of that gauge over the scheduler nodes (taken in the same minute).
 */
import type { Buckets } from "../cluster/buckets.ts";
import { KairosError } from "../lib/errors.ts";
import { forecastRunsDue, type Forecast } from "../service/forecast.ts";
import { readForecastJobs } from "../server/forecast.ts";

export const MAX_FORECAST_HOURS = 168;
export const DEFAULT_CLI_MAX_JOBS = 1_000_000;

export interface ForecastReport {
  from: string;
  minutes: number;
  total: number;
  per_minute: number[];
  per_hour: number[];
  peak: { minute: string; runs: number } | null;
  tenants: { tenant_id: string; total: number; per_minute: number[] }[];
  jobs_scanned: number;
  truncated: boolean;
}

function positiveInt(raw: string | undefined, flag: string, def: number, max: number): number {
  if (raw === undefined) return def;
  const n = /^[1-9]\d{0,8}$/.test(raw) ? Number(raw) : NaN;
  if (!(n >= 1 && n <= max))
    throw new KairosError(
      "invalid_argument",
      `${flag}: must be a whole number 1-${max}, got ${JSON.stringify(raw)}`,
      { field: flag },
    );
  return n;
}

/** `--hours` (1-168, default 1) and `--max-jobs` (default 1,000,000), validated. */
export function parseForecastFlags(f: { hours?: string; maxJobs?: string }): {
  hours: number;
  maxJobs: number;
} {
  return {
    hours: positiveInt(f.hours, "--hours", 1, MAX_FORECAST_HOURS),
    maxJobs: positiveInt(f.maxJobs, "--max-jobs", DEFAULT_CLI_MAX_JOBS, 100_000_000),
  };
}

const sum = (a: readonly number[]): number => a.reduce((x, y) => x + y, 0);
const iso = (ms: number): string => new Date(ms).toISOString().replace(":00.000Z", "Z");

/** The report of a forecast (the `--json` object). */
export function forecastReport(f: Forecast, truncatedRead: boolean): ForecastReport {
  const per_hour: number[] = [];
  for (let m = 0; m < f.perMinute.length; m += 60) per_hour.push(sum(f.perMinute.slice(m, m + 60)));
  let peak: ForecastReport["peak"] = null;
  f.perMinute.forEach((runs, m) => {
    if (runs > 0 && (peak === null || runs > peak.runs))
      peak = { minute: iso(f.startMs + m * 60_000), runs };
  });
  const tenants = [...f.byTenant].map(([tenant_id, per_minute]) => ({
    tenant_id,
    total: sum(per_minute),
    per_minute,
  }));
  tenants.sort((a, b) => b.total - a.total || a.tenant_id.localeCompare(b.tenant_id));
  return {
    from: iso(f.startMs),
    minutes: f.perMinute.length,
    total: sum(f.perMinute),
    per_minute: f.perMinute,
    per_hour,
    peak,
    tenants,
    jobs_scanned: f.jobsScanned,
    truncated: f.truncated || truncatedRead,
  };
}

/** Reads every job of the cluster (at most `maxJobs`) and forecasts `hours` from `nowMs`. */
export async function clusterForecast(
  buckets: Buckets,
  nowMs: number,
  o: { hours: number; maxJobs: number },
): Promise<ForecastReport> {
  const read = await readForecastJobs(buckets.actors, ["*"], o.maxJobs);
  return forecastReport(
    forecastRunsDue(read.jobs, nowMs, {
      minutes: o.hours * 60,
      maxJobs: o.maxJobs,
      maxOccurrences: 50_000_000,
    }),
    read.truncated,
  );
}

/** The report for a person: totals, per hour, the peak minute, tenants by runs. */
export function formatForecast(r: ForecastReport): string {
  const lines = [
    `forecast from ${r.from} for ${r.minutes / 60} h: ${r.total} runs due (${r.jobs_scanned} jobs scanned)`,
    r.peak ? `peak minute ${r.peak.minute}: ${r.peak.runs} runs` : "no runs due",
  ];
  if (r.truncated)
    lines.push(
      "TRUNCATED: more jobs or occurrences than the bounds (--max-jobs): the counts are a lower bound",
    );
  lines.push("", "hour from           runs  peak/min");
  r.per_hour.forEach((runs, h) => {
    const mins = r.per_minute.slice(h * 60, h * 60 + 60);
    lines.push(
      `${iso(Date.parse(r.from) + h * 3_600_000).padEnd(18)} ${String(runs).padStart(6)}  ${String(Math.max(0, ...mins)).padStart(8)}`,
    );
  });
  if (r.tenants.length > 0) {
    lines.push("", "tenant                            runs");
    for (const t of r.tenants)
      lines.push(`${t.tenant_id.padEnd(30)} ${String(t.total).padStart(7)}`);
  }
  return lines.join("\n");
}
