/**
 * The egress proxy (src/sandbox/egress-proxy.ts) over real loopback sockets, as a task's HTTP
 * client would use it: the attempt's credential, the tenant's policy, the operator's guard
 * against internal addresses (a name resolving to one is refused too: no DNS rebinding), the
 * per-attempt bounds, the grant's end cutting its tunnels, and one log line per connection.
 * The Docker end (a container on the task network) is test/e2e/egress.test.ts.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer as createHttpServer, type Server } from "node:http";
import { connect, createServer as createTcpServer, type AddressInfo, type Socket } from "node:net";
import { once } from "node:events";
import { EgressProxy, type EgressGrant } from "../../../src/sandbox/egress-proxy.ts";
import { parseInternalAllowance } from "../../../src/sandbox/egress-policy.ts";
import { systemClock } from "../../../src/lib/clock.ts";

interface LogLine {
  level: string;
  msg: string;
  extra: Record<string, unknown>;
}

const BIG = 200 * 1024;

/** The credential of a grant's proxy URL, as a Proxy-Authorization header value. */
function authOf(g: EgressGrant): string {
  const u = new URL(g.proxyUrl);
  return `Basic ${Buffer.from(`${decodeURIComponent(u.username)}:${u.password}`).toString("base64")}`;
}

/** Sends `text` to the proxy and reads until the proxy closes: the whole answer. */
async function exchange(port: number, text: string): Promise<string> {
  const s = connect({ host: "127.0.0.1", port });
  const chunks: Buffer[] = [];
  s.on("data", (c: Buffer) => chunks.push(c));
  s.on("error", () => undefined);
  s.write(text);
  await once(s, "close");
  return Buffer.concat(chunks).toString("latin1");
}

