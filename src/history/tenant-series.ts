/**
 * The rolling series a scheduler node keeps per tenant for the tenant's live charts (`GET
 * /v1/stats`): per 5 s step of the last 10 minutes, the runs whose first attempt started on this
 * node, their dispatch lags (a histogram of fixed log-scale buckets, so nodes' histograms add up
 * and percentiles are taken after summing), and the runs waiting at the step's sample. Fed from
 * the run-path metrics (the first start of a run, as `kairos_dispatch_lag_seconds`) and a sampler
 * of `RunsWaiting` every step; read by the stats responder. Pure: times are arguments.
 *
 * Nothing here is on the dispatch path's actors: a start costs one map lookup and two counter
 * increments in the job shell's record write; a read is O(steps) for one tenant.
 *
 * Bounds: at most `MAX_SERIES_TENANTS` tenants (the least recently active is dropped first; a
 * tenant with nothing in the window is dropped at the next sample), `STATS_POINTS` steps each,
 * and a lag histogram of at most `LAG_BOUNDS_MS.length + 1` buckets per step. Percentiles are
 * interpolated within a bucket (buckets grow by 10^(1/8), about 33 %: a p99 within that of the
 * true one).
 */
import { STATS_POINTS, STATS_STEP_MS, type NodeStatsPoint } from "../protocol/stats.ts";
import { OrderedMap } from "../lib/ordered-map.ts";

export const MAX_SERIES_TENANTS = 4_096;
export const WINDOW_MS = STATS_STEP_MS * STATS_POINTS;

/** Upper bounds (ms) of the lag buckets: 1 ms × 10^(i/8) up to about an hour; one more bucket above. */
export const LAG_BOUNDS_MS: readonly number[] = Object.freeze(
  Array.from({ length: 53 }, (_, i) => Number((10 ** (i / 8)).toPrecision(3))),
);

/** The bucket of a lag: the first whose upper bound it does not exceed (past the last: the overflow bucket). */
export function lagBucket(lagMs: number): number {
  const v = Math.max(0, lagMs);
  let lo = 0;
  let hi = LAG_BOUNDS_MS.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (v <= LAG_BOUNDS_MS[mid]!) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/**
 * The `q` quantile (0-1) of a histogram by bucket (`counts.get(i)`: lags in bucket i), in ms,
 * interpolated linearly within its bucket; null when it is empty. The overflow bucket answers
 * its lower bound (nothing is known above it).
 */
export function lagQuantileMs(counts: ReadonlyMap<number, number>, q: number): number | null {
  let total = 0;
  for (const n of counts.values()) total += n;
  if (total === 0) return null;
  const rank = Math.min(total, Math.max(1, Math.ceil(q * total)));
  const buckets = [...counts.keys()].sort((a, b) => a - b);
  let seen = 0;
  for (const i of buckets) {
    const n = counts.get(i)!;
    if (n <= 0) continue;
    if (seen + n >= rank) {
      const lower = i === 0 ? 0 : LAG_BOUNDS_MS[i - 1]!;
      const upper = LAG_BOUNDS_MS[i];
      if (upper === undefined) return lower;
      return lower + (upper - lower) * ((rank - seen) / n);
    }
    seen += n;
  }
  return LAG_BOUNDS_MS[LAG_BOUNDS_MS.length - 1]!;
}

interface Step {
  t: number;
  started: number;
  lag: Map<number, number> | undefined;
  waiting: [number, number] | undefined;
}

interface Series {
  steps: (Step | undefined)[];
  /** Last time something was recorded (a start, a non-zero sample). */
  activeMs: number;
  /** The last waiting sample. */
  waitingNow: [number, number];
}

const stepOf = (ms: number): number => Math.floor(ms / STATS_STEP_MS) * STATS_STEP_MS;

export class TenantSeries {
  readonly #tenants = new OrderedMap<string, Series>();

  constructor(private readonly maxTenants = MAX_SERIES_TENANTS) {}

  /** A run of `tenant` started its first attempt at `nowMs`, `lagMs` after it was due. */
  started(tenant: string, nowMs: number, lagMs: number): void {
    const s = this.#series(tenant, nowMs);
    const step = this.#step(s, nowMs);
    step.started++;
    const b = lagBucket(lagMs);
    step.lag ??= new Map();
    step.lag.set(b, (step.lag.get(b) ?? 0) + 1);
  }

  /**
   * The runs waiting on this node by tenant (`[slot, worker]`), sampled at `nowMs`: recorded in
   * the step of every tenant waiting or active within the window (0 for those not in `byTenant`).
   * Also drops the tenants with nothing in the window.
   */
  sampleWaiting(byTenant: ReadonlyMap<string, readonly [number, number]>, nowMs: number): void {
    for (const [tenant, w] of byTenant) {
      if (w[0] + w[1] === 0) continue;
      const s = this.#series(tenant, nowMs);
      this.#step(s, nowMs).waiting = [w[0], w[1]];
      s.waitingNow = [w[0], w[1]];
    }
    for (const [tenant, s] of this.#tenants) {
      const w = byTenant.get(tenant);
      if (w !== undefined && w[0] + w[1] > 0) continue;
      if (nowMs - s.activeMs > WINDOW_MS) {
        this.#tenants.delete(tenant);
        continue;
      }
      this.#step(s, nowMs).waiting = [0, 0];
      s.waitingNow = [0, 0];
    }
  }

  /** The tenant's steps within the window ending at `nowMs`, oldest first, and its waiting now. */
  read(tenant: string, nowMs: number): { points: NodeStatsPoint[]; waitingNow: [number, number] } {
    const s = this.#tenants.get(tenant);
    if (s === undefined) return { points: [], waitingNow: [0, 0] };
    const from = stepOf(nowMs) - WINDOW_MS;
    const points: NodeStatsPoint[] = [];
    for (const step of s.steps) {
      if (step === undefined || step.t <= from || step.t > nowMs) continue;
      points.push({
        t: step.t,
        started: step.started,
        lag: step.lag ? [...step.lag] : [],
        waiting: step.waiting ? [step.waiting[0], step.waiting[1]] : null,
      });
    }
    points.sort((a, b) => a.t - b.t);
    return { points, waitingNow: [s.waitingNow[0], s.waitingNow[1]] };
  }

  /** Tenants tracked (for tests and bounds). */
  get size(): number {
    return this.#tenants.size;
  }

  #series(tenant: string, nowMs: number): Series {
    let s = this.#tenants.get(tenant);
    if (s === undefined) {
      if (this.#tenants.size >= this.maxTenants) this.#tenants.delete(this.#tenants.oldest()!);
      s = { steps: new Array<Step | undefined>(STATS_POINTS), activeMs: nowMs, waitingNow: [0, 0] };
    } else this.#tenants.delete(tenant); // re-inserted: Map order is least recently active first
    s.activeMs = Math.max(s.activeMs, nowMs);
    this.#tenants.set(tenant, s);
    return s;
  }

  #step(s: Series, nowMs: number): Step {
    const t = stepOf(nowMs);
    const i = Math.floor(t / STATS_STEP_MS) % STATS_POINTS;
    let step = s.steps[i];
    if (step === undefined || step.t !== t) {
      step = { t, started: 0, lag: undefined, waiting: undefined };
      s.steps[i] = step;
    }
    return step;
  }
}
