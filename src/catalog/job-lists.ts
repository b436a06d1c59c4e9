/**
 * A tenant's job lists: its job catalog (every job, job-catalog.ts) and its paused index — a
 * second catalog of the same layout holding the jobs that are paused or may be, under the tenant
 * token `<tenant>-paused` (`jd.<tenant>-paused`, `jl.<tenant>-paused.<key>`). A `state=paused`
 * page reads the index, so it costs O(page) however few of the tenant's jobs are paused; every
 * other page reads the catalog.
 *
 * The index keeps the catalog's promise — a paused job is always in it — by the same order of
 * writes: a paused create's entry is added before the job is made; a patch that pauses adds the
 * job's catalog entry (the pause pending on it) before the patch; after any patch of the name
 * or `enabled` the entry is settled to the job's values (added again if it was dropped
 * meanwhile), or leaves when the job is enabled. Membership is what counts: a page reads every
 * entry of the index (the name filter aside) and checks its job, so an entry whose values lag
 * still finds its paused job. An entry of a job that is not paused leaves only by a `leave`
 * op, which keeps an entry of a later version or with a pause pending (a patch in flight, or
 * one a crash cut short: that entry stays, hidden, until the job's next patch settles it).
 *
 * Pitfall: a settle drops every pending value. Two patches of one job in flight at once, one
 * pausing and one enabling, can so lose the pause's pending mark; if the pausing one's node then
 * dies between its patch and its settle, the paused job is missing from the index (never from
 * the catalog) until it is patched again.
 *
 * A tenant's index is built on its first use from the catalog's entries that may be paused (a
 * walk of the whole catalog, once); of two nodes building at once one wins, as for the catalog.
 * Every write to the index follows its build, so no pause is missed.
 */
import type { Clock } from "../lib/clock.ts";
import type { KvStore } from "../cluster/kv.ts";
import type { Random } from "../lib/random.ts";
import {
  pausePending,
  verdict,
  type CatalogEntry,
  type CatalogFilter,
  type CatalogOp,
  type CatalogValues,
  type Verdict,
} from "./catalog-core.ts";
import { JobCatalog, type CatalogRead } from "./job-catalog.ts";

const PAUSED_SUFFIX = "-paused";

/** The paused index's tenant token (a tenant id never holds `-`). */
export const pausedIndexOf = (tenantId: string): string => `${tenantId}${PAUSED_SUFFIX}`;

/** Which list a page reads: the catalog, or the paused index. */
export type ListSource = "catalog" | "paused";

/** The list a filter is read from. */
export const sourceOf = (f: CatalogFilter): ListSource =>
  f.state === "paused" ? "paused" : "catalog";

/** A job as a page read it (null: no state). */
export type ReadJob = Parameters<typeof verdict>[1];

/**
 * An entry of the paused index against its job (`f` the page's whole filter). A paused, deleted
 * or missing job is judged as in the catalog (`verdict`). An enabled one is hidden; its entry
 * leaves unless the job as read is older than the entry (a replica behind) or a pause is pending
 * on it. A pending pause is never dropped here: its patch may apply after this page, and only
 * the patch knows when it is done (a crash leaves the entry, hidden, until the job's next patch).
 */
export function pausedVerdict(
  e: CatalogEntry,
  job: ReadJob,
  f: CatalogFilter,
  nowMs: number,
): Verdict {
  if (job === null || job.deleted || !job.values.e) return verdict(e, job, f, nowMs);
  if (job.v < e.v || pausePending(e)) return { kind: "hide" };
  return { kind: "repair", op: { kind: "leave", id: e.i, v: job.v }, show: false };
}

export interface JobListsDeps {
  /** The `tenants` bucket. */
  readonly kv: KvStore;
  readonly clock: Clock;
  readonly random: Random;
  /** The tenant's jobs now, as entries (its catalog's first use: built from them). */
  readonly existing: (tenantId: string) => Promise<CatalogEntry[]>;
}

export class JobLists {
  readonly #clock: Clock;
  readonly #catalog: JobCatalog;
  readonly #paused: JobCatalog;

