/**
 * Self-fencing: the worker drops offers never acknowledged in time and kills attempts whose last
 * acknowledgement ran out, without waiting to be told (the owner may already have offered the
 * run elsewhere). One timer, armed at the earliest drop time among the awake leases; attempts
 * acknowledged through their start are parked until their start timer wakes them.
 */
import type { WorkerCore } from "./core.ts";
import type { SelfFencingPart } from "./types.ts";
import type { Lease } from "./lease.ts";

export class SelfFencing implements SelfFencingPart {
  readonly #c: WorkerCore;
  #cancelFence: (() => void) | undefined;
  /** When the armed fence timer fires (monotonic ms); +∞: none armed. */
  #fenceAtMono = Number.POSITIVE_INFINITY;

  constructor(c: WorkerCore) {
    this.#c = c;
  }

  stop(): void {
    this.#cancelFence?.();
  }

  /**
   * Parks an attempt acknowledged through its start (see lease-table.ts `awake`): not started,
   * not due, not held, and its acknowledgement still covers its start (`coveredThroughStart`).
   * Nothing can be due for it before its start timer, which wakes it: `#dropAtMono` keeps it
   * until start_at + TTL, and it needs no heartbeat before it starts (heartbeat.ts `needsBeat`).
   */
  parkIfCovered(l: Lease): void {
    if (
      l.lost ||
      l.due ||
      l.held ||
      l.waitingSlot ||
      l.execution ||
      l.completion ||
      l.validUntilMono === undefined
    )
      return;
    if (this.coveredThroughStart(l, l.validUntilMono, this.#c.o.clock.now()))
      this.#c.table.sleep(l);
  }

  /**
   * Whether an acknowledgement valid until `validUntilMono` still leaves enough at start_at for a
   * waiting attempt to skip the rounds before it: two heartbeat intervals (the first rounds after
   * the start renew it), at most half of TTL − margin.
   */
  coveredThroughStart(l: Lease, validUntilMono: number, wallNow: number): boolean {
    const { o } = this.#c;
    const atStart = validUntilMono - o.clock.monoMs() - Math.max(0, l.req.start_at_ms - wallNow);
    return (
      atStart >= Math.min(2 * o.heartbeatIntervalMs, (l.req.lease_ttl_ms - this.#c.margin(l)) / 2)
    );
  }

  /**
   * Monotonic time at which an attempt not ended is dropped (`enforce`): its last acknowledgement
   * + TTL − margin — an offer never acknowledged counts from its acceptance — except that an
   * acknowledged attempt not started yet is kept until start_at + TTL, when its owner's lease ends
   * (it is not heartbeated before its start nears, see heartbeat.ts `needsBeat`, and never starts
   * stale).
   */
  #dropAtMono(l: Lease, monoNow: number, wallNow: number): number {
    if (l.validUntilMono === undefined)
      return l.acceptedAtMono + l.req.lease_ttl_ms - this.#c.margin(l);
    if (l.execution) return l.validUntilMono;
    return Math.max(l.validUntilMono, monoNow + l.req.start_at_ms + l.req.lease_ttl_ms - wallNow);
  }

  /**
   * Self-fencing: drops offers never acknowledged in time and kills attempts whose last
   * acknowledgement ran out (the owner may already have offered the run elsewhere).
   */
  enforce(): void {
    const c = this.#c;
    const { o } = c;
    const now = o.clock.monoMs();
    const wallNow = o.clock.now();
    for (const l of c.table.awakeLeases()) {
      if (l.completion) {
        // A worker cut off for longer than the completion deadline gives the report up (the slot
        // comes back; the owner's lease expires and the run is retried).
        if (now - (l.completionSinceMono ?? now) > o.completionDeadlineMs) {
          c.giveUp(l);
          c.leaseGone();
          o.log(
            "warn",
            "gave up reporting a completion; its owner's probe still learns the result",
            { run_id: l.req.run_id },
          );
        }
        continue;
      }
      if (l.lost) continue;
      if (now < this.#dropAtMono(l, now, wallNow)) continue;
      o.onEvent?.({
        type: l.execution ? "self_fenced" : "offer_expired",
        run_id: l.req.run_id,
        attempt: l.req.attempt,
      });
      void c.kill(l, "self-fenced: no acknowledged heartbeat within the lease", true);
    }
  }

  /**
   * A timer at the earliest moment an attempt's acknowledgement runs out (a walk of the awake
   * leases).
   */
  armFence(): void {
    this.#cancelFence?.();
    this.#cancelFence = undefined;
    this.#fenceAtMono = Number.POSITIVE_INFINITY;
    this.fenceBy(this.#c.table.awakeLeases());
  }

  /**
   * Brings the fence timer forward to the earliest drop time among `leases`, if that is sooner
   * than the one armed (O(leases)). When it fires it enforces and walks every awake lease
   * (`armFence`). Every start calls it for the attempts it starts (the start timer, the round
   * that acknowledges a due attempt), so a started attempt's drop time is never later than the
   * fence armed, whichever path started it.
   */
  fenceBy(leases: Iterable<Lease>): void {
    const { o } = this.#c;
    let earliest = Number.POSITIVE_INFINITY;
    const monoNow = o.clock.monoMs();
    const wallNow = o.clock.now();
    for (const l of leases) {
      if (l.lost || l.completion) continue;
      // An acknowledged attempt waiting for its start is dropped by a heartbeat round's `enforce`
      // (every interval; a parked one once its start timer has woken it), not by this timer: its
      // drop time (start_at + TTL) differs per attempt, and at 5,000 runs/s prepared ahead this
      // O(attempts) timer fired every millisecond.
      if (!l.execution && l.validUntilMono !== undefined) continue;
      earliest = Math.min(earliest, this.#dropAtMono(l, monoNow, wallNow));
    }
    const at = earliest + 1;
    if (!Number.isFinite(earliest) || this.#c.stopping || at >= this.#fenceAtMono) return;
    this.#cancelFence?.();
    this.#fenceAtMono = at;
    this.#cancelFence = o.clock.setTimer(Math.max(0, at - monoNow), () => {
      this.#cancelFence = undefined;
      this.#fenceAtMono = Number.POSITIVE_INFINITY;
      this.enforce();
      this.armFence();
    });
  }
}
