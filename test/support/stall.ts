/**
 * Hand-driven parts for tests of code that judges silence (membership, the worker directory):
 * a clock whose time and timers move only when told — a stalled event loop is `t += n` with no
 * `runTimers()` — and a bus stub that keeps each subscription so a test can deliver a message.
 */
import type { Bus, BusSubscribeOptions } from "../../src/cluster/bus.ts";
import type { Clock } from "../../src/lib/clock.ts";

export class StallClock implements Clock {
  t = 0;
  timers = new Set<() => void>();
  now(): number {
    return this.t;
  }
  monoMs(): number {
    return this.t;
  }
  setTimer(_ms: number, fn: () => void): () => void {
    this.timers.add(fn);
    return () => this.timers.delete(fn);
  }
  /** Runs every armed timer once (the timers they arm wait for the next call). */
  runTimers(): void {
    const due = [...this.timers];
    this.timers.clear();
    for (const f of due) f();
  }
}

/** A bus that publishes nowhere and records subscriptions in `subs` (subject → options). */
export function stubBus(subs: Map<string, BusSubscribeOptions>): Bus {
  return {
    publish: () => undefined,
    request: () => Promise.reject(new Error("unused")),
    subscribe: (subject, opts) => {
      subs.set(subject, opts);
      return { unsubscribe: () => subs.delete(subject) };
    },
    flush: async () => undefined,
    isClosed: () => false,
  };
}
