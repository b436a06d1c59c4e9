/**
 * Webhook notifications: an HMAC-signed POST with
 * `Kairos-Signature: t=<unix s>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`, `Kairos-Event: <type>`
 * and `Kairos-Delivery-Id`; receivers verify the signature, reject old timestamps and dedupe on the
 * delivery id. The tenant's dead-letter webhook gets `{"type": "run.dead_lettered", "run": …}`
 * (delivery id: the run id); a run-event subscription `{"id": "<run_id>:<type>", "type", "run"}`
 * (delivery id: that id), signed with the subscription's own secret. Up to `attempts` tries with
 * backoff per call; durability is the outbox's (dead-letters.ts).
 *
 * Pitfall: the URL is tenant-chosen (SSRF). Unless `WebhookPolicy` relaxes it: https only;
 * redirects never followed; literal addresses and loopback names refused; a name is resolved here,
 * every address checked against the blocked ranges (src/lib/net-address.ts) inside the socket's
 * `lookup`, so the socket connects to the address checked (no DNS-rebinding window). At most
 * `maxConcurrentPerTenant` deliveries at once and `maxQueuedPerTenant` waiting per tenant.
 */
import { createHmac } from "node:crypto";
import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { backoffMs, type BackoffPolicy } from "../lib/backoff.ts";
import { isBlockedAddress, isInternalHost } from "../lib/net-address.ts";
import type { RunView } from "../protocol/model.ts";
import { eventId, type RunEventType } from "../protocol/events.ts";

export function signWebhook(secret: string, timestampS: number, body: string): string {
  return `t=${timestampS},v1=${createHmac("sha256", secret).update(`${timestampS}.${body}`).digest("hex")}`;
}

/** The operator's rules for webhook destinations (`kairos node --webhook-allow-*`). */
export interface WebhookPolicy {
  /** Allow `http:` URLs. Default false. */
  readonly allowHttp: boolean;
  /** Allow loopback, private, link-local, CGNAT and other non-public addresses. Default false. */
  readonly allowPrivateAddresses: boolean;
  /** Deliveries of one tenant in flight at once. Default 4. */
  readonly maxConcurrentPerTenant: number;
  /** Deliveries of one tenant waiting for a turn; beyond it a delivery is dropped. Default 100. */
  readonly maxQueuedPerTenant: number;
}

export const DEFAULT_WEBHOOK_POLICY: WebhookPolicy = Object.freeze({
  allowHttp: false,
  allowPrivateAddresses: false,
  maxConcurrentPerTenant: 4,
  maxQueuedPerTenant: 100,
});

/** The pause between the POSTs of one delivery: 0.5 s doubling (0.5, 1 s with the default 3), at most 30 s. */
const POST_BACKOFF: BackoffPolicy = { baseMs: 500, maxMs: 30_000 };

/** Resolves a host name to all its addresses (injectable for tests; default: the OS resolver). */
export type Resolve = (hostname: string) => Promise<LookupAddress[]>;

const systemResolve: Resolve = (hostname) =>
  new Promise((resolve, reject) =>
    dnsLookup(hostname, { all: true, verbatim: true }, (err, addrs) =>
      err ? reject(err) : resolve(addrs),
    ),
  );

export { isBlockedAddress };

/** A destination refused before anything was sent. */
export class WebhookRefused extends Error {
  override readonly name = "WebhookRefused";
}

type LookupCallback = (
  err: Error | null,
  address: string | LookupAddress[],
  family?: number,
) => void;

/**
 * The `lookup` handed to the socket: resolves, drops blocked addresses, and gives the socket
 * only addresses that passed — the connection cannot go anywhere that was not checked.
 */
function checkedLookup(policy: WebhookPolicy, resolve: Resolve, refused: (why: string) => void) {
  return (hostname: string, options: { all?: boolean | undefined }, cb: LookupCallback): void => {
    resolve(hostname).then(
      (addrs) => {
        const ok = policy.allowPrivateAddresses
          ? addrs
          : addrs.filter((a) => !isBlockedAddress(a.address));
        if (ok.length === 0) {
          const why = `${hostname} resolves only to non-public addresses (${addrs.map((a) => a.address).join(", ") || "none"})`;
          refused(why);
          cb(new WebhookRefused(why), options.all ? [] : "");
          return;
        }
        if (options.all) cb(null, ok);
        else cb(null, ok[0]!.address, ok[0]!.family);
      },
      (e: unknown) => cb(e instanceof Error ? e : new Error(String(e)), options.all ? [] : ""),
    );
  };
}

