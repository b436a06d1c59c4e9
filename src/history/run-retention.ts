/**
 * Bounded history, the I/O part: performs the job actor's retention effects (retention.ts).
 * - `prune_runs`: after `pruneEveryRuns` terminal records of a job (a job new to the node starts
 *   at a count spread by its id), list the job's run keys (headers only), pick what retention
 *   drops, and remove it with ONE stream purge below the oldest kept revision; the few later ones
 *   are deleted by CAS. Old index chunks whose runs are all gone are purged too.
 * - `purge_job`: a deleted job's records, index chunks and actor state.
 *
 * Pitfalls: a purge per key costs server work growing with the stream, hence the single purge.
 * Effects run after the state write while this node owns the job; a failure waits for the next
 * pass. A run whose end was deferred may still be listed by the stored job state after its
 * record is pruned: a state read back treats the missing record as ended (`reconcile`).
 */
import type { KvKey, KvStore } from "../cluster/kv.ts";
import { hash32 } from "../cluster/hash.ts";
import { kvKeys, kvPurge } from "../cluster/kv.ts";
import { JOB_ACTOR, splitJobActorId } from "../protocol/ids.ts";
import { runsToPrune, type RetentionConfig, type RetentionEffect } from "./retention.ts";
import { listRunIndex, pruneRunIndex, purgeRunIndex } from "./run-index-store.ts";
import { OrderedMap } from "../lib/ordered-map.ts";

/** Most jobs whose count this node remembers; a forgotten job prunes at its next terminal run. */
const COUNT_LIMIT = 100_000;
/** Deletes of late-written dropped records in flight per pass. */
const DELETE_CONCURRENCY = 8;

export interface RunRetentionDeps {
  runs: KvStore;
  /** The actors bucket, for a deleted job's state (without it only its records are purged). */
  actors?: KvStore;
  nowMs: () => number;
  log: (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;
}

/**
 * The count a job new to this node starts at: spread by its id over [0, pruneEveryRuns), so its
 * first pass comes after 1..pruneEveryRuns terminal runs (its history stays below keepRuns + 2 ×
 * pruneEveryRuns across moves) and only one job in pruneEveryRuns lists its keys at its first
 * run — in a burst of 200,000 once-jobs that was one key listing per run (a third of the KV
 * operations of the run path besides the writes).
 */
export function firstCount(actorId: string, pruneEveryRuns: number): number {
  return hash32(actorId) % pruneEveryRuns;
}

export class RunRetention {
  readonly #since = new OrderedMap<string, number>();
  readonly #busy = new Set<string>();

  constructor(
    readonly config: RetentionConfig,
    private readonly deps: RunRetentionDeps,
  ) {}

  /** Performs one retention effect of the job actor `actorId` (`<tenant>.<job>`) in `partition`. */
  async perform(partition: number, actorId: string, fx: RetentionEffect): Promise<void> {
    if (fx.kind === "purge_job") return this.purgeJob(partition, actorId);
    const since =
      (this.#since.get(actorId) ?? firstCount(actorId, this.config.pruneEveryRuns)) + fx.settled;
    if ((!fx.force && since < this.config.pruneEveryRuns) || this.#busy.has(actorId))
      return this.#count(actorId, since);
    this.#busy.add(actorId);
    try {
      this.#count(actorId, 0);
      const left = await this.prune(partition, actorId, new Set(fx.active));
      if (left > 0) this.#count(actorId, this.config.pruneEveryRuns); // due again at the next terminal run
    } catch (e) {
      this.#count(actorId, since);
      throw e;
    } finally {
      this.#busy.delete(actorId);
    }
  }

  /** One pass over a job's records; resolves to how many retention still drops after it. */
  async prune(partition: number, actorId: string, active: ReadonlySet<string>): Promise<number> {
    const { tenantId, jobId } = splitJobActorId(actorId);
    const filter = `${partition}.${tenantId}.${jobId}.*`;
    // The index's chunks are listed BEFORE the run keys (pruneRunIndex: a later chunk may name
    // records this listing misses).
    const chunks = await listRunIndex(this.deps.runs, partition, tenantId, jobId);
    const keys = await kvKeys(this.deps.runs, filter);
    const dropped = new Set(
      runsToPrune(
        keys.map((k) => k.key),
        active,
        this.config,
        this.deps.nowMs(),
      ),
    );
    // Everything of the job below the oldest revision kept goes in one purge (no markers left).
    let floor = Number.MAX_SAFE_INTEGER;
    let newest = 0;
    for (const k of keys) {
      newest = Math.max(newest, k.revision);
      if (!dropped.has(k.key)) floor = Math.min(floor, k.revision);
    }
    if (floor === Number.MAX_SAFE_INTEGER) floor = newest + 1; // nothing kept: all of it
    // (It also removes the delete markers of earlier passes' late records once all kept are newer.)
    if (keys.some((k) => dropped.has(k.key) && k.revision < floor))
      await kvPurge(this.deps.runs, filter, floor);
    const late: KvKey[] = keys.filter((k) => dropped.has(k.key) && k.revision >= floor);
    const batch = late.slice(0, this.config.maxDeletesPerPass);
    let next = 0;
    const lane = async () => {
      while (next < batch.length) {
        const k = batch[next++]!;
        await this.deps.runs.delete(k.key, k.revision); // a conflict: rewritten meanwhile, kept
      }
    };
    await Promise.all(Array.from({ length: Math.min(DELETE_CONCURRENCY, batch.length) }, lane));
    // The oldest chunks of the runs index whose runs are all gone now go too.
    const gone = new Set(
      [...keys.filter((k) => dropped.has(k.key) && k.revision < floor), ...batch].map((k) =>
        k.key.slice(k.key.lastIndexOf(".") + 1),
      ),
    );
    const remaining = new Set(
      keys.map((k) => k.key.slice(k.key.lastIndexOf(".") + 1)).filter((id) => !gone.has(id)),
    );
    await pruneRunIndex(this.deps.runs, partition, tenantId, jobId, chunks, (id) =>
      remaining.has(id),
    );
    return late.length - batch.length;
  }

  /** A deleted job: its run records, then its actor state (`job.<partition>.<tenant>.<job>`). */
  async purgeJob(partition: number, actorId: string): Promise<void> {
    const { tenantId, jobId } = splitJobActorId(actorId);
    await kvPurge(this.deps.runs, `${partition}.${tenantId}.${jobId}.*`);
    await purgeRunIndex(this.deps.runs, partition, tenantId, jobId);
    if (this.deps.actors) await kvPurge(this.deps.actors, `${JOB_ACTOR}.${partition}.${actorId}`);
    this.#since.delete(actorId);
    this.deps.log("info", "deleted job purged", { job: actorId, partition });
  }

  #count(actorId: string, n: number): void {
    this.#since.delete(actorId);
    if (this.#since.size >= COUNT_LIMIT) this.#since.delete(this.#since.oldest()!);
    this.#since.set(actorId, n);
  }
}
