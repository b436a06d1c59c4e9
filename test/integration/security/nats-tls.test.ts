/**
 * TLS for client connections: a node configured with the CA (`natsAuth.tls.caFile`) connects to
 * a TLS-only, authenticated nats-server and works; a client that does not speak TLS, or does not
 * trust the CA, is refused. Certificates are made here with openssl (a throwaway CA).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectNats } from "../../../src/cluster/nats.ts";
import { makeNodeConfig } from "../../../src/cluster/config.ts";
import { KairosNode } from "../../../src/server/node.ts";
import { isKairosError } from "../../../src/lib/errors.ts";
import { systemClock } from "../../../src/lib/clock.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import { writeNatsAuthFiles, type NatsAuthFiles } from "../../../src/dev/nats-auth-files.ts";
import { launchNatsServer, type NatsServerHandle } from "../../../src/dev/nats-launcher.ts";

function makeCerts(dir: string): { ca: string; cert: string; key: string; otherCa: string } {
  const f = (n: string) => join(dir, n);
  const ssl = (...args: string[]) => execFileSync("openssl", args, { stdio: "ignore" });
  ssl(
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-keyout",
    f("ca-key.pem"),
    "-out",
    f("ca.pem"),
    "-days",
    "1",
    "-subj",
    "/CN=kairos-test-ca",
  );
  ssl(
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-keyout",
    f("other-key.pem"),
    "-out",
    f("other-ca.pem"),
    "-days",
    "1",
    "-subj",
    "/CN=someone-else",
  );
  ssl(
    "req",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-keyout",
    f("key.pem"),
    "-out",
    f("req.csr"),
    "-subj",
    "/CN=nats",
  );
  writeFileSync(
    f("ext.cnf"),
    "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
  );
  ssl(
    "x509",
    "-req",
    "-in",
    f("req.csr"),
    "-CA",
    f("ca.pem"),
    "-CAkey",
    f("ca-key.pem"),
    "-CAcreateserial",
    "-out",
    f("cert.pem"),
    "-days",
    "1",
    "-extfile",
    f("ext.cnf"),
  );
  return { ca: f("ca.pem"), cert: f("cert.pem"), key: f("key.pem"), otherCa: f("other-ca.pem") };
}

describe("NATS over TLS", { timeout: 60_000 }, () => {
  let dir: string;
  let certs: ReturnType<typeof makeCerts>;
  let auth: NatsAuthFiles;
  let server: NatsServerHandle;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "kairos-tls-"));
    certs = makeCerts(dir);
    auth = writeNatsAuthFiles(join(dir, "auth"));
    server = await launchNatsServer({
      storeDir: join(dir, "data"),
      auth,
      tls: { certFile: certs.cert, keyFile: certs.key },
    });
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("a scheduler node connects with the CA and its credentials, both connections", async () => {
    const node = new KairosNode(
      makeNodeConfig({
        natsUrl: `tls://127.0.0.1:${server.port}`,
        natsAuth: { credsFile: auth.credsFor(["scheduler"]), tls: { caFile: certs.ca } },
        nodeId: "tls-1",
        roles: ["scheduler"],
        partitions: 2,
      }),
      { clock: systemClock, random: seededRandom(3), log: () => undefined },
    );
    const started = new Promise<void>((resolve) =>
      node.events.on((e) => e.type === "node_started" && resolve()),
    );
    await node.start();
    await started;
    assert.equal(node.nc.isClosed(), false);
    await node.stop();
  });

  it("a client that does not trust the server's CA is refused", async () => {
    await assert.rejects(
      connectNats({
        url: `tls://127.0.0.1:${server.port}`,
        name: "wrong-ca",
        credsFile: auth.credsFor("admin"),
        tls: { caFile: certs.otherCa },
        connectTimeoutMs: 3000,
      }),
      (e: unknown) => isKairosError(e, "unavailable"),
    );
  });

  it("a client without TLS options (no CA: the server is not trusted) is refused even with valid credentials", async () => {
    await assert.rejects(
      connectNats({
        url: `nats://127.0.0.1:${server.port}`,
        name: "plain",
        credsFile: auth.credsFor("admin"),
        connectTimeoutMs: 3000,
      }),
      (e: unknown) => isKairosError(e, "unavailable"),
    );
  });

  it("the config refuses a client certificate without its key", () => {
    assert.throws(
      () =>
        makeNodeConfig({
          natsUrl: "tls://x",
          nodeId: "n",
          natsAuth: { tls: { certFile: certs.cert } },
        }),
      /go together/,
    );
  });
});