/** Outcome of one POST: the status, or why it was not sent / failed. */
type PostResult = { status: number } | { refused: string } | { error: string };

/** Checks the URL's scheme and literal address; undefined when it may be tried. */
function refuseUrl(url: URL, policy: WebhookPolicy): string | undefined {
  if (url.protocol !== "https:" && !(url.protocol === "http:" && policy.allowHttp)) {
    return `${url.protocol.replace(/:$/, "")} webhooks are not allowed (https only${url.protocol === "http:" ? "; the operator can allow http with --webhook-allow-http" : ""})`;
  }
  if (url.username !== "" || url.password !== "")
    return "credentials in the webhook URL are not allowed";
  // A literal address or a loopback name (`localhost.`, `x.localhost`) is refused before any
  // lookup; a name's addresses are checked in the connection's lookup (checkedLookup).
  if (!policy.allowPrivateAddresses && isInternalHost(url.hostname))
    return `${url.hostname} is not a public address`;
  return undefined;
}

async function post(
  url: URL,
  headers: Record<string, string>,
  body: string,
  timeoutMs: number,
  policy: WebhookPolicy,
  resolve: Resolve,
): Promise<PostResult> {
  const early = refuseUrl(url, policy);
  if (early !== undefined) return { refused: early };
  let refusedWhy: string | undefined;
  const lookup = checkedLookup(policy, resolve, (why) => (refusedWhy = why));
  const send = url.protocol === "https:" ? httpsRequest : httpRequest;
  return new Promise<PostResult>((done) => {
    const req = send(url, {
      method: "POST",
      headers: { ...headers, "content-length": String(Buffer.byteLength(body)) },
      lookup,
      signal: AbortSignal.timeout(timeoutMs),
      agent: false, // one connection per delivery: no pooled socket to an address checked earlier
    });
    req.once("response", (res: IncomingMessage) => {
      res.destroy(); // the body is not needed
      done({ status: res.statusCode ?? 0 });
    });
    req.once("error", (e: Error) =>
      done(refusedWhy !== undefined ? { refused: refusedWhy } : { error: e.message }),
    );
    req.end(body);
  });
}

/** Per-tenant bound on deliveries in flight, with a bounded wait list. */
class TenantLimiter {
  readonly #state = new Map<string, { active: number; waiting: (() => void)[] }>();
  constructor(
    readonly maxActive: number,
    readonly maxWaiting: number,
  ) {}

  /** Runs `fn` within the tenant's bound; undefined when the wait list is full (dropped). */
  async run<T>(tenantId: string, fn: () => Promise<T>): Promise<T | undefined> {
    let s = this.#state.get(tenantId);
    if (!s) this.#state.set(tenantId, (s = { active: 0, waiting: [] }));
    if (s.active >= this.maxActive) {
      if (s.waiting.length >= this.maxWaiting) return undefined;
      await new Promise<void>((r) => s.waiting.push(r));
    }
    s.active++;
    try {
      return await fn();
    } finally {
      s.active--;
      const next = s.waiting.shift();
      if (next) next();
      else if (s.active === 0) this.#state.delete(tenantId);
    }
  }
}

/** Sends webhooks under one policy; one per process (its per-tenant bound is per process). */
export class WebhookSender {
  readonly policy: WebhookPolicy;
  readonly #resolve: Resolve;
  readonly #limiter: TenantLimiter;

  constructor(policy: Partial<WebhookPolicy> = {}, opts: { resolve?: Resolve } = {}) {
    this.policy = Object.freeze({ ...DEFAULT_WEBHOOK_POLICY, ...policy });
    for (const k of ["maxConcurrentPerTenant", "maxQueuedPerTenant"] as const) {
      const v = this.policy[k];
      if (!Number.isInteger(v) || v < (k === "maxQueuedPerTenant" ? 0 : 1))
        throw new RangeError(
          `webhook ${k} must be a ${k === "maxQueuedPerTenant" ? "non-negative" : "positive"} integer, got ${v}`,
        );
    }
    this.#resolve = opts.resolve ?? systemResolve;
    this.#limiter = new TenantLimiter(
      this.policy.maxConcurrentPerTenant,
      this.policy.maxQueuedPerTenant,
    );
  }

  /** Runs `fn` within `tenantId`'s bound; undefined when too many are waiting. */
  limit<T>(tenantId: string, fn: () => Promise<T>): Promise<T | undefined> {
    return this.#limiter.run(tenantId, fn);
  }

  post(
    url: URL,
    headers: Record<string, string>,
    body: string,
    timeoutMs: number,
  ): Promise<PostResult> {
    return post(url, headers, body, timeoutMs, this.policy, this.#resolve);
  }
}

