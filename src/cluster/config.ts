/**
 * Node configuration: options → defaults → one validated, frozen object. Units are in the names.
 * The environment is parsed once, at the entry point (src/cli), never here.
 */
import { KairosError } from "../lib/errors.ts";
import type { NatsAuthOptions } from "./nats-auth.ts";

export const ROLES = ["api", "scheduler", "worker"] as const;
export type Role = (typeof ROLES)[number];

export interface NodeConfig {
  readonly natsUrl: string;
  /** Credentials file and TLS of both NATS connections (data and control); `{}`: none. */
  readonly natsAuth: NatsAuthOptions;
  readonly clusterName: string;
  readonly nodeId: string;
  readonly roles: readonly Role[];
  /** Used only when the cluster is first created; afterwards the stored count wins. */
  readonly partitions: number;
  readonly replicas: number;
  readonly heartbeatIntervalMs: number;
  readonly failureTimeoutMs: number;
  readonly leaseTtlMs: number;
  readonly leaseRenewIntervalMs: number;
  readonly leaseSafetyMarginMs: number;
  readonly partitionTickMs: number;
  /**
   * Who renews partition leases: `thread` (a worker thread with a NATS connection of its own, so
   * a busy main event loop keeps its leases; lease-keeper-thread.ts) or `inline` (the main loop).
   * An injected transport (tests, simulation) always renews inline.
   */
  readonly leaseRenewer: "thread" | "inline";
  /** The lease thread stops renewing once the main event loop has shown no life this long. */
  readonly leaseMainStallMs: number;
  readonly actorIdleMs: number;
  readonly mailboxLimit: number;
  readonly requestDeadlineMs: number;
  /**
   * Scheduler: the most slots believed of one worker identity's advert (`--max-worker-slots`); an
   * advert above it is believed only up to it, counted and logged (src/slots/worker-trust.ts).
   */
  readonly maxWorkerSlots: number;
  /** Scheduler: the most prefetch places believed of one worker (`--max-worker-prefetch`). */
  readonly maxWorkerPrefetch: number;
}

/** The highest `maxWorkerSlots` and `maxWorkerPrefetch` may be set to. */
export const WORKER_LIMIT_CEILING = 1_000_000;

export const DEFAULTS = {
  clusterName: "kairos",
  natsAuth: {} as NatsAuthOptions,
  roles: ["api", "scheduler", "worker"] as readonly Role[],
  partitions: 64,
  replicas: 1,
  heartbeatIntervalMs: 500,
  failureTimeoutMs: 3000,
  leaseTtlMs: 4000,
  leaseRenewIntervalMs: 1000,
  leaseSafetyMarginMs: 1000,
  partitionTickMs: 250,
  leaseRenewer: "thread" as "thread" | "inline",
  leaseMainStallMs: 15_000,
  actorIdleMs: 60_000,
  mailboxLimit: 1024,
  requestDeadlineMs: 15_000,
  // Far above a Docker host's useful concurrency, far below what a lying advert claims; the
  // prefetch's as high as a worker's default prefetch goes (src/worker/slot-ledger.ts).
  maxWorkerSlots: 1_024,
  maxWorkerPrefetch: 256,
};

const NAME_RE = /^[A-Za-z0-9_-]{1,64}$/;

export function makeNodeConfig(
  o: Partial<NodeConfig> & { natsUrl: string; nodeId: string },
): NodeConfig {
  const c: NodeConfig = { ...DEFAULTS, ...o };
  const bad = (field: string, why: string) =>
    new KairosError("invalid_argument", `${field}: ${why}`, { field });
  if (!NAME_RE.test(c.nodeId)) throw bad("node_id", `"${c.nodeId}" must be 1-64 of [A-Za-z0-9_-]`);
  if (!NAME_RE.test(c.clusterName))
    throw bad("cluster", `"${c.clusterName}" must be 1-64 of [A-Za-z0-9_-]`);
  if (c.roles.length === 0) throw bad("roles", "at least one role is required");
  for (const r of c.roles)
    if (!ROLES.includes(r))
      throw bad("roles", `unknown role "${String(r)}" (expected ${ROLES.join(", ")})`);
  if (!Number.isInteger(c.partitions) || c.partitions < 1 || c.partitions > 4096)
    throw bad("partitions", "must be an integer 1-4096");
  if (![1, 3, 5].includes(c.replicas)) throw bad("replicas", "must be 1, 3 or 5");
  if (c.leaseRenewIntervalMs * 2 > c.leaseTtlMs - c.leaseSafetyMarginMs) {
    throw bad(
      "lease_renew_interval_ms",
      "must leave room for two renewals inside the trust window (ttl - margin)",
    );
  }
  for (const [field, v] of [
    ["nats_creds", c.natsAuth.credsFile],
    ["nats_tls_ca", c.natsAuth.tls?.caFile],
    ["nats_tls_cert", c.natsAuth.tls?.certFile],
    ["nats_tls_key", c.natsAuth.tls?.keyFile],
  ] as const) {
    if (v !== undefined && v.trim() === "") throw bad(field, "must be a file path (empty given)");
  }
  if ((c.natsAuth.tls?.certFile === undefined) !== (c.natsAuth.tls?.keyFile === undefined)) {
    throw bad(
      "nats_tls_cert",
      "a client certificate and its key go together (--nats-tls-cert and --nats-tls-key)",
    );
  }
  if (c.leaseRenewer !== "thread" && c.leaseRenewer !== "inline")
    throw bad("lease_renewer", `"${String(c.leaseRenewer)}" must be thread or inline`);
  if (
    !Number.isFinite(c.leaseMainStallMs) ||
    c.leaseMainStallMs < c.leaseTtlMs ||
    c.leaseMainStallMs > 600_000
  ) {
    throw bad("lease_main_stall_ms", "must be at least the lease TTL and at most 600000");
  }
  if (
    !Number.isInteger(c.maxWorkerSlots) ||
    c.maxWorkerSlots < 1 ||
    c.maxWorkerSlots > WORKER_LIMIT_CEILING
  )
    throw bad("max_worker_slots", `must be an integer 1-${WORKER_LIMIT_CEILING}`);
  if (
    !Number.isInteger(c.maxWorkerPrefetch) ||
    c.maxWorkerPrefetch < 0 ||
    c.maxWorkerPrefetch > WORKER_LIMIT_CEILING
  )
    throw bad("max_worker_prefetch", `must be an integer 0-${WORKER_LIMIT_CEILING}`);
  if (c.failureTimeoutMs < 2 * c.heartbeatIntervalMs)
    throw bad("failure_timeout_ms", "must be at least two heartbeat intervals");
  const natsAuth = Object.freeze({
    ...c.natsAuth,
    ...(c.natsAuth.tls ? { tls: Object.freeze({ ...c.natsAuth.tls }) } : {}),
  });
  return Object.freeze({ ...c, natsAuth, roles: Object.freeze([...c.roles]) });
}
