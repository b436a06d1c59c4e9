/**
 * Dead letters and run events, durably: a dead-letter list per tenant and one outbox for webhooks
 * and mails. Writing a dead-lettered run's terminal record (`failed`, `timed_out`) also `create`s,
 * before the job state moves on: `dl.<tenant>.<run_id>` (the run as the API shows it; written
 * once, so its revision orders the list and is the cursor of `GET /v1/runs?status=dead_lettered`)
 * and `ob.<partition>.<tenant>.<run_id>` (`{run, tries, next_at_ms, done?}`, a pending delivery to
 * the tenant's dead-letter webhook and its `run.dead_lettered` subscriptions). Any other run event
 * a subscription asks for is written after the run's end (run-events.ts, `addEvent`) as
 * `ob.<partition>.<tenant>.<run_id>.<event>` (`event` set).
 *
 * The outbox delivers at once, and the sweeper of whoever holds the partition delivers what is
 * left after a crash. Each destination (outbox-targets.ts) delivered is recorded in the entry;
 * the entry is deleted (CAS) once every destination is done — a 2xx, a refusal retrying cannot
 * fix (SSRF rule, redirect, 4xx other than 429), an email handed to the Mailer — or after
 * `maxTries` rounds with a failure.
 *
 * Pitfall: delivery is at-least-once — a replay or a partition move can deliver twice; receivers
 * dedupe on the `Kairos-Delivery-Id` header (a dead letter's: its run id; a subscription's:
 * `<run_id>:<event>`).
 */
import { backoffMs, type BackoffPolicy } from "../lib/backoff.ts";
import type { Clock } from "../lib/clock.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { KvEntry, KvStore } from "../cluster/kv.ts";
import type { RunView } from "../protocol/model.ts";
import { notifyDeadLetter, type WebhookSender, type WebhookTarget } from "./webhook.ts";
import type { RunEventType, SubscriptionRecord } from "../protocol/events.ts";
import type { Mailer } from "./mail.ts";
import { destinationsOf, tryDestination, type TryResult } from "./outbox-targets.ts";
import {
  DEFAULT_DEAD_LETTER_RETENTION,
  pruneDeadLetters,
  type DeadLetterRetention,
} from "./dead-letter-retention.ts";

export const deadLetterKey = (tenantId: string, runId: string): string => `dl.${tenantId}.${runId}`;
export const outboxKey = (partition: number, tenantId: string, runId: string): string =>
  `ob.${partition}.${tenantId}.${runId}`;

/** A run event's pending delivery: the dead letter's key with the event's name after it. */
export const eventOutboxKey = (
  partition: number,
  tenantId: string,
  runId: string,
  type: RunEventType,
): string => `${outboxKey(partition, tenantId, runId)}.${type.slice("run.".length)}`;

/** A run is dead-lettered when it ends failed or timed out (its retries, if any, are spent). */
export function isDeadLetter(run: RunView): boolean {
  return run.status === "failed" || run.status === "timed_out";
}

/** A pending delivery. `event`: a run event's type (absent: a dead letter, the legacy entry). */
interface OutboxEntry {
  run: RunView;
  tries: number;
  next_at_ms: number;
  event?: RunEventType;
  /** The destinations already delivered (outbox-targets.ts ids). */
  done?: string[];
}

/**
 * Records a dead letter and its pending delivery (see the module header). Idempotent; throws
 * only on transport failures (the caller's pre effect then fails and is decided again).
 */
export async function recordDeadLetter(
  runs: KvStore,
  partition: number,
  run: RunView,
): Promise<void> {
  await runs.create(deadLetterKey(run.tenant_id, run.run_id), encode(run));
  await runs.create(
    outboxKey(partition, run.tenant_id, run.run_id),
    encode({ run, tries: 0, next_at_ms: 0 } satisfies OutboxEntry),
  );
}

export interface DeadLetterOutboxOptions {
  runs: () => KvStore;
  /** The partitions this node holds now: only their entries are delivered from here. */
  held: () => readonly number[];
  webhook: (tenantId: string) => Promise<WebhookTarget | undefined>;
  /** The tenant's run-event subscriptions (subscriptions.ts `SubscriptionLookup`); none: no subscriptions. */
  subscriptions?: (tenantId: string) => Promise<SubscriptionRecord[]>;
  /** Sends subscriptions' webhooks (the operator's policy and per-tenant bound). */
  webhookSender?: WebhookSender;
  /** Email subscriptions' mails (mail.ts); none: this node has no SMTP server. */
  mailer?: Mailer;
  clock: Clock;
  log: (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;
  /** How often pending entries are looked for (default 5 s). */
  sweepMs?: number;
  /** Deliveries tried (each up to 3 POSTs) before an entry is given up (default 10). */
  maxTries?: number;
  /** Entries handled per sweep (default 200; the rest wait for the next sweep). */
  maxPerSweep?: number;
  /** POSTs per delivery (default 3, with backoff between them). */
  postAttempts?: number;
  /** The tenants' dead-letter lists' bounds (dead-letter-retention.ts; default 10,000 per tenant, 30 days). */
  retention?: DeadLetterRetention;
  /** Time between two retention passes of this node (default a day; the first a minute after start). */
  retentionEveryMs?: number;
}

/** The wait before a failed delivery's next try: 5 s doubling, at most 10 minutes. */
const DELIVERY_BACKOFF: BackoffPolicy = { baseMs: 5_000, maxMs: 600_000 };

export class DeadLetterOutbox {
  readonly #o: DeadLetterOutboxOptions;
  readonly #inFlight = new Set<string>();
  #cancel: (() => void) | undefined;
  #cancelPrune: (() => void) | undefined;
  #stopped = false;
  #sweeping = false;

