/**
 * The internal NATS API's responder on an API node: one queue subscription
 * (`kairos.<c>.api.*.>`, group `kairos-api`), so each request reaches one API node; each goes to
 * the handler (handler.ts) and gets one reply — only to the asker's own inbox (a request with any
 * other reply subject is dropped, counted, logged: src/cluster/reply-guard.ts).
 *
 * Bounded: at most `maxInFlight` at once, past that 429 `overloaded` at once; plain publishes
 * (no reply) are dropped; bodies over `maxBodyBytes` refused.
 *
 * Why not `@nats-io/services`: its `$SRV.PING|INFO|STATS` subjects answer anyone allowed there
 * with every endpoint and every tenant's counters, which service users must not get.
 */
import {
  Match,
  headers as natsHeaders,
  type Msg,
  type NatsConnection,
  type Subscription,
} from "@nats-io/transport-node";
import { KairosError } from "../lib/errors.ts";
import { replyRefusal, type InboxMode, type ReplyRefusal } from "../cluster/reply-guard.ts";
import { countBusRefusal } from "../metrics/index.ts";
import { errorReply, type NatsApiHandler } from "./handler.ts";
import { API_QUEUE_GROUP, apiWildcard, parseApiSubject } from "./subjects.ts";
import { encodeReply } from "./wire.ts";

export interface NatsApiServiceOptions {
  clusterName: string;
  maxInFlight: number;
  log: (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;
  /** Which reply subjects are answered (reply-guard.ts; default `per_user`: the node has NATS credentials). */
  inboxes?: InboxMode;
  /** Told of each request dropped because of its reply subject (after it is counted and logged). */
  onRefused?: (r: ReplyRefusal & { subject: string }) => void;
}

/** A running responder. */
export class NatsApiService {
  readonly #nc: NatsConnection;
  readonly #handle: NatsApiHandler;
  readonly #opts: NatsApiServiceOptions;
  #sub: Subscription | undefined;
  #inFlight = 0;
  #answered = 0;
  readonly #pending = new Set<Promise<void>>();

  constructor(nc: NatsConnection, handle: NatsApiHandler, opts: NatsApiServiceOptions) {
    this.#nc = nc;
    this.#handle = handle;
    this.#opts = opts;
  }

  /** Requests answered by this node so far (including error replies). */
  get answered(): number {
    return this.#answered;
  }

  /** The subject served. */
  get subject(): string {
    return apiWildcard(this.#opts.clusterName);
  }

  /** Subscribes; resolves once the server has the subscription. */
  async start(): Promise<void> {
    this.#sub = this.#nc.subscribe(this.subject, {
      queue: API_QUEUE_GROUP,
      callback: (err, msg) => {
        if (err) {
          this.#opts.log("error", "nats api subscription error", { err: String(err) });
          return;
        }
        this.#receive(msg);
      },
    });
    await this.#nc.flush();
  }

  #receive(msg: Msg): void {
    if (!msg.reply) return; // a plain publish: nobody to answer
    // Before anything is done for it: a reply subject that is not a tenant service's own inbox
    // (`$JS.API.…`, `$KV.…`, another identity's) would have this node publish there (reply-guard.ts).
    const tenantId = parseApiSubject(this.#opts.clusterName, msg.subject)?.tenantToken ?? "";
    const refused = replyRefusal(
      msg.reply,
      { kind: "service", tenantId },
      this.#opts.inboxes ?? "per_user",
    );
    if (refused) {
      countBusRefusal("nats_api", refused.reason);
      this.#opts.log(
        "warn",
        "nats api request dropped unanswered: its reply subject is not the asker's inbox",
        { reason: refused.reason, detail: refused.detail, subject: msg.subject.slice(0, 200) },
      );
      this.#opts.onRefused?.({ ...refused, subject: msg.subject.slice(0, 200) });
      return;
    }
    if (this.#inFlight >= this.#opts.maxInFlight) {
      const e = new KairosError(
        "overloaded",
        `this API node is handling ${this.#opts.maxInFlight} NATS API requests; retry`,
      );
      msg.respond(encodeReply(errorReply(e, () => undefined)));
      this.#answered++;
      return;
    }
    this.#inFlight++;
    const h = msg.headers;
    const p = this.#handle({
      subject: msg.subject,
      data: msg.data,
      header: (name) =>
        h !== undefined && h.has(name, Match.IgnoreCase)
          ? h.get(name, Match.IgnoreCase)
          : undefined,
    })
      .then((reply) => {
        msg.respond(encodeReply(reply), { headers: statusHeaders(reply.status) });
        this.#answered++;
      })
      .catch((e: unknown) =>
        this.#opts.log("error", "nats api reply failed", {
          err: String(e),
          subject: msg.subject.slice(0, 200),
        }),
      )
      .finally(() => {
        this.#inFlight--;
        this.#pending.delete(p);
      });
    this.#pending.add(p);
  }

  /** Stops taking requests and waits for those in flight to be answered. */
  async stop(): Promise<void> {
    const sub = this.#sub;
    this.#sub = undefined;
    if (sub !== undefined && !this.#nc.isClosed()) await sub.drain();
    await Promise.allSettled([...this.#pending]);
  }
}

/** `Kairos-Status: <http status>` on every reply, for tools that read headers only. */
function statusHeaders(status: number) {
  const h = natsHeaders();
  h.set("Kairos-Status", String(status));
  return h;
}
