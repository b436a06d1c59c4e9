/**
 * A first-in first-out queue read from a moving head, compacted once half of it is consumed:
 * O(1) amortised per item. `Array.shift` copied the whole queue per item — 14 % of the
 * scheduler's CPU in the 200,000-job burst, where hundreds of thousands of operations waited
 * (`node --cpu-prof`). Used by the KV in-flight limiter and the worker's completion reports.
 */
export class Fifo<T> {
  #items: T[] = [];
  #head = 0;

  get size(): number {
    return this.#items.length - this.#head;
  }

  push(item: T): void {
    this.#items.push(item);
  }

  /** The oldest item, removed; undefined when empty. */
  shift(): T | undefined {
    if (this.#head >= this.#items.length) return undefined;
    const item = this.#items[this.#head]!;
    this.#head++;
    if (this.#head === this.#items.length) {
      this.#items = [];
      this.#head = 0;
    } else if (this.#head >= 1024 && this.#head * 2 >= this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return item;
  }
}