  constructor(o: DeadLetterOutboxOptions) {
    this.#o = o;
  }

  start(): void {
    this.#stopped = false;
    this.#arm();
    this.#armPrune(60_000);
  }

  stop(): void {
    this.#stopped = true;
    this.#cancel?.();
    this.#cancel = undefined;
    this.#cancelPrune?.();
    this.#cancelPrune = undefined;
  }

  /** One dead-letter retention pass now (also run daily once started); the number dropped. */
  async prune(): Promise<number> {
    const dropped = await pruneDeadLetters(
      this.#o.runs(),
      this.#o.retention ?? DEFAULT_DEAD_LETTER_RETENTION,
      this.#o.clock.now(),
    );
    if (dropped > 0) this.#o.log("info", "dead letters pruned", { dropped });
    return dropped;
  }

  #armPrune(ms: number): void {
    if (this.#stopped) return;
    this.#cancelPrune = this.#o.clock.setTimer(ms, () => {
      this.prune()
        .catch((e: unknown) =>
          this.#o.log("warn", "dead-letter retention pass failed", { err: String(e) }),
        )
        .finally(() => this.#armPrune(this.#o.retentionEveryMs ?? 86_400_000));
    });
  }

  /** Delivers one run's pending entry now (from the job shell, right after it dead-lettered it). */
  async kick(partition: number, tenantId: string, runId: string): Promise<void> {
    return this.kickKey(partition, outboxKey(partition, tenantId, runId));
  }

  /** Delivers the pending entry under `key` now (a dead letter's, or a run event's). */
  async kickKey(partition: number, key: string): Promise<void> {
    const e = await this.#o.runs().get(key);
    if (e) await this.#deliver(partition, e);
  }

  /**
   * Writes a run event's pending entry (`ob.<partition>.<tenant>.<run_id>.<event>`) and delivers
   * it now. Idempotent: an entry already there (a replay) is delivered, not written again.
   */
  async addEvent(partition: number, type: RunEventType, run: RunView): Promise<void> {
    const key = eventOutboxKey(partition, run.tenant_id, run.run_id, type);
    await this.#o
      .runs()
      .create(key, encode({ run, tries: 0, next_at_ms: 0, event: type } satisfies OutboxEntry));
    await this.kickKey(partition, key);
  }

