/**
 * How long a process could listen: the rule membership (membership.ts) and the worker directory
 * (src/slots/worker-directory.ts) judge silence by. A peer's heartbeat that waits in this process's
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
  constructor(
    private readonly clock: Clock,
    private readonly intervalMs: number,
  ) {}

  /** Starts the count (the first tick); before it, `judgeAt()` is simply now. */
  start(): void {
    this.#lastTickMs = this.clock.now();
  }

  /** Stops the count: `judgeAt()` is now again (a stopped owner no longer ticks). */
  stop(): void {
    this.#lastTickMs = undefined;
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

/** What a peer's credit is bounded by (membership's peers, the directory's workers). */
export interface Heard {
  /** When it was really last heard (its "last seen" may be credited beyond it). */
  heardMs: number;
  /** The longest stretch this process could not listen since then (0 when heard). */
  longestDeafMs: number;
}

/**
 * A peer's "last seen" credited with `deafMs` this process could not listen (and its longest
 * stretch updated): never past now, and never more than one timeout plus the longest deaf stretch
 * since it was really heard (this one included). So a stall of any length drops nobody — each
 * peer gets a timeout of listening after it to be heard again, also when shorter late ticks follow
 * (capping by the current stretch alone took that back at the next late tick) — and a process
 * whose ticks keep running late still drops a dead peer: once it has listened for a timeout past
 * heard + timeout + the longest stretch, as the credit stops growing while the clock does (within
 * two timeouts, two of the longest stretches and a tick of when it was heard).
 */
export function creditedSeen(
  peer: Heard,
  seenMs: number,
  deafMs: number,
  nowMs: number,
  timeoutMs: number,
): number {
  peer.longestDeafMs = Math.max(peer.longestDeafMs, deafMs);
  return Math.min(nowMs, seenMs + deafMs, peer.heardMs + timeoutMs + peer.longestDeafMs);
}
