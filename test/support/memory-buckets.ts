/** The cluster's buckets on the in-memory KV (unit tests of services that read and write them). */
import type { Buckets } from "../../src/cluster/buckets.ts";
import type { KvStore } from "../../src/cluster/kv.ts";
import { MemoryKv } from "../../src/cluster/kv-memory.ts";

/** Every bucket a fresh MemoryKv, or the one given in `over` (e.g. a counting wrapper). */
export function memoryBuckets(over: Partial<Record<keyof Buckets, KvStore>> = {}): Buckets {
  const mk = (n: keyof Buckets) => over[n] ?? new MemoryKv(n);
  return {
    cluster: mk("cluster"),
    leases: mk("leases"),
    nodes: mk("nodes"),
    actors: mk("actors"),
    runs: mk("runs"),
    tenants: mk("tenants"),
    idempotency: mk("idempotency"),
  };
}
