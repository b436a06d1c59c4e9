/**
 * The responder of the partitions a node holds: it subscribes to each held partition's actor
 * subject and worker plane, and answers only what may be answered — the subscribed subject only,
 * the asker's own inbox only (reply-guard.ts), on the worker plane only the kinds allowed from
 * workers and items naming the worker of the subject, and every item past its type's guard
 * (`MessageGuard`, address-guard.ts). It never throws into a NATS callback: an item is untrusted.
 */
import type { MessageGuard } from "../actors/actor.ts";
import type { ActorHost } from "../actors/host.ts";
import type { Bus, BusMsg, BusSubscription } from "../cluster/bus.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { EventBus } from "../cluster/events.ts";
import {
  partitionSubject,
  workerPlaneSender,
  workerPlaneWildcard,
  type ActorReply,
  type ActorRequest,
  type BatchRequest,
  type LocalActors,
} from "../cluster/router.ts";
import {
  REQUEST_INFO_HEADER,
  replyRefusal,
  type Asker,
  type InboxMode,
} from "../cluster/reply-guard.ts";
import type { Clock } from "../lib/clock.ts";
import { KairosError, isKairosError } from "../lib/errors.ts";
import { countBusRefusal } from "../metrics/index.ts";
import { answerBatch } from "./batch-answer.ts";

export interface ResponderOptions {
  readonly clusterName: string;
  /** Which reply subjects are answered: per-user inboxes when the node has credentials. */
  readonly inboxes: InboxMode;
  readonly bus: () => Bus;
  readonly host: () => ActorHost;
  readonly events: EventBus;
  readonly log: (
    level: "info" | "warn" | "error",
    msg: string,
    extra?: Record<string, unknown>,
  ) => void;
  readonly clock: Clock;
}

export class PartitionResponder {
  readonly #o: ResponderOptions;
  /** Per held partition: its actor-command and worker-plane subscriptions. */
  readonly #subs = new Map<number, BusSubscription[]>();
  readonly #guards = new Map<string, MessageGuard>();
  readonly #workerKinds = new Map<string, ReadonlySet<string>>();

  constructor(o: ResponderOptions) {
    this.#o = o;
  }

  /** Adds a check of every message to actors of `type` (see `KairosNode.guard`). */
  guard(type: string, fn: MessageGuard): void {
    this.#guards.set(type, fn);
  }

  /** The message kinds of `type` workers may send on their worker plane. */
  allowFromWorkers(type: string, kinds: readonly string[]): void {
    this.#workerKinds.set(type, new Set(kinds));
  }

