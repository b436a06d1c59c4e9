/**
 * Kairos's own request path over a NATS connection: one wildcard subscription on
 * `<inboxPrefix>.<nuid>.*`, each request published with reply `<that>.<token>`, and a map of
 * token → pending promise. It replaces `nc.request` for the hot callers (the actor router, offers
 * to workers, every KV request through `withMuxedRequests`).
 *
 * Why: nats-core 3.x builds and discards an Error with a stack for every successful request; here
 * an Error is built only when a request fails. The outcomes match `nc.request` with
 * `noAsyncTraces` (reply, no responders, timeout, connection closed, closed/draining, permission
 * violation), so callers classify them unchanged.
 *
 * Pitfalls: the inbox prefix is the connection's `inboxPrefix` (`_INBOX_<user>`, the only inbox
 * a role may subscribe to). No limit on pending requests: each lives at most its timeout and the
 * callers bound their own concurrency.
 */
import {
  createInbox,
  errors,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
  type Subscription,
} from "@nats-io/transport-node";
import { systemClock, type Clock } from "../lib/clock.ts";
import type { Bus } from "./bus.ts";
import { armDeadline } from "./deadline.ts";

export interface MuxRequestOptions {
  /** Milliseconds (`nc.request`'s default of 1000 when 0). */
  timeout: number;
  headers?: MsgHdrs;
}

interface Pending {
  resolve: (m: Msg) => void;
  reject: (e: Error) => void;
  /** Disarms the timeout. */
  cancel: () => void;
  subject: string;
}

/** The inbox prefix the client itself uses for `nc.request` (connect option `inboxPrefix`). */
function clientInboxPrefix(nc: NatsConnection): string | undefined {
  const p = (nc as { options?: { inboxPrefix?: unknown } }).options?.inboxPrefix;
  return typeof p === "string" && p.length > 0 ? p : undefined;
}

export class RequestMux {
  readonly #nc: NatsConnection;
  readonly #clock: Clock;
  readonly #prefix: string;
  /** `<prefix>.<nuid>.`: a new nuid with each (re)created subscription. */
  #base = "";
  #sub: Subscription | undefined;
  #next = 0;
  readonly #pending = new Map<string, Pending>();

