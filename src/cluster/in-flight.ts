/**
 * A bound on operations in flight (a counting semaphore with a FIFO queue). The data-plane KV
 * buckets of a node share one: a burst of 10,000 actor turns otherwise put 20,000 KV writes on
 * the wire at once, each with its own 5 s timeout running while it waits in the server's queue —
 * timeouts (unknown outcomes) then multiplied the work. Queued here, an operation has not been
 * sent: no timeout runs and nothing is unknown.
 *
 * The queue is an array read from a moving head (compacted once half of it is consumed): with
 * `Array.shift` every turn copied the whole queue — 14 % of the scheduler's CPU in the
 * 200,000-job burst, where hundreds of thousands of operations waited (`node --cpu-prof`).
 */
export class InFlightLimiter {
  #active = 0;
  #queue: (() => void)[] = [];
  #head = 0;

  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`in-flight limit must be a positive integer, got ${limit}`);
  }

  /** Operations running now and waiting for a turn. */
  get active(): number {
    return this.#active;
  }
  get waiting(): number {
    return this.#queue.length - this.#head;
  }

  async run<T>(op: () => Promise<T>): Promise<T> {
    if (this.#active >= this.limit) await new Promise<void>((r) => this.#queue.push(r));
    else this.#active++;
    try {
      return await op();
    } finally {
      const next = this.#take();
      if (next) next(); // the slot passes straight to the next waiter
      else this.#active--;
    }
  }

  /** The oldest waiter, if any: O(1) amortised. */
  #take(): (() => void) | undefined {
    if (this.#head >= this.#queue.length) return undefined;
    const next = this.#queue[this.#head]!;
    this.#head++;
    if (this.#head === this.#queue.length) {
      this.#queue = [];
      this.#head = 0;
    } else if (this.#head >= 1024 && this.#head * 2 >= this.#queue.length) {
      this.#queue = this.#queue.slice(this.#head);
      this.#head = 0;
    }
    return next;
  }
}
