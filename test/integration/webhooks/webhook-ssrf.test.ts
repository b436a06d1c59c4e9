/**
 * Dead-letter webhooks cannot be turned against the scheduler's own network (SSRF):
 * non-public destinations are refused before any socket is opened — literal addresses
 * (127.0.0.1, 169.254.169.254, 10.0.0.1, 100.64.0.1, ::1, …) and host names that resolve to
 * them (checked inside the connection's lookup, so a rebinding resolver cannot slip in another
 * address); http is refused unless the operator allows it; a redirect is not followed; one
 * tenant's deliveries are bounded. Receivers are real HTTP servers on 127.0.0.1 that count
 * connections (the "private" policy is relaxed only where a test must reach them).
 */
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import {
  isBlockedAddress,
  notifyDeadLetter,
  WebhookSender,
  type Resolve,
} from "../../../src/notify/webhook.ts";
import type { RunView } from "../../../src/protocol/model.ts";
import type { SubscriptionRecord } from "../../../src/protocol/events.ts";
import { destinationsOf, tryDestination } from "../../../src/notify/outbox-targets.ts";

const run = { run_id: "r1", tenant_id: "t1", job_id: "j1", status: "failed" } as unknown as RunView;
const opts = { nowS: () => 1_700_000_000, sleep: async () => undefined, timeoutMs: 3000 };

interface Receiver {
  server: Server;
  port: number;
  connections: number;
  requests: { url: string; body: string }[];
  handler: (res: import("node:http").ServerResponse) => void;
}

async function receiver(): Promise<Receiver> {
  const r: Receiver = {
    server: createServer(),
    port: 0,
    connections: 0,
    requests: [],
    handler: (res) => res.writeHead(204).end(),
  };
  r.server.on("connection", (_s: Socket) => r.connections++);
  r.server.on("request", (req, res) => {
    let body = "";
    req
      .setEncoding("utf8")
      .on("data", (c: string) => (body += c))
      .on("end", () => {
        r.requests.push({ url: req.url ?? "", body });
        r.handler(res);
      });
  });
  await new Promise<void>((ok) => r.server.listen(0, "127.0.0.1", ok));
  r.port = (r.server.address() as AddressInfo).port;
  return r;
}

