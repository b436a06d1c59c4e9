/**
 * The KV buckets of a cluster, created on first use with the cluster's replica count.
 * Bucket names carry the cluster name so several clusters can share one NATS account.
 * Never delete and recreate a live bucket: revisions would restart and fences would go backwards.
 */
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { NatsKv } from "./kv-nats.ts";
import type { KvStore } from "./kv.ts";
import { checkServerVersion } from "./server-version.ts";
import { systemClock, type Clock } from "../lib/clock.ts";

export interface Buckets {
  /** Cluster-wide settings (`config`: partition count). */
  readonly cluster: KvStore;
  /** Partition leases `p.<n>`; the acquiring write's revision is the partition epoch. */
  readonly leases: KvStore;
  /** Node records `<node_id>`, refreshed by heartbeat, expiring by bucket TTL. */
  readonly nodes: KvStore;
  /** Actor state `<type>.<partition>.<id…>`. */
  readonly actors: KvStore;
  /** Run records `<partition>.<tenant>.<job>.<run>`. */
  readonly runs: KvStore;
  /** Tenants `t.<tenant>` and API key hashes `k.<sha256>`. */
  readonly tenants: KvStore;
  /** Idempotency keys `<tenant>.<sha256(key)>`, expiring after 24 h. */
  readonly idempotency: KvStore;
}

export interface BucketOptions {
  clusterName: string;
  replicas: number;
  /** Limits the storage of each bucket (bytes); unlimited when omitted. */
  maxBytes?: number;
  /** Server version warnings go here. */
  warn?: (msg: string) => void;
  /** Paces retries while a new NATS cluster settles (default: the system clock). */
  clock?: Clock;
}

const NODE_TTL_MS = 30_000;
const IDEMPOTENCY_TTL_MS = 24 * 3600_000;

export async function openBuckets(nc: NatsConnection, opts: BucketOptions): Promise<Buckets> {
  const warning = checkServerVersion(nc.info?.version ?? "0.0.0", opts.replicas);
  if (warning) opts.warn?.(warning);
  const clock = opts.clock ?? systemClock;
  const jsm = await jetstreamManager(nc);
  const kvm = new Kvm(nc);
  const open = async (suffix: string, ttl = 0, history = 1): Promise<KvStore> => {
    const name = `${opts.clusterName}_${suffix}`;
    const settings = {
      replicas: opts.replicas,
      history,
      ...(ttl > 0 ? { ttl } : {}),
      ...(opts.maxBytes ? { max_bytes: opts.maxBytes } : {}),
    };
    // A NATS cluster that has just elected its JetStream leader may not know every peer yet:
    // replicated streams then fail with "no suitable peers for placement". Retry, bounded.
    for (let attempt = 0; ; attempt++) {
      try {
        return new NatsKv(name, await kvm.create(name, settings), jsm);
      } catch (e) {
        const transient = e instanceof Error && /no suitable peers|insufficient resources/i.test(e.message);
        if (!transient || attempt >= 40) throw e;
        await new Promise<void>((r) => clock.setTimer(250, r));
      }
    }
  };
  const [cluster, leases, nodes, actors, runs, tenants, idempotency] = await Promise.all([
    open("cluster"),
    open("leases"),
    open("nodes", NODE_TTL_MS),
    open("actors", 0, 4),
    open("runs"),
    open("tenants"),
    open("idem", IDEMPOTENCY_TTL_MS),
  ]);
  return { cluster, leases, nodes, actors, runs, tenants, idempotency };
}
