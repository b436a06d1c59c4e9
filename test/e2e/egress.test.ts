/**
 * Network egress end to end, on the real Docker engine with a real nats-server: the test makes
 * its own task network (src/sandbox/task-network.ts: internal bridge + nftables firewall) and
 * runs a node with `--task-network` and the worker's egress proxy. Servers on the host listen on
 * ALL addresses, so that only the isolation — not where they listen — keeps a task from them.
 *
 * A task with `network: "egress"` of a tenant whose policy names the host's servers:
 * - reaches an allowed HTTP server through the proxy (HTTP_PROXY, busybox wget), and an HTTPS
 *   server through a CONNECT tunnel (busybox ssl_client inside the tunnel);
 * - is refused a destination outside the policy (403), and an internal address the policy names
 *   but the operator does not allow (127.0.0.1: 403 from the proxy's guard);
 * - cannot connect around the proxy: a direct TCP connect to the host's server on the gateway
 *   address fails (the firewall), as does one to the host's other address (no route).
 * Each connection is logged by the worker with the run id. A task with `network: "none"` reaches
 * nothing; a tenant without an egress policy cannot create an egress job (422 policy_denied).
 * Skipped unless KAIROS_DOCKER=1 or KAIROS_REQUIRE_DOCKER=1; needs root for the firewall (nft).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer as createHttpServer, type Server } from "node:http";
import { createServer as createTlsServer, type Server as TlsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  apiClient,
  eventually,
  startKairosFixture,
  type Api,
  type KairosFixture,
} from "../support/kairos.ts";
import type { NodeProc } from "../support/nodes.ts";
import { dockerClient, dockerSkip, ensureTestImage, TEST_IMAGE } from "../support/docker-image.ts";
import {
  createTaskNetwork,
  removeTaskNetwork,
  type TaskNetworkInfo,
} from "../../src/sandbox/task-network.ts";

interface Run {
  run_id: string;
  status: string;
  result: { exit_code: number | null; output: string } | null;
}
const inAnHour = () => ({ at: new Date(Date.now() + 3600_000).toISOString() });
const PROXY_PORT = 3128;

/** A self-signed certificate for the HTTPS server (openssl, a throwaway key). */
function selfSigned(): { key: string; cert: string } {
  const dir = mkdtempSync(join(tmpdir(), "kairos-egress-tls-"));
  try {
    execFileSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=egress.test",
        "-days",
        "1",
      ].concat(["-keyout", join(dir, "k.pem"), "-out", join(dir, "c.pem")]),
      { stdio: "ignore" },
    );
    return {
      key: readFileSync(join(dir, "k.pem"), "utf8"),
      cert: readFileSync(join(dir, "c.pem"), "utf8"),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Listens on all addresses; its port. */
async function listenAll(s: Server | TlsServer): Promise<number> {
  s.listen(0, "0.0.0.0");
  await once(s, "listening");
  return (s.address() as AddressInfo).port;
}

/**
 * The egress task's script: each probe prints one `name: result` line. The proxy credential is
 * taken from HTTP_PROXY as any client would; CONNECT requests are written by hand (busybox wget
 * speaks only plain HTTP to a proxy), the TLS client runs inside the tunnel.
 */
const EGRESS_SCRIPT = String.raw`
p=${"$"}{HTTP_PROXY#http://}; cred=${"$"}{p%@*}; hp=${"$"}{p#*@}; ph=${"$"}{hp%:*}; pp=${"$"}{hp##*:}
auth=$(printf %s "$cred" | busybox base64 | tr -d '\n')
echo "via-proxy: $(wget -q -O- "http://$GW:$PA/hello" 2>&1)"
echo "outside-policy: $(wget -q -O- "http://$GW:$PB/" 2>&1)"
internal=$(printf 'CONNECT 127.0.0.1:%s HTTP/1.1\r\nProxy-Authorization: Basic %s\r\n\r\n' "$PA" "$auth" | nc -w 5 "$ph" "$pp" | head -n 1)
echo "internal: $internal"
cat > /tmp/tls.sh <<'EOF'
exec 3<&0 4>&1
printf 'CONNECT %s:%s HTTP/1.1\r\nProxy-Authorization: Basic %s\r\n\r\n' "$GW" "$PS" "$auth" >&4
read -r status <&3; echo "https-tunnel: $status" >&2
while read -r line <&3; do [ "$line" = "$(printf '\r')" ] && break; done
printf 'GET /tls HTTP/1.0\r\nHost: egress.test\r\n\r\n' | busybox ssl_client -s 4 -r 3 -n egress.test >&2
EOF
export auth GW PS
nc -w 10 "$ph" "$pp" -e sh /tmp/tls.sh 2>&1; echo
if echo x | nc -w 3 "$GW" "$PA" >/dev/null 2>&1; then echo "direct-gateway: CONNECTED"; else echo "direct-gateway: failed"; fi
if echo x | nc -w 3 "$HOSTIP" "$PA" >/dev/null 2>&1; then echo "direct-host: CONNECTED"; else echo "direct-host: failed"; fi
`;

describe("network egress end to end (docker)", { skip: dockerSkip(), timeout: 240_000 }, () => {
  let fx: KairosFixture;
  let node: NodeProc;
  let api: Api;
  let apiUrl: string;
  let net: TaskNetworkInfo;
  const name = `kairos-egress-e2e-${process.pid}`;
  const tls = selfSigned();
  const web: Server = createHttpServer((req, res) => res.end(`hello from ${req.url}`));
  const other: Server = createHttpServer((_req, res) => res.end("other server"));
  // busybox's TLS client sends no signature_algorithms, so TLS 1.2's default (SHA-1) applies,
  // which OpenSSL refuses at its default security level: this test server accepts it.
  const secure: TlsServer = createTlsServer(
    { ...tls, ciphers: "DEFAULT@SECLEVEL=0", sigalgs: "RSA+SHA256:RSA+SHA1" },
    (req, res) => res.end(`secure ${req.url}`),
  );
  let ports: { PA: number; PB: number; PS: number };

  before(async () => {
    await ensureTestImage();
    ports = { PA: await listenAll(web), PB: await listenAll(other), PS: await listenAll(secure) };
    net = await createTaskNetwork(dockerClient(), name, {
      proxyPort: PROXY_PORT,
      firewall: true,
    });
    fx = await startKairosFixture();
    node = fx.spawn("eg1", "api,scheduler,worker", [
      "--executor",
      "docker",
      "--task-network",
      name,
      "--egress-proxy-port",
      String(PROXY_PORT),
      // The operator lets the proxy reach the host's address on the task network, nothing else internal.
      "--egress-allow-internal",
      `${net.gateway}/32`,
    ]);
    apiUrl = await fx.apiUrl(node);
  });
  after(async () => {
    await fx?.stop();
    await removeTaskNetwork(dockerClient(), name).catch(() => undefined);
    web.close();
    other.close();
    secure.close();
  });

  async function runOnce(a: Api, task: Record<string, unknown>): Promise<Run> {
    const job = await a.call<{ job_id: string }>("POST", "/v1/jobs", {
      schedule: inAnHour(),
      task,
    });
    assert.equal(job.status, 201, JSON.stringify(job.body));
    const now = await a.call<Run>("POST", `/v1/jobs/${job.body.job_id}/runs`);
    return eventually(
      async () => {
        const r = (await a.call<Run>("GET", `/v1/runs/${now.body.run_id}`)).body;
        return r.status === "succeeded" || r.status === "failed" ? r : undefined;
      },
      120_000,
      "run finished",
    );
  }

  const hostIp = (): string => {
    const out = execFileSync("ip", ["-4", "-o", "route", "get", "192.0.2.1"], { encoding: "utf8" });
    return /src (\S+)/.exec(out)?.[1] ?? "192.0.2.2";
  };

  it("an egress task reaches allowed servers only through the proxy, and nothing else", async () => {
    const t = await fx.newTenant("egress");
    await fx.tenants.setEgressPolicy(t.tenant_id, [
      `${net.gateway}:${ports.PA}`,
      `${net.gateway}:${ports.PS}`,
      `127.0.0.1:${ports.PA}`,
    ]);
    api = apiClient(apiUrl, t.api_key);
    const env = {
      GW: net.gateway,
      HOSTIP: hostIp(),
      PA: String(ports.PA),
      PB: String(ports.PB),
      PS: String(ports.PS),
    };
    const done = await runOnce(api, {
      image: TEST_IMAGE,
      args: ["/bin/sh", "-c", EGRESS_SCRIPT],
      env,
      timeout_s: 90,
      network: "egress",
    });
    const out = done.result?.output ?? "";
    const line = (k: string) => new RegExp(`^${k}: (.*)$`, "m").exec(out)?.[1] ?? `(no ${k} line)`;
    assert.equal(line("via-proxy"), "hello from /hello", out);
    assert.match(line("outside-policy"), /403 Forbidden/, out);
    assert.match(line("internal"), /^HTTP\/1\.1 403 Forbidden/, out);
    assert.match(out, /https-tunnel: HTTP\/1\.1 200 Connection established/, out);
    assert.match(out, /secure \/tls/, out);
    assert.equal(line("direct-gateway"), "failed", out);
    assert.equal(line("direct-host"), "failed", out);

    // The worker logged each proxied connection with the run id.
    const logged = (status: number, target: string) =>
      node.waitFor(
        (e) => {
          const r = e as unknown as Record<string, unknown>;
          return (
            r["type"] === "egress_connection" &&
            r["run_id"] === done.run_id &&
            r["status"] === status &&
            String(r["target"]).includes(target)
          );
        },
        10_000,
        `egress log line ${status} ${target}`,
      );
    await logged(200, `${net.gateway}:${ports.PA}`);
    await logged(403, `${net.gateway}:${ports.PB}`);
    await logged(403, `127.0.0.1:${ports.PA}`);
    await logged(200, `${net.gateway}:${ports.PS}`);
  });

  it("a task with network none reaches nothing, and gets no proxy", async () => {
    const t = await fx.newTenant("no-network");
    await fx.tenants.setEgressPolicy(t.tenant_id, [`${net.gateway}:${ports.PA}`]);
    const a = apiClient(apiUrl, t.api_key);
    const script = String.raw`
echo "proxy-env: ${"$"}{HTTP_PROXY:-unset}"
echo "wget: $(wget -q -O- "http://$GW:$PA/hello" 2>&1)"
if echo x | nc -w 3 "$GW" "$PA" >/dev/null 2>&1; then echo "direct: CONNECTED"; else echo "direct: failed"; fi
if echo x | nc -w 3 "$GW" "$PP" >/dev/null 2>&1; then echo "proxy: CONNECTED"; else echo "proxy: failed"; fi
`;
    const done = await runOnce(a, {
      image: TEST_IMAGE,
      args: ["/bin/sh", "-c", script],
      env: { GW: net.gateway, PA: String(ports.PA), PP: String(PROXY_PORT) },
      timeout_s: 60,
    });
    const out = done.result?.output ?? "";
    assert.match(out, /^proxy-env: unset$/m, out);
    assert.doesNotMatch(out, /hello from/, out);
    assert.match(out, /^direct: failed$/m, out);
    assert.match(out, /^proxy: failed$/m, out);
  });

  it("a tenant without an egress policy cannot create an egress job (422 policy_denied)", async () => {
    const t = await fx.newTenant("no-policy");
    const a = apiClient(apiUrl, t.api_key);
    const r = await a.call<{ error: { code: string; field: string } }>("POST", "/v1/jobs", {
      schedule: inAnHour(),
      task: { image: TEST_IMAGE, args: ["true"], timeout_s: 10, network: "egress" },
    });
    assert.equal(r.status, 422, JSON.stringify(r.body));
    assert.equal(r.body.error.code, "policy_denied");
    assert.equal(r.body.error.field, "task.network");
  });
});
