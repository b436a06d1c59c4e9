/**
 * Run-path metrics derived from the run records the job shell writes, so the pure core stays free
 * of them (a decision counts only once its record is written). Each write is compared with the
 * record it replaces and every transition counted once: first `started_at` → dispatch lag; an
 * attempt's `outcome` → attempts (and lease expiries by kind); `retry_wait` or re-queue → retries;
 * `failed`/`timed_out` → dead letters; `throttled` → throttled runs. It also feeds
 * `kairos_runs_waiting` (run-waiting.ts).
 *
 * Pitfalls: the baseline is the last record this node wrote or noted for the key, else the one
 * it read (`known` keeps a newer baseline — replacing it would count a start twice). A record this
 * node created has an empty baseline; a write whose baseline was evicted counts nothing. Each node
 * counts what it wrote: sum across nodes in PromQL.
 */
import {
  countAttempt,
  countDeadLetter,
  countLeaseExpiry,
  countRetry,
  countThrottled,
  observeDispatchLag,
} from "../metrics/index.ts";
import type { AttemptOutcome, RunStatus, RunView } from "../protocol/model.ts";
import { TERMINAL, lapseKind, type LapseKind } from "../protocol/model.ts";
import type { RunsWaiting } from "./run-waiting.ts";
import { OrderedMap } from "../lib/ordered-map.ts";

/** The job shell's post effects a run waits for (its `acquire_slot` and `dispatch` effects). */
export type WaitingEffect =
  | { kind: "acquire_slot"; run_id: string }
  | { kind: "dispatch"; run_id: string; scheduled_for_ms: number };

/** Where the counts go (the Prometheus recorders; a test passes its own). */
export interface RunMetricsSink {
  dispatchLag(tenant: string, seconds: number): void;
  attempt(tenant: string, outcome: AttemptOutcome): void;
  leaseExpiry(kind: LapseKind): void;
  retry(tenant: string): void;
  deadLetter(tenant: string): void;
  throttled(tenant: string): void;
}

/**
 * The Prometheus recorders. `tenantLabels` false (the default of a node): the tenant is left out
 * of every sample, so a scrape names no tenant (`--metrics-tenant-labels` turns it on).
 */
export function prometheusSink(tenantLabels: boolean): RunMetricsSink {
  const t = (tenant: string): string | undefined => (tenantLabels ? tenant : undefined);
  return {
    dispatchLag: (tenant, seconds) => observeDispatchLag(t(tenant), seconds),
    attempt: (tenant, outcome) => countAttempt(t(tenant), outcome),
    leaseExpiry: countLeaseExpiry,
    retry: (tenant) => countRetry(t(tenant)),
    deadLetter: (tenant) => countDeadLetter(t(tenant)),
    throttled: (tenant) => countThrottled(t(tenant)),
  };
}

/** What a transition is judged on. */
interface Baseline {
  started: boolean;
  /** Attempts with an outcome. */
  ended: number;
  status: RunStatus | null;
}

const EMPTY: Baseline = { started: false, ended: 0, status: null };

/**
 * Most baselines kept — and revisions in the run-record store's cache: each non-terminal run this
 * node wrote, oldest evicted first, a terminal one dropped. A cache smaller than a burst is
 * evicted in the order it is read back (FIFO): every run of the burst then misses at its terminal
 * write — one more read of its record per run. Runs active on a node beyond this bound (a rate × the 5 min look-ahead above it: ~870
 * runs/s) pay that read again. Memory (an estimate): a few hundred bytes an entry for both (a key string,
 * map slots, a baseline object), tens of MB full.
 */
export const BASELINE_LIMIT = 262_144;

const summary = (r: RunView): Baseline => ({
  started: r.started_at !== null,
  ended: r.attempts.filter((a) => a.outcome !== null).length,
  status: r.status,
});

export class RunMetrics {
  readonly #baselines = new OrderedMap<string, Baseline>();

  constructor(
    private readonly sink: RunMetricsSink = prometheusSink(false),
    private readonly limit = BASELINE_LIMIT,
    private readonly waiting?: RunsWaiting,
  ) {}

  /** The stored record of `key`, as read by the shell: the baseline of its next write. */
  known(key: string, stored: RunView): void {
    if (!this.#baselines.has(key)) this.#keep(key, summary(stored));
  }

  /** This node wrote `record` under `key` (`created`: the write created the key). Counts what changed. */
  written(
    key: string,
    record: RunView,
    created: boolean,
    stillOwner: () => boolean = () => true,
  ): void {
    this.waiting?.record(record, stillOwner);
    const before = created ? EMPTY : this.#baselines.get(key);
    if (before !== undefined) this.#count(before, record);
    if (TERMINAL.has(record.status)) this.#baselines.delete(key);
    else this.#keep(key, summary(record));
  }

  /** A post effect the shell performs: a slot request or a worker offer means the run waits for it. */
  effect(fx: WaitingEffect, stillOwner: () => boolean): void {
    if (fx.kind === "acquire_slot") this.waiting?.effect(fx.run_id, "slot", stillOwner);
    else if (fx.kind === "dispatch")
      this.waiting?.effect(fx.run_id, "worker", stillOwner, fx.scheduled_for_ms);
  }

  /** Baselines held (for tests: terminal runs leave none). */
  get size(): number {
    return this.#baselines.size;
  }

  #keep(key: string, b: Baseline): void {
    this.#baselines.delete(key);
    if (this.#baselines.size >= this.limit) this.#baselines.delete(this.#baselines.oldest()!);
    this.#baselines.set(key, b);
  }

  #count(before: Baseline, r: RunView): void {
    const tenant = r.tenant_id;
    if (!before.started && r.started_at !== null) {
      this.sink.dispatchLag(
        tenant,
        (Date.parse(r.started_at) - Date.parse(r.scheduled_for)) / 1000,
      );
    }
    let seen = 0;
    for (const a of r.attempts) {
      if (a.outcome === null) continue;
      if (seen++ < before.ended) continue;
      this.sink.attempt(tenant, a.outcome);
      if (a.outcome === "lease_lost") this.sink.leaseExpiry(lapseKind(a.error));
    }
    if (r.status !== before.status) {
      const requeued =
        r.status === "queued" && (before.status === "leased" || before.status === "running");
      if (r.status === "retry_wait" || requeued) this.sink.retry(tenant);
      if (r.status === "failed" || r.status === "timed_out") this.sink.deadLetter(tenant);
      if (r.status === "throttled") this.sink.throttled(tenant);
    }
  }
}
