/**
 * A bound on operations in flight (a counting semaphore with two FIFO lanes). A node's data-plane
 * KV buckets share one: otherwise a burst puts tens of thousands of writes on the wire at once,
 * each timeout running while it waits in the server's queue, and timeouts (unknown outcomes)
 * multiply the work. Queued here, an operation has not been sent: nothing is unknown.
 *
 * Two lanes: an `urgent` operation waits only behind other urgent ones — a worker's claim or
 * heartbeat turn takes it (`KvStore.update`'s `urgent`; actor.ts `ActorDefinition.urgent`), ahead
 * of a burst's completion turns. First in, first out within a lane (`Fifo`, O(1) amortised).
 */
import { Fifo } from "../lib/fifo.ts";

export class InFlightLimiter {
  #active = 0;
  readonly #queue = new Fifo<() => void>();
  readonly #urgent = new Fifo<() => void>();

  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1)
      throw new RangeError(`in-flight limit must be a positive integer, got ${limit}`);
  }

  /** Operations running now and waiting for a turn. */
  get active(): number {
    return this.#active;
  }
  get waiting(): number {
    return this.#queue.size + this.#urgent.size;
  }

  /** Runs `op` when fewer than `limit` run; an `urgent` one goes ahead of every waiting non-urgent one. */
  async run<T>(op: () => Promise<T>, urgent = false): Promise<T> {
    if (this.#active >= this.limit)
      await new Promise<void>((r) => (urgent ? this.#urgent : this.#queue).push(r));
    else this.#active++;
    try {
      return await op();
    } finally {
      const next = this.#urgent.shift() ?? this.#queue.shift();
      if (next)
        next(); // the slot passes straight to the next waiter
      else this.#active--;
    }
  }
}