  constructor(nc: NatsConnection, opts: { inboxPrefix?: string; clock?: Clock } = {}) {
    this.#nc = nc;
    this.#clock = opts.clock ?? systemClock;
    this.#prefix = opts.inboxPrefix ?? clientInboxPrefix(nc) ?? "_INBOX";
    void nc.closed().then(() => {
      if (this.#pending.size === 0) return;
      const closed = new errors.RequestError("connection closed");
      this.#failAll(() => new errors.RequestError(closed.message, { cause: closed }));
    });
    void this.#watchPublishViolations();
  }

  /** The prefix of this mux's reply subjects, `<inboxPrefix>.<nuid>.` (empty before the first request). */
  get replyBase(): string {
    return this.#base;
  }

  /** Requests awaiting their reply. */
  get pending(): number {
    return this.#pending.size;
  }

  request(subject: string, data: Uint8Array, opts: MuxRequestOptions): Promise<Msg> {
    const nc = this.#nc;
    if (nc.isClosed()) return Promise.reject(new errors.ClosedConnectionError());
    if (nc.isDraining()) return Promise.reject(new errors.DrainingConnectionError());
    const timeout = opts.timeout || 1000;
    if (timeout < 1)
      return Promise.reject(
        errors.InvalidArgumentError.format("timeout", "must be greater than 0"),
      );
    try {
      this.#subscribe();
    } catch (e) {
      return Promise.reject(e instanceof Error ? e : new Error(String(e)));
    }
    const token = (this.#next++).toString(36);
    const reply = this.#base + token;
    return new Promise<Msg>((resolve, reject) => {
      // Stall-aware (deadline.ts): a reply waiting in the socket while this loop stalled counts.
      const cancel = armDeadline(this.#clock, timeout, () => {
        if (this.#pending.delete(token)) reject(new errors.TimeoutError());
      });
      this.#pending.set(token, { resolve, reject, cancel, subject });
      try {
        nc.publish(subject, data, opts.headers ? { reply, headers: opts.headers } : { reply });
      } catch (e) {
        cancel();
        this.#pending.delete(token);
        reject(e instanceof Error ? e : new Error(String(e)));
      }
    });
  }

  #subscribe(): void {
    if (this.#sub) return;
    const base = `${createInbox(this.#prefix)}.`;
    this.#sub = this.#nc.subscribe(`${base}*`, { callback: (err, m) => this.#dispatch(err, m) });
    this.#base = base;
  }

  #dispatch(err: Error | null, m: Msg): void {
    if (err) {
      // The server refused the inbox subscription (permissions): it is gone, and so is every
      // pending reply. The next request subscribes again.
      this.#sub = undefined;
      this.#failAll(() => new errors.RequestError(err.message, { cause: err }));
      return;
    }
    const token = m.subject.substring(this.#base.length);
    const p = this.#pending.get(token);
    if (!p) return; // timed out already, or a duplicate
    this.#pending.delete(token);
    p.cancel();
    if (m.data.length === 0 && m.headers?.code === 503) {
      p.reject(
        new errors.RequestError(`no responders: '${p.subject}'`, {
          cause: new errors.NoRespondersError(p.subject),
        }),
      );
    } else {
      p.resolve(m);
    }
  }

  #failAll(make: () => Error): void {
    if (this.#pending.size === 0) return;
    const all = [...this.#pending.values()];
    this.#pending.clear();
    for (const p of all) {
      p.cancel();
      p.reject(make());
    }
  }

  /**
   * A publish the server refused (permissions) fails the oldest pending request to that subject
   * at once, as `nc.request` does, instead of leaving it to time out.
   */
  async #watchPublishViolations(): Promise<void> {
    for await (const s of this.#nc.status()) {
      if (
        s.type !== "error" ||
        !(s.error instanceof errors.PermissionViolationError) ||
        s.error.operation !== "publish"
      )
        continue;
      const err = s.error;
      for (const [token, p] of this.#pending) {
        if (p.subject !== err.subject) continue;
        this.#pending.delete(token);
        p.cancel();
        p.reject(new errors.RequestError(err.message, { cause: err }));
        break;
      }
    }
  }
}

const muxes = new WeakMap<NatsConnection, RequestMux>();

/** The connection's one `RequestMux` (created on first use). */
export function requestMux(nc: NatsConnection, clock?: Clock): RequestMux {
  let m = muxes.get(nc);
  if (!m) {
    m = new RequestMux(nc, clock ? { clock } : {});
    muxes.set(nc, m);
  }
  return m;
}

/** The connection as a `Bus` whose requests go through its `RequestMux`; everything else is `nc`'s own. */
export function muxedBus(nc: NatsConnection, clock?: Clock): Bus {
  const mux = requestMux(nc, clock);
  return {
    publish: (subject, data) => nc.publish(subject, data),
    request: (subject, data, opts) => mux.request(subject, data, opts),
    subscribe: (subject, opts) => nc.subscribe(subject, opts),
    flush: () => nc.flush(),
    isClosed: () => nc.isClosed(),
  };
}

/**
 * `nc` with its `request` replaced by the connection's mux (everything else is `nc`'s own), for a
 * library that takes a connection and makes requests on it: the JetStream client behind the KV
 * buckets makes one per KV operation (`jetstream(withMuxedRequests(nc))`, buckets.ts). Through
 * `nc.request` each of them built a discarded Error (see the module header): 7.9 % of a
 * scheduler's CPU while it prepared a 200,000-run burst.
 */
export function withMuxedRequests(nc: NatsConnection, clock?: Clock): NatsConnection {
  const mux = requestMux(nc, clock);
  const request = (
    subject: string,
    data?: Uint8Array,
    opts?: { timeout?: number; headers?: MsgHdrs },
  ): Promise<Msg> =>
    mux.request(subject, data ?? new Uint8Array(0), {
      timeout: opts?.timeout ?? 1000,
      ...(opts?.headers ? { headers: opts.headers } : {}),
    });
  return new Proxy(nc, {
    get(target, p) {
      if (p === "request") return request;
      const v: unknown = Reflect.get(target, p, target);
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}