  /**
   * One pass over the held partitions' pending entries that are due: ONE list of the whole
   * outbox (normally empty: entries live only until delivered), filtered to the held partitions,
   * so a node's sweep costs one KV operation however many partitions it holds.
   */
  async sweep(): Promise<void> {
    if (this.#sweeping) return;
    this.#sweeping = true;
    try {
      const now = this.#o.clock.now();
      const held = new Set(this.#o.held());
      if (held.size === 0 || this.#stopped) return;
      const due = (await this.#o.runs().list("ob.>"))
        .map((e) => ({ e, p: Number(e.key.split(".")[1]) }))
        .filter(({ e, p }) => held.has(p) && decode<OutboxEntry>(e.value).next_at_ms <= now)
        .slice(0, this.#o.maxPerSweep ?? 200);
      await Promise.all(due.map(({ e, p }) => this.#deliver(p, e)));
    } finally {
      this.#sweeping = false;
    }
  }

  #arm(): void {
    if (this.#stopped) return;
    this.#cancel = this.#o.clock.setTimer(this.#o.sweepMs ?? 5_000, () => {
      this.sweep()
        .catch((e: unknown) =>
          this.#o.log("warn", "dead-letter outbox sweep failed", { err: String(e) }),
        )
        .finally(() => this.#arm());
    });
  }

  async #deliver(partition: number, e: KvEntry): Promise<void> {
    if (this.#inFlight.has(e.key) || !this.#o.held().includes(partition)) return;
    this.#inFlight.add(e.key);
    try {
      const entry = decode<OutboxEntry>(e.value);
      const { run } = entry;
      const type = entry.event ?? "run.dead_lettered";
      const legacy = entry.event === undefined ? await this.#o.webhook(run.tenant_id) : undefined;
      const subs = (await this.#o.subscriptions?.(run.tenant_id)) ?? [];
      const done = new Set(entry.done ?? []);
      const pending = destinationsOf(type, run, legacy, subs, this.#o.webhookSender).filter(
        (d) => !done.has(d.id),
      );
      if (pending.some((d) => d.kind === "email") && !this.#o.mailer)
        this.#o.log(
          "warn",
          "run event for an email subscription, but this node has no --smtp-url",
          {
            run_id: run.run_id,
            tenant_id: run.tenant_id,
            event: type,
          },
        );
      const post = {
        nowS: () => Math.floor(this.#o.clock.now() / 1000),
        sleep: (ms: number) => new Promise<void>((r) => this.#o.clock.setTimer(ms, r)),
        ...(this.#o.postAttempts !== undefined ? { attempts: this.#o.postAttempts } : {}),
      };
      const results = await Promise.all(
        pending.map((d) => tryDestination(d, type, run, { mailer: this.#o.mailer, post })),
      );
      await this.#settle(e, entry, type, done, results);
    } finally {
      this.#inFlight.delete(e.key);
    }
  }

  /** After a round of tries: delete the entry when every destination is done, else reschedule. */
  async #settle(
    e: KvEntry,
    entry: OutboxEntry,
    type: RunEventType,
    done: Set<string>,
    results: TryResult[],
  ): Promise<void> {
    const runs = this.#o.runs();
    const ids = { run_id: entry.run.run_id, tenant_id: entry.run.tenant_id, event: type };
    const what = entry.event === undefined ? "dead-letter webhook" : "run-event webhook";
    for (const r of results) {
      if (r.result === "done") done.add(r.id);
      if (r.result === "done" && r.outcome && !r.outcome.ok)
        this.#o.log("warn", `${what} refused; not retried`, {
          ...ids,
          destination: r.id,
          status: r.outcome.status,
          err: r.outcome.error,
        });
    }
    const failed = results.filter(
      (r): r is Extract<TryResult, { result: "retry" }> => r.result === "retry",
    );
    if (results.every((r) => r.result === "done")) {
      await runs.delete(e.key, e.revision);
      return;
    }
    // Not sent at all (the tenant's deliveries on this node are at their bound): not a try.
    const tries = entry.tries + (failed.length > 0 ? 1 : 0);
    const why = failed.map((r) => ({
      destination: r.id,
      status: r.outcome.status,
      err: r.outcome.error,
    }));
    if (tries >= (this.#o.maxTries ?? 10)) {
      this.#o.log("warn", `${what} given up`, { ...ids, tries, failed: why });
      await runs.delete(e.key, e.revision);
      return;
    }
    if (failed.length === 0 && done.size === (entry.done ?? []).length) return; // nothing tried
    if (failed.length > 0)
      this.#o.log("warn", `${what} failed; will retry`, { ...ids, tries, failed: why });
    const next_at_ms =
      failed.length > 0
        ? this.#o.clock.now() + backoffMs(tries - 1, DELIVERY_BACKOFF)
        : entry.next_at_ms;
    await runs.update(
      e.key,
      encode({ ...entry, tries, next_at_ms, done: [...done] } satisfies OutboxEntry),
      e.revision,
    );
  }
}

/** Where the job shell's dead letters go. */
export interface DeadLetterDeps {
  /** The durable dead-letter list and webhook outbox; without it, delivered from memory. */
  outbox?: DeadLetterOutbox;
  /** The tenant's dead-letter webhook, if any (from its record; cached by the caller). */
  tenantWebhook?: (tenantId: string) => Promise<WebhookTarget | undefined>;
}

type Log = (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;

/**
 * The job shell's `dead_letter` effect: logged, then POSTed (HMAC-signed) to the tenant's webhook
 * when it has one — through the durable outbox when there is one (its keys were written with the
 * terminal record, before the state; a crash re-delivers), otherwise at once from memory (signed
 * with `clock`'s time, its retries spaced on it).
 */
export async function deliverDeadLetter(
  deps: DeadLetterDeps,
  log: Log,
  clock: Clock,
  partition: number,
  record: RunView,
): Promise<void> {
  log("warn", "run dead-lettered", {
    run_id: record.run_id,
    job_id: record.job_id,
    status: record.status,
    reason: record.reason,
  });
  if (deps.outbox) return deps.outbox.kick(partition, record.tenant_id, record.run_id);
  const target = await deps.tenantWebhook?.(record.tenant_id);
  if (!target) return;
  const r = await notifyDeadLetter(target, record, {
    nowS: () => Math.floor(clock.now() / 1000),
    sleep: (ms) => new Promise((done) => clock.setTimer(ms, done)),
  });
  if (!r.ok)
    log("warn", "dead-letter webhook failed", {
      run_id: record.run_id,
      status: r.status,
      err: r.error,
    });
}
