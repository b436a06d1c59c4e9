/**
 * One timer structure per node: a binary min-heap of (dueMs, seq) with lazy cancellation, driven
 * by a single host timer armed for the earliest entry. Holds a million pending timers cheaply
 * (one small object each; no host timer per entry). Scheduling a key again replaces its timer.
 */
import type { Clock } from "../lib/clock.ts";
import { heapify, heapPop, heapPush } from "../lib/min-heap.ts";

interface Entry<T> {
  dueMs: number;
  seq: number;
  key: string;
  payload: T;
  live: boolean;
  /** Its key's group (`#groups`), found once when the key is first scheduled. */
  group: Group | undefined;
}

/** Heap order: earliest due first, then scheduling order. */
const dueFirst = <T>(a: Entry<T>, b: Entry<T>): boolean =>
  a.dueMs < b.dueMs || (a.dueMs === b.dueMs && a.seq < b.seq);

interface Group {
  name: string;
  keys: Set<string>;
}

export class TimerQueue<T> {
  readonly #clock: Clock;
  readonly #onFire: (key: string, payload: T) => void;
  #heap: Entry<T>[] = [];
  #byKey = new Map<string, Entry<T>>();
  /**
   * Live keys by group — a key's text up to and including its first `|` (the host's keys are
   * `<partition>|…`) — so cancelling a partition's timers visits that partition's keys only
   * (scanning every key per partition lost took 4 s of one CPU when a node dropped 64 partitions
   * holding 400,000 timers).
   */
  #groups = new Map<string, Group>();
  #seq = 0;
  #armedFor = Number.POSITIVE_INFINITY;
  #cancelHost: (() => void) | undefined;
  #stopped = false;
  /** Admission (`admitWith`): while it answers false, due timers wait in due order. */
  #admit: (() => boolean) | undefined;
  /** A due timer was held back by admission: nothing is armed until `resume()`. */
  #held = false;
  /** Longest single host-timer wait; long delays re-arm in steps (host timers are 32-bit). */
  static readonly MAX_WAIT_MS = 2 ** 30;
  /**
   * Most timers fired in one turn of the event loop; the rest fire on the next turn. Ten thousand
   * jobs due at one instant otherwise ran ten thousand actor turns in one synchronous stretch,
   * starving lease renewals and every socket of the process (busy is not dead).
   */
  static readonly SLICE = 256;

  constructor(clock: Clock, onFire: (key: string, payload: T) => void) {
    this.#clock = clock;
    this.#onFire = onFire;
  }

  get size(): number {
    return this.#byKey.size;
  }