/** The strict sender used when a target carries none (https only, public addresses only). */
const defaultSender = new WebhookSender();

export interface WebhookTarget {
  url: string;
  secret: string;
  /** The operator's sender (policy and per-tenant bound); default: the strict one. */
  sender?: WebhookSender;
}

export interface WebhookOutcome {
  ok: boolean;
  status?: number;
  error?: string;
  /** The destination was refused (scheme, address, redirect): nothing more was tried. */
  refused?: boolean;
}

/** What a POST carries: its JSON body, its delivery id and the tenant whose bound it counts against. */
export interface WebhookPayload {
  body: string;
  deliveryId: string;
  tenantId: string;
  /** `Kairos-Event` header: the event type. */
  type: string;
}

/** The legacy dead-letter POST: `{"type": "run.dead_lettered", "run": …}`, delivery id = run id. */
export function notifyDeadLetter(
  target: WebhookTarget,
  run: RunView,
  opts: PostOptions,
): Promise<WebhookOutcome> {
  const payload = {
    body: JSON.stringify({ type: "run.dead_lettered", run }),
    deliveryId: run.run_id,
    tenantId: run.tenant_id,
    type: "run.dead_lettered",
  };
  return postSigned(target, payload, opts);
}

/** A subscription's POST: `{"id": "<run_id>:<type>", "type", "run"}`, delivery id = the event id. */
export function notifyRunEvent(
  target: WebhookTarget,
  type: RunEventType,
  run: RunView,
  opts: PostOptions,
): Promise<WebhookOutcome> {
  const id = eventId(run.run_id, type);
  const payload = {
    body: JSON.stringify({ id, type, run }),
    deliveryId: id,
    tenantId: run.tenant_id,
    type,
  };
  return postSigned(target, payload, opts);
}

export interface PostOptions {
  nowS: () => number;
  attempts?: number;
  timeoutMs?: number;
  sleep: (ms: number) => Promise<void>;
}

/**
 * POSTs a signed payload (up to `attempts` tries with backoff) within the tenant's bound. The
 * delivery id is the same on every redelivery (the outbox is at-least-once).
 */
async function postSigned(
  target: WebhookTarget,
  payload: WebhookPayload,
  opts: PostOptions,
): Promise<WebhookOutcome> {
  const sender = target.sender ?? defaultSender;
  let url: URL;
  try {
    url = new URL(target.url);
  } catch {
    return { ok: false, refused: true, error: "refused: the webhook URL does not parse" };
  }
  const { body } = payload;
  const sent = await sender.limit(payload.tenantId, async (): Promise<WebhookOutcome> => {
    let last: WebhookOutcome = { ok: false, error: "not sent" };
    for (let i = 0; i < (opts.attempts ?? 3); i++) {
      if (i > 0) await opts.sleep(backoffMs(i - 1, POST_BACKOFF));
      const headers = {
        "content-type": "application/json",
        "kairos-signature": signWebhook(target.secret, opts.nowS(), body),
        "kairos-delivery-id": payload.deliveryId,
        "kairos-event": payload.type,
      };
      const r = await sender.post(url, headers, body, opts.timeoutMs ?? 5000);
      if ("refused" in r) return { ok: false, refused: true, error: `refused: ${r.refused}` };
      if ("error" in r) {
        last = { ok: false, error: r.error };
        continue;
      }
      if (r.status >= 200 && r.status < 300) return { ok: true, status: r.status };
      if (r.status >= 300 && r.status < 400)
        return {
          ok: false,
          refused: true,
          status: r.status,
          error: "refused: the receiver answered with a redirect, which is not followed",
        };
      last = { ok: false, status: r.status };
      if (r.status >= 400 && r.status < 500 && r.status !== 429) return last;
    }
    return last;
  });
  return (
    sent ?? {
      ok: false,
      error: `dropped: more than ${sender.policy.maxQueuedPerTenant} deliveries of tenant ${payload.tenantId} waiting`,
    }
  );
}