  /**
   * The host's partitions as the command router's `LocalActors` (router.ts): an in-process
   * command passes what an actor-plane request over NATS passes — its type's guard (refused:
   * `message_refused` event, `permission_denied`) — and an actor's failure other than a
   * `KairosError` is logged as the wire logs it. Not checked: the reply subject and the subject
   * (there is none).
   */
  localActors(host: ActorHost): LocalActors {
    return {
      serves: (p) => host.serves(p),
      deliver: (t, i, msg) => {
        const it: ActorRequest = { t, i, m: msg };
        return this.#deliver(it, undefined, host).catch((e: unknown) => {
          this.#logFailure(it, e);
          throw e;
        });
      },
    };
  }

  unsubscribe(p: number): void {
    for (const sub of this.#subs.get(p) ?? []) sub.unsubscribe();
    this.#subs.delete(p);
  }

  /**
   * Why an item may not reach its actor (undefined: admitted); see `guard`, `allowFromWorkers`.
   * `sender`: the worker whose worker-plane subject the item came on (undefined: the actor plane);
   * the item must name that worker (`worker`), the only one its sender's identity may speak for.
   */
  #refusal(it: ActorRequest, sender: string | undefined): string | undefined {
    if (sender !== undefined) {
      const m = it.m as { kind?: unknown; worker?: unknown } | null;
      const kind = m?.kind;
      if (!this.#workerKinds.get(it.t)?.has(typeof kind === "string" ? kind : "")) {
        return `${it.t} message "${String(kind)}" is not accepted on the worker plane`;
      }
      if (m?.worker !== sender) {
        countBusRefusal("worker_plane", "identity");
        return `${it.t} message "${kind as string}" names worker ${JSON.stringify(String(m?.worker).slice(0, 80))} but came on worker ${JSON.stringify(sender)}'s subject`;
      }
    }
    return this.#guards.get(it.t)?.(it.i, it.m);
  }

  subscribe(p: number): void {
    if (this.#subs.has(p)) return;
    this.#subs.set(p, [
      this.#o.bus().subscribe(partitionSubject(this.#o.clusterName, p), {
        queue: "owners",
        callback: (e, m) => this.#serve(e, m, false, p),
      }),
      this.#o.bus().subscribe(workerPlaneWildcard(this.#o.clusterName, p), {
        queue: "owners",
        callback: (e, m) => this.#serve(e, m, true, p),
      }),
    ]);
  }

  #serve(err: Error | null, m: BusMsg, fromWorkers: boolean, p: number): void {
    if (err) {
      // A subscription refused by the server (permissions): the callback gets an empty message.
      this.#o.log("error", "partition subscription failed", { err: String(err) });
      return;
    }
    // Only what was published on the subscribed subject: a JetStream push consumer delivers stored
    // messages under their own subject (`$KV.…`) to whatever subject its creator chose, as the
    // account — past the permissions that keep workers off `p.<n>`.
    const c = this.#o.clusterName;
    if (
      fromWorkers
        ? !m.subject.startsWith(workerPlaneWildcard(c, p).slice(0, -1))
        : m.subject !== partitionSubject(c, p)
    ) {
      countBusRefusal(fromWorkers ? "worker_plane" : "actors", "subject");
      this.#o.events.emit({
        type: "reply_refused",
        responder: fromWorkers ? "worker_plane" : "actors",
        reason: "subject",
        subject: m.subject.slice(0, 200),
      });
      return;
    }
    const host = this.#o.host();
    let req: ActorRequest | BatchRequest | undefined;
    try {
      req = decode<ActorRequest | BatchRequest>(m.data);
    } catch {
      req = undefined;
    }
    // Answer only the asker's own inbox, never a subject it chose for us (reply-guard.ts). On the
    // worker plane the asker is the worker the subject names (its items must name it too: `#refusal`).
    const sender = fromWorkers ? workerPlaneSender(m.subject) : undefined;
    const asker: Asker =
      sender !== undefined ? { kind: "worker", workerIds: [sender] } : { kind: "actor_command" };
    const refused = replyRefusal(m.reply, asker, this.#o.inboxes, () =>
      m.headers?.get(REQUEST_INFO_HEADER),
    );
    if (refused) {
      const responder = fromWorkers ? "worker_plane" : "actors";
      countBusRefusal(responder, refused.reason);
      this.#o.log(
        "warn",
        "request dropped unanswered: its reply subject is not the asker's inbox",
        { responder, reason: refused.reason, detail: refused.detail, subject: m.subject },
      );
      this.#o.events.emit({
        type: "reply_refused",
        responder,
        reason: refused.reason,
        subject: m.subject,
      });
      return;
    }
    if (req === undefined || req === null || typeof req !== "object") {
      m.respond(
        encode({
          ok: false,
          e: { code: "invalid_argument", message: "undecodable actor request" },
        } satisfies ActorReply),
      );
      return;
    }
    this.#answer(m, req, sender, host);
  }

  /** Delivers a decoded request (one item or a batch) to its actors and answers with the reply. */
  #answer(
    m: BusMsg,
    req: ActorRequest | BatchRequest,
    sender: string | undefined,
    host: ActorHost,
  ): void {
    const deliver = (it: ActorRequest): Promise<unknown> => this.#deliver(it, sender, host);
    if ("b" in req) {
      // Answered once every item is, or at the batch's budget with the rest pending (batch-answer.ts).
      void answerBatch(req, deliver, this.#o.clock).then((v) =>
        m.respond(encode({ ok: true, v } satisfies ActorReply)),
      );
      return;
    }
    const one = req;
    deliver(one).then(
      (v) => m.respond(encode({ ok: true, v } satisfies ActorReply)),
      (e: unknown) => {
        const err = isKairosError(e)
          ? e.toJSON()
          : { code: "internal" as const, message: "internal error" };
        this.#logFailure(one, e);
        m.respond(encode({ ok: false, e: err } satisfies ActorReply));
      },
    );
  }

  /**
   * Delivers one item past its checks (`#refusal`), or rejects: `permission_denied` with a
   * `message_refused` event for a refused one. Never throws: an item is untrusted input (a
   * batch's `[null]` once threw here, inside the NATS callback or as an unhandled rejection that
   * ended the process).
   */
  #deliver(it: ActorRequest, sender: string | undefined, host: ActorHost): Promise<unknown> {
    if (!isActorRequest(it))
      return Promise.reject(
        new KairosError("invalid_argument", "malformed actor request item: needs string t and i"),
      );
    try {
      const why = this.#refusal(it, sender);
      if (why === undefined) return host.deliver(it.t, it.i, it.m);
      this.#o.events.emit({ type: "message_refused", actor: `${it.t}/${it.i}`, reason: why });
      return Promise.reject(new KairosError("permission_denied", why));
    } catch (e) {
      return Promise.reject(e instanceof Error ? e : new Error(String(e)));
    }
  }

  /** An actor's failure other than a refusal it answers with (`KairosError`): a bug, logged. */
  #logFailure(it: ActorRequest, e: unknown): void {
    if (!isKairosError(e)) this.#o.log("error", `actor ${it.t}/${it.i} failed`, { err: String(e) });
  }
}

/** An actor request item as it arrived (untrusted): an object with string `t` and `i`. */
function isActorRequest(v: unknown): v is ActorRequest {
  if (typeof v !== "object" || v === null) return false;
  const r = v as { t?: unknown; i?: unknown };
  return typeof r.t === "string" && typeof r.i === "string";
}
