/**
 * A bound on operations in flight (a counting semaphore with two FIFO lanes). The data-plane KV
 * buckets of a node share one: a burst of 10,000 actor turns otherwise put 20,000 KV writes on
 * the wire at once, each with its own 5 s timeout running while it waits in the server's queue —
 * timeouts (unknown outcomes) then multiplied the work. Queued here, an operation has not been
 * sent: no timeout runs and nothing is unknown.
 *
 * The queue is a `Fifo` (src/lib/fifo.ts: O(1) amortised; `Array.shift` cost 14 % of the
 * scheduler's CPU in the 200,000-job burst).
 *
 * Two lanes: an `urgent` operation waits only behind other urgent ones. The actor host's
 * admission (`TURNS_IN_FLIGHT`) serves a worker's claim or heartbeat ahead of a burst's
 * completion turns, and that turn's fence and state update take the data-plane KV limiter's
 * urgent lane (`KvStore.update`'s `urgent`; actor.ts `ActorDefinition.urgent`). Within a lane,
 * first in, first out.
 */
import { Fifo } from "../lib/fifo.ts";

export class InFlightLimiter {
  #active = 0;
  readonly #queue = new Fifo<() => void>();
  readonly #urgent = new Fifo<() => void>();

  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`in-flight limit must be a positive integer, got ${limit}`);
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
    if (this.#active >= this.limit) await new Promise<void>((r) => (urgent ? this.#urgent : this.#queue).push(r));
    else this.#active++;
    try {
      return await op();
    } finally {
      const next = this.#urgent.shift() ?? this.#queue.shift();
      if (next) next(); // the slot passes straight to the next waiter
      else this.#active--;
    }
  }
}
