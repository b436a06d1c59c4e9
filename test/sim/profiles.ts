/**
 * The simulation's two settings (each seed runs one, chosen by the seed unless `--profile` says):
 *
 * - `short`: the compressed cluster of the first simulations — run lease 4 s, look-ahead 2 s,
 *   jobs due every few seconds, 110 s. Many occurrences, leases and handoffs per second of
 *   simulated time.
 * - `production`: the defaults a cluster runs with — the job actor's `DEFAULT_JOB_CONFIG` (run
 *   lease 10 s, a 5 min look-ahead, so a job's window is 1–5 min: `windowOf`), the node's
 *   `DEFAULTS` (partition leases renewed from the lease keeper's thread, `leaseMainStallMs` 15 s),
 *   the worker's heartbeat of a quarter lease, the retry policy's default `max_attempts` 1 beside
 *   3 — and jobs that hold prepared runs for minutes: an hourly job first due 3 min after the
 *   start (prepared at its creation), one-shots 1–4 min ahead, a job every minute (prepared a
 *   minute ahead), one every 20 s, beside the capped tenant's jobs every few seconds. 300 s.
 */
import { DEFAULTS as NODE_DEFAULTS, type NodeConfig } from "../../src/cluster/config.ts";
import { DEFAULT_JOB_CONFIG, type JobActorConfig } from "../../src/job-state/job-types.ts";
import type { JobSpec, Overlap } from "../../src/protocol/model.ts";
import type { Random } from "../../src/lib/random.ts";
import { between, pick } from "./draw.ts";

export const PROFILES = ["short", "production"] as const;
export type ProfileName = (typeof PROFILES)[number];

type NodeTimes = Pick<
  NodeConfig,
  | "heartbeatIntervalMs"
  | "failureTimeoutMs"
  | "leaseTtlMs"
  | "leaseRenewIntervalMs"
  | "leaseSafetyMarginMs"
  | "partitionTickMs"
  | "actorIdleMs"
  | "requestDeadlineMs"
  | "leaseMainStallMs"
  | "leaseRenewer"
>;

export interface SimProfile {
  readonly name: ProfileName;
  /** Simulated wall time at the start. */
  readonly startMs: number;
  readonly job: JobActorConfig;
  readonly node: NodeTimes;
  readonly workerHeartbeatMs: number;
  readonly workerSlots: number;
  readonly durationMs: number;
  /** Faults and commands stop this long before the end. */
  readonly quietTailMs: number;
  readonly faults: readonly [number, number];
  readonly commands: readonly [number, number];
  /** How long a drained worker waits for its running attempts (its `--drain-timeout-ms`). */
  readonly drainTimeoutMs: readonly [number, number];
  /** The seed's tenants (with their max_concurrent) and jobs. */
  plan(r: Random): { caps: Map<string, number>; jobs: { tenant: string; spec: JobSpec }[] };
}

function spec(schedule: JobSpec["schedule"], overlap: Overlap, maxAttempts = 3): JobSpec {
  return {
    name: null,
    schedule,
    overlap,
    enabled: true,
    flex_window_s: 0,
    task: { image: "sim", args: [], env: {}, timeout_s: 20 },
    retry: { max_attempts: maxAttempts, backoff: "exponential", base_s: 1, max_s: 4 },
    misfire: { policy: "run_all", starting_deadline_s: null },
  };
}

const utc = (cron: string) => ({ cron, time_zone: "UTC" });

/** Tenant "ta" (cap 2) with a job of each of allow, skip and queue every few seconds; "tb", maybe "tc". */
function cappedTenant(
  r: Random,
  jobs: { tenant: string; spec: JobSpec }[],
  caps: Map<string, number>,
  attempts: () => number,
): void {
  caps.set("ta", 2);
  // Overlap=queue needs a period above the mean task time, or its backlog grows without bound.
  const cron = (o: Overlap) => utc(`*/${pick(r, o === "queue" ? [5, 6] : [3, 4, 5, 6])} * * * * *`);
  for (const overlap of ["allow", "skip", "queue"] as const)
    jobs.push({ tenant: "ta", spec: spec(cron(overlap), overlap, attempts()) });
}

const SHORT_JOB: JobActorConfig = {
  ...DEFAULT_JOB_CONFIG,
  leaseTtlMs: 4000,
  lookaheadMs: 2000,
  redispatchDelayMs: 500,
};

