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

/** `kv` behind a proxy that counts each of its operations by method name (`ops`). */
export function countedKv(kv: KvStore): { kv: KvStore; ops: Map<string, number> } {
  const ops = new Map<string, number>();
  const proxy = new Proxy(kv, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== "function") return v;
      return (...args: unknown[]) => {
        ops.set(String(prop), (ops.get(String(prop)) ?? 0) + 1);
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { kv: proxy, ops };
}
