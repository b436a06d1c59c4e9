/**
 * The forecast service of a scheduler node: keeps `kairos_forecast_runs_due{minute}` (runs due
 * in each minute of the next hour) over the jobs of the partitions this node holds. It lists
 * those jobs' stored states from the actors bucket (`job.<p>.*.*`, one list per held partition)
 * and computes the pure forecast (src/service/forecast.ts) in the middle of every minute (away from
 * the top-of-the-minute bursts), and a couple of seconds after the held partitions change
 * (acquired, released, lost). It computes 61 minutes and re-publishes the gauge shifted by one at
 * each minute's start (from memory), so minute 0 is always the current minute.
 *
 * Cost: one KV list of each held partition per minute, decoding each job state whose revision
 * changed since the last refresh (the others' forecast inputs — tenant, schedule, next run — are
 * kept by key and revision, for jobs only, at most `maxJobs`: at 100,000 jobs, decoding every state each minute took seconds of the node's
 * CPU, and the API's reads meanwhile waited behind it), bounded
 * by `maxJobs` (default 100,000 per node; past it the forecast is an undercount and a warning is
 * logged once per refresh) and by the forecast's occurrence budget. The gauge is process-wide:
 * with several nodes in one process (tests) the last refresh wins.
 */
import type { Clock } from "../lib/clock.ts";
import type { KvStore } from "../cluster/kv.ts";
import { decode } from "../cluster/codec.ts";
import type { EventBus } from "../cluster/events.ts";
import { JOB_ACTOR } from "../protocol/ids.ts";
import type { JobState } from "../job-state/job-state.ts";
import {
  DEFAULT_MAX_JOBS,
  forecastJobOf,
  forecastRunsDue,
  type Forecast,
  type ForecastJob,
} from "../service/forecast.ts";
import { setForecastRunsDue } from "../metrics/index.ts";

export interface ForecastServiceOptions {
  actors: () => KvStore;
  held: () => readonly number[];
  events: EventBus;
  clock: Clock;
  log: (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;
  maxJobs?: number;
  /** Delay of the refresh after a partition change (coalesces a burst of acquisitions). */
  settleMs?: number;
  /** Where the per-minute counts go (default: the gauge). */
  publish?: (perMinute: readonly number[]) => void;
}

const MINUTE_MS = 60_000;
/** Where in each minute the periodic refresh runs (see `#tick`). */
export const REFRESH_AT_MS = 30_000;
/** The minute's start is passed by this much before the gauge shifts (timers may fire early). */
const SHIFT_SLACK_MS = 10;

/** A job state's forecast input as of a KV revision (undefined: a deleted or empty state). */
export interface KnownJob {
  readonly revision: number;
  readonly job: ForecastJob | undefined;
}

/**
 * Job states decoded between two yields to the event loop while a forecast reads them: a
 * node's first forecast after many creates decodes every job state it holds (100,000 took
 * ~2.9 s), and an API list read waits behind each slice — 500 decodes held the loop ~70 ms.
 */
export const DECODES_PER_YIELD = 100;

/**
 * Reads the stored job states of the given partitions, at most `maxJobs` (then `truncated`).
 * `known`: the inputs of a previous read by key; a state at the same revision is not decoded
 * again. `read` holds this read's inputs by key, for the next.
 */
export async function readForecastJobs(
  actors: KvStore,
  partitions: Iterable<number | "*">,
  maxJobs: number,
  known?: ReadonlyMap<string, KnownJob>,
): Promise<{ jobs: ForecastJob[]; truncated: boolean; read: Map<string, KnownJob> }> {
  const jobs: ForecastJob[] = [];
  const read = new Map<string, KnownJob>();
  let decoded = 0;
  for (const p of partitions) {
    for (const e of await actors.list(`${JOB_ACTOR}.${p}.*.*`)) {
      if (jobs.length >= maxJobs) return { jobs, truncated: true, read };
      let k = known?.get(e.key);
      if (k?.revision !== e.revision) {
        if (++decoded % DECODES_PER_YIELD === 0) await new Promise((r) => setImmediate(r));
        k = { revision: e.revision, job: forecastJobOf(decode<{ s: JobState }>(e.value).s) };
      }
      // Only jobs are kept (a deleted job's state is decoded again: it is small, and purged).
      if (k.job) {
        read.set(e.key, k);
        jobs.push(k.job);
      }
    }
  }
  return { jobs, truncated: false, read };
}

export class ForecastService {
  readonly #o: ForecastServiceOptions;
  #cancelTimer: (() => void) | undefined;
  #cancelSettle: (() => void) | undefined;
  #offEvents: (() => void) | undefined;
  #running: Promise<void> | undefined;
  #again = false;
  #stopped = false;
  /** The last forecast (61 minutes from its start), re-published shifted at each minute's start. */
  #last:
    | {
        startMs: number;
        perMinute: readonly number[];
        byTenant: ReadonlyMap<string, readonly number[]>;
      }
    | undefined;
  #cancelShift: (() => void) | undefined;
  /** The last refresh's inputs by key and revision (at most `maxJobs`: see readForecastJobs). */
  #known: ReadonlyMap<string, KnownJob> = new Map();

