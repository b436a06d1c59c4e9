/**
 * `kairos_runs_waiting{reason}` of a scheduler node, kept by the job shell without touching the
 * pure core or the actor host: runs that are due and not started, waiting for a tenant slot
 * (`slot`) or — slot granted — for a worker to claim them (`worker`).
 *
 * The shell reports what it does for each run (job-shell.ts):
 * - a run record written (`record`): `queued` → the run waits (due at its scheduled_for); any other
 *   status (leased, running, retry_wait, terminal) → it no longer waits here;
 * - a post effect (`effect`): `acquire_slot` → waiting for a slot; `dispatch` (an offer to a
 *   worker, after the grant) → waiting for a worker. A run that keeps waiting is touched again by
 *   its re-asks (every 10 s at first, at most every 30 s: run-dispatch.ts) and re-offers (every
 *   second); STALE_MS is longer than both.
 *
 * Read at scrape time (`count(now)`): runs not yet due (look-ahead) are not counted, nor runs of
 * actors this node no longer owns (`stillOwner`); such an entry untouched for `STALE_MS` is
 * forgotten (its new owner counts it). Bounded at `LIMIT` entries, oldest first.
 */
import type { WaitReason } from "../metrics/index.ts";
import type { RunView } from "./model.ts";

interface Waiting {
  reason: WaitReason;
  /** When it falls due (undefined: unknown, counted as due). */
  dueMs: number | undefined;
  stillOwner: () => boolean;
  touchedMs: number;
}

export const WAITING_LIMIT = 100_000;
export const STALE_MS = 60_000;

export class RunsWaiting {
  readonly #runs = new Map<string, Waiting>();

  constructor(private readonly now: () => number) {}

  /** A run record was written by the owner whose `stillOwner` is given. */
  record(r: RunView, stillOwner: () => boolean): void {
    if (r.status !== "queued") {
      this.#runs.delete(r.run_id);
      return;
    }
    const w = this.#runs.get(r.run_id);
    this.#set(r.run_id, { reason: w?.reason ?? "slot", dueMs: Date.parse(r.scheduled_for), stillOwner, touchedMs: this.now() });
  }

  /** A post effect for a run: it now waits for a slot (`acquire_slot`) or a worker (`dispatch`). */
  effect(runId: string, reason: WaitReason, stillOwner: () => boolean, dueMs?: number): void {
    const w = this.#runs.get(runId);
    this.#set(runId, { reason, dueMs: dueMs ?? w?.dueMs, stillOwner, touchedMs: this.now() });
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

  get size(): number {
    return this.#runs.size;
  }

  #set(runId: string, w: Waiting): void {
    this.#runs.delete(runId);
    if (this.#runs.size >= WAITING_LIMIT) this.#runs.delete(this.#runs.keys().next().value!);
    this.#runs.set(runId, w);
  }
}
