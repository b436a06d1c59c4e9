/**
 * The worker's slots and its prefetch, as pure bookkeeping (no I/O, no clock): which accepted
 * attempts hold one of the `slots`, and which wait in the prefetch queue (at most `prefetch`) for
 * the next slot to free. A slot is held from the acceptance (an attempt prepared ahead keeps its
 * slot until it starts, as it always did) until the attempt's execution ends or the attempt goes;
 * the slot then passes at once to the oldest queued attempt. Only attempts already due may queue,
 * so an attempt prepared ahead never waits behind the queue at its start instant.
 *
 * Also the slot turnaround (`Turnaround`): each start matched to the earliest slot freed before it
 * and not matched yet — the time a slot sat idle between two executions
 * (`kairos_slot_idle_seconds`).
 *
 * Pitfall: the prefetched attempts hold their tenants' grants while they wait, so the fleet's
 * shares count the prefetch as places (worker-directory.ts `capacity`): without that, every grant
 * would have its slot and the queue would stay empty.
 */
import { Fifo } from "../lib/fifo.ts";

/** The prefetch a worker with `slots` slots holds by default: an eighth, at least 2, at most 256 (never more than its slots). */
export function defaultPrefetch(slots: number): number {
  return Math.min(slots, 256, Math.max(2, Math.ceil(slots / 8)));
}

/** Where an offer goes (`admit`): a slot of its own, the prefetch queue, or nowhere (refused). */
export type Placement = "slot" | "queued" | "full";

export class SlotLedger<T> {
  readonly #holding = new Set<T>();
  /** The prefetch queue, oldest first (at most `prefetch`: a removal by splice is cheap). */
  #queue: T[] = [];

  constructor(
    readonly slots: number,
    readonly prefetch: number,
  ) {
    if (!Number.isInteger(slots) || slots < 0)
      throw new RangeError(`slots must be a whole number ≥ 0, got ${slots}`);
    if (!Number.isInteger(prefetch) || prefetch < 0)
      throw new RangeError(`prefetch must be a whole number ≥ 0, got ${prefetch}`);
  }

  /** Offers this worker would take now: free slots plus free places in the queue. */
  get room(): number {
    return Math.max(0, this.slots + this.prefetch - this.#holding.size - this.#queue.length);
  }

  /** Attempts waiting in the prefetch queue. */
  get queued(): number {
    return this.#queue.length;
  }

  /** Slots held (by attempts not started yet, or executing). */
  get held(): number {
    return this.#holding.size;
  }

  holds(x: T): boolean {
    return this.#holding.has(x);
  }

  /**
   * A new attempt: a slot if one is free; else the queue, if it is due now (`due`) and the queue
   * has room; else `full` (nothing recorded).
   */
  admit(x: T, due: boolean): Placement {
    if (this.#holding.has(x)) return "slot";
    if (this.#queue.includes(x)) return "queued";
    if (this.#holding.size < this.slots) {
      this.#holding.add(x);
      return "slot";
    }
    if (!due || this.#queue.length >= this.prefetch) return "full";
    this.#queue.push(x);
    return "queued";
  }

  /**
   * `x` gives up its slot or its place in the queue (its execution ended, or it went): the
   * attempts that take the freed slot, oldest first; undefined if `x` held neither.
   */
  release(x: T): T[] | undefined {
    if (!this.#holding.delete(x)) {
      const i = this.#queue.indexOf(x);
      if (i < 0) return undefined;
      this.#queue.splice(i, 1);
      return [];
    }
    const promoted: T[] = [];
    while (this.#holding.size < this.slots && this.#queue.length > 0) {
      const next = this.#queue.shift()!;
      this.#holding.add(next);
      promoted.push(next);
    }
    return promoted;
  }
}

/**
 * Slot turnaround: every slot freed by an execution's end (`freed`) is matched to the next start
 * (`started`, oldest free first); a start with no free before it (a slot never used yet) is none.
 * At most `slots` frees are remembered (one per slot).
 */
export class Turnaround {
  readonly #frees = new Fifo<number>();
  constructor(private readonly slots: number) {}

  freed(atMs: number): void {
    this.#frees.push(atMs);
    if (this.#frees.size > this.slots) this.#frees.shift();
  }

  /** The idle time (ms) of the slot this start takes, or undefined when it took no freed one. */
  started(atMs: number): number | undefined {
    const at = this.#frees.shift();
    return at === undefined ? undefined : Math.max(0, atMs - at);
  }
}
