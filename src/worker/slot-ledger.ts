/**
 * The worker's slots and its prefetch, as pure bookkeeping (no I/O, no clock): which accepted
 * attempts hold one of the `slots`, and which wait in the prefetch queue (at most `prefetch` of
 * each kind: see below) for a slot. A slot is held from the acceptance when one is free (an attempt prepared ahead keeps its
 * slot until it starts, as it always did) until the attempt's execution ends or the attempt goes.
 * With every slot taken, an offer waits in the queue; a freed slot passes at once to a queued
 * attempt that is READY (its start instant passed, acknowledged: the caller says which), and one
 * that becomes ready takes a slot left free (`take`). So a queued attempt prepared ahead holds no
 * slot idle before its start.
 *
 * Which ready attempt a freed slot goes to: first those offered ON TIME (before their start
 * instant, or at most ON_TIME_MS after it: its grant came by the time the run was due, so its
 * tenant was within its share), then those already late when offered (a backlog: its tenant's runs waited for
 * grants); within each group the one whose tenant holds fewest of this worker's slots per unit
 * of weight (`Fairness`: the offer carries the tenant's weight), then the oldest. A light tenant's
 * run so waits for the next slot to free, not behind the heavy tenants' backlogs that fill the
 * queue, and each freed slot goes to the backlog furthest under its weighted part of the worker:
 * the fleet's grants decide whose runs wait here, this decides whose runs execute (first come,
 * first served among them let a tenant whose runs waited less execute up to its grants, above
 * its part, while another's grants waited). An attempt is passed over by at most MAX_PASSED
 * others, then goes first (no starvation). The queue holds up to
 * `prefetch` offers that came late and as many that came on time: backlogs filling it never leave
 * a run prepared ahead without a place (refused, it came back after its start, late, behind them).
 * `room`, what the worker advertises, counts the places a late offer could take.
 *
 * One slot a worker may keep for a run prepared ahead (`Hold`): a slot freed when no queued attempt
 * on time is ready, but one on time starts within SLOT_HOLD_MS, goes to that one (it holds the slot
 * idle until its start) rather than to a late one ready now. Without it, on a worker whose slots
 * all run tasks of one length started together, they free together, once a task length apart, and a
 * light tenant's run due just after such a wave waits a whole task length for the next. At most
 * one slot of the worker is kept so at a time (a large worker frees slots often enough, and the
 * fleet loses at most one slot·SLOT_HOLD_MS a worker per run prepared ahead).
 *
 * Also the slot turnaround (`Turnaround`): each start matched to the earliest slot freed before it
 * and not matched yet — the time a slot sat idle between two executions
 * (`kairos_slot_idle_seconds`).
 *
 * Pitfall: the prefetched attempts hold their tenants' grants while they wait, so the fleet's
 * shares count the prefetch as places (worker-directory.ts `capacity`): without that, every grant
 * would have its slot and the queue would stay empty. The places for runs on time are counted too:
 * a run prepared ahead holds its grant there from its offer, seconds before its start, and out of
 * the late places' grants it left the backlogs' queue empty at most frees on a small worker.
 */
import { Fifo } from "../lib/fifo.ts";
import { ON_TIME_MS } from "../protocol/worker.ts";

export { ON_TIME_MS };

/** The prefetch a worker with `slots` slots holds by default: an eighth, at least 2, at most 256 (never more than its slots). */
export function defaultPrefetch(slots: number): number {
  return Math.min(slots, 256, Math.max(2, Math.ceil(slots / 8)));
}

/** A slot freed at most this long before a queued on-time attempt's start may be kept for it (`Hold`). */
export const SLOT_HOLD_MS = 1_500;

/** Where an offer goes (`admit`): a slot of its own, the prefetch queue, or nowhere (refused). */
export type Placement = "slot" | "queued" | "full";

/** A ready queued attempt is passed over by at most this many others (then it goes first). */
export const MAX_PASSED = 8;

