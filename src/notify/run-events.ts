/**
 * Run events from the job shell: a run's end (the job actor's `run_ended` post effect) becomes a
 * pending outbox entry only when the tenant subscribes to its event for that job — so a tenant
 * without subscriptions costs a lookup in memory per run end (SubscriptionLookup: one watch of
 * every subscription per node), and never a KV operation. A dead letter's own entry is written with its
 * terminal record (dead-letters.ts); `run.dead_lettered` subscriptions are served from it.
 *
 * Pitfall: the event entry is written after the decision that ended the run (a post effect, so a
 * burst's turns never wait on it): if the job's owner dies in between, that one event is lost —
 * the run's record stands. From the entry on, delivery is at-least-once (the outbox's sweeper).
 */
import type { RunView } from "../protocol/model.ts";
import { endEventOf, subscribed } from "../protocol/events.ts";
import type { DeadLetterOutbox } from "./dead-letters.ts";
import type { SubscriptionLookup } from "./subscriptions.ts";

export class RunEvents {
  readonly #lookup: SubscriptionLookup;
  readonly #outbox: DeadLetterOutbox;

  constructor(lookup: SubscriptionLookup, outbox: DeadLetterOutbox) {
    this.#lookup = lookup;
    this.#outbox = outbox;
  }

  /** Starts following the subscriptions (one watch); until ready, lookups read per tenant. */
  start(): Promise<void> {
    return this.#lookup.start();
  }

  stop(): void {
    this.#lookup.stop();
  }

  /** A run ended: its event into the outbox and delivered, if the tenant subscribes to it. */
  async ended(partition: number, run: RunView): Promise<void> {
    const type = endEventOf(run.status);
    if (type === undefined) return;
    const subs = this.#lookup.cached(run.tenant_id) ?? (await this.#lookup.of(run.tenant_id));
    if (!subs.some((s) => subscribed(s, type, run.job_id))) return;
    await this.#outbox.addEvent(partition, type, run);
  }
}
