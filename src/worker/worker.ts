/**
 * The worker, one per worker process: advertises free slots, accepts offers (a claim), heartbeats
 * its attempts in batches per partition, runs each through the sandbox executor and reports
 * completion with the fence. On start it kills containers left by an earlier incarnation.
 *
 * Its half of a lease, on the monotonic clock: an attempt STARTS only while a heartbeat for it is
 * acknowledged and fresh, so a paused or cut-off worker starts nothing stale; a running attempt
 * whose acknowledgement runs out is killed here (self-fencing). One concern per module: the lease
 * table (lease-table.ts, attempt-memory.ts), offers, cancels and probes (offers.ts), start timing
 * (start-timing.ts), heartbeats (heartbeat.ts), self-fencing (self-fencing.ts), the completion
 * outbox (outbox.ts) and the drain (drain.ts), sharing one WorkerCore (core.ts).
 */
import type { BusSubscription } from "../cluster/bus.ts";
import { WorkerCore } from "./core.ts";
import { Drain, type DrainResult } from "./drain.ts";
import { Heartbeats } from "./heartbeat.ts";
import { Offers } from "./offers.ts";
import type { WorkerOptions } from "./options.ts";
import { CompletionOutbox } from "./outbox.ts";
import { SelfFencing } from "./self-fencing.ts";
import { StartTiming } from "./start-timing.ts";

export {
  FORGOTTEN_LIMIT,
  GIVEN_UP_LIMIT,
  GIVEN_UP_OUTPUT_CHARS,
  OUTPUT_NOT_KEPT,
} from "./attempt-memory.ts";
export { GIVE_BACK_REPORT_MS, HAND_BACK_REPORT_MS, type DrainResult } from "./drain.ts";
export { MAX_COVER_MS, endedBeforeKill } from "./lease.ts";
export type { WorkerOptions } from "./options.ts";
export { COMPLETION_WAIT_MS, COMPLETIONS_IN_FLIGHT } from "./outbox.ts";

export class Worker {
  readonly #c: WorkerCore;
  readonly #offers: Offers;
  readonly #drain: Drain;
  #subs: BusSubscription[] = [];

  constructor(o: WorkerOptions) {
    const c = new WorkerCore(o);
    c.parts = {
      outbox: new CompletionOutbox(c),
      starts: new StartTiming(c),
      beats: new Heartbeats(c),
      fencing: new SelfFencing(c),
    };
    this.#c = c;
    this.#offers = new Offers(c);
    this.#drain = new Drain(c);
  }

  async start(): Promise<void> {
    const { o } = this.#c;
    const reaped = await o.executor.reapOrphans(() => false);
    if (reaped > 0) o.log("warn", `killed ${reaped} orphaned task(s) of an earlier incarnation`);
    this.#subs.push(...this.#offers.subscribe());
    this.#c.parts.beats.beat();
  }

  get draining(): boolean {
    return this.#c.draining;
  }

  /** Attempts held, and how many of them are awake (visited by each round; the rest are parked). */
  get leaseCounts(): { held: number; awake: number } {
    const { table } = this.#c;
    return { held: table.size, awake: table.awakeLeases().length };
  }

  /**
   * Starts deferred because this worker's clock ran ahead of an owner's (a skew the tolerance does
   * not cover).
   */
  get skewDeferrals(): number {
    return this.#c.parts.starts.skewDeferrals;
  }

  /**
   * Drains (drain.ts): resolves once no attempt is left — every running one finished (or was
   * handed back at `timeoutMs`) and its completion was acknowledged or given up. Bounded by
   * `timeoutMs` + the kill + `HAND_BACK_REPORT_MS`. Call `stop()` after it.
   */
  drain(timeoutMs: number): Promise<DrainResult> {
    return this.#drain.drain(timeoutMs);
  }

  /** Ends a drain's wait for running attempts now: they are handed back (a second signal). */
  hurry(): void {
    this.#drain.hurry();
  }

  /** Stops taking work; running attempts are killed (their leases expire and they are retried). */
  async stop(): Promise<void> {
    const c = this.#c;
    c.stopping = true;
    c.parts.beats.stop();
    c.parts.fencing.stop();
    c.parts.beats.stopSoon();
    c.parts.outbox.stop();
    for (const s of this.#subs) s.unsubscribe();
    await Promise.all([...c.table.leases.values()].map((l) => c.kill(l, "worker stopping")));
    await c.o.executor.close();
  }
}
