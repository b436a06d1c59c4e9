/**
 * How long a process could listen: the rule membership (membership.ts) and the worker directory
 * (src/jobs/worker-directory.ts) judge silence by. A peer's heartbeat that waits in this process's
 * socket while its event loop is stalled proves nothing about the peer; expiring it for that time
 * drops live peers — the scheduler that released its partitions after a 4.7 s stall; a worker
 * directory that would count no capacity after one.
 *
 * The owner calls `tick()` from a timer armed every `intervalMs`; a tick that runs late by more
 * than one interval reports the time the process was deaf, and the owner credits each peer with
 * it (`credit`). Between ticks, `judgeAt()` caps "now" at one interval past the last tick.
 */
import type { Clock } from "../lib/clock.ts";

export class Listening {
  #lastTickMs: number | undefined;
  constructor(private readonly clock: Clock, private readonly intervalMs: number) {}

  /** Starts the count (the first tick); before it, `judgeAt()` is simply now. */
  start(): void {
    this.#lastTickMs = this.clock.now();
  }

  /** The time silence is judged at: now, but no later than one interval past the last tick. */
  judgeAt(): number {
    const now = this.clock.now();
    return this.#lastTickMs === undefined ? now : Math.min(now, this.#lastTickMs + this.intervalMs);
  }

  /** Records a tick at now; returns the ms this process could not listen since the last (0 if on time). */
  tick(): number {
    const now = this.clock.now();
    const deaf = this.#lastTickMs === undefined ? 0 : now - this.#lastTickMs - this.intervalMs;
    this.#lastTickMs = now;
    return deaf > this.intervalMs ? deaf : 0;
  }
}

/**
 * A peer's "last seen" credited with `deafMs`: never past now, and never more than one timeout
 * plus this deaf stretch past when it was really heard. So one stall of any length drops nobody
 * (each peer has a timeout of listening after it to be heard again), and a process whose ticks
 * keep running late still drops a dead peer: within two timeouts plus two deaf stretches of when
 * it was last heard, as its credit stops growing while the clock does.
 */
export function creditedSeen(seenMs: number, heardMs: number, deafMs: number, nowMs: number, timeoutMs: number): number {
  return Math.min(nowMs, seenMs + deafMs, heardMs + timeoutMs + deafMs);
}
