/**
 * What the parts of a worker share: its options, its lease table, whether it is stopping or
 * draining, and the parts themselves (start timing, heartbeats, self-fencing, the completion
 * outbox), wired by worker.ts. Also the ways a lease ends that every part uses: a kill, a report
 * given up.
 */
import type { ExecutionResult } from "../sandbox/index.ts";
import { GIVEN_UP_LIMIT } from "./attempt-memory.ts";
import { fencedKey, marginOf, type Lease } from "./lease.ts";
import { LeaseTable } from "./lease-table.ts";
import type { WorkerOptions } from "./options.ts";
import { defaultPrefetch, Turnaround } from "./slot-ledger.ts";
import type { WorkerParts } from "./types.ts";

/** Most handed-over reports kept for a drain to confirm (as many as the attempt memory holds). */
export const HANDED_OVER_KEPT = GIVEN_UP_LIMIT;

export class WorkerCore {
  readonly o: WorkerOptions;
  readonly table: LeaseTable;
  /** Slot turnaround: a slot freed by an execution's end → the next start (slot-ledger.ts). */
  readonly turnaround: Turnaround;
  /**
   * Attempts executing here, by tenant (each holds a slot: at most `slots` entries); advertised,
   * so the fleet actor turns its rounding by the slots tenants' runs execute in (heartbeat.ts).
   */
  readonly executing = new Map<string, number>();
  stopping = false;
  draining = false;
  /** Called whenever a lease goes away (the drain waits for none to be left). */
  onLeaseGone: (() => void) | undefined;
  /**
   * Reports handed over (`handedOver`) within the completion deadline, oldest first, at most
   * HANDED_OVER_KEPT: a drain confirms them before the process ends (drain.ts), since its
   * attempt memory, which a probe would read, ends with it.
   */
  readonly handedOverReports = new Map<string, Lease>();
  #parts: WorkerParts | undefined;

  constructor(o: WorkerOptions) {
    this.o = o;
    this.table = new LeaseTable(o.slots, o.prefetch ?? defaultPrefetch(o.slots), o.clock);
    this.turnaround = new Turnaround(o.slots);
  }

  /**
   * Most attempts held at once, ended ones whose report waits for its answer included: twice the
   * slots and queue places (a slot frees when its execution ends, not when its report is
   * answered; the queue holds `prefetch` runs offered late and as many on time).
   */
  get leaseLimit(): number {
    const { slots } = this.table;
    return 2 * (slots.slots + 2 * slots.prefetch);
  }

  /** The parts, set once by the worker that made them. */
  get parts(): WorkerParts {
    return this.#parts!;
  }
  set parts(p: WorkerParts) {
    this.#parts = p;
  }

  /**
   * An attempt's execution ended: its slot is free now (its report may still be on its way), and
   * passes to an attempt in the prefetch queue whose start has passed (slot-ledger.ts `release`).
   */
  executionEnded(l: Lease): void {
    if (l.counted) {
      l.counted = false;
      const t = l.req.tenant_id;
      const n = (this.executing.get(t) ?? 1) - 1;
      if (n > 0) this.executing.set(t, n);
      else this.executing.delete(t);
    }
    this.turnaround.freed(this.o.clock.monoMs());
    this.table.freeSlot(l);
  }

  /** An attempt's execution began: counted among its tenant's (see `executing`). */
  executionStarted(l: Lease): void {
    if (l.counted) return;
    l.counted = true;
    const t = l.req.tenant_id;
    this.executing.set(t, (this.executing.get(t) ?? 0) + 1);
  }

  leaseGone(): void {
    this.onLeaseGone?.();
  }

  margin(l: Lease): number {
    return marginOf(this.o.leaseSafetyMarginMs, l);
  }

  /** The owner's acknowledgement still covers this attempt. */
  fresh(l: Lease): boolean {
    return (
      !l.lost &&
      !l.held &&
      l.validUntilMono !== undefined &&
      this.o.clock.monoMs() < l.validUntilMono
    );
  }

  /**
   * `immediate` (self-fencing, lease lost): SIGKILL without grace — the margin is already spent.
   */
  async kill(lease: Lease, why: string, immediate = false): Promise<void> {
    lease.lost = true;
    if (immediate) lease.killedAtOnce = true;
    this.table.drop(lease);
    this.leaseGone();
    if (!lease.execution) return;
    // Until its result is in, a probe must not hear `started`: the task may have ended by itself
    // just before the kill (lease.ts `endedBeforeKill`), and its success is known only then.
    // (The outbox's `complete`, queued at the start — a `.then` of the result, or start timing's
    // `completeEnded` for an execution ended as it started — runs before this callback: the
    // result is kept first.)
    if (immediate) {
      const k = fencedKey(lease.key, lease.req.fence);
      const killing = this.table.memory.killing;
      killing.add(k);
      const done = () => killing.delete(k);
      lease.execution.result.then(done, done);
    }
    await lease.execution.kill(why, { immediate });
  }

