/**
 * Reminders: actor timers live in the node's TimerQueues (one for the data plane, bounded in
 * turns in flight; one for `urgentTimers` types, the control plane), keyed by partition first so
 * a lost partition's go by prefix, and survive passivation. A timer message whose handling fails
 * (KV timeout, full mailbox, a trust blip) is delivered again with capped backoff while the
 * partition is held: at-least-once, so handlers must be idempotent (they re-check state).
 */
import { backoffMs, type BackoffPolicy } from "../lib/backoff.ts";
import { isKairosError } from "../lib/errors.ts";
import { partitionOf } from "../cluster/placement.ts";
import { TimerQueue } from "../cluster/timer-queue.ts";
import type { HostCore } from "./host-core.ts";
import type { Instance, RemindersPart, TimerPayload } from "./types.ts";

/**
 * Backoff of a timer message whose handling failed (at-least-once reminders), and of a partition's
 * load.
 */
export const TIMER_RETRY: BackoffPolicy = { baseMs: 250, maxMs: 5_000 };

/**
 * Back-pressure on timers: at most this many timer-driven actor turns (a burst's `fire`s) are in
 * flight on a node; the rest wait in the timer queue, in due order. Delivered all at once, a
 * 200,000-job burst put every `fire` (its state read, its record create) in the KV queue at once:
 * hundreds of thousands of operations waited there, and the tenant actors' slot batches and the
 * fleet's reports behind them ran past their deadlines and were done again. The data-plane KV
 * limiter allows 512 operations in flight (buckets.ts); a turn is mostly one or two of them.
 * The control plane's timers (`urgentTimers`) are not bounded by it.
 */
export const TIMER_TURNS_IN_FLIGHT = 512;

/** A timer's key in the node's queues: by partition first, so a lost partition's go by prefix. */
export function timerKey(partition: number, type: string, id: string, name: string): string {
  return `${partition}|${type}|${id}|${name}`;
}

export class Reminders implements RemindersPart {
  readonly #c: HostCore;
  readonly #timers: TimerQueue<TimerPayload>;
  /** Timers of `urgentTimers` types (the control plane: tenant actors), fired on their own. */
  readonly #urgent: TimerQueue<TimerPayload>;
  /** Data-plane timer deliveries in flight (see `TIMER_TURNS_IN_FLIGHT`). */
  #timerTurns = 0;
  readonly #timerTurnLimit: number;

  constructor(c: HostCore, deliver: (type: string, id: string, msg: unknown) => Promise<unknown>) {
    this.#c = c;
    const { o } = c;
    this.#timerTurnLimit = o.timerTurnsInFlight ?? TIMER_TURNS_IN_FLIGHT;
    if (!Number.isInteger(this.#timerTurnLimit) || this.#timerTurnLimit < 1)
      throw new RangeError(
        `timerTurnsInFlight must be a positive integer, got ${this.#timerTurnLimit}`,
      );
    this.#timers = new TimerQueue(o.clock, (k, t) => this.#fireTimer(deliver, k, t, true));
    this.#timers.admitWith(() => this.#timerTurns < this.#timerTurnLimit);
    this.#urgent = new TimerQueue(o.clock, (k, t) => this.#fireTimer(deliver, k, t, false));
  }

  /** Timer-driven turns in flight on the data-plane queue, and whether due timers wait for them. */
  get timerTurns(): { inFlight: number; held: boolean } {
    return { inFlight: this.#timerTurns, held: this.#timers.held };
  }

  get pending(): number {
    return this.#timers.size + this.#urgent.size;
  }

  /** The queue of a type's timers (see `ActorDefinition.urgentTimers`). */
  queue(type: string): TimerQueue<TimerPayload> {
    return this.#c.types.get(type)?.definition.urgentTimers === true ? this.#urgent : this.#timers;
  }

  arm(inst: Instance, name: string, atMs: number, msg: unknown): void {
    this.queue(inst.type).schedule(timerKey(inst.partition, inst.type, inst.id, name), atMs, {
      type: inst.type,
      id: inst.id,
      msg,
    });
  }

  cancel(inst: Instance, name: string): void {
    this.queue(inst.type).cancel(timerKey(inst.partition, inst.type, inst.id, name));
  }

  /**
   * Delivers a timer's message; if handling fails while the partition is still ours, delivers it
   * again with capped backoff (unless the timer was re-armed meanwhile). Timers are reminders.
   */
  #fireTimer(
    deliver: (type: string, id: string, msg: unknown) => Promise<unknown>,
    key: string,
    t: TimerPayload,
    bounded: boolean,
  ): void {
    const { o } = this.#c;
    let delivery = deliver(t.type, t.id, t.msg);
    if (bounded) {
      this.#timerTurns++;
      delivery = delivery.finally(() => {
        this.#timerTurns--;
        this.#timers.resume();
      });
    }
    delivery.catch((e: unknown) => {
      const partition = partitionOf({ type: t.type, id: t.id }, o.partitions);
      if (!this.#c.accepting.has(partition)) return; // a new owner re-arms from state on activation
      if (!isKairosError(e, "not_owner") && !isKairosError(e, "overloaded"))
        o.onError(`timer for ${t.type}/${t.id} (will retry)`, e);
      const queue = this.queue(t.type);
      if (queue.dueOf(key) !== undefined) return; // re-armed meanwhile: that one wins
      const failures = t.failures ?? 0;
      const delay = backoffMs(failures, TIMER_RETRY);
      queue.schedule(key, o.clock.now() + delay, { ...t, failures: failures + 1 });
    });
  }

  /** Drops a partition's timers (lost or released). */
  dropPartition(partition: number): void {
    this.#timers.cancelPrefix(`${partition}|`);
    this.#urgent.cancelPrefix(`${partition}|`);
  }

  stop(): void {
    this.#timers.stop();
    this.#urgent.stop();
  }
}
