/**
 * Time is injected. Production code receives a `Clock`; tests receive a `FakeClock` and move it.
 * Only this module (and entry points) may read the wall clock or arm host timers.
 */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
  /**
   * Monotonic milliseconds (any origin): for durations that must not jump with the wall clock —
   * trust windows and leases. Compare only with other readings of the same clock.
   */
  monoMs(): number;
  /** Arms a one-shot host timer; returns a cancel function. */
  setTimer(delayMs: number, fn: () => void): () => void;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  monoMs: () => performance.now(),
  setTimer(delayMs, fn) {
    const t = setTimeout(fn, Math.max(0, delayMs));
    t.unref?.();
    return () => clearTimeout(t);
  },
};

/**
 * Runs `fn` after `ms` on the host's timers, or on a later turn of the event loop when `ms` is 0
 * (`setImmediate`: after pending I/O). The default of shells that take a `defer` seam; the
 * simulation passes its own, on its clock.
 */
export function deferOnHost(fn: () => void, ms: number): void {
  if (ms > 0) setTimeout(fn, ms);
  else setImmediate(fn);
}

/** A clock that only moves when told to; timers fire synchronously inside `advance`. */
export class FakeClock implements Clock {
  #now: number;
  #timers: { at: number; seq: number; fn: () => void }[] = [];
  #seq = 0;
  constructor(startMs = 0) {
    this.#now = startMs;
  }
  now(): number {
    return this.#now;
  }
  monoMs(): number {
    return this.#now;
  }
  setTimer(delayMs: number, fn: () => void): () => void {
    const entry = { at: this.#now + Math.max(0, delayMs), seq: this.#seq++, fn };
    this.#timers.push(entry);
    return () => {
      this.#timers = this.#timers.filter((t) => t !== entry);
    };
  }
  /** Moves time forward by `ms`, firing due timers in order. */
  advance(ms: number): void {
    const target = this.#now + ms;
    for (;;) {
      this.#timers.sort((a, b) => a.at - b.at || a.seq - b.seq);
      const next = this.#timers[0];
      if (!next || next.at > target) break;
      this.#timers.shift();
      this.#now = next.at;
      next.fn();
    }
    this.#now = target;
  }
}
