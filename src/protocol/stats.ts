/**
 * A tenant's live figures (`GET /v1/stats`) and the one message that carries them between nodes.
 * Each scheduler node keeps a short rolling series per tenant of what its own job actors did
 * (src/history/tenant-series.ts) and answers an API node's request for one tenant's
 * (`NodeTenantStats`); the API node sums the answers of every live scheduler
 * (src/history/tenant-stats.ts) into a `TenantStatsView`. Also the operators' view of the
 * cluster (`GET /v1/admin/cluster`, src/server/operator-view.ts) and the check of the operator
 * keys that read it. Types only.
 */

/** The series' resolution and length: 5 s steps over the last 10 minutes. */
export const STATS_STEP_MS = 5_000;
export const STATS_POINTS = 120;
/** Minutes of forecast a node answers (from its current minute). */
export const STATS_FORECAST_MINUTES = 60;

/** One step of one node's series for one tenant (only steps with something in them are sent). */
export interface NodeStatsPoint {
  /** Start of the step (epoch ms, a multiple of `STATS_STEP_MS`). */
  t: number;
  /** Runs whose first attempt started in the step. */
  started: number;
  /** Their dispatch lags as a sparse histogram: `[bucket index, count]` (LAG_BOUNDS_MS). */
  lag: [number, number][];
  /** Runs waiting when the step was sampled: `[for a tenant slot, for a worker]`; null: not sampled. */
  waiting: [number, number] | null;
}

/** A scheduler node's answer for one tenant. */
export interface NodeTenantStats {
  v: 1;
  node: string;
  now_ms: number;
  points: NodeStatsPoint[];
  /** The node's runs of the tenant waiting now (its last sample). */
  waiting_now: [number, number];
  /** Runs due per minute from `start_ms` (the node's current minute), for the jobs of the partitions it holds; null before its first forecast. */
  forecast: { start_ms: number; per_minute: number[] } | null;
}

/** One step of the tenant's series, summed over the nodes. */
export interface TenantStatsPoint {
  at: string;
  started: number;
  started_per_s: number;
  lag_p50_s: number | null;
  lag_p99_s: number | null;
  /** Runs waiting (slot + worker) at the step's sample; null when no node sampled it. */
  waiting: number | null;
}

/** What `GET /v1/stats` answers. */
export interface TenantStatsView {
  tenant_id: string;
  at: string;
  step_s: number;
  /** The last `STATS_POINTS` complete steps, oldest first (the current, unfinished step is left out). */
  series: TenantStatsPoint[];
  totals: { started: number; lag_p50_s: number | null; lag_p99_s: number | null };
  waiting: { slot: number; worker: number };
  forecast: { from: string; per_minute: number[]; total: number } | null;
  /** Scheduler nodes asked and those that answered in time; `partial` when any did not. */
  nodes: { asked: number; answered: number };
  partial: boolean;
}

/** Where the API gets a tenant's figures. */
export interface TenantStatsSource {
  tenantStats(tenantId: string): Promise<TenantStatsView>;
}

/** A worker as a scheduler's worker directory believes it (src/slots/worker-directory.ts). */
export interface WorkerView {
  worker_id: string;
  executor: string;
  slots: number;
  free: number;
  prefetch: number;
  /** trusted, benched (an offer went unanswered) or on_trial. */
  standing: string;
}

/** A scheduler node's answer to the operators' view (`{kind: "node"}` on its stats subject). */
export interface NodeOverview {
  v: 1;
  node: string;
  now_ms: number;
  /** The partitions whose lease it holds. */
  partitions: number[];
  actors_active: number;
  mailbox_depth: number;
  /** Runs due and not started on its job actors: `[for a tenant slot, for a worker]`. */
  runs_waiting: [number, number];
  workers: WorkerView[];
}

/** What `GET /v1/admin/cluster` answers (operator keys only). */
export interface ClusterView {
  at: string;
  nodes: { node_id: string; roles: string[]; started_at: string; last_heartbeat: string }[];
  partitions: { count: number; held: { partition: number; node: string }[]; unheld: number[] };
  schedulers: {
    node_id: string;
    answered: boolean;
    partitions: number | null;
    actors_active: number | null;
    mailbox_depth: number | null;
    runs_waiting: { slot: number; worker: number } | null;
  }[];
  /** Workers heard by the schedulers, each once (`seen_by`: how many schedulers heard it). */
  workers: (WorkerView & { seen_by: number })[];
  /** The fleet actor's shares: null when it did not answer in time. */
  fair_shares: {
    capacity: number;
    computed_at: string | null;
    tenants: {
      tenant_id: string;
      weight: number;
      demand: number;
      share: number | null;
      used: number | null;
    }[];
  } | null;
}

/** Where the API gets the operators' view. */
export interface ClusterViewSource {
  clusterView(): Promise<ClusterView>;
}

/** Checks operator keys (src/tenants/operator-keys.ts). */
export interface OperatorKeyCheck {
  /** The key's id and name, or null (unknown, revoked, or not an operator key). */
  authenticate(key: string): Promise<{ keyId: string; name: string } | null>;
}
