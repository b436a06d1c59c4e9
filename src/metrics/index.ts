/**
 * Prometheus metrics of a Kairos process (prom-client), served at `/metrics` on the node's own
 * metrics listener (`--metrics-port`, loopback by default; src/http/ops.ts), never on the API
 * port. The names and labels are a contract for dashboards: add, never rename. The list with
 * meanings and where each is recorded is in docs/operations.md (`/metrics`).
 *
 * One registry per process. Node gauges are read at scrape time from registered sources
 * (`addGaugeSource`), summed when several nodes share a process (tests); counters and histograms
 * are recorded by the typed functions below.
 *
 * Pitfall: label values must stay bounded — closed unions, and tenant ids only when the operator
 * asks (`--metrics-tenant-labels`); a recorder given no tenant leaves the label out.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { droppedLogLines } from "../lib/log.ts";

export const registry = new Registry();
collectDefaultMetrics({ register: registry });

/** The metric names (the contract). */
export const METRICS = {
  dispatchLag: "kairos_dispatch_lag_seconds",
  runsWaiting: "kairos_runs_waiting",
  leaseExpiries: "kairos_lease_expiries_total",
  attempts: "kairos_attempts_total",
  retries: "kairos_retries_total",
  deadLetters: "kairos_dead_letters_total",
  runsThrottled: "kairos_runs_throttled_total",
  partitionsHeld: "kairos_partitions_held",
  actorsActive: "kairos_actors_active",
  mailboxDepth: "kairos_mailbox_depth",
  kvOp: "kairos_kv_op_seconds",
  forecast: "kairos_forecast_runs_due",
  logLinesDropped: "kairos_log_lines_dropped_total",
  busRefusals: "kairos_bus_refusals_total",
  slotIdle: "kairos_slot_idle_seconds",
  workerBenches: "kairos_worker_benches_total",
} as const;

export type WaitReason = "slot" | "worker";
export type AttemptOutcomeLabel =
  "succeeded" | "failed" | "timed_out" | "oom" | "lease_lost" | "cancelled" | "error";
export type KvOp =
  "get" | "get_replica" | "create" | "update" | "put" | "delete" | "list" | "keys" | "purge";
/** Which responder refused a request (`countBusRefusal`). */
export type BusResponder =
  "actors" | "worker_plane" | "nats_api" | "worker" | "adverts" | "membership" | "stats";
/** Why: reply-guard.ts's reasons, `identity` (a message naming another worker than its sender), `subject` (delivered under another subject), or `inflated` (an advert above the operator's per-worker limits, believed only up to them). */
export type BusRefusalReason =
  "no_reply" | "not_an_inbox" | "not_the_asker" | "identity" | "subject" | "malformed" | "inflated";
export type GaugeSourceName = "partitions_held" | "actors_active" | "mailbox_depth";

const sources: Record<GaugeSourceName, Set<() => number>> = {
  partitions_held: new Set(),
  actors_active: new Set(),
  mailbox_depth: new Set(),
};
const sum = (name: GaugeSourceName): number => {
  let n = 0;
  for (const f of sources[name]) n += f();
  return n;
};

/** Reads a node's state at scrape time; returns the function that removes the source (on stop). */
export function addGaugeSource(name: GaugeSourceName, read: () => number): () => void {
  sources[name].add(read);
  return () => sources[name].delete(read);
}

const dispatchLag = new Histogram({
  name: METRICS.dispatchLag,
  help: "Dispatch lag: attempt start minus scheduled_for, seconds (once per run, at its first start)",
  labelNames: ["tenant"] as const,
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
  registers: [registry],
});
const slotIdle = new Histogram({
  name: METRICS.slotIdle,
  help: "Slot turnaround on a worker: a slot freed by an attempt's end to the next attempt started on it, seconds (worker nodes)",
  buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
  registers: [registry],
});
const waitingSources = new Set<() => Readonly<Record<WaitReason, number>>>();
const runsWaiting = new Gauge({
  name: METRICS.runsWaiting,
  help: "Runs due but not started, by what they wait for: a tenant slot (slot) or a worker slot (worker)",
  labelNames: ["reason"] as const,
  registers: [registry],
  collect() {
    if (waitingSources.size === 0) return;
    let slot = 0;
    let worker = 0;
    for (const read of waitingSources) {
      const w = read();
      slot += w.slot;
      worker += w.worker;
    }
    this.set({ reason: "slot" }, slot);
    this.set({ reason: "worker" }, worker);
  },
});
runsWaiting.set({ reason: "slot" }, 0);
runsWaiting.set({ reason: "worker" }, 0);