/** A place in the prefetch queue: the attempt, whether it came on time, how often it was passed over. */
interface Queued<T> {
  readonly x: T;
  readonly onTime: boolean;
  passed: number;
}

/** Whose an attempt is, for the choice of a freed slot's next holder (see the module header). */
export interface Fairness<T> {
  tenantOf(x: T): string;
  /** The tenant's weight (> 0; anything else counts as 1). */
  weightOf(x: T): number;
}

/**
 * For keeping a freed slot for an attempt prepared ahead (see the module header): `soon` — not
 * ready, its start instant at most SLOT_HOLD_MS away; `idle` — holds a slot and executes nothing yet.
 */
export interface Hold<T> {
  soon(x: T): boolean;
  idle(x: T): boolean;
}

/** Nobody's: every attempt alike, so the order is on time first, then oldest. */
const ALIKE: Fairness<unknown> = { tenantOf: () => "", weightOf: () => 1 };

/**
 * Which ready queued attempt a freed slot goes to (pure; see the module header): the oldest of
 * those passed over MAX_PASSED times; else among those that came on time (else among all) the
 * lowest `load` — the slots its tenant holds here per unit of weight — ties oldest; when none of
 * the ready ones came on time, the oldest on-time one that is `soon` (not ready) instead, if any;
 * −1 when none. `passed`: the indexes of the ready ones before it that it passes over (each counts it).
 */
export function nextHolder(
  queue: readonly { readonly onTime: boolean; readonly passed: number }[],
  ready: (i: number) => boolean,
  load: (i: number) => number,
  soon?: (i: number) => boolean,
): { next: number; passed: number[] } {
  let best = -1;
  let bestOnTime = false;
  let bestLoad = 0;
  const seen: number[] = [];
  for (let i = 0; i < queue.length; i++) {
    if (!ready(i)) continue;
    const q = queue[i]!;
    if (q.passed >= MAX_PASSED) return { next: i, passed: seen };
    seen.push(i);
    const l = load(i);
    if (best < 0 || (q.onTime && !bestOnTime) || (q.onTime === bestOnTime && l < bestLoad)) {
      best = i;
      bestOnTime = q.onTime;
      bestLoad = l;
    }
  }
  if (!bestOnTime && soon) {
    // No ready attempt on time: the oldest on time that starts soon keeps the slot (every ready
    // one is passed over).
    for (let i = 0; i < queue.length; i++)
      if (queue[i]!.onTime && !ready(i) && soon(i)) return { next: i, passed: seen };
  }
  return { next: best, passed: seen.filter((i) => i < best) };
}

export class SlotLedger<T> {
  readonly #holding = new Set<T>();
  /** Slots held by tenant (`Fairness.tenantOf`): at most `slots` entries. */
  readonly #heldBy = new Map<string, number>();
  /** The prefetch queue in arrival order (at most 2 × `prefetch`: a scan or a splice is cheap). */
  #queue: Queued<T>[] = [];
  /** The attempt a freed slot was kept for (`Hold`), while it holds the slot idle. */
  #kept: T | undefined;

  constructor(
    readonly slots: number,
    readonly prefetch: number,
    private readonly fair: Fairness<T> = ALIKE,
  ) {
    if (!Number.isInteger(slots) || slots < 0)
      throw new RangeError(`slots must be a whole number ≥ 0, got ${slots}`);
    if (!Number.isInteger(prefetch) || prefetch < 0)
      throw new RangeError(`prefetch must be a whole number ≥ 0, got ${prefetch}`);
  }

  /** Offers in the queue that came on time (`onTime`) or late. */
  #queuedOf(onTime: boolean): number {
    let n = 0;
    for (const q of this.#queue) if (q.onTime === onTime) n++;
    return n;
  }