export const SHORT: SimProfile = {
  name: "short",
  startMs: Date.UTC(2026, 0, 5, 12, 0, 0),
  job: SHORT_JOB,
  node: {
    heartbeatIntervalMs: 500,
    failureTimeoutMs: 2000,
    leaseTtlMs: 3000,
    leaseRenewIntervalMs: 700,
    leaseSafetyMarginMs: 800,
    partitionTickMs: 250,
    actorIdleMs: 20_000,
    requestDeadlineMs: 10_000,
    leaseMainStallMs: 15_000,
    leaseRenewer: "inline",
  },
  workerHeartbeatMs: Math.max(250, Math.floor(SHORT_JOB.leaseTtlMs / 4)),
  workerSlots: 2,
  durationMs: 110_000,
  quietTailMs: 35_000,
  faults: [4, 8],
  commands: [0, 4],
  drainTimeoutMs: [2000, 8000],
  plan(r) {
    const caps = new Map<string, number>();
    const jobs: { tenant: string; spec: JobSpec }[] = [];
    cappedTenant(r, jobs, caps, () => 3);
    caps.set("tb", 100);
    const tb = pick(r, ["allow", "skip", "queue", "replace"] as const);
    jobs.push({ tenant: "tb", spec: spec(utc(`*/${pick(r, [3, 4, 5, 6])} * * * * *`), tb) });
    jobs.push({
      tenant: "tb",
      spec: spec({ at: new Date(this.startMs + between(r, 20, 60) * 1000).toISOString() }, "skip"),
    });
    if (r.next() < 0.5) {
      caps.set("tc", 100);
      const tc = pick(r, ["allow", "skip", "queue"] as const);
      jobs.push({
        tenant: "tc",
        spec: spec(utc(`*/${pick(r, tc === "queue" ? [5, 6] : [3, 4, 5, 6])} * * * * *`), tc),
      });
    }
    return { caps, jobs };
  },
};

export const PRODUCTION: SimProfile = {
  name: "production",
  // Three minutes before the hour: the hourly job's first occurrence is prepared at its creation.
  startMs: Date.UTC(2026, 0, 5, 11, 57, 0),
  job: DEFAULT_JOB_CONFIG,
  node: {
    heartbeatIntervalMs: NODE_DEFAULTS.heartbeatIntervalMs,
    failureTimeoutMs: NODE_DEFAULTS.failureTimeoutMs,
    leaseTtlMs: NODE_DEFAULTS.leaseTtlMs,
    leaseRenewIntervalMs: NODE_DEFAULTS.leaseRenewIntervalMs,
    leaseSafetyMarginMs: NODE_DEFAULTS.leaseSafetyMarginMs,
    partitionTickMs: NODE_DEFAULTS.partitionTickMs,
    actorIdleMs: NODE_DEFAULTS.actorIdleMs,
    requestDeadlineMs: NODE_DEFAULTS.requestDeadlineMs,
    leaseMainStallMs: NODE_DEFAULTS.leaseMainStallMs,
    leaseRenewer: "thread",
  },
  // src/server/start.ts: a quarter of the run lease, at least 250 ms.
  workerHeartbeatMs: Math.max(250, Math.floor(DEFAULT_JOB_CONFIG.leaseTtlMs / 4)),
  workerSlots: 6,
  durationMs: 300_000,
  quietTailMs: 80_000,
  faults: [6, 12],
  commands: [1, 6],
  drainTimeoutMs: [3000, 20_000],
  plan(r) {
    const caps = new Map<string, number>();
    const jobs: { tenant: string; spec: JobSpec }[] = [];
    const attempts = () => pick(r, [1, 3]);
    cappedTenant(r, jobs, caps, attempts);
    // Long-held prepared runs in tenants without a tight cap: a prepared run holds its tenant's
    // slot until it ends (README, "Known limitations").
    caps.set("tb", 100);
    jobs.push({
      tenant: "tb",
      spec: spec(utc("0 * * * *"), pick(r, ["skip", "allow", "replace"] as const), attempts()),
    });
    jobs.push({
      tenant: "tb",
      spec: spec(
        utc("0 * * * * *"),
        pick(r, ["allow", "skip", "queue", "replace"] as const),
        attempts(),
      ),
    });
    for (let i = between(r, 1, 3); i > 0; i--) {
      jobs.push({
        tenant: "tb",
        spec: spec(
          { at: new Date(this.startMs + between(r, 60, 220) * 1000).toISOString() },
          "skip",
          attempts(),
        ),
      });
    }
    if (r.next() < 0.7) {
      caps.set("tc", 100);
      jobs.push({
        tenant: "tc",
        spec: spec(
          utc("*/20 * * * * *"),
          pick(r, ["allow", "skip", "queue", "replace"] as const),
          attempts(),
        ),
      });
      jobs.push({
        tenant: "tc",
        spec: spec(
          { at: new Date(this.startMs + between(r, 30, 200) * 1000).toISOString() },
          "allow",
          attempts(),
        ),
      });
    }
    return { caps, jobs };
  },
};

export function profileNamed(name: ProfileName): SimProfile {
  switch (name) {
    case "short":
      return SHORT;
    case "production":
      return PRODUCTION;
  }
}
