/**
 * The set-up NatsJobsService's unit tests share (test/unit/service/nats-service.*.test.ts): the
 * cluster's buckets on the in-memory KV holding one tenant's record, the service over the test's
 * fake router (standing in for the job actors), and the tenant's job catalog as it lists in KV.
 */
import type { ActorRouter } from "../../src/cluster/router.ts";
import type { Buckets } from "../../src/cluster/buckets.ts";
import { decode, encode } from "../../src/cluster/codec.ts";
import type { WriteResult } from "../../src/cluster/kv.ts";
import type { CatalogEntry, Chunk } from "../../src/catalog/catalog-core.ts";
import type { Random } from "../../src/lib/random.ts";
import type { Tenant } from "../../src/protocol/service.ts";
import { NatsJobsService } from "../../src/service/nats-service.ts";
import { memoryBuckets } from "./memory-buckets.ts";

export interface JobsServiceFixture {
  buckets: Buckets;
  service: NatsJobsService;
  /** The tenant's record written (await before the first call). */
  ready: Promise<WriteResult>;
  /** Every entry of the tenant's job catalog, chunk by chunk as KV lists them. */
  catalog: () => Promise<CatalogEntry[]>;
}

/**
 * Tenant `tenantId` (named `name`, 10 concurrent runs, `maxJobs` jobs, weight 1, no webhook) and
 * the service over `router` with `partitions` partitions and `random` for its new job ids.
 */
export function jobsServiceFixture(
  router: ActorRouter,
  o: { tenantId: string; name: string; maxJobs: number; partitions: number; random: Random },
): JobsServiceFixture {
  const buckets = memoryBuckets();
  const tenant: Tenant = {
    tenant_id: o.tenantId,
    name: o.name,
    created_at: "2026-03-01T00:00:00Z",
    max_concurrent_runs: 10,
    max_jobs: o.maxJobs,
    weight: 1,
    webhook_url: null,
  };
  return {
    buckets,
    service: new NatsJobsService(router, buckets, o.partitions, o.random),
    ready: buckets.tenants.create(`t.${o.tenantId}`, encode(tenant)),
    catalog: async () =>
      (await buckets.tenants.list(`jl.${o.tenantId}.*`)).flatMap(
        (e) => decode<Chunk>(e.value).entries,
      ),
  };
}
