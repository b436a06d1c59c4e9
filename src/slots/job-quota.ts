/**
 * The `max_jobs` quota: a per-tenant counter `jc.<tenant_id>` → `{ jobs }` in the `tenants`
 * bucket, kept with CAS, so a create costs O(1) KV operations. `reserve` counts a new job before
 * its actor is asked (422 `quota_exceeded` at the cap; a replayed create does not reserve again);
 * `release` uncounts one, never below zero. The first use for a tenant seeds the counter from its
 * existing jobs (concurrent seeds race on `create`). A tenant without a record has no quota.
 *
 * Updates of one tenant's counter are grouped within a process: the reserves and releases that
 * arrive while one CAS is in flight are applied together by the next (one read of the tenant,
 * one read and one write of the counter for up to MAX_GROUP of them), so concurrent creates
 * neither race on the key nor queue one round trip each behind it.
 *
 * Pitfall: approximate — a create whose actor timed out keeps its reservation and a delete whose
 * reply was lost is not uncounted; both over-count, which makes the cap stricter, never exceeded.
 */
import { decode, encode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import { backoffMs } from "../lib/backoff.ts";
import { casUpdate, type CasOptions } from "../lib/cas-update.ts";
import type { Clock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import type { Random } from "../lib/random.ts";
import type { Tenant } from "../protocol/service.ts";

interface JobCount {
  jobs: number;
}

const MAX_CAS_RETRIES = 20;
/** Most counter updates of one tenant applied by one CAS. */
export const MAX_GROUP = 1024;

/** The pause after the i-th CAS conflict with another process: 1 ms doubling to 64, times 1–2. */
const conflictBackoff = (i: number, random: Random) =>
  backoffMs(i, { baseMs: 1, maxMs: 64, jitter: { random, min: 1 } });

/** The counter's key in the `tenants` bucket. */
export function jobCountKey(tenantId: string): string {
  return `jc.${tenantId}`;
}

/** Reads a tenant's job count, or null when it was never counted. */
export async function readJobCount(tenants: KvStore, tenantId: string): Promise<number | null> {
  const e = await tenants.get(jobCountKey(tenantId));
  return e === null ? null : decode<JobCount>(e.value).jobs;
}

/** One reserve or release waiting for its group's CAS. */
interface Pending {
  readonly kind: "reserve" | "release";
  readonly resolve: (counted: boolean) => void;
  readonly reject: (e: unknown) => void;
}

/** What one group's CAS decided: the count before it and how many reserves it counted. */
interface GroupResult {
  readonly before: number;
  readonly granted: number;
}

export class TenantJobCounter {
  /** Per tenant, the updates waiting for the next CAS (present while a group is being applied). */
  readonly #queues = new Map<string, Pending[]>();

  constructor(
    private readonly tenants: KvStore,
    /** How many live jobs the tenant has now (used once, to seed a missing counter). */
    private readonly countExisting: (tenantId: string) => Promise<number>,
    /** Paces retries after a conflict with another process (a jittered pause). */
    private readonly pace: { readonly clock: Clock; readonly random: Random },
  ) {}

  /** How a counter update reads, writes and retries (`casUpdate`). */
  #cas(tenantId: string): CasOptions<JobCount> {
    const { clock, random } = this.pace;
    return {
      attempts: MAX_CAS_RETRIES,
      encode: (v) => encode(v),
      decode: (b) => decode<JobCount>(b),
      conflictMessage: `the job count of tenant ${tenantId} kept changing; retry`,
      pause: (i) => new Promise<void>((r) => clock.setTimer(conflictBackoff(i, random), r)),
    };
  }

  /**
   * Counts one more job for the tenant, or throws `quota_exceeded`. Returns false (nothing
   * counted) when the tenant has no record.
   */
  reserve(tenantId: string): Promise<boolean> {
    return this.#enqueue(tenantId, "reserve");
  }

  /** Uncounts one job (never below zero; nothing when the counter does not exist). */
  async release(tenantId: string): Promise<void> {
    await this.#enqueue(tenantId, "release");
  }

  #enqueue(tenantId: string, kind: Pending["kind"]): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      const queue = this.#queues.get(tenantId);
      if (queue !== undefined) return void queue.push({ kind, resolve, reject });
      const fresh: Pending[] = [{ kind, resolve, reject }];
      this.#queues.set(tenantId, fresh);
      void this.#drain(tenantId, fresh);
    });
  }

  /** Applies the tenant's queued updates group by group until none is left. */
  async #drain(tenantId: string, queue: Pending[]): Promise<void> {
    while (queue.length > 0) {
      const group = queue.splice(0, MAX_GROUP);
      try {
        await this.#apply(tenantId, group);
      } catch (e) {
        for (const p of group) p.reject(e);
      }
    }
    this.#queues.delete(tenantId); // no await since the last check: nothing was queued meanwhile
  }

  /** One CAS for a group: its releases, then as many of its reserves as fit, in their order. */
  async #apply(tenantId: string, group: readonly Pending[]): Promise<void> {
    const reserves = group.filter((p) => p.kind === "reserve");
    const releases = group.length - reserves.length;
    const record = reserves.length > 0 ? await this.tenants.get(`t.${tenantId}`) : null;
    // No record, no quota: its reserves count nothing.
    const max = record === null ? undefined : decode<Tenant>(record.value).max_jobs;
    const wanted = max === undefined ? 0 : reserves.length;
    const r = await casUpdate<JobCount, GroupResult | null>(
      this.tenants,
      jobCountKey(tenantId),
      async (c) => {
        // Absent: nothing to release; seeded from the jobs that exist when a reserve needs it
        // (concurrent seeds race on the create). A count still absent at the cap is seeded all
        // the same: the next create need not count.
        if (c === null && wanted === 0) return { done: null };
        const before =
          c === null ? await this.countExisting(tenantId) : Math.max(0, c.jobs - releases);
        const granted = wanted === 0 ? 0 : Math.min(wanted, Math.max(0, max! - before));
        const after = before + granted;
        return c !== null && after === c.jobs
          ? { done: { before, granted } }
          : { write: { jobs: after }, result: { before, granted } };
      },
      this.#cas(tenantId),
    );
    for (const p of group) if (p.kind === "release") p.resolve(false);
    if (max === undefined) return reserves.forEach((p) => p.resolve(false));
    const granted = r?.granted ?? 0;
    const count = (r?.before ?? 0) + granted;
    reserves.forEach((p, i) => {
      if (i < granted) return p.resolve(true);
      p.reject(
        new KairosError(
          "quota_exceeded",
          `max_jobs: tenant ${tenantId} has ${count} jobs and its max_jobs quota is ${max}; delete a job or raise the quota (kairos admin tenant quota ${tenantId} --max-jobs N)`,
          { retryable: false },
        ),
      );
    });
  }
}