  /**
   * Offers this worker would take now, whether on time or late: free slots plus the free places a
   * late offer may take (an on-time offer has places of its own: see the module header).
   */
  get room(): number {
    return (
      Math.max(0, this.slots - this.#holding.size) +
      Math.max(0, this.prefetch - this.#queuedOf(false))
    );
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

  #hold(x: T): void {
    this.#holding.add(x);
    const t = this.fair.tenantOf(x);
    this.#heldBy.set(t, (this.#heldBy.get(t) ?? 0) + 1);
  }

  /** Slots `x`'s tenant holds here per unit of its weight. */
  #load(x: T): number {
    const w: unknown = this.fair.weightOf(x);
    const weight = typeof w === "number" && w > 0 && Number.isFinite(w) ? w : 1;
    return (this.#heldBy.get(this.fair.tenantOf(x)) ?? 0) / weight;
  }

  #indexOf(x: T): number {
    return this.#queue.findIndex((q) => q.x === x);
  }

  /**
   * A new attempt: a slot if one is free; else the queue, if fewer than `prefetch` of its kind
   * (on time, or late) wait there; else `full` (nothing recorded). `onTime`: offered before its
   * start instant or at most ON_TIME_MS after it.
   */
  admit(x: T, onTime: boolean): Placement {
    if (this.#holding.has(x)) return "slot";
    if (this.#indexOf(x) >= 0) return "queued";
    if (this.#holding.size < this.slots) {
      this.#hold(x);
      return "slot";
    }
    if (this.#queuedOf(onTime) >= this.prefetch) return "full";
    this.#queue.push({ x, onTime, passed: 0 });
    return "queued";
  }

  /** A queued attempt that became ready takes a free slot, if there is one (true: it holds one). */
  take(x: T): boolean {
    if (this.#holding.has(x)) return true;
    const i = this.#indexOf(x);
    if (i < 0 || this.#holding.size >= this.slots) return false;
    this.#queue.splice(i, 1);
    this.#hold(x);
    return true;
  }

  /**
   * `x` gives up its slot or its place in the queue (its execution ended, or it went): the
   * queued attempts that take the freed slot — `ready` ones, on time first (`#next`), or one kept
   * for (`hold`: see the module header); undefined if `x` held neither. A slot no ready attempt
   * takes stays free.
   */
  release(x: T, ready: (q: T) => boolean, hold?: Hold<T>): T[] | undefined {
    if (this.#kept === x) this.#kept = undefined;
    if (!this.#holding.delete(x)) {
      const i = this.#indexOf(x);
      if (i < 0) return undefined;
      this.#queue.splice(i, 1);
      return [];
    }
    const t = this.fair.tenantOf(x);
    const n = (this.#heldBy.get(t) ?? 1) - 1;
    if (n > 0) this.#heldBy.set(t, n);
    else this.#heldBy.delete(t);
    const promoted: T[] = [];
    while (this.#holding.size < this.slots) {
      const i = this.#next(ready, this.#mayKeep(hold) ? hold : undefined);
      if (i < 0) break;
      const [q] = this.#queue.splice(i, 1);
      this.#hold(q!.x);
      promoted.push(q!.x);
      if (!ready(q!.x)) this.#kept = q!.x;
    }
    return promoted;
  }

  /** No slot is kept now (the one kept for an attempt is gone or executes). */
  #mayKeep(hold: Hold<T> | undefined): boolean {
    if (!hold) return false;
    if (this.#kept !== undefined && this.#holding.has(this.#kept) && hold.idle(this.#kept))
      return false;
    this.#kept = undefined;
    return true;
  }

  /**
   * The queue index a freed slot goes to (`nextHolder`); the ready ones queued before it that it
   * passes over count it.
   */
  #next(ready: (q: T) => boolean, hold: Hold<T> | undefined): number {
    const queue = this.#queue;
    const { next, passed } = nextHolder(
      queue,
      (k) => ready(queue[k]!.x),
      (k) => this.#load(queue[k]!.x),
      hold && ((k) => hold.soon(queue[k]!.x)),
    );
    for (const k of passed) queue[k]!.passed++;
    return next;
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