/**
 * Reads runs waiting at scrape time (e.g. summed over the active job actors of a node); returns
 * the remover. With a source registered, `addRunsWaiting` deltas are overwritten at scrape.
 */
export function addRunsWaitingSource(read: () => Readonly<Record<WaitReason, number>>): () => void {
  waitingSources.add(read);
  return () => waitingSources.delete(read);
}
const leaseExpiries = new Counter({
  name: METRICS.leaseExpiries,
  help: "Attempt leases that lapsed without completion, by kind: counted against max_attempts; not_started (its worker said so: given back, dropped by a probe); presumed_not_started (never heard to start, not known to its worker: where an at-least-once re-run can hide)",
  labelNames: ["kind"] as const,
  registers: [registry],
});
const attempts = new Counter({
  name: METRICS.attempts,
  help: "Attempts that ended, by tenant and outcome",
  labelNames: ["tenant", "outcome"] as const,
  registers: [registry],
});
const retries = new Counter({
  name: METRICS.retries,
  help: "Attempts scheduled again after a retryable failure",
  labelNames: ["tenant"] as const,
  registers: [registry],
});
const deadLetters = new Counter({
  name: METRICS.deadLetters,
  help: "Runs dead-lettered after their last attempt",
  labelNames: ["tenant"] as const,
  registers: [registry],
});
const runsThrottled = new Counter({
  name: METRICS.runsThrottled,
  help: "Runs recorded throttled: an occurrence beyond its job's or its tenant's bound on runs waiting for a slot",
  labelNames: ["tenant"] as const,
  registers: [registry],
});
const pullGauge = (name: string, help: string, source: GaugeSourceName): Gauge =>
  new Gauge({
    name,
    help,
    registers: [registry],
    collect() {
      if (sources[source].size > 0) this.set(sum(source));
    },
  });
pullGauge(METRICS.partitionsHeld, "Partitions whose lease this node holds", "partitions_held");
pullGauge(METRICS.actorsActive, "Actors active in memory on this node", "actors_active");
const mailboxDepth = pullGauge(
  METRICS.mailboxDepth,
  "Messages queued in actor mailboxes on this node",
  "mailbox_depth",
);
const kvOp = new Histogram({
  name: METRICS.kvOp,
  help: "JetStream KV operation latency in seconds, failures included",
  labelNames: ["op", "bucket"] as const,
  buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5],
  registers: [registry],
});
const forecast = new Gauge({
  name: METRICS.forecast,
  help: "Runs due in each minute of the next hour (minute 0 = the current minute), from the schedules of the partitions this node owns",
  labelNames: ["minute"] as const,
  registers: [registry],
});

let droppedReported = 0;
new Counter({
  name: METRICS.logLinesDropped,
  help: "Log lines dropped because stdout's reader fell behind (the process's log buffer was full)",
  registers: [registry],
  collect() {
    const n = droppedLogLines();
    if (n > droppedReported) this.inc(n - droppedReported);
    droppedReported = n;
  },
});

const busRefusals = new Counter({
  name: METRICS.busRefusals,
  help: "Requests a responder dropped unanswered: a reply subject that is not the asker's own inbox, a worker-plane message naming another worker than its sender, or a body that is not the message its subject carries",
  labelNames: ["responder", "reason"] as const,
  registers: [registry],
});

/** A responder dropped a request unanswered (src/cluster/reply-guard.ts). */
export function countBusRefusal(responder: BusResponder, reason: BusRefusalReason): void {
  busRefusals.inc({ responder, reason });
}

const workerBenches = new Counter({
  name: METRICS.workerBenches,
  help: "Workers a scheduler stopped offering to for a while because an offer went unanswered (src/slots/worker-trust.ts)",
  registers: [registry],
});

