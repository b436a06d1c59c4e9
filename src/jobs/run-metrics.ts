/**
 * Run-path metrics derived from the run records the job shell writes (src/jobs/job-shell.ts
 * `putRun`), so the pure job core stays free of them (it may be re-run; a decision counts only
 * once its record is written).
 *
 * Each write is compared with the record it replaces, and every transition is counted once:
 *
 * | transition in the record | metric |
 * | --- | --- |
 * | `started_at` goes from null to set (the run's first start) | `kairos_dispatch_lag_seconds{tenant}` observes started_at − scheduled_for |
 * | an attempt gets its `outcome` | `kairos_attempts_total{tenant,outcome}`; `lease_lost` also `kairos_lease_expiries_total{kind}` (`counted`; `not_started`: its worker said so — given back, dropped by a probe; `presumed_not_started`: never heard to start and not known to its worker — where an at-least-once re-run can hide) |
 * | status becomes `retry_wait`, or `queued` from `leased`/`running` (lease expired, re-queued) | `kairos_retries_total{tenant}` |
 * | status becomes `failed` or `timed_out` (dead letter) | `kairos_dead_letters_total{tenant}` |
 *
 * The record it replaces (the baseline) is the last one this node wrote or noted for the key,
 * or else the one it read: the shell reads the stored record whenever it lacks a cached revision —
 * after an owner move, a conflict, or a cache eviction — and reports it with `known`, which keeps
 * a baseline this node already has (it is newer: transitions noted without a write, `note`, are
 * in it; replacing it with the stored record, written at creation, counted a run's start twice
 * when its revision had been evicted and its baseline had not). So a new owner compares with what
 * the old one made durable, and a transition recorded once is not counted again by the next
 * writer. A record this node `create`d has an empty baseline. A write whose baseline is unknown
 * (cached revision but baseline evicted) counts nothing.
 * Each node counts the transitions it wrote; sum across nodes in PromQL.
 *
 * It also feeds `kairos_runs_waiting` (run-waiting.ts) when given a `RunsWaiting`: from the
 * records written and the post effects performed (`effect`).
 */
import { countAttempt, countDeadLetter, countLeaseExpiry, countRetry, observeDispatchLag } from "../metrics/index.ts";
import type { AttemptOutcome, RunStatus, RunView } from "./model.ts";
import { TERMINAL, lapseKind, type LapseKind } from "./model.ts";
import type { JobEffect } from "./job-actor.ts";
import type { RunsWaiting } from "./run-waiting.ts";

/** Where the counts go (the Prometheus recorders; a test passes its own). */
export interface RunMetricsSink {
  dispatchLag(tenant: string, seconds: number): void;
  attempt(tenant: string, outcome: AttemptOutcome): void;
  leaseExpiry(kind: LapseKind): void;
  retry(tenant: string): void;
  deadLetter(tenant: string): void;
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
 * node wrote, oldest evicted first, a terminal one dropped. A cache smaller than a burst was
 * evicted in the order it is read back (FIFO): with 100,000, every run of a 200,000-run burst
 * missed at its terminal write — one read of its record more (1.0 `get` per run, fifteenth
 * session). Runs active on a node beyond this bound (a rate × the 5 min look-ahead above it: ~870
 * runs/s) pay that read again. Not measured: a few hundred bytes an entry for both (a key string,
 * map slots, a baseline object), tens of MB full.
 */
export const BASELINE_LIMIT = 262_144;

const summary = (r: RunView): Baseline => ({
  started: r.started_at !== null,
  ended: r.attempts.filter((a) => a.outcome !== null).length,
  status: r.status,
});

export class RunMetrics {
  readonly #baselines = new Map<string, Baseline>();

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
  written(key: string, record: RunView, created: boolean, stillOwner: () => boolean = () => true): void {
    this.waiting?.record(record, stillOwner);
    const before = created ? EMPTY : this.#baselines.get(key);
    if (before !== undefined) this.#count(before, record);
    if (TERMINAL.has(record.status)) this.#baselines.delete(key);
    else this.#keep(key, summary(record));
  }

  /** A post effect the shell performs: a slot request or a worker offer means the run waits for it. */
  effect(fx: JobEffect, stillOwner: () => boolean): void {
    if (fx.kind === "acquire_slot") this.waiting?.effect(fx.run_id, "slot", stillOwner);
    else if (fx.kind === "dispatch") this.waiting?.effect(fx.run_id, "worker", stillOwner, fx.scheduled_for_ms);
  }

  /** Baselines held (for tests: terminal runs leave none). */
  get size(): number {
    return this.#baselines.size;
  }

  #keep(key: string, b: Baseline): void {
    this.#baselines.delete(key);
    if (this.#baselines.size >= this.limit) this.#baselines.delete(this.#baselines.keys().next().value!);
    this.#baselines.set(key, b);
  }

  #count(before: Baseline, r: RunView): void {
    const tenant = r.tenant_id;
    if (!before.started && r.started_at !== null) {
      this.sink.dispatchLag(tenant, (Date.parse(r.started_at) - Date.parse(r.scheduled_for)) / 1000);
    }
    let seen = 0;
    for (const a of r.attempts) {
      if (a.outcome === null) continue;
      if (seen++ < before.ended) continue;
      this.sink.attempt(tenant, a.outcome);
      if (a.outcome === "lease_lost") this.sink.leaseExpiry(lapseKind(a.error));
    }
    if (r.status !== before.status) {
      const requeued = r.status === "queued" && (before.status === "leased" || before.status === "running");
      if (r.status === "retry_wait" || requeued) this.sink.retry(tenant);
      if (r.status === "failed" || r.status === "timed_out") this.sink.deadLetter(tenant);
    }
  }
}
