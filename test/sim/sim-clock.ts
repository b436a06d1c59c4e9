/**
 * Simulated time and simulated processes.
 *
 * `SimClock` is the one clock of a simulation: a min-heap of timers ordered by (due time, arming
 * order), and `runUntil`, which fires them one at a time and drains every pending microtask
 * between two firings, so each timer's async consequences happen "at" its instant, before the
 * next timer. Nothing in a simulation uses host timers or Math.random, so a seed replays exactly.
 *
 * `SimProcess` is one simulated OS process (a scheduler node or a worker). Everything that makes
 * its code run — its timers, bus deliveries, KV replies, watch events — passes through `gate`:
 * - running: the callback runs;
 * - paused (SIGSTOP): callbacks queue up and run, in order, when it resumes (its backlog);
 * - dead (crash): callbacks are dropped; the process never runs again.
 * Its clock reads the simulation's time plus its host's offset (wall clock only; the monotonic
 * reading has none, like a real host's): a fixed skew, or a function of time (`HostClock`: skew,
 * drift and steps, which outlive a restart of the process on that host).
 */
import type { Clock } from "../../src/lib/clock.ts";
import { heapPop, heapPush } from "../../src/lib/min-heap.ts";

interface Timer {
  at: number;
  seq: number;
  fn: () => void;
  live: boolean;
}
/** Heap order: earliest first, then scheduling order. */
const dueFirst = (a: Timer, b: Timer): boolean => a.at < b.at || (a.at === b.at && a.seq < b.seq);

/** Resolves after every microtask queued so far (and the ones they queue) has run. */
export function drainMicrotasks(): Promise<void> {
  return new Promise((r) => setImmediate(r));
}

export class SimClock implements Clock {
  #now: number;
  #seq = 0;
  #heap: Timer[] = [];

  constructor(startMs: number) {
    this.#now = startMs;
  }

  now(): number {
    return this.#now;
  }

  monoMs(): number {
    return this.#now;
  }

  setTimer(delayMs: number, fn: () => void): () => void {
    const t: Timer = {
      at: this.#now + Math.max(0, Number.isFinite(delayMs) ? delayMs : 0),
      seq: this.#seq++,
      fn,
      live: true,
    };
    heapPush(this.#heap, t, dueFirst);
    return () => {
      t.live = false;
    };
  }

  /** Fires every timer due up to `targetMs`, one at a time, draining microtasks after each. */
  async runUntil(targetMs: number, afterEach?: () => void): Promise<void> {
    for (;;) {
      const t = this.#peek();
      if (!t || t.at > targetMs) break;
      heapPop(this.#heap, dueFirst);
      if (!t.live) continue;
      this.#now = Math.max(this.#now, t.at);
      t.fn();
      await drainMicrotasks();
      afterEach?.();
    }
    this.#now = Math.max(this.#now, targetMs);
    await drainMicrotasks();
  }

  get pending(): number {
    return this.#heap.length;
  }

  #peek(): Timer | undefined {
    return this.#heap[0];
  }
}

export type ProcessState = "running" | "paused" | "dead";

export class SimProcess {
  readonly name: string;
  readonly clock: Clock;
  #state: ProcessState = "running";
  #backlog: (() => void)[] = [];
  readonly #sim: SimClock;

  constructor(sim: SimClock, name: string, skewMs: number | { offsetMs(): number }) {
    this.#sim = sim;
    this.name = name;
    const offset = typeof skewMs === "number" ? () => skewMs : () => skewMs.offsetMs();
    this.clock = {
      // Whole milliseconds, as Date.now() reads (simulated time advances by fractions too).
      now: () => Math.floor(sim.now() + offset()),
      monoMs: () => sim.monoMs(),
      setTimer: (delayMs, fn) => sim.setTimer(delayMs, () => this.gate(fn)),
    };
  }

  get state(): ProcessState {
    return this.#state;
  }

  /** Runs `fn` as this process: now, later (paused), or never (dead). */
  gate(fn: () => void): void {
    if (this.#state === "running") fn();
    else if (this.#state === "paused") this.#backlog.push(fn);
  }

  pause(): void {
    if (this.#state === "running") this.#state = "paused";
  }

  /** Resumes; the backlog runs in order, one callback per simulation step. */
  resume(): void {
    if (this.#state !== "paused") return;
    this.#state = "running";
    const backlog = this.#backlog;
    this.#backlog = [];
    for (const fn of backlog) this.#sim.setTimer(0, () => this.gate(fn));
  }

  kill(): void {
    this.#state = "dead";
    this.#backlog = [];
  }
}

/**
 * A host's wall clock against the simulation's time: a skew, steps (an NTP step, an operator's
 * `date -s`) and drifts (ms of error gained per second, positive = fast), each ended on its own —
 * an ended drift's error is corrected at once, as NTP steps a clock back. The monotonic clock is
 * not affected (a step never moves it; a drift of a few ‰ is left out of timers).
 */
export class HostClock {
  readonly #skewMs: number;
  #stepsMs = 0;
  readonly #drifts = new Set<{ msPerS: number; fromMs: number }>();
  readonly #sim: SimClock;

  constructor(sim: SimClock, skewMs: number) {
    this.#sim = sim;
    this.#skewMs = skewMs;
  }

  offsetMs(): number {
    let drift = 0;
    for (const d of this.#drifts) drift += ((this.#sim.now() - d.fromMs) * d.msPerS) / 1000;
    return Math.round(this.#skewMs + this.#stepsMs + drift);
  }

  /** The wall clock jumps by `ms` (negative: backwards). */
  step(ms: number): void {
    this.#stepsMs += ms;
  }

  /** From now on the clock gains `msPerS` ms each second; the returned function ends the drift and takes its error back. */
  drift(msPerS: number): () => void {
    const d = { msPerS, fromMs: this.#sim.now() };
    this.#drifts.add(d);
    return () => void this.#drifts.delete(d);
  }
}
