/**
 * The `max_jobs` quota: a per-tenant counter `jc.<tenant_id>` → `{ jobs }` in the `tenants`
 * bucket, kept with CAS, so a create costs O(1) KV operations. `reserve` counts a new job before
 * its actor is asked (422 `quota_exceeded` at the cap; a replayed create does not reserve again);
 * `release` uncounts one, never below zero. The first use for a tenant seeds the counter from its
 * existing jobs (concurrent seeds race on `create`). A tenant without a record has no quota.
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

export class TenantJobCounter {
  /** Per tenant, the tail of this process's queue of counter updates (see `serial`). */
  readonly #tails = new Map<string, Promise<unknown>>();

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
    return this.serial(tenantId, () => this.#reserve(tenantId));
  }

  /**
   * Counter updates of one tenant are serialised within this process: concurrent creates would
   * otherwise race on one CAS key and exhaust their retries (64 parallel creates did). Across
   * processes, conflicts are retried with a growing, jittered pause.
   */
  private async serial<T>(tenantId: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#tails.get(tenantId) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.#tails.set(tenantId, tail);
    try {
      return await next;
    } finally {
      if (this.#tails.get(tenantId) === tail) this.#tails.delete(tenantId);
    }
  }

  async #reserve(tenantId: string): Promise<boolean> {
    const t = await this.tenants.get(`t.${tenantId}`);
    if (t === null) return false;
    const max = decode<Tenant>(t.value).max_jobs;
    // The count at the cap (a refusal), or null: counted.
    const over = await casUpdate<JobCount, number | null>(
      this.tenants,
      jobCountKey(tenantId),
      async (c) => {
        // Absent: seeded from the jobs that exist (concurrent seeds race on the create).
        const n = c === null ? await this.countExisting(tenantId) : c.jobs;
        if (n < max) return { write: { jobs: n + 1 }, result: null };
        // At the cap. A counter still absent is seeded all the same: the next create need not count.
        return c === null ? { write: { jobs: n }, result: n } : { done: n };
      },
      this.#cas(tenantId),
    );
    if (over === null) return true;
    throw new KairosError(
      "quota_exceeded",
      `max_jobs: tenant ${tenantId} has ${over} jobs and its max_jobs quota is ${max}; delete a job or raise the quota (kairos admin tenant quota ${tenantId} --max-jobs N)`,
      { retryable: false },
    );
  }

  /** Uncounts one job (never below zero; nothing when the counter does not exist). */
  release(tenantId: string): Promise<void> {
    return this.serial(tenantId, () => this.#release(tenantId));
  }

  async #release(tenantId: string): Promise<void> {
    await casUpdate<JobCount, void>(
      this.tenants,
      jobCountKey(tenantId),
      (c) =>
        c === null || c.jobs <= 0
          ? { done: undefined }
          : { write: { jobs: c.jobs - 1 }, result: undefined },
      this.#cas(tenantId),
    );
  }
}
