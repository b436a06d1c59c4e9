/**
 * The auth callout served by API nodes: nats-server asks on `$SYS.REQ.USER.AUTH` whether a
 * non-static user may connect; the answer, signed with the callout issuer key (nats-accounts.ts),
 * refuses with a reason or carries a user JWT placing the connection in SERVICES with its tenant's
 * permissions. Admitted: `service-<name>` with its secret, record not revoked, tenant existing —
 * read from KV on every connection; the user JWT expires after `userJwtTtlS` (1 h).
 *
 * Silence is an answer: an unknown name gets none (another cluster on the same server may know
 * it) and nats-server refuses after its auth timeout. With `xkeySeed` requests and answers are
 * sealed. Bounded: `maxRequestBytes`, `maxInFlight`, a per-address and a per-node rate; past any,
 * a refusal ("busy"), never a queue. Every decision is logged (`service_auth`).
 *
 * Pitfall: anyone reaching the NATS port can trigger callouts; the per-address bound keeps one
 * address from spending everyone's budget. `decide` is pure; `ServiceAuthCallout` is the shell.
 */
import { decode, encodeAuthorizationResponse, encodeUser } from "@nats-io/jwt";
import { fromCurveSeed, fromSeed, type KeyPair } from "@nats-io/nkeys";
import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import { servicePermissions, serviceUser } from "../cluster/nats-permissions.ts";
import { AUTH_CALLOUT_SUBJECT, SERVICES_ACCOUNT } from "../cluster/nats-accounts.ts";
import type { Clock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import { TokenBuckets } from "../http/rate-limit.ts";
import type { ServiceCheck } from "../tenants/services.ts";

/** The parts of nats-server's authorization request that the decision reads. */
export interface CalloutRequest {
  /** The user nkey the server generated for this connection: the user JWT's subject. */
  userNkey: string;
  /** The server's id (its public nkey): the response's audience. */
  serverId: string;
  user: string;
  password: string;
  /** The client's address, for logs. */
  host: string;
}

/** What the service lookup answered, and whether its tenant still exists. */
export type Lookup =
  ServiceCheck | { ok: true; record: { tenant_id: string; name: string }; tenantGone: true };

export type Decision =
  | { kind: "admit"; name: string; tenantId: string }
  | {
      kind: "refuse";
      name: string;
      reason: "bad_secret" | "revoked" | "tenant_gone" | "busy" | "unavailable";
    }
  | { kind: "ignore"; why: "not_a_service_user" | "unknown_service" };

const SERVICE_PREFIX = "service-";

/** The service name in a user name (`service-<name>`), or undefined. */
export function serviceNameOf(user: string): string | undefined {
  return user.startsWith(SERVICE_PREFIX) && user.length > SERVICE_PREFIX.length
    ? user.slice(SERVICE_PREFIX.length)
    : undefined;
}

/** The decision for a looked-up request (pure). */
export function decide(name: string, lookup: Lookup): Decision {
  if (!lookup.ok)
    return lookup.reason === "unknown_service"
      ? { kind: "ignore", why: "unknown_service" }
      : { kind: "refuse", name, reason: lookup.reason };
  if ("tenantGone" in lookup) return { kind: "refuse", name, reason: "tenant_gone" };
  return { kind: "admit", name, tenantId: lookup.record.tenant_id };
}

/** The human sentence of a refusal (sent to nats-server, which logs it and refuses the client). */
export function refusalText(reason: Extract<Decision, { kind: "refuse" }>["reason"]): string {
  switch (reason) {
    case "bad_secret":
      return "kairos: wrong secret for this service identity";
    case "revoked":
      return "kairos: this service identity was revoked";
    case "tenant_gone":
      return "kairos: the tenant of this service identity no longer exists";
    case "busy":
      return "kairos: too many connection attempts, retry later";
    case "unavailable":
      return "kairos: this identity cannot be checked now (the tenants bucket did not answer), retry later";
  }
}

interface RequestClaims {
  user_nkey?: unknown;
  server_id?: { id?: unknown };
  client_info?: { host?: unknown };
  connect_opts?: { user?: unknown; pass?: unknown };
}

const str = (v: unknown, max: number): string => (typeof v === "string" ? v.slice(0, max) : "");

/**
 * Decodes nats-server's request (a JWT signed by the server's key; `decode` checks the signature
 * against its issuer). Throws on anything malformed.
 */
export function parseCalloutRequest(data: Uint8Array): CalloutRequest {
  const claims = decode<RequestClaims>(new TextDecoder().decode(data));
  const n = claims.nats;
  const req: CalloutRequest = {
    userNkey: str(n.user_nkey, 64),
    serverId: str(n.server_id?.id, 64),
    user: str(n.connect_opts?.user, 256),
    password: str(n.connect_opts?.pass, 256),
    host: str(n.client_info?.host, 64),
  };
  if (!/^U[A-Z2-7]{55}$/.test(req.userNkey) || !/^N[A-Z2-7]{55}$/.test(req.serverId)) {
    throw new KairosError(
      "invalid_argument",
      "auth callout request without a user nkey or server id",
    );
  }
  return req;
}

export interface CalloutOptions {
  clusterName: string;
  /** The account nkey seed that signs answers (`callout_issuer_seed` of the API user's credentials). */
  issuerSeed: string;
  /**
   * The curve key seed the server seals requests to (`callout_xkey_seed`); answers are sealed back.
   * With it, a request that is not sealed is dropped (the server's config and this key disagree).
   */
  xkeySeed?: string;
  /** Looks a service up and checks its secret and tenant. */
  lookup: (name: string, secret: string) => Promise<Lookup>;
  clock: Clock;
  log: (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;
  /** How long an admitted connection's user JWT is valid (default 3600 s). */
  userJwtTtlS?: number;
  maxInFlight?: number;
  /** Callouts a second this node checks, in all. */
  perSecond?: number;
  burst?: number;
  /** Callouts a second from one client address (so one address cannot spend everyone's budget). */
  perHostPerSecond?: number;
  perHostBurst?: number;
  maxRequestBytes?: number;
}

/** Limits of the callout on each API node. */
export const CALLOUT_DEFAULTS: Readonly<
  Required<
    Pick<
      CalloutOptions,
      | "userJwtTtlS"
      | "maxInFlight"
      | "perSecond"
      | "burst"
      | "perHostPerSecond"
      | "perHostBurst"
      | "maxRequestBytes"
    >
  >
> = Object.freeze({
  userJwtTtlS: 3600,
  maxInFlight: 64,
  perSecond: 50,
  burst: 100,
  perHostPerSecond: 5,
  perHostBurst: 20,
  maxRequestBytes: 32 * 1024,
});
/** Client addresses whose callout rate is tracked (least recently seen forgotten first). */
const MAX_TRACKED_HOSTS = 10_000;
/** The header carrying the server's curve key when it sealed the request. */
const SERVER_XKEY_HEADER = "Nats-Server-Xkey";
/** Most subscriptions an admitted service connection may hold. */
const SERVICE_MAX_SUBS = 100;

/** The queue group of a cluster's API nodes on the callout subject: one answer per cluster. */
export function calloutQueue(clusterName: string): string {
  return `kairos-auth-${clusterName}`;
}

/** The NATS side: one queue subscription on `$SYS.REQ.USER.AUTH`. */
export class ServiceAuthCallout {
  readonly #nc: NatsConnection;
  readonly #o: CalloutOptions & typeof CALLOUT_DEFAULTS;
  readonly #issuer: KeyPair;
  readonly #xkey: KeyPair | undefined;
  readonly #rate: TokenBuckets;
  readonly #hostRate: TokenBuckets;
  #sub: Subscription | undefined;
  #inFlight = 0;
  readonly #pending = new Set<Promise<void>>();

  constructor(nc: NatsConnection, opts: CalloutOptions) {
    this.#nc = nc;
    this.#o = { ...CALLOUT_DEFAULTS, ...opts };
    try {
      this.#issuer = fromSeed(new TextEncoder().encode(opts.issuerSeed));
    } catch (e) {
      throw new KairosError("invalid_argument", "callout_issuer_seed is not an nkey seed", {
        field: "nats-creds",
        cause: e,
      });
    }
    try {
      this.#xkey =
        opts.xkeySeed === undefined
          ? undefined
          : fromCurveSeed(new TextEncoder().encode(opts.xkeySeed));
    } catch (e) {
      throw new KairosError("invalid_argument", "callout_xkey_seed is not a curve nkey seed", {
        field: "nats-creds",
        cause: e,
      });
    }
    this.#rate = new TokenBuckets(this.#o.perSecond, this.#o.burst, 1);
    this.#hostRate = new TokenBuckets(
      this.#o.perHostPerSecond,
      this.#o.perHostBurst,
      MAX_TRACKED_HOSTS,
    );
  }

  async start(): Promise<void> {
    this.#sub = this.#nc.subscribe(AUTH_CALLOUT_SUBJECT, {
      queue: calloutQueue(this.#o.clusterName),
      callback: (err, msg) => {
        if (err) this.#o.log("error", "auth callout subscription error", { err: String(err) });
        else this.#receive(msg);
      },
    });
    await this.#nc.flush();
  }

  async stop(): Promise<void> {
    const sub = this.#sub;
    this.#sub = undefined;
    if (sub !== undefined && !this.#nc.isClosed()) await sub.drain();
    await Promise.allSettled([...this.#pending]);
  }

  #receive(msg: Msg): void {
    if (!msg.reply || msg.data.length > this.#o.maxRequestBytes) {
      this.#o.log("warn", "auth callout request dropped", {
        evt: "service_auth",
        bytes: msg.data.length,
        reply: Boolean(msg.reply),
      });
      return;
    }
    let req: CalloutRequest;
    let serverXkey: string | undefined;
    try {
      serverXkey = msg.headers?.get(SERVER_XKEY_HEADER) || undefined;
      req = parseCalloutRequest(this.#open(msg.data, serverXkey));
    } catch (e) {
      this.#o.log("warn", "auth callout request malformed", {
        evt: "service_auth",
        err: String(e).slice(0, 200),
      });
      return;
    }
    const name = serviceNameOf(req.user);
    if (name === undefined) return this.#log({ kind: "ignore", why: "not_a_service_user" }, req);
    const now = this.#o.clock.now();
    // The address's own budget first: a flood from one address is refused before it spends the node's.
    const busy =
      this.#inFlight >= this.#o.maxInFlight ||
      this.#hostRate.take(req.host, now) > 0 ||
      this.#rate.take("callout", now) > 0;
    const p = (
      busy
        ? Promise.resolve<Decision>({ kind: "refuse", name, reason: "busy" })
        : this.#decide(name, req)
    )
      .then((d) => this.#answer(msg, req, d, serverXkey))
      .catch((e: unknown) =>
        this.#o.log(
          "error",
          "auth callout failed: the connection is refused after nats-server's auth timeout",
          { evt: "service_auth", service: name, err: String(e) },
        ),
      )
      .finally(() => {
        this.#inFlight--;
        this.#pending.delete(p);
      });
    this.#inFlight++;
    this.#pending.add(p);
  }

  /** A lookup that fails (KV unavailable, timeout) is a refusal now, not a wait for the server's timeout. */
  async #decide(name: string, req: CalloutRequest): Promise<Decision> {
    try {
      return decide(name, await this.#o.lookup(name, req.password));
    } catch (e) {
      this.#o.log("error", "auth callout lookup failed", {
        evt: "service_auth",
        service: name,
        err: String(e).slice(0, 300),
      });
      return { kind: "refuse", name, reason: "unavailable" };
    }
  }

  /** The request's JWT: opened with the curve key when the server sealed it (it must, when we have one). */
  #open(data: Uint8Array, serverXkey: string | undefined): Uint8Array {
    if (this.#xkey === undefined) return data;
    if (serverXkey === undefined)
      throw new KairosError(
        "invalid_argument",
        "auth callout request not sealed, but this node has callout_xkey_seed: the server's auth_callout.xkey and the credentials disagree",
      );
    const opened = this.#xkey.open(data, serverXkey);
    if (opened === null)
      throw new KairosError(
        "invalid_argument",
        "auth callout request does not open with this node's callout_xkey_seed",
      );
    return opened;
  }

  async #answer(
    msg: Msg,
    req: CalloutRequest,
    d: Decision,
    serverXkey: string | undefined,
  ): Promise<void> {
    this.#log(d, req);
    if (d.kind === "ignore") return;
    const data =
      d.kind === "admit"
        ? { jwt: await this.#userJwt(req, d.name, d.tenantId) }
        : { error: refusalText(d.reason) };
    const jwt = new TextEncoder().encode(
      await encodeAuthorizationResponse(req.userNkey, req.serverId, this.#issuer, data, {}),
    );
    msg.respond(
      this.#xkey !== undefined && serverXkey !== undefined ? this.#xkey.seal(jwt, serverXkey) : jwt,
    );
  }

  /** The user JWT: SERVICES account (audience), its tenant's API only, its own inbox, an expiry. */
  async #userJwt(req: CalloutRequest, name: string, tenantId: string): Promise<string> {
    const user = serviceUser(name);
    const p = servicePermissions(this.#o.clusterName, tenantId, user);
    const exp = Math.floor(this.#o.clock.now() / 1000) + this.#o.userJwtTtlS;
    return encodeUser(
      user,
      req.userNkey,
      this.#issuer,
      {
        pub: { allow: p.publish.allow, deny: [] },
        sub: { allow: p.subscribe.allow, deny: [] },
        subs: SERVICE_MAX_SUBS,
      },
      { aud: SERVICES_ACCOUNT, exp },
    );
  }

  #log(d: Decision, req: CalloutRequest): void {
    const base = {
      evt: "service_auth",
      user: req.user.slice(0, 80),
      host: req.host,
      server: req.serverId,
    };
    switch (d.kind) {
      case "admit":
        return this.#o.log("info", "service identity admitted", { ...base, tenant_id: d.tenantId });
      case "refuse":
        return this.#o.log("warn", "service identity refused", { ...base, reason: d.reason });
      case "ignore":
        return d.why === "unknown_service"
          ? this.#o.log(
              "info",
              "auth callout: unknown service (not this cluster's), left to the auth timeout",
              base,
            )
          : undefined;
    }
  }
}