describe("webhook destinations (SSRF)", () => {
  let rx: Receiver;
  let other: Receiver;
  before(async () => {
    rx = await receiver();
    other = await receiver();
  });
  after(async () => {
    for (const r of [rx, other]) {
      r.server.closeAllConnections();
      await new Promise((ok) => r.server.close(ok));
    }
  });

  it("classifies addresses: loopback, private, link-local, CGNAT, unspecified, mapped are blocked; public is not", () => {
    for (const a of [
      "127.0.0.1",
      "127.9.9.9",
      "10.0.0.1",
      "172.16.5.5",
      "192.168.1.1",
      "169.254.169.254",
      "100.64.0.1",
      "100.127.255.254",
      "0.0.0.0",
      "224.0.0.1",
      "255.255.255.255",
      "::1",
      "::",
      "fe80::1",
      "fd00::1",
      "::ffff:127.0.0.1",
      "::ffff:a9fe:a9fe",
      "64:ff9b::a00:1",
      "not-an-ip",
      // IPv6 forms that carry an IPv4 address: compatible (::/96), translated, NAT64 local use, 6to4, Teredo.
      "::7f00:1",
      "::a9fe:a9fe",
      "::ffff:0:7f00:1",
      "64:ff9b:1::7f00:1",
      "2002:7f00:1::1",
      "2001:0:7f00:1::1",
      "192.88.99.1",
      "3fff::1",
    ]) {
      assert.equal(isBlockedAddress(a), true, a);
    }
    for (const a of ["93.184.216.34", "8.8.8.8", "100.128.0.1", "2606:4700:4700::1111"])
      assert.equal(isBlockedAddress(a), false, a);
  });

  it("refuses literal non-public addresses without opening a connection", async () => {
    // http is allowed here so that only the address rule decides.
    const sender = new WebhookSender({ allowHttp: true });
    const before = rx.connections;
    for (const host of [
      "127.0.0.1",
      "169.254.169.254",
      "10.0.0.1",
      "100.64.0.1",
      "[::1]",
      "0.0.0.0",
      "[::ffff:127.0.0.1]",
    ]) {
      const port = host === "127.0.0.1" ? rx.port : 80;
      const r = await notifyDeadLetter(
        { url: `http://${host}:${port}/hook`, secret: "s", sender },
        run,
        opts,
      );
      assert.equal(r.ok, false, host);
      assert.equal(r.refused, true, `${host}: ${JSON.stringify(r)}`);
      assert.match(r.error ?? "", /not a public address/, host);
    }
    assert.equal(rx.connections, before, "nothing reached the local receiver");
  });

  it("refuses loopback names and other spellings of internal addresses as written, before any lookup", async () => {
    // The resolver would say "public"; only the check of the URL as written may refuse these.
    let resolved = 0;
    const sender = new WebhookSender(
      {},
      { resolve: async () => (resolved++, [{ address: "127.0.0.1", family: 4 }]) },
    );
    const urls = [
      "https://localhost./hook",
      "https://LOCALHOST../hook",
      "https://kairos.localhost/hook",
      "https://localhost.localdomain/",
      "https://[::7f00:1]/hook",
      "https://[::a9fe:a9fe]/",
      "https://[64:ff9b::7f00:1]/",
      "https://[::ffff:0:7f00:1]/",
      "https://[2002:7f00:1::1]/",
      "https://0x7f.1/",
      "https://2130706433/",
      "https://127.0.0.1./",
      "https://0177.0.0.1/",
      "https://[0:0:0:0:0:ffff:169.254.169.254]/",
    ];
    for (const url of urls) {
      const r = await notifyDeadLetter({ url, secret: "s", sender }, run, opts);
      assert.equal(r.refused, true, `${url}: ${JSON.stringify(r)}`);
      assert.match(r.error ?? "", /is not a public address/, url);
    }
    assert.equal(resolved, 0, "no name was looked up");
  });

  it("a public-looking name is still resolved and checked (the check as written does not replace it)", async () => {
    let resolved = 0;
    const sender = new WebhookSender(
      {},
      { resolve: async () => (resolved++, [{ address: "::7f00:1", family: 6 }]) },
    );
    const r = await notifyDeadLetter(
      { url: "https://hooks.example.test/hook", secret: "s", sender },
      run,
      opts,
    );
    assert.equal(r.refused, true, JSON.stringify(r));
    assert.match(r.error ?? "", /resolves only to non-public addresses \(::7f00:1\)/);
    assert.equal(resolved, 1);
  });

  it("refuses a host name that resolves to a non-public address, without connecting", async () => {
    const resolved: string[] = [];
    const resolve: Resolve = async (h) => {
      resolved.push(h);
      return [{ address: "127.0.0.1", family: 4 }];
    };
    const sender = new WebhookSender({ allowHttp: true }, { resolve });
    const before = rx.connections;
    const r = await notifyDeadLetter(
      { url: `http://hooks.example.test:${rx.port}/hook`, secret: "s", sender },
      run,
      opts,
    );
    assert.equal(r.refused, true, JSON.stringify(r));
    assert.match(r.error ?? "", /resolves only to non-public addresses \(127\.0\.0\.1\)/);
    assert.deepEqual(resolved, ["hooks.example.test"]);
    assert.equal(rx.connections, before);
  });

  it("https goes through the same checked lookup (a rebinding answer is refused, not resolved again)", async () => {
    let calls = 0;
    // A resolver whose answer changes between calls. There is exactly one resolution, inside the
    // TLS socket's lookup, and the socket may only use what it returned (here: private, refused);
    // with the system resolver this name would not exist at all (ENOTFOUND, not a refusal).
    const resolve: Resolve = async () =>
      calls++ === 0
        ? [{ address: "10.0.0.1", family: 4 }]
        : [{ address: "93.184.216.34", family: 4 }];
    const sender = new WebhookSender({}, { resolve });
    const r = await notifyDeadLetter(
      { url: "https://hooks.example.test/hook", secret: "s", sender },
      run,
      opts,
    );
    assert.equal(r.refused, true, JSON.stringify(r));
    assert.match(r.error ?? "", /resolves only to non-public addresses \(10\.0\.0\.1\)/);
    assert.equal(calls, 1, "resolved once; the refusal is not retried");
  });

  it("connects to the address that was checked (the resolver's answer is what the socket uses)", async () => {
    // The receiver is on loopback, so private addresses are allowed here; the point is that the
    // socket goes where the checked lookup said, not to a second resolution of the name.
    const sender = new WebhookSender(
      { allowHttp: true, allowPrivateAddresses: true },
      { resolve: async () => [{ address: "127.0.0.1", family: 4 }] },
    );
    const n = rx.requests.length;
    const r = await notifyDeadLetter(
      { url: `http://receiver.example.test:${rx.port}/hook`, secret: "s", sender },
      run,
      opts,
    );
    assert.equal(r.ok, true, JSON.stringify(r));
    assert.equal(rx.requests.length, n + 1);
    assert.equal(JSON.parse(rx.requests[n]!.body).run.run_id, "r1");
  });

  it("refuses http unless the operator allows it, before resolving anything", async () => {
    let resolved = 0;
    const sender = new WebhookSender(
      {},
      { resolve: async () => (resolved++, [{ address: "93.184.216.34", family: 4 }]) },
    );
    const r = await notifyDeadLetter(
      { url: "http://hooks.example.test/hook", secret: "s", sender },
      run,
      opts,
    );
    assert.equal(r.refused, true);
    assert.match(r.error ?? "", /http webhooks are not allowed \(https only/);
    assert.equal(resolved, 0);
    const ftp = await notifyDeadLetter(
      { url: "ftp://hooks.example.test/", secret: "s", sender },
      run,
      opts,
    );
    assert.equal(ftp.refused, true);
  });

  it("the default sender (no operator policy) is strict: https and public addresses only", async () => {
    const r = await notifyDeadLetter(
      { url: `https://127.0.0.1:${rx.port}/hook`, secret: "s" },
      run,
      opts,
    );
    assert.equal(r.refused, true, JSON.stringify(r));
  });

  it("does not follow a redirect (not even once), and does not retry it", async () => {
    const sender = new WebhookSender({ allowHttp: true, allowPrivateAddresses: true });
    rx.handler = (res) =>
      res.writeHead(302, { location: `http://127.0.0.1:${other.port}/stolen` }).end();
    try {
      const n = rx.requests.length;
      const r = await notifyDeadLetter(
        { url: `http://127.0.0.1:${rx.port}/hook`, secret: "s", sender },
        run,
        { ...opts, attempts: 3 },
      );
      assert.equal(r.ok, false);
      assert.equal(r.status, 302);
      assert.match(r.error ?? "", /redirect, which is not followed/);
      assert.equal(rx.requests.length, n + 1, "one request, no retry");
      assert.equal(other.connections, 0, "the redirect target was never contacted");
    } finally {
      rx.handler = (res) => res.writeHead(204).end();
    }
  });

  it("bounds one tenant's deliveries in flight; the overflow is dropped, other tenants unaffected", async () => {
    const sender = new WebhookSender({
      allowHttp: true,
      allowPrivateAddresses: true,
      maxConcurrentPerTenant: 2,
      maxQueuedPerTenant: 1,
    });
    const held: (() => void)[] = [];
    let arrived: () => void = () => {};
    rx.handler = (res) => {
      held.push(() => res.writeHead(204).end());
      arrived();
    };
    try {
      const twoArrived = new Promise<void>((ok) => (arrived = () => held.length >= 2 && ok()));
      const url = `http://127.0.0.1:${rx.port}/hook`;
      const first = [1, 2, 3].map(() => notifyDeadLetter({ url, secret: "s", sender }, run, opts));
      await twoArrived; // two in flight, the third waits
      const dropped = await notifyDeadLetter({ url, secret: "s", sender }, run, opts);
      assert.equal(dropped.ok, false);
      assert.match(dropped.error ?? "", /dropped: more than 1 deliveries of tenant t1 waiting/);
      assert.equal(held.length, 2, "only two of t1's deliveries reached the receiver");
      const thirdArrived = new Promise<void>((ok) => (arrived = () => held.length >= 3 && ok()));
      held[0]!();
      await thirdArrived;
      held[1]!();
      held[2]!();
      assert.deepEqual(
        (await Promise.all(first)).map((r) => r.ok),
        [true, true, true],
      );
    } finally {
      rx.handler = (res) => res.writeHead(204).end();
    }
  });

  it("a run-event subscription's webhook goes through the same guard (and its control reaches the receiver)", async () => {
    const resolve: Resolve = async () => [{ address: "127.0.0.1", family: 4 }];
    const subs: SubscriptionRecord[] = [
      {
        subscription_id: "s1",
        tenant_id: "t1",
        events: ["run.failed"],
        job_id: null,
        webhook: { url: `http://hooks.example.test:${rx.port}/sub` },
        email: null,
        created_at: "2026-01-01T00:00:00Z",
        secret: "whsec_x",
      },
    ];
    const strict = new WebhookSender({ allowHttp: true }, { resolve });
    const [d] = destinationsOf("run.failed", run, undefined, subs, strict);
    const before = rx.connections;
    const r = await tryDestination(d!, "run.failed", run, { mailer: undefined, post: opts });
    assert.equal(r.result, "done", "refused: not retried");
    assert.equal(r.outcome?.refused, true, JSON.stringify(r));
    assert.equal(rx.connections, before, "no connection");
    // Control: with private addresses allowed by the operator, the same delivery arrives.
    const relaxed = new WebhookSender(
      { allowHttp: true, allowPrivateAddresses: true },
      { resolve },
    );
    const [d2] = destinationsOf("run.failed", run, undefined, subs, relaxed);
    const ok = await tryDestination(d2!, "run.failed", run, { mailer: undefined, post: opts });
    assert.equal(ok.outcome?.ok, true, JSON.stringify(ok));
    assert.equal(rx.requests.at(-1)?.url, "/sub");
  });
});