  /** Arms (or re-arms) the timer named `key` to fire at `dueMs` (epoch ms). */
  schedule(key: string, dueMs: number, payload: T): void {
    const old = this.#byKey.get(key);
    if (old) old.live = false;
    const e: Entry<T> = {
      dueMs,
      seq: this.#seq++,
      key,
      payload,
      live: true,
      group: old ? old.group : this.#join(key),
    };
    this.#byKey.set(key, e);
    heapPush(this.#heap, e, dueFirst);
    if (dueMs < this.#armedFor) this.#arm();
  }

  cancel(key: string): boolean {
    const e = this.#byKey.get(key);
    if (!e) return false;
    e.live = false;
    this.#byKey.delete(key);
    this.#leave(e);
    return true;
  }

  /**
   * Adds `key` to its group's set (made if none); the entry keeps the group, so cancelling or
   * firing it finds the set without cutting and hashing the key's group text again (a hot path
   * in a burst).
   */
  #join(key: string): Group | undefined {
    const i = key.indexOf("|");
    if (i < 0) return undefined;
    const name = key.slice(0, i + 1);
    let g = this.#groups.get(name);
    if (!g) this.#groups.set(name, (g = { name, keys: new Set() }));
    g.keys.add(key);
    return g;
  }

  /** Removes a live key's entry from its group (and the group once empty). */
  #leave(e: Entry<T>): void {
    const g = e.group;
    if (!g) return;
    g.keys.delete(e.key);
    if (g.keys.size === 0 && this.#groups.get(g.name) === g) this.#groups.delete(g.name);
  }

  /** Cancels every timer whose key starts with `prefix` (e.g. all timers of a partition). */
  cancelPrefix(prefix: string): number {
    const i = prefix.indexOf("|");
    // A whole group (`<group>|`): its keys only. Any other prefix: a scan of every key.
    const keys =
      i === prefix.length - 1
        ? [...(this.#groups.get(prefix)?.keys ?? [])]
        : [...this.#byKey.keys()].filter((k) => k.startsWith(prefix));
    for (const k of keys) this.cancel(k);
    // Mostly dead entries (a partition's timers gone): rebuild the heap in O(n) now, instead of
    // popping each dead entry at O(log n) when the earliest one is looked for (seconds at 400,000).
    if (this.#heap.length > 2 * this.#byKey.size + 1024) {
      this.#compact();
      this.#arm();
    }
    return keys.length;
  }

  /**
   * Back-pressure: before each due timer fires, `admit` is asked; while it answers false the
   * timer stays queued (in due order, nothing fires out of turn) and no host timer is armed for
   * it — the owner calls `resume()` when capacity comes back.
   */
  admitWith(admit: () => boolean): void {
    this.#admit = admit;
  }

  /** Whether due timers are waiting for admission. */
  get held(): boolean {
    return this.#held;
  }

  /**
   * Capacity came back (see `admitWith`): what is due fires from a host timer (wait 0), never
   * synchronously here. The host calls this as each admitted turn settles, in a microtask; firing
   * from here let a slice's turns, settling in microtasks, resume the next slice, and so on, without
   * the event loop ever turning: the sustained benchmark's scheduler ran 23.7 s of timer turns in one
   * stretch, its lease renewals paused, and it lost every partition.
   */
  resume(): void {
    if (!this.#held || this.#stopped) return;
    this.#held = false;
    this.#arm();
  }

  dueOf(key: string): number | undefined {
    return this.#byKey.get(key)?.dueMs;
  }

  stop(): void {
    this.#stopped = true;
    this.#cancelHost?.();
    this.#cancelHost = undefined;
  }

  /** Fires what is due now, at most `limit` timers; returns how many fired. */
  fireDue(limit = Number.POSITIVE_INFINITY): number {
    const now = this.#clock.now();
    let fired = 0;
    while (fired < limit) {
      const top = this.#heap[0];
      if (!top) break;
      if (!top.live) {
        heapPop(this.#heap, dueFirst);
        continue;
      }
      if (top.dueMs > now) break;
      if (this.#admit !== undefined && !this.#admit()) {
        this.#held = true;
        break;
      }
      heapPop(this.#heap, dueFirst);
      this.#byKey.delete(top.key);
      this.#leave(top);
      fired++;
      this.#onFire(top.key, top.payload);
    }
    if (this.#heap.length > 2 * this.#byKey.size + 1024) this.#compact();
    return fired;
  }

  #arm(): void {
    if (this.#stopped || this.#held) return;
    while (this.#heap[0] && !this.#heap[0].live) heapPop(this.#heap, dueFirst);
    const top = this.#heap[0];
    this.#cancelHost?.();
    this.#cancelHost = undefined;
    if (!top) {
      this.#armedFor = Number.POSITIVE_INFINITY;
      return;
    }
    this.#armedFor = top.dueMs;
    const wait = Math.min(Math.max(0, top.dueMs - this.#clock.now()), TimerQueue.MAX_WAIT_MS);
    this.#cancelHost = this.#clock.setTimer(wait, () => {
      this.#cancelHost = undefined;
      this.#armedFor = Number.POSITIVE_INFINITY;
      this.fireDue(TimerQueue.SLICE);
      this.#arm(); // more due: wait 0, i.e. after the I/O of this turn
    });
  }

  #compact(): void {
    this.#heap = this.#heap.filter((e) => e.live);
    heapify(this.#heap, dueFirst);
  }
}
