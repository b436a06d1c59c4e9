/**
 * A map that knows its oldest key in O(1): the bounded caches' and memories' eviction ("least
 * recently inserted first out"; a key re-inserted after a delete goes to the end, as in a `Map`).
 *
 * Pitfall it exists for: a `Map`'s first key (`map.keys().next()`) is found by scanning past every
 * slot deleted since V8 last rehashed the table, so evicting the oldest entry of a full map on each
 * insert costs O(deleted) a call — 200,000 evictions from a map of 100,000 entries took 11.6 s on
 * one core (58 µs each), against 0.2 s here. In a 200,000-run burst, caches of that size sit on the
 * scheduler's and the worker's hot paths.
 *
 * How: each live key's entry carries the sequence number of its insertion, and an insertion-order
 * queue holds (key, sequence) pairs; the head pairs whose key is gone or re-inserted since are
 * dropped as they are met, and the queue is rebuilt from the map once stale pairs outnumber live
 * ones (O(1) amortised per operation).
 *
 * Memory: each entry holds a slot object and a queue pair beside the `Map`'s own entry — about
 * 120 bytes an entry against a `Map`'s 29 (1,000,000 fresh string keys, node 20, heap used after
 * a full GC), and until a compaction up to 2 × size + 1,024 stale pairs more. Use it where
 * eviction of the oldest is needed; a plain `Map` elsewhere.
 *
 * Iteration is the `Map`'s own (insertion order, live under changes as a `Map`'s): `keys()` is
 * its iterator, `values()` and `entries()` thin iterator objects over it, not generators.
 */

interface Slot<V> {
  value: V;
  seq: number;
}

export class OrderedMap<K, V> implements Iterable<[K, V]> {
  readonly #map = new Map<K, Slot<V>>();
  /** (key, seq) in insertion order; pairs before `#head` are consumed. */
  #order: { key: K; seq: number }[] = [];
  #head = 0;
  #seq = 0;

  get size(): number {
    return this.#map.size;
  }

  get(key: K): V | undefined {
    return this.#map.get(key)?.value;
  }

  has(key: K): boolean {
    return this.#map.has(key);
  }

  /** Sets `key`; an existing key keeps its place (as in a `Map`), a new one goes to the end. */
  set(key: K, value: V): this {
    const slot = this.#map.get(key);
    if (slot) {
      slot.value = value;
      return this;
    }
    const seq = this.#seq++;
    this.#map.set(key, { value, seq });
    this.#order.push({ key, seq });
    this.#compactIfStale();
    return this;
  }

  delete(key: K): boolean {
    const had = this.#map.delete(key);
    if (had) this.#compactIfStale();
    return had;
  }

  clear(): void {
    this.#map.clear();
    this.#order = [];
    this.#head = 0;
  }

  /** The key inserted longest ago that is still here (undefined when empty). */
  oldest(): K | undefined {
    while (this.#head < this.#order.length) {
      const { key, seq } = this.#order[this.#head]!;
      if (this.#map.get(key)?.seq === seq) return key;
      this.#head++; // deleted, or re-inserted later (its live pair is further on)
      if (this.#head >= 1024 && this.#head * 2 >= this.#order.length) {
        this.#order = this.#order.slice(this.#head);
        this.#head = 0;
      }
    }
    return undefined;
  }

  /** The `Map`'s own key iterator: insertion order, live as a `Map`'s is. */
  keys(): IterableIterator<K> {
    return this.#map.keys();
  }

  values(): IterableIterator<V> {
    return new SlotValues(this.#map.values());
  }

  entries(): IterableIterator<[K, V]> {
    return new SlotEntries(this.#map.entries());
  }

  [Symbol.iterator](): IterableIterator<[K, V]> {
    return this.entries();
  }

  /** Rebuilds the queue from the map (insertion order) once stale pairs outnumber live ones. */
  #compactIfStale(): void {
    const pairs = this.#order.length - this.#head;
    if (pairs <= 2 * this.#map.size + 1024) return;
    const order: { key: K; seq: number }[] = [];
    for (const [key, slot] of this.#map) order.push({ key, seq: slot.seq });
    this.#order = order;
    this.#head = 0;
  }
}

/**
 * The values of a slot iterator, without a generator: a generator's `next()` resumes a suspended
 * frame, where this is one call on the `Map`'s iterator (a full pass of a large cache is cheap).
 */
class SlotValues<V> implements IterableIterator<V> {
  constructor(private readonly it: Iterator<Slot<V>>) {}

  next(): IteratorResult<V, undefined> {
    const r = this.it.next();
    return r.done === true
      ? { done: true, value: undefined }
      : { done: false, value: r.value.value };
  }

  [Symbol.iterator](): this {
    return this;
  }
}

/** The entries of a slot iterator, without a generator (see `SlotValues`). */
class SlotEntries<K, V> implements IterableIterator<[K, V]> {
  constructor(private readonly it: Iterator<[K, Slot<V>]>) {}

  next(): IteratorResult<[K, V], undefined> {
    const r = this.it.next();
    return r.done === true
      ? { done: true, value: undefined }
      : { done: false, value: [r.value[0], r.value[1].value] };
  }

  [Symbol.iterator](): this {
    return this;
  }
}
