/**
 * The egress proxy's grants: one per attempt with `network: "egress"`, holding its credential,
 * its tenant's policy as parsed rules, its byte count and its open connections (egress-proxy.ts
 * serves connections against them).
 *
 * Pitfalls: a credential is compared in constant time; a grant re-opened for the same attempt
 * cuts the stale one's sockets; `admit` takes its place before any await, so concurrent requests
 * cannot all pass the per-attempt bound.
 */
import { randomBytes, timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import type { Duplex } from "node:stream";
import { parseEgressPolicy, type EgressRule } from "./egress-policy.ts";
import type { ExecutorLog } from "./options.ts";

/** Whose attempt a grant is (for the log). */
export interface EgressIdentity {
  runId: string;
  attempt: number;
  jobId: string;
  tenantId: string;
}

/** An attempt's standing with the proxy: its credential, its usage; `close()` when it ends. */
export interface EgressGrant {
  /** The proxy URL with the attempt's credential, as the task's HTTP_PROXY. */
  readonly proxyUrl: string;
  readonly bytes: () => number;
  close(): void;
}

/** One attempt's grant as the proxy keeps it. */
export interface Grant {
  id: EgressIdentity;
  user: string;
  password: Buffer;
  rules: readonly EgressRule[];
  bytes: number;
  /** Every socket of the attempt's connections (cut at its end or past its byte bound). */
  sockets: Set<Duplex>;
  /** Its connections admitted and not yet ended (the per-attempt bound). */
  open: number;
  closed: boolean;
}

/** How one connection ended, for its log line. */
export interface Outcome {
  status: number;
  reason?: string;
  address?: string;
}

/** The per-attempt bounds the table enforces. */
export interface GrantLimits {
  readonly maxConnectionsPerRun: number;
  readonly maxBytesPerRun: number;
}

export class EgressGrantTable {
  readonly #limits: GrantLimits;
  readonly #log: ExecutorLog;
  readonly #grants = new Map<string, Grant>();

  constructor(limits: GrantLimits, log: ExecutorLog) {
    this.#limits = limits;
    this.#log = log;
  }

  /**
   * Admits one attempt: its credential and the destinations it may reach; `proxyUrl` builds the
   * task's proxy URL from the credential. A policy that does not parse (a forged or corrupt
   * offer) admits nothing, logged.
   */
  open(
    id: EgressIdentity,
    allow: readonly string[],
    proxyUrl: (user: string, secret: string) => string,
  ): EgressGrant {
    let rules: readonly EgressRule[] = [];
    if (allow.length > 0) {
      try {
        rules = parseEgressPolicy(allow, "egress policy of the offer");
      } catch (e) {
        this.#log("warn", "an offer's egress policy does not parse: the attempt reaches nothing", {
          run_id: id.runId,
          err: String(e),
        });
      }
    }
    const user = `${id.runId}-${id.attempt}`;
    const secret = randomBytes(24).toString("base64url");
    const g: Grant = {
      id,
      user,
      password: Buffer.from(secret),
      rules,
      bytes: 0,
      sockets: new Set(),
      open: 0,
      closed: false,
    };
    this.#grants.get(user)?.sockets.forEach((s) => s.destroy()); // a stale grant of the attempt
    this.#grants.set(user, g);
    return {
      proxyUrl: proxyUrl(user, secret),
      bytes: () => g.bytes,
      close: () => {
        g.closed = true;
        for (const s of g.sockets) s.destroy();
        if (this.#grants.get(user) === g) this.#grants.delete(user);
      },
    };
  }

  /** Cuts every grant's connections and forgets them all (the proxy stops). */
  closeAll(): void {
    for (const g of this.#grants.values()) for (const s of g.sockets) s.destroy();
    this.#grants.clear();
  }

  /** The grant a request's Proxy-Authorization names, or undefined. */
  of(headers: IncomingHttpHeaders): Grant | undefined {
    const m = /^Basic ([A-Za-z0-9+/=]{1,512})$/.exec(headers["proxy-authorization"] ?? "");
    if (m === null) return undefined;
    const decoded = Buffer.from(m[1]!, "base64").toString("utf8");
    const colon = decoded.indexOf(":");
    if (colon < 0) return undefined;
    let user: string;
    try {
      user = decodeURIComponent(decoded.slice(0, colon));
    } catch {
      return undefined;
    }
    const g = this.#grants.get(user);
    const given = Buffer.from(decoded.slice(colon + 1));
    if (g === undefined || g.closed || given.length !== g.password.length) return undefined;
    return timingSafeEqual(given, g.password) ? g : undefined;
  }

  /**
   * Takes one of the attempt's connection places at once: a release to call exactly when the
   * connection ends, or the refusal.
   */
  admit(g: Grant): (() => void) | Outcome {
    if (g.open >= this.#limits.maxConnectionsPerRun)
      return {
        status: 429,
        reason: `the attempt has ${this.#limits.maxConnectionsPerRun} connections open already`,
      };
    g.open++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      g.open--;
    };
  }

  /** Adds a chunk to the grant's bytes; past the bound, cuts every connection of the attempt. */
  count(g: Grant, n: number): void {
    g.bytes += n;
    if (g.bytes > this.#limits.maxBytesPerRun) for (const s of g.sockets) s.destroy();
  }
}
