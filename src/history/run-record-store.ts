/**
 * The run-record store: performs the job actor's `put_run` effects on the `runs` bucket. Every
 * record is stamped with the partition epoch (`_e`) of the writer.
 * - `create`: a new occurrence (an existing key means a crash re-fired it: fine).
 * - `update`: CAS on the record's revision (cached per node, bounded); on a conflict it re-reads
 *   and refuses (`not_owner`) if a later epoch wrote the record — never a blind overwrite.
 * - `terminal` / `settle`: settle an orphaned non-terminal record (see `JobEffect`).
 * Run-path metrics are derived from the records written (run-metrics.ts); every record created is
 * appended to its tenant's runs log (tenant-run-log.ts: buffered in memory, never awaited here).
 *
 * Gotchas: a write that keeps conflicting (3 tries) throws `conflict`, which drops the actor so it
 * reloads; the revision cache is only a hint (a miss costs one read). It holds non-terminal runs
 * only, up to REVISION_CACHE_LIMIT (a burst larger than that pays a read per run past it).
 */
import type { ShellContext } from "../actors/host.ts";
import type { KvStore } from "../cluster/kv.ts";
import { KairosError } from "../lib/errors.ts";
import { runKey } from "../protocol/ids.ts";
import { TERMINAL, type RunView } from "../protocol/model.ts";
import { decodeRunRecord, encodeRunRecord } from "./run-record.ts";
import { BASELINE_LIMIT, type RunMetrics } from "./run-metrics.ts";
import type { TenantRunLog } from "./tenant-run-log.ts";
import { OrderedMap } from "../lib/ordered-map.ts";

/** Revisions cached: as many as run metrics' baselines (the same runs, see BASELINE_LIMIT). */
export const REVISION_CACHE_LIMIT = BASELINE_LIMIT;

/** How a `put_run` effect writes its record (see the module header and `JobEffect`). */
export type PutRunMode = "create" | "update" | "terminal" | "settle";

export class RunRecordStore {
  readonly #revisions = new OrderedMap<string, number>();
  constructor(
    private readonly runs: KvStore,
    private readonly metrics: RunMetrics,
    /** Told of every record this store creates (the tenant's runs log, tenant-run-log.ts). */
    private readonly tenantLog?: Pick<TenantRunLog, "created">,
  ) {}

  /** Keeps a record's revision for its next update; a terminal record has none (its entry goes). */
  #remember(key: string, rev: number, record: RunView): void {
    this.#revisions.delete(key);
    if (TERMINAL.has(record.status)) return;
    if (this.#revisions.size >= REVISION_CACHE_LIMIT)
      this.#revisions.delete(this.#revisions.oldest()!);
    this.#revisions.set(key, rev);
  }

  /** Revisions cached (for tests: terminal runs leave none). */
  get cached(): number {
    return this.#revisions.size;
  }

  /** A transition of an active run that is not written (`note_run`): counted as if it were. */
  note(ctx: ShellContext, record: RunView): void {
    this.metrics.written(
      runKey(ctx.partition, record.tenant_id, record.job_id, record.run_id),
      record,
      false,
      () => ctx.stillOwner(),
    );
  }

  /**
   * Writes a run record (see the module header); throws `not_owner` when a later epoch wrote it.
   * Resolves to `"ended"` when a `create` met a record that is already terminal (the occurrence
   * was fired before, and ended, in a decision whose state change was lost: see `already_ended`),
   * and to `"settled"` when a `settle` found an orphan — written now, or ended already by the
   * fire whose state change was lost (see `run_settled`).
   */
  async put(
    ctx: ShellContext,
    record: RunView,
    mode: PutRunMode,
  ): Promise<"ended" | "settled" | void> {
    const key = runKey(ctx.partition, record.tenant_id, record.job_id, record.run_id);
    const value = encodeRunRecord(record, ctx.epoch);
    if (mode === "create" || mode === "terminal") {
      const r = await this.runs.create(key, value);
      if (r.ok) {
        this.metrics.written(key, record, true, () => ctx.stillOwner());
        this.tenantLog?.created(record);
        return this.#remember(key, r.revision, record);
      }
      if (mode === "create") {
        // Re-fired after a lost state change: the record is there. One read says whether it ended.
        const e = await this.runs.get(key);
        return e && TERMINAL.has(decodeRunRecord(e.value).record.status) ? "ended" : undefined;
      }
    }
    for (let i = 0; i < 3; i++) {
      let rev = mode === "update" ? this.#revisions.get(key) : undefined;
      if (rev === undefined) {
        const e = await this.runs.get(key);
        if (!e) {
          if (mode === "update") rev = 0;
          else return; // settle: nothing was left behind
        } else {
          const stored = decodeRunRecord(e.value);
          this.metrics.known(key, stored.record);
          if (stored.epoch > ctx.epoch)
            throw new KairosError(
              "not_owner",
              `run record ${record.run_id} was written under a later epoch (${stored.epoch} > ${ctx.epoch})`,
            );
          // Already ended: nothing to write. For a settle it is still an orphan of this
          // occurrence (its fire's state change was lost, so the job's runs index lacks it).
          if (mode !== "update" && TERMINAL.has(stored.record.status))
            return mode === "settle" ? "settled" : undefined;
          rev = e.revision;
        }
      }
      const r =
        rev === 0 ? await this.runs.create(key, value) : await this.runs.update(key, value, rev);
      if (r.ok) {
        this.metrics.written(key, record, rev === 0, () => ctx.stillOwner());
        if (rev === 0) this.tenantLog?.created(record);
        this.#remember(key, r.revision, record);
        return mode === "settle" ? "settled" : undefined;
      }
      this.#revisions.delete(key);
    }
    throw new KairosError(
      "conflict",
      `run record ${record.run_id} keeps changing under this owner`,
    );
  }
}