  /**
   * A report given up (completionDeadlineMs): the lease goes, but its completion is kept for its
   * owner's probe — under a burst a report can wait here past the deadline, and its attempt would
   * otherwise count as started with its result lost (a dead letter at max_attempts 1). Past the
   * output budget the oldest lose their output first (a run's result matters more than its log
   * tail).
   */
  giveUp(l: Lease): void {
    if (l.completion) {
      this.table.memory.remember(fencedKey(l.key, l.req.fence), l.completion);
      this.o.onEvent?.({ type: "report_given_up", run_id: l.req.run_id, attempt: l.req.attempt });
    }
    this.table.drop(l);
  }

  /**
   * A report its owner answered `pending`: queued in its job actor's mailbox, whose turn settles
   * the run; the owner keeps the lease while it waits there (run-messages.ts `onLeaseExpired`).
   * Nothing is copied: the lease goes and the completion is kept for a probe under its fence, which
   * is how an owner that lost the queued report (its actor dropped or moved) learns it. Copied
   * instead, a burst's queued reports came back to the saturated owner every 15–45 s, each copy one
   * more item for it and for NATS to carry, until the worker's deadline gave them up.
   */
  handedOver(l: Lease): void {
    if (l.completion) {
      const key = fencedKey(l.key, l.req.fence);
      this.table.memory.handedOver.set(key, l.completion);
      this.o.onEvent?.({ type: "report_queued", run_id: l.req.run_id, attempt: l.req.attempt });
      const kept = this.handedOverReports;
      kept.delete(key);
      kept.set(key, l);
      this.#pruneHandedOver();
    }
    this.table.drop(l);
  }

  /**
   * The reports handed over still within the completion deadline (past it, their owners have
   * settled them or, having lost them, probed this worker long since); taken: a drain confirms them.
   */
  takeHandedOver(): Lease[] {
    this.#pruneHandedOver();
    const out = [...this.handedOverReports.values()];
    this.handedOverReports.clear();
    return out;
  }

  #pruneHandedOver(): void {
    const kept = this.handedOverReports;
    const now = this.o.clock.monoMs();
    for (const [key, l] of kept) {
      const old = now - (l.completionSinceMono ?? now) > this.o.completionDeadlineMs;
      if (!old && kept.size <= HANDED_OVER_KEPT) break;
      kept.delete(key);
    }
  }

  /**
   * An ended attempt its owner refused (a heartbeat answered `lease_lost`/`not_found`, a report
   * `stale_fence`/`not_found`): the lease goes, nothing is killed (its execution is over), and its
   * completion is kept for a probe under its fence, as a given-up report's is. The refusal may
   * come from an owner whose state is behind the stored one (an actor read back stale, or a
   * state the owner has yet to read back): the owner that then holds the lease probes it, and
   * answered `started` it would count the result lost and offer the run again. An owner whose
   * lease this no longer is never asks under that fence, and takes an answer only for its
   * current lease (run-messages.ts `onProbeAnswer`).
   */
  refused(l: Lease): void {
    l.lost = true;
    if (l.completion) this.table.memory.remember(fencedKey(l.key, l.req.fence), l.completion);
    this.table.drop(l);
    this.leaseGone();
  }

  /**
   * An attempt killed at once that had ended by itself just before (`endedBeforeKill`): its
   * success is kept for its owner's probe, as a given-up report's is. Thrown away, the probe would
   * answer `started` and its owner offer the run again — a second execution of a run that had
   * succeeded (a self-fencing timer firing as the task exits, ledger chaos invariant f). The owner
   * takes it only while the lease is still its current one (run-lifecycle.ts `onProbeAnswer`).
   */
  keepEndedBeforeKill(l: Lease, r: ExecutionResult): void {
    this.table.memory.remember(fencedKey(l.key, l.req.fence), {
      outcome: "exited",
      exit_code: 0,
      output: r.output,
      error: null,
      started_at_ms: r.startedAtMs,
      finished_at_ms: r.finishedAtMs,
    });
    this.o.onEvent?.({ type: "ended_before_kill", run_id: l.req.run_id, attempt: l.req.attempt });
  }
}
