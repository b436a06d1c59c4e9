/**
 * `kairos_runs_waiting{reason}` of a scheduler node, kept by the job shell without touching the
 * pure core: runs due and not started, waiting for a tenant slot (`slot`) or, slot granted, for a
 * worker to claim them (`worker`). The shell reports each run record written (`queued` waits;
 * any other status does not) and each post effect (`acquire_slot` → slot; `dispatch` → worker).
 * A run that keeps waiting is touched again by its re-asks and re-offers.
 *
 * Read at scrape time (`count(now)`), and by tenant for the tenants' live charts
 * (`countByTenant`, src/history/tenant-series.ts): runs not yet due (look-ahead) are not counted, nor runs of
 * actors this node no longer owns. Pitfalls: an entry untouched for `STALE_MS` (longer than the
 * re-ask and re-offer periods) is forgotten — its new owner counts it. Bounded at `LIMIT` entries,
 * oldest dropped first.
 */
import type { WaitReason } from "../metrics/index.ts";
import type { RunView } from "../protocol/model.ts";
import { OrderedMap } from "../lib/ordered-map.ts";

interface Waiting {
  reason: WaitReason;
  /** Its tenant (undefined: an effect before any record of it; not counted per tenant). */
  tenant: string | undefined;
  /** When it falls due (undefined: unknown, counted as due). */
  dueMs: number | undefined;
  stillOwner: () => boolean;
  touchedMs: number;
}

export const WAITING_LIMIT = 100_000;
export const STALE_MS = 60_000;

export class RunsWaiting {
  readonly #runs = new OrderedMap<string, Waiting>();

  constructor(private readonly now: () => number) {}

  /** A run record was written by the owner whose `stillOwner` is given. */
  record(r: RunView, stillOwner: () => boolean): void {
    if (r.status !== "queued") {
      this.#runs.delete(r.run_id);
      return;
    }
    const w = this.#runs.get(r.run_id);
    this.#set(r.run_id, {
      reason: w?.reason ?? "slot",
      tenant: r.tenant_id,
      dueMs: Date.parse(r.scheduled_for),
      stillOwner,
      touchedMs: this.now(),
    });
  }

  /** A post effect for a run: it now waits for a slot (`acquire_slot`) or a worker (`dispatch`). */
  effect(runId: string, reason: WaitReason, stillOwner: () => boolean, dueMs?: number): void {
    const w = this.#runs.get(runId);
    this.#set(runId, {
      reason,
      tenant: w?.tenant,
      dueMs: dueMs ?? w?.dueMs,
      stillOwner,
      touchedMs: this.now(),
    });
  }

  /** Runs due and waiting, by reason (scrape time). */
  count(nowMs: number): Record<WaitReason, number> {
    const n: Record<WaitReason, number> = { slot: 0, worker: 0 };
    for (const [id, w] of this.#runs) {
      if (!w.stillOwner()) {
        if (nowMs - w.touchedMs > STALE_MS) this.#runs.delete(id);
        continue;
      }
      if (w.dueMs === undefined || w.dueMs <= nowMs) n[w.reason]++;
    }
    return n;
  }

  /**
   * Runs due and waiting by tenant, `[slot, worker]` (the tenants' live charts sample it every
   * few seconds: one pass over at most `WAITING_LIMIT` entries).
   */
  countByTenant(nowMs: number): Map<string, [number, number]> {
    const out = new Map<string, [number, number]>();
    for (const w of this.#runs.values()) {
      if (w.tenant === undefined || !w.stillOwner()) continue;
      if (w.dueMs !== undefined && w.dueMs > nowMs) continue;
      let n = out.get(w.tenant);
      if (n === undefined) out.set(w.tenant, (n = [0, 0]));
      n[w.reason === "slot" ? 0 : 1]++;
    }
    return out;
  }

  get size(): number {
    return this.#runs.size;
  }

  #set(runId: string, w: Waiting): void {
    this.#runs.delete(runId);
    if (this.#runs.size >= WAITING_LIMIT) this.#runs.delete(this.#runs.oldest()!);
    this.#runs.set(runId, w);
  }
}
