/**
 * The worker's egress proxy: the only way out of the task network for a task with
 * `network: "egress"` (docs/security.md, "Network egress"). It listens on the task network's
 * gateway address and speaks HTTP CONNECT (any TCP, e.g. HTTPS) and plain HTTP forwarding
 * (absolute `http://` URLs). Each attempt gets a credential of its own (`open`), which its
 * container receives in HTTP_PROXY/HTTPS_PROXY; the proxy knows the run and tenant from it.
 *
 * For every connection, in order: the credential (407), the destination against the tenant's
 * policy as written (403), then the name is resolved HERE and every address checked against the
 * operator's guard (egress-policy.ts `addressAllowed`: no internal address unless allowed, 403),
 * and the proxy connects to an address it checked. Bounds: connections of one attempt at once,
 * bytes of one attempt (both directions; past it every tunnel of the attempt is cut), connections
 * of the whole proxy, connect and idle timeouts. One log line per connection, with the run id.
 *
 * Pitfalls: the task's own DNS is not used and not needed (the proxy resolves); a plain-HTTP
 * request gets `Connection: close`, so every request is a connection, checked and logged alone;
 * `close()` of a grant (the attempt ended) cuts its open tunnels.
 */
import { lookup as dnsLookup } from "node:dns";
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from "node:http";
import { connect, isIP, Socket as NetSocket, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { Clock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import {
  addressAllowed,
  canonicalHost,
  egressAllows,
  type InternalAllowance,
} from "./egress-policy.ts";
import {
  EgressGrantTable,
  type EgressGrant,
  type EgressIdentity,
  type Grant,
  type Outcome,
} from "./egress-grants.ts";
import type { ExecutorLog } from "./options.ts";
import { AUTH_CHALLENGE, CRLF, endToEndHeaders, rawResponse } from "./egress-wire.ts";

/** Resolves a name to its addresses (injectable for tests; default: the OS resolver). */
export type EgressResolve = (hostname: string) => Promise<string[]>;

const systemResolve: EgressResolve = (hostname) =>
  new Promise((resolve, reject) =>
    dnsLookup(hostname, { all: true, verbatim: true }, (err, addrs) =>
      err ? reject(err) : resolve(addrs.map((a) => a.address)),
    ),
  );

/** The proxy's validated settings (egressProxyConfig in options.ts). */
export interface EgressProxyConfig {
  /** Address it listens on: the task network's gateway. */
  readonly host: string;
  readonly port: number;
  readonly allowInternal: InternalAllowance;
  /** Connections of one attempt open at once; more: 429. */
  readonly maxConnectionsPerRun: number;
  /** Bytes one attempt may move through the proxy, both directions together. */
  readonly maxBytesPerRun: number;
  /** Connections of the whole proxy at once (the server's own bound). */
  readonly maxConnections: number;
  readonly connectTimeoutMs: number;
  /** A tunnel or request with no traffic this long is closed. */
  readonly idleTimeoutMs: number;
}

export type { EgressGrant, EgressIdentity } from "./egress-grants.ts";

export class EgressProxy {
  readonly #cfg: EgressProxyConfig;
  readonly #clock: Clock;
  readonly #log: ExecutorLog;
  readonly #resolve: EgressResolve;
  readonly #grants: EgressGrantTable;
  readonly #server: Server;
  /** Every client connection (a CONNECT tunnel leaves the server's own bookkeeping). */
  readonly #clients = new Set<Socket>();

  private constructor(
    cfg: EgressProxyConfig,
    clock: Clock,
    log: ExecutorLog,
    resolve: EgressResolve,
  ) {
    this.#cfg = cfg;
    this.#clock = clock;
    this.#log = log;
    this.#resolve = resolve;
    this.#grants = new EgressGrantTable(cfg, log);
    this.#server = createServer({ requestTimeout: cfg.idleTimeoutMs });
    this.#server.maxConnections = cfg.maxConnections;
    this.#server.on("connection", (s: Socket) => {
      this.#clients.add(s);
      s.once("close", () => this.#clients.delete(s));
    });
    // A handler's unexpected failure ends its connection, never the worker.
    const failed = (socket: Duplex, e: unknown): void => {
      socket.destroy();
      this.#log("error", "egress proxy: a connection failed unexpectedly", { err: String(e) });
    };
    this.#server.on("connect", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      socket.on("error", () => socket.destroy());
      this.#connect(req, socket, head).catch((e: unknown) => failed(socket, e));
    });
    this.#server.on("request", (req: IncomingMessage, res: ServerResponse) => {
      this.#forward(req, res).catch((e: unknown) => failed(req.socket, e));
    });
    this.#server.on("clientError", (_e, socket: Duplex) => {
      if (socket.writable) rawResponse(socket, 400, "bad request");
      else socket.destroy();
    });
  }

  /** Starts a proxy listening on `cfg.host:cfg.port`; `unavailable` when it cannot bind. */
  static async listen(
    cfg: EgressProxyConfig,
    deps: { clock: Clock; log: ExecutorLog; resolve?: EgressResolve },
  ): Promise<EgressProxy> {
    const proxy = new EgressProxy(cfg, deps.clock, deps.log, deps.resolve ?? systemResolve);
    await new Promise<void>((resolve, reject) => {
      proxy.#server.once("error", (e) =>
        reject(
          new KairosError(
            "unavailable",
            `the egress proxy cannot listen on ${cfg.host}:${cfg.port}: ${e.message}`,
            { cause: e, field: "egress-proxy-port" },
          ),
        ),
      );
      proxy.#server.listen(cfg.port, cfg.host, () => resolve());
    });
    return proxy;
  }

  /** The port it listens on (the configured one, or the one picked for port 0). */
  get port(): number {
    const a = this.#server.address();
    return typeof a === "object" && a !== null ? a.port : this.#cfg.port;
  }

  /** Admits one attempt (EgressGrantTable.open): its credential and its destinations. */
  open(id: EgressIdentity, allow: readonly string[]): EgressGrant {
    const host = isIP(this.#cfg.host) === 6 ? `[${this.#cfg.host}]` : this.#cfg.host;
    return this.#grants.open(
      id,
      allow,
      (user, secret) => `http://${encodeURIComponent(user)}:${secret}@${host}:${this.port}`,
    );
  }

  /** Stops listening and cuts every open connection. */
  async close(): Promise<void> {
    this.#grants.closeAll();
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    for (const s of this.#clients) s.destroy();
    this.#server.closeAllConnections();
    await closed;
  }

  /**
   * Checks a destination for a grant: the policy, then the resolved addresses. Answers the
   * address to connect to, or the refusal (status and reason).
   */
  async #check(
    g: Grant,
    rawHost: string,
    port: number,
  ): Promise<{ address: string } | { status: number; reason: string }> {
    if (g.bytes >= this.#cfg.maxBytesPerRun)
      return { status: 403, reason: `the attempt used its ${this.#cfg.maxBytesPerRun} bytes` };
    const host = canonicalHost(rawHost);
    if (host === undefined || !(port >= 1 && port <= 65535))
      return { status: 400, reason: `not a destination: ${rawHost.slice(0, 100)}:${port}` };
    if (!egressAllows(g.rules, host, port))
      return { status: 403, reason: `${host}:${port} is not in the tenant's egress policy` };
    let addresses: string[];
    try {
      addresses = isIP(host) !== 0 ? [host] : await this.#resolve(host);
    } catch (e) {
      return { status: 502, reason: `${host} does not resolve: ${(e as Error).message}` };
    }
    const ok = addresses.find((a) => addressAllowed(a, this.#cfg.allowInternal));
    if (ok === undefined)
      return {
        status: 403,
        reason: `${host} resolves only to internal addresses (${addresses.join(", ") || "none"})`,
      };
    return { address: ok };
  }

  #logLine(
    g: Grant | undefined,
    method: string,
    target: string,
    out: Outcome,
    startedMs: number,
    bytes: { up: number; down: number },
  ): void {
    this.#log(out.status < 300 ? "info" : "warn", "egress connection", {
      evt: "egress_connection",
      run_id: g?.id.runId ?? null,
      attempt: g?.id.attempt ?? null,
      tenant_id: g?.id.tenantId ?? null,
      job_id: g?.id.jobId ?? null,
      method,
      target: target.slice(0, 300),
      address: out.address ?? null,
      status: out.status,
      ...(out.reason !== undefined ? { reason: out.reason } : {}),
      bytes_up: bytes.up,
      bytes_down: bytes.down,
      duration_ms: this.#clock.now() - startedMs,
    });
  }

  /** Opens a TCP connection to a checked address, within the connect timeout. */
  #dial(address: string, port: number): Promise<Socket> {
    return new Promise((resolve, reject) => {
      const s = connect({ host: address, port });
      s.setTimeout(this.#cfg.connectTimeoutMs, () =>
        s.destroy(new Error(`no connection within ${this.#cfg.connectTimeoutMs} ms`)),
      );
      s.once("connect", () => {
        s.setTimeout(this.#cfg.idleTimeoutMs, () => s.destroy());
        resolve(s);
      });
      s.once("error", reject);
    });
  }

  /** CONNECT host:port: a tunnel, once every check passed. */
  async #connect(req: IncomingMessage, client: Duplex, head: Buffer): Promise<void> {
    const started = this.#clock.now();
    const target = req.url ?? "";
    const bytes = { up: 0, down: 0 };
    const refuse = (g: Grant | undefined, out: Outcome, extra = ""): void => {
      if (!client.destroyed) rawResponse(client, out.status, out.reason ?? "", extra);
      this.#logLine(g, "CONNECT", target, out, started, bytes);
    };
    const g = this.#grants.of(req.headers);
    if (g === undefined)
      return refuse(
        undefined,
        { status: 407, reason: "proxy credential missing or wrong" },
        AUTH_CHALLENGE,
      );
    const release = this.#grants.admit(g);
    if (typeof release !== "function") return refuse(g, release);
    const m = /^(\[[^\]]{1,64}\]|[^:[\]]{1,255}):([0-9]{1,5})$/.exec(target);
    const verdict =
      m === null
        ? { status: 400, reason: "CONNECT needs host:port" }
        : await this.#check(g, m[1]!, Number(m[2]));
    if ("status" in verdict) {
      release();
      return refuse(g, verdict);
    }
    g.sockets.add(client);
    let upstream: Socket;
    try {
      upstream = await this.#dial(verdict.address, Number(m![2]));
    } catch (e) {
      g.sockets.delete(client);
      release();
      return refuse(g, { status: 502, reason: (e as Error).message, address: verdict.address });
    }
    if (client.destroyed || g.closed) {
      upstream.destroy();
      g.sockets.delete(client);
      release();
      const out = { status: 499, reason: "closed before the tunnel", address: verdict.address };
      return this.#logLine(g, "CONNECT", target, out, started, bytes);
    }
    g.sockets.add(upstream);
    if (client instanceof NetSocket)
      client.setTimeout(this.#cfg.idleTimeoutMs, () => client.destroy());
    client.write(`HTTP/1.1 200 Connection established${CRLF}${CRLF}`);
    if (head.length > 0) {
      bytes.up += head.length;
      this.#grants.count(g, head.length);
      upstream.write(head);
    }
    this.#pipe(g, client, upstream, bytes);
    let logged = false;
    const done = (): void => {
      client.destroy();
      upstream.destroy();
      g.sockets.delete(client);
      g.sockets.delete(upstream);
      release();
      if (logged) return;
      logged = true;
      this.#logLine(
        g,
        "CONNECT",
        target,
        { status: 200, address: verdict.address },
        started,
        bytes,
      );
    };
    client.once("close", done);
    upstream.once("close", done);
  }

  /** Both directions of a tunnel, counted against the grant. */
  #pipe(g: Grant, client: Duplex, upstream: Socket, bytes: { up: number; down: number }): void {
    client.on("data", (c: Buffer) => {
      bytes.up += c.length;
      this.#grants.count(g, c.length);
    });
    upstream.on("data", (c: Buffer) => {
      bytes.down += c.length;
      this.#grants.count(g, c.length);
    });
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
    client.pipe(upstream);
    upstream.pipe(client);
  }

  /** A plain-HTTP request with an absolute `http://` URL, forwarded once every check passed. */
  async #forward(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = this.#clock.now();
    const target = req.url ?? "";
    const method = req.method ?? "GET";
    const bytes = { up: 0, down: 0 };
    const refuse = (g: Grant | undefined, out: Outcome, headers: Record<string, string> = {}) => {
      res.writeHead(out.status, { ...headers, "content-type": "text/plain", connection: "close" });
      res.end(`${out.reason ?? ""}\n`);
      this.#logLine(g, method, target, out, started, bytes);
    };
    const g = this.#grants.of(req.headers);
    if (g === undefined)
      return refuse(
        undefined,
        { status: 407, reason: "proxy credential missing or wrong" },
        {
          "proxy-authenticate": 'Basic realm="kairos-egress"',
        },
      );
    const release = this.#grants.admit(g);
    if (typeof release !== "function") return refuse(g, release);
    let url: URL | undefined;
    try {
      url = new URL(target);
    } catch {
      url = undefined;
    }
    if (url === undefined || url.protocol !== "http:") {
      release();
      return refuse(g, {
        status: 400,
        reason: "only absolute http:// URLs are forwarded; use CONNECT (HTTPS_PROXY) for https",
      });
    }
    const port = url.port === "" ? 80 : Number(url.port);
    const verdict = await this.#check(g, url.hostname, port);
    if ("status" in verdict) {
      release();
      return refuse(g, verdict);
    }
    this.#relay(g, req, res, url, verdict.address, { started, method, target, bytes, release });
  }

  /** Sends the checked request on and its response back, counted; logs it once. */
  #relay(
    g: Grant,
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
    address: string,
    at: {
      started: number;
      method: string;
      target: string;
      bytes: { up: number; down: number };
      release: () => void;
    },
  ): void {
    const headers = endToEndHeaders(req.headers);
    headers["host"] = url.host;
    headers["connection"] = "close";
    const upstream = httpRequest({
      host: address,
      port: url.port === "" ? 80 : Number(url.port),
      method: at.method,
      path: `${url.pathname}${url.search}`,
      headers,
      agent: false,
      setHost: false,
      timeout: this.#cfg.connectTimeoutMs,
    });
    const sock = req.socket;
    g.sockets.add(sock);
    let status = 502;
    let reason: string | undefined;
    let logged = false;
    const finish = (): void => {
      g.sockets.delete(sock);
      at.release();
      if (logged) return;
      logged = true;
      const out: Outcome = { status, address, ...(reason !== undefined ? { reason } : {}) };
      this.#logLine(g, at.method, at.target, out, at.started, at.bytes);
    };
    req.on("data", (c: Buffer) => {
      at.bytes.up += c.length;
      this.#grants.count(g, c.length);
    });
    req.pipe(upstream);
    upstream.once("timeout", () => upstream.destroy(new Error("no answer in time")));
    upstream.once("response", (up: IncomingMessage) => {
      status = up.statusCode ?? 502;
      const back = endToEndHeaders(up.headers);
      res.writeHead(status, { ...back, connection: "close" });
      up.on("data", (c: Buffer) => {
        at.bytes.down += c.length;
        this.#grants.count(g, c.length);
      });
      up.pipe(res);
      up.once("error", () => res.destroy());
    });
    upstream.once("error", (e) => {
      reason = e.message;
      if (!res.headersSent) {
        res.writeHead(502, { "content-type": "text/plain", connection: "close" });
        res.end(`${e.message}\n`);
      } else res.destroy();
      finish();
    });
    res.once("close", () => {
      upstream.destroy(); // the client went away (or the answer is complete): nothing more to send
      finish();
    });
  }
}
