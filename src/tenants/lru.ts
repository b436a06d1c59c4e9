/**
 * A small bounded LRU map (a `Map` keeps insertion order: a hit is re-inserted at the end, the
 * first key is the least recently used). Used for the authentication cache.
 */
import { OrderedMap } from "../lib/ordered-map.ts";

export class LruCache<K, V> {
  readonly #max: number;
  readonly #map = new OrderedMap<K, V>();

  constructor(max: number) {
    if (!Number.isInteger(max) || max < 1)
      throw new RangeError(`LruCache max must be a positive integer, got ${max}`);
    this.#max = max;
  }

  get size(): number {
    return this.#map.size;
  }

  get(key: K): V | undefined {
    const v = this.#map.get(key);
    if (v === undefined) return undefined;
    this.#map.delete(key);
    this.#map.set(key, v);
    return v;
  }

  set(key: K, value: V): void {
    this.#map.delete(key);
    this.#map.set(key, value);
    if (this.#map.size > this.#max) {
      const oldest = this.#map.oldest();
      if (oldest !== undefined) this.#map.delete(oldest);
    }
  }

  delete(key: K): void {
    this.#map.delete(key);
  }
}