/** A worker left an offer unanswered and is benched (src/slots/worker-directory.ts). */
export function countWorkerBench(): void {
  workerBenches.inc();
}

/** The tenant label of a sample: none when the tenant is not to be named. */
function tenantLabel(tenant: string | undefined): { tenant?: string } {
  return tenant === undefined ? {} : { tenant };
}

/** A run's first attempt started `lagSeconds` after its scheduled_for (negative lags count as 0). */
export function observeDispatchLag(tenant: string | undefined, lagSeconds: number): void {
  dispatchLag.observe(tenantLabel(tenant), Math.max(0, lagSeconds));
}

/** A worker started an attempt in a slot that an attempt's end had freed `seconds` before. */
export function observeSlotIdle(seconds: number): void {
  slotIdle.observe(Math.max(0, seconds));
}

/** `delta` runs started (+1) or stopped (−1) waiting for `reason`. */
export function addRunsWaiting(reason: WaitReason, delta: number): void {
  runsWaiting.inc({ reason }, delta);
}

/** An attempt's lease expired (its worker did not heartbeat or complete in time). */
export function countLeaseExpiry(kind: "counted" | "not_started" | "presumed_not_started"): void {
  leaseExpiries.inc({ kind });
}

/** An attempt ended with `outcome`. */
export function countAttempt(tenant: string | undefined, outcome: AttemptOutcomeLabel): void {
  attempts.inc({ ...tenantLabel(tenant), outcome });
}

/** A failed attempt is retried (a next attempt was scheduled). */
export function countRetry(tenant: string | undefined): void {
  retries.inc(tenantLabel(tenant));
}

/** A run was dead-lettered. */
export function countDeadLetter(tenant: string | undefined): void {
  deadLetters.inc(tenantLabel(tenant));
}

/** A run was recorded `throttled` (a bounded backlog). */
export function countThrottled(tenant: string | undefined): void {
  runsThrottled.inc(tenantLabel(tenant));
}

/**
 * Sets the mailbox depth directly, for a caller that tracks it itself (instead of a source
 * registered with `addGaugeSource("mailbox_depth", …)`; a registered source wins at scrape).
 */
export function setMailboxDepth(n: number): void {
  mailboxDepth.set(n);
}

/**
 * Starts timing one KV operation on `bucket` (a cluster's bucket name: bounded); call the returned
 * function when it settles (ok or not).
 */
export function startKvOp(op: KvOp, bucket: string): () => void {
  const end = kvOp.startTimer({ op, bucket });
  return () => {
    end();
  };
}

/** Replaces the forecast: `perMinute[m]` runs due in minute m (0–59) of the next hour. */
export function setForecastRunsDue(perMinute: readonly number[]): void {
  forecast.reset();
  for (let m = 0; m < 60; m++) forecast.set({ minute: String(m) }, perMinute[m] ?? 0);
}

/** The exposition text and its content type. */
export async function metricsText(): Promise<{ body: string; contentType: string }> {
  return { body: await registry.metrics(), contentType: registry.contentType };
}

/**
 * Held weakly: a node dropped without its `stop()` — an in-process test's or the simulation's
 * crashed node — is not kept alive, with all it references, by this module (the simulation grew
 * by megabytes a seed). Its owner keeps the function.
 */
const skewSources = new Set<WeakRef<() => ReadonlyMap<string, number>>>();
new Gauge({
  name: "kairos_clock_skew_seconds",
  help: "Each peer node's wall clock minus this node's, from its last membership heartbeat (less the heartbeat's one-way latency)",
  labelNames: ["node"] as const,
  registers: [registry],
  collect() {
    this.reset();
    for (const ref of skewSources) {
      const read = ref.deref();
      if (read === undefined) skewSources.delete(ref);
      else for (const [node, ms] of read()) this.set({ node }, ms / 1000);
    }
  },
});

/**
 * Registers a node's view of its peers' clock skews (ms), read at scrape time; returns its
 * removal. The caller keeps `read` referenced for as long as it should be read (held weakly here).
 */
export function addClockSkewSource(read: () => ReadonlyMap<string, number>): () => void {
  const ref = new WeakRef(read);
  skewSources.add(ref);
  return () => skewSources.delete(ref);
}