  constructor(d: JobListsDeps) {
    this.#clock = d.clock;
    this.#catalog = new JobCatalog(d);
    this.#paused = new JobCatalog({
      kv: d.kv,
      clock: d.clock,
      random: d.random,
      existing: (token) => this.#mayBePaused(token.slice(0, -PAUSED_SUFFIX.length)),
    });
  }

  /** The catalog's entries that are paused or may be: the index's first contents. */
  async #mayBePaused(tenantId: string): Promise<CatalogEntry[]> {
    const all = Number.MAX_SAFE_INTEGER;
    const r = await this.#catalog.read(tenantId, "", {
      filter: { state: "paused" },
      want: all,
      maxExamined: all,
    });
    return r.entries;
  }

  /** A new job's entries (before the job is made): the catalog's, and the index's if paused. */
  async listNew(tenantId: string, entry: CatalogEntry): Promise<void> {
    const add: CatalogOp = { kind: "add", entry };
    await Promise.all([
      this.#catalog.apply(tenantId, [add]),
      entry.e ? undefined : this.#paused.apply(pausedIndexOf(tenantId), [add]),
    ]);
  }

  /** A job gone (or never made): its entries go. */
  async unlist(tenantId: string, jobId: string): Promise<void> {
    const remove: CatalogOp = { kind: "remove", id: jobId };
    await Promise.all([
      this.#catalog.apply(tenantId, [remove]),
      this.#paused.apply(pausedIndexOf(tenantId), [remove]),
    ]);
  }

  /**
   * Before a patch of the name or `enabled`: the values it may give the job, pending on its
   * entries; a pause first adds the job's catalog entry (the pause pending on it) to the index.
   */
  async beforePatch(
    tenantId: string,
    jobId: string,
    values: Partial<CatalogValues>,
  ): Promise<void> {
    const pend: CatalogOp = { kind: "pend", id: jobId, values };
    await this.#catalog.apply(tenantId, [pend]);
    const index = pausedIndexOf(tenantId);
    if (values.e !== false) return this.#paused.apply(index, [pend]);
    const entry = await this.#catalog.find(tenantId, jobId);
    // No entry, no job (the patch will answer 404).
    if (entry !== null) await this.#paused.apply(index, [{ kind: "add", entry }, pend]);
  }

  /** After a patch: the job's values at version `v` on its entries. */
  async afterPatch(
    tenantId: string,
    jobId: string,
    values: CatalogValues,
    v: number,
  ): Promise<void> {
    const settle: CatalogOp = { kind: "settle", id: jobId, values, v };
    const entry: CatalogEntry = { i: jobId, n: values.n, e: false, v, t: this.#clock.now() };
    await Promise.all([
      this.#catalog.apply(tenantId, [settle]),
      this.#paused.apply(
        pausedIndexOf(tenantId),
        values.e ? [{ kind: "leave", id: jobId, v }] : [{ kind: "add", entry }, settle],
      ),
    ]);
  }

  /**
   * Entries after `after` that may match the filter, from the list it is read from
   * (job-catalog.ts `read`). The index is read by name only: its membership, not its values,
   * says a job may be paused (the page checks each job).
   */
  read(
    tenantId: string,
    after: string,
    o: { filter: CatalogFilter; want: number; maxExamined: number },
  ): Promise<CatalogRead> {
    if (sourceOf(o.filter) === "catalog") return this.#catalog.read(tenantId, after, o);
    const byName = o.filter.name === undefined ? {} : { name: o.filter.name };
    return this.#paused.read(pausedIndexOf(tenantId), after, { ...o, filter: byName });
  }

  /** What a page learnt of an entry of `source` from its job. */
  verdict(
    source: ListSource,
    e: CatalogEntry,
    job: ReadJob,
    f: CatalogFilter,
    nowMs: number,
  ): Verdict {
    return source === "paused" ? pausedVerdict(e, job, f, nowMs) : verdict(e, job, f, nowMs);
  }

  /** Repairs a page found (in the background: a page never waits on them). */
  repair(tenantId: string, source: ListSource, ops: readonly CatalogOp[]): Promise<void> {
    return source === "paused"
      ? this.#paused.apply(pausedIndexOf(tenantId), ops)
      : this.#catalog.apply(tenantId, ops);
  }
}
