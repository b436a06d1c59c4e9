/**
 * The worker's claims: the leases it holds by attempt key, the subset awake (visited by heartbeat
 * rounds and self-fencing), the memory of attempts gone (attempt-memory.ts) that a lease joins
 * when it is dropped, and the slots and prefetch queue (slot-ledger.ts) a lease leaves when it is
 * dropped (`freeSlot`).
 */
import { AttemptMemory } from "./attempt-memory.ts";
import type { Lease } from "./lease.ts";
import { SLOT_HOLD_MS, SlotLedger, type Hold } from "./slot-ledger.ts";

export class LeaseTable {
  readonly leases = new Map<string, Lease>();
  readonly memory = new AttemptMemory();
  readonly slots: SlotLedger<Lease>;
  /**
   * Told when a lease gave up its slot or its place in the prefetch queue, with the attempts that
   * took the slot (start timing starts them; the worker advertises its room).
   */
  onFreed: ((promoted: Lease[]) => void) | undefined;
  /**
   * The leases heartbeat rounds, `enforce` and `armFence` (self-fencing.ts) visit: every lease but
   * those parked — acknowledged through their start and waiting for it (`parkIfCovered`), which
   * only their start timer wakes — and those whose completion report is on the wire (none of the
   * three has anything to do for them: the outbox takes them back if a copy is to follow; with an
   * owner slow to answer, they would be most of the walk). A lease gone from `leases` is dropped
   * from here as it is met (`awakeLeases`). Visiting every lease would make each round O(leases):
   * with 100,000 attempts prepared minutes ahead and a round 20 ms after each burst of offers, the
   * worker would spend its time walking parked leases.
   */
  readonly awake = new Set<Lease>();
  /**
   * Leases a start instant woke, not yet added to `awake`: a burst's start loop pushes here (an
   * array push) and the set takes them when next looked at — `awakeLeases`, or before any delete
   * from it (`sleep`), so the set's contents are as if each had been added in the loop. Adding
   * 200,000 leases to the set inside the loop (its table regrown on the way) delays the last
   * starts.
   */
  woken: Lease[] = [];

  /** Whether a freed slot may be kept for a queued attempt whose start is near (slot-ledger.ts). */
  readonly #hold: Hold<Lease>;

  /**
   * `clock`: this worker's; a start is timed by its owner's clock where the offer carried it
   * (start-timing.ts), so is the nearness of a start here — a worker whose clock runs ahead would
   * otherwise keep a slot idle for as long as it is ahead.
   */
  constructor(slots: number, prefetch: number, clock: { now(): number; monoMs(): number }) {
    this.slots = new SlotLedger<Lease>(slots, prefetch, {
      tenantOf: (l) => l.req.tenant_id,
      weightOf: (l) => l.req.weight ?? 1,
    });
    const ownerNow = (l: Lease): number =>
      l.req.owner_now_ms === undefined
        ? clock.now()
        : l.req.owner_now_ms + (clock.monoMs() - l.acceptedAtMono);
    this.#hold = {
      // Not one waiting for an acknowledgement (`due`) or gated (`held`): its start is not near.
      soon: (l) =>
        !l.lost &&
        l.execution === undefined &&
        !l.due &&
        l.held !== true &&
        l.req.start_at_ms - ownerNow(l) <= SLOT_HOLD_MS,
      idle: (l) => !l.lost && l.execution === undefined,
    };
  }

  get size(): number {
    return this.leases.size;
  }

  /** A new claim: held and awake. */
  add(l: Lease): void {
    this.leases.set(l.key, l);
    this.awake.add(l);
  }

  /** The awake leases still held (a snapshot: callers may drop leases while they walk it). */
  awakeLeases(): Lease[] {
    this.#takeWoken();
    const out: Lease[] = [];
    for (const l of this.awake) {
      if (this.leases.get(l.key) === l) out.push(l);
      else this.awake.delete(l);
    }
    return out;
  }

  /** Moves the leases woken since into `awake` (see `woken`). */
  #takeWoken(): void {
    if (this.woken.length === 0) return;
    for (const l of this.woken) this.awake.add(l);
    this.woken = [];
  }

  /**
   * Takes a lease out of `awake` (after the woken ones are in: a later delete wins over an earlier
   * wake).
   */
  sleep(l: Lease): void {
    this.#takeWoken();
    this.awake.delete(l);
  }

  /** Still held here under its key and not lost. */
  holds(l: Lease): boolean {
    return this.leases.get(l.key) === l && !l.lost;
  }

  /**
   * Removes `l` from the held leases, unless a newer lease of the same attempt took its key;
   * remembers it for probes.
   */
  drop(l: Lease): void {
    if (this.leases.get(l.key) !== l) return;
    this.leases.delete(l.key);
    this.memory.forget(l);
    this.freeSlot(l);
  }

  /**
   * `l` gives up its slot or its place in the prefetch queue (its execution ended, or it went);
   * `onFreed` hears of it, with the attempts that take the freed slot.
   */
  freeSlot(l: Lease): void {
    // A freed slot goes to a queued attempt whose start instant passed (start-timing.ts `run`),
    // or is kept for one whose start is near.
    const promoted = this.slots.release(l, (q) => q.waitingSlot === true, this.#hold);
    if (promoted !== undefined) this.onFreed?.(promoted);
  }
}