/** Opens a CONNECT tunnel; resolves with the socket once the proxy's answer head is read. */
async function tunnel(
  port: number,
  target: string,
  auth: string,
): Promise<{ s: Socket; head: string }> {
  const s = connect({ host: "127.0.0.1", port });
  s.on("error", () => undefined);
  s.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\nProxy-Authorization: ${auth}\r\n\r\n`);
  let buf = "";
  while (!buf.includes("\r\n\r\n")) {
    const [c] = (await once(s, "data")) as [Buffer];
    buf += c.toString("latin1");
  }
  return { s, head: buf };
}

describe("egress proxy", () => {
  let web: Server;
  let webPort: number;
  let internalPort: number;
  const internal = createTcpServer((c) => c.end("internal secret\n"));
  const logs: LogLine[] = [];
  const waiters = new Set<{ pred: (l: LogLine) => boolean; resolve: (l: LogLine) => void }>();
  /** The first log line matching `pred`, already written or when it is. */
  const logged = (pred: (l: LogLine) => boolean): Promise<LogLine> => {
    const hit = logs.find(pred);
    return hit !== undefined
      ? Promise.resolve(hit)
      : new Promise((resolve) => waiters.add({ pred, resolve }));
  };
  const ofRun = (run: string, n: number) => (l: LogLine) =>
    l.extra["run_id"] === run && logs.filter((x) => x.extra["run_id"] === run).length >= n;
  let proxy: EgressProxy;

  before(async () => {
    web = createHttpServer((req, res) => {
      if (req.url === "/big") {
        res.end(Buffer.alloc(BIG, 0x61));
        return;
      }
      res.end(`hello ${req.url} via ${req.headers.host}`);
    });
    web.listen(0, "127.0.0.1");
    await once(web, "listening");
    webPort = (web.address() as AddressInfo).port;
    internal.listen(0, "127.0.0.2");
    await once(internal, "listening");
    internalPort = (internal.address() as AddressInfo).port;
    proxy = await EgressProxy.listen(
      {
        host: "127.0.0.1",
        port: 0,
        // The operator lets the proxy reach 127.0.0.1 (the test servers), no other internal address.
        allowInternal: parseInternalAllowance(["127.0.0.1/32"]),
        maxConnectionsPerRun: 2,
        maxBytesPerRun: 64 * 1024,
        maxConnections: 100,
        connectTimeoutMs: 2000,
        idleTimeoutMs: 10_000,
      },
      {
        clock: systemClock,
        log: (level, msg, extra) => {
          const line = { level, msg, extra: extra ?? {} };
          logs.push(line);
          for (const w of [...waiters])
            if (w.pred(line)) {
              waiters.delete(w);
              w.resolve(line);
            }
        },
        resolve: async (name) => {
          if (name === "allowed.test") return ["127.0.0.1"];
          if (name === "rebind.test") return ["10.0.0.5", "169.254.169.254"];
          throw new Error(`ENOTFOUND ${name}`);
        },
      },
    );
  });

  after(async () => {
    await proxy.close();
    web.close();
    internal.close();
  });

  const policy = () => [
    `allowed.test:${webPort}`,
    `127.0.0.2:${internalPort}`,
    `rebind.test:${webPort}`,
  ];
  const grant = (run: string): EgressGrant =>
    proxy.open({ runId: run, attempt: 1, jobId: "j1", tenantId: "t1" }, policy());

  it("forwards plain HTTP to an allowed destination, and logs it with the run id", async () => {
    const g = grant("r-plain");
    const out = await exchange(
      proxy.port,
      `GET http://allowed.test:${webPort}/x HTTP/1.1\r\nHost: allowed.test:${webPort}\r\nProxy-Authorization: ${authOf(g)}\r\n\r\n`,
    );
    assert.match(out, /^HTTP\/1\.1 200 /);
    assert.match(out, new RegExp(`hello /x via allowed.test:${webPort}`));
    const line = await logged(ofRun("r-plain", 1));
    assert.equal(line.extra["evt"], "egress_connection");
    assert.equal(line.extra["tenant_id"], "t1");
    assert.equal(line.extra["status"], 200);
    assert.equal(line.extra["address"], "127.0.0.1");
    g.close();
    assert.equal(logs.filter((l) => l.extra["run_id"] === "r-plain").length, 1, "one line");
  });

  it("tunnels CONNECT to an allowed destination", async () => {
    const g = grant("r-connect");
    const { s, head } = await tunnel(proxy.port, `allowed.test:${webPort}`, authOf(g));
    assert.match(head, /^HTTP\/1\.1 200 /);
    const chunks: Buffer[] = [];
    s.on("data", (c: Buffer) => chunks.push(c));
    s.write(`GET /t HTTP/1.1\r\nHost: inside\r\nConnection: close\r\n\r\n`);
    await once(s, "close");
    assert.match(Buffer.concat(chunks).toString(), /hello \/t via inside/);
    assert.ok(g.bytes() > 0);
    g.close();
  });

  it("refuses without the attempt's credential (407)", async () => {
    const g = grant("r-auth");
    const wrong = `Basic ${Buffer.from("r-auth-1:not-the-secret-not-the-secret-xx").toString("base64")}`;
    for (const auth of [undefined, wrong]) {
      const out = await exchange(
        proxy.port,
        `CONNECT allowed.test:${webPort} HTTP/1.1\r\n${auth ? `Proxy-Authorization: ${auth}\r\n` : ""}\r\n`,
      );
      assert.match(out, /^HTTP\/1\.1 407 /);
      assert.match(out, /proxy-authenticate: Basic/i);
    }
    g.close();
    // A closed grant's credential is refused too.
    const out = await exchange(
      proxy.port,
      `CONNECT allowed.test:${webPort} HTTP/1.1\r\nProxy-Authorization: ${authOf(g)}\r\n\r\n`,
    );
    assert.match(out, /^HTTP\/1\.1 407 /);
  });

  it("refuses a destination outside the tenant's policy (403)", async () => {
    const g = grant("r-policy");
    for (const target of [`allowed.test:1`, `other.test:${webPort}`, `127.0.0.1:${webPort}`]) {
      const out = await exchange(
        proxy.port,
        `CONNECT ${target} HTTP/1.1\r\nProxy-Authorization: ${authOf(g)}\r\n\r\n`,
      );
      assert.match(out, /^HTTP\/1\.1 403 /, target);
      assert.match(out, /not in the tenant's egress policy/);
    }
    g.close();
  });

  it("refuses internal addresses the operator did not allow, also behind a name (403)", async () => {
    const g = grant("r-internal");
    const direct = await exchange(
      proxy.port,
      `CONNECT 127.0.0.2:${internalPort} HTTP/1.1\r\nProxy-Authorization: ${authOf(g)}\r\n\r\n`,
    );
    assert.match(direct, /^HTTP\/1\.1 403 /);
    assert.doesNotMatch(direct, /internal secret/);
    const named = await exchange(
      proxy.port,
      `GET http://rebind.test:${webPort}/ HTTP/1.1\r\nHost: rebind.test\r\nProxy-Authorization: ${authOf(g)}\r\n\r\n`,
    );
    assert.match(named, /^HTTP\/1\.1 403 /);
    assert.match(named, /resolves only to internal addresses \(10\.0\.0\.5, 169\.254\.169\.254\)/);
    await logged(ofRun("r-internal", 2));
    assert.deepEqual(
      logs.filter((l) => l.extra["run_id"] === "r-internal").map((l) => l.extra["status"]),
      [403, 403],
    );
    g.close();
  });

  it("forwards only http:// URLs; https goes through CONNECT (400)", async () => {
    const g = grant("r-https");
    const out = await exchange(
      proxy.port,
      `GET https://allowed.test:${webPort}/ HTTP/1.1\r\nHost: allowed.test\r\nProxy-Authorization: ${authOf(g)}\r\n\r\n`,
    );
    assert.match(out, /^HTTP\/1\.1 400 /);
    g.close();
  });

  it("cuts an attempt past its byte bound, and refuses it from then on", async () => {
    const g = grant("r-bytes");
    const out = await exchange(
      proxy.port,
      `GET http://allowed.test:${webPort}/big HTTP/1.1\r\nHost: allowed.test\r\nProxy-Authorization: ${authOf(g)}\r\n\r\n`,
    );
    assert.ok(out.length < BIG, `got ${out.length} bytes, more than the bound lets through`);
    const again = await exchange(
      proxy.port,
      `GET http://allowed.test:${webPort}/x HTTP/1.1\r\nHost: allowed.test\r\nProxy-Authorization: ${authOf(g)}\r\n\r\n`,
    );
    assert.match(again, /^HTTP\/1\.1 403 /);
    assert.match(again, /used its 65536 bytes/);
    g.close();
  });

  it("bounds an attempt's open connections (429), and its end cuts them", async () => {
    const g = grant("r-conns");
    const a = await tunnel(proxy.port, `allowed.test:${webPort}`, authOf(g));
    const b = await tunnel(proxy.port, `allowed.test:${webPort}`, authOf(g));
    assert.match(a.head, /^HTTP\/1\.1 200 /);
    assert.match(b.head, /^HTTP\/1\.1 200 /);
    const third = await exchange(
      proxy.port,
      `CONNECT allowed.test:${webPort} HTTP/1.1\r\nProxy-Authorization: ${authOf(g)}\r\n\r\n`,
    );
    assert.match(third, /^HTTP\/1\.1 429 /);
    const closed = Promise.all([once(a.s, "close"), once(b.s, "close")]);
    g.close();
    await closed; // the attempt ended: its tunnels are gone
  });
});