  constructor(o: ForecastServiceOptions) {
    this.#o = o;
  }

  start(): void {
    this.#offEvents = this.#o.events.on((e) => {
      if (
        e.type === "partition_acquired" ||
        e.type === "partition_released" ||
        e.type === "partition_lost"
      )
        this.#soon();
    });
    this.#tick();
    this.#shiftAtMinute();
  }

  stop(): void {
    this.#stopped = true;
    this.#offEvents?.();
    this.#cancelTimer?.();
    this.#cancelSettle?.();
    this.#cancelShift?.();
  }

  /** Recomputes now (one refresh at a time; a request meanwhile runs once more after it). */
  refresh(): Promise<void> {
    if (this.#running) {
      this.#again = true;
      return this.#running;
    }
    this.#running = this.#compute()
      .then(
        (f) => {
          this.#last = { startMs: f.startMs, perMinute: f.perMinute, byTenant: f.byTenant };
          this.#publish();
        },
        (e: unknown) =>
          this.#o.log("warn", "forecast refresh failed; the previous forecast stays", {
            err: String(e),
          }),
      )
      .finally(() => {
        this.#running = undefined;
        if (this.#again && !this.#stopped) {
          this.#again = false;
          void this.refresh();
        }
      });
    return this.#running;
  }

  async #compute(): Promise<Forecast> {
    const maxJobs = this.#o.maxJobs ?? DEFAULT_MAX_JOBS;
    const read = await readForecastJobs(
      this.#o.actors(),
      [...this.#o.held()].sort((a, b) => a - b),
      maxJobs,
      this.#known,
    );
    this.#known = read.read;
    // One minute more than the gauge shows: at the next minute's start it is shifted by one.
    const f = forecastRunsDue(read.jobs, this.#o.clock.now(), { minutes: 61, maxJobs });
    if (read.truncated || f.truncated)
      this.#o.log(
        "warn",
        "forecast truncated: more jobs or occurrences than its bounds (an undercount)",
        { jobs_scanned: f.jobsScanned, max_jobs: maxJobs },
      );
    return f;
  }

  /**
   * One tenant's runs due per minute over the next hour, from the last forecast (its jobs in the
   * partitions this node holds): 60 minutes from the current one (zeros past the forecast's end,
   * and for a tenant with nothing due); undefined before the first forecast. No listing.
   */
  tenantForecast(tenantId: string): { startMs: number; perMinute: number[] } | undefined {
    const last = this.#last;
    if (!last) return undefined;
    const now = this.#o.clock.now();
    const offset = Math.max(0, Math.floor((now - last.startMs) / MINUTE_MS));
    const mine = last.byTenant.get(tenantId);
    return {
      startMs: last.startMs + offset * MINUTE_MS,
      perMinute: Array.from({ length: 60 }, (_, i) => mine?.[offset + i] ?? 0),
    };
  }

  /** The gauge from the last forecast: 60 minutes from the current one (zeros past its end). */
  #publish(): void {
    const last = this.#last;
    if (!last) return;
    const offset = Math.max(0, Math.floor((this.#o.clock.now() - last.startMs) / MINUTE_MS));
    const out = Array.from({ length: 60 }, (_, i) => last.perMinute[offset + i] ?? 0);
    (this.#o.publish ?? setForecastRunsDue)(out);
  }

  /** At each minute's start: minute 0 becomes the new current minute (no listing, no parsing). */
  #shiftAtMinute(): void {
    if (this.#stopped) return;
    const now = this.#o.clock.now();
    this.#cancelShift = this.#o.clock.setTimer(
      MINUTE_MS - (now % MINUTE_MS) + SHIFT_SLACK_MS,
      () => {
        this.#publish();
        this.#shiftAtMinute();
      },
    );
  }

  /**
   * In the middle of every minute (at :30), never at its start: runs are due at the start of a
   * minute (cron), and a refresh at :01 listed and decoded every job state of the node on its own
   * connection in the very second of a top-of-the-minute burst (a 200,000-run burst: the listing
   * plus a second of parsing schedules, each minute, on the burst's CPU).
   */
  #tick(): void {
    if (this.#stopped) return;
    void this.refresh();
    const now = this.#o.clock.now();
    let delay = (MINUTE_MS + REFRESH_AT_MS - (now % MINUTE_MS)) % MINUTE_MS;
    // A timer may fire a little early: never a second listing right after this one.
    if (delay < 1000) delay += MINUTE_MS;
    this.#cancelTimer = this.#o.clock.setTimer(delay, () => this.#tick());
  }

  #soon(): void {
    if (this.#stopped || this.#cancelSettle) return;
    this.#cancelSettle = this.#o.clock.setTimer(this.#o.settleMs ?? 2000, () => {
      this.#cancelSettle = undefined;
      void this.refresh();
    });
  }
}
