/**
 * Dead letters reach the tenant's webhook: a run that fails its last attempt is POSTed, signed
 * with HMAC-SHA256, to a receiver on 127.0.0.1 that checks the signature (the node is started
 * with --webhook-allow-http --webhook-allow-private: by default both would be refused).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { signWebhook } from "../../src/notify/webhook.ts";
import { apiClient, startKairosFixture, type Api, type KairosFixture } from "../support/kairos.ts";

interface Received {
  signature: string;
  body: string;
}

describe("dead-letter webhook", { timeout: 120_000 }, () => {
  let fx: KairosFixture;
  let api: Api;
  let server: Server;
  let tenantId: string;
  let secret: string;
  const received: Received[] = [];
  let onReceive: (() => void) | undefined;

  before(async () => {
    server = createServer((req, res) => {
      let body = "";
      req
        .setEncoding("utf8")
        .on("data", (c: string) => (body += c))
        .on("end", () => {
          received.push({ signature: String(req.headers["kairos-signature"] ?? ""), body });
          res.writeHead(204).end();
          onReceive?.();
        });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const addr = server.address();
    const port = typeof addr === "object" && addr ? addr.port : 0;
    fx = await startKairosFixture();
    // The receiver is plain http on loopback: both are refused unless the operator allows them.
    const node = fx.spawn("wh-1", "api,scheduler,worker", [
      "--webhook-allow-http",
      "--webhook-allow-private",
    ]);
    const t = await fx.newTenant("hooked");
    tenantId = t.tenant_id;
    secret = (await fx.tenants.setWebhook(tenantId, `http://127.0.0.1:${port}/kairos`)).secret!;
    api = apiClient(await fx.apiUrl(node), t.api_key);
  });
  after(async () => {
    await fx?.stop();
    await new Promise((r) => server?.close(r));
  });

  it("POSTs the dead-lettered run with a valid signature", async () => {
    const arrived = new Promise<void>((r) => (onReceive = r));
    const job = await api.call<{ job_id: string }>("POST", "/v1/jobs", {
      schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
      task: { image: "busybox", args: ["/bin/sh", "-c", "echo boom; exit 7"], timeout_s: 10 },
    });
    assert.equal(job.status, 201);
    const run = await api.call<{ run_id: string }>("POST", `/v1/jobs/${job.body.job_id}/runs`);
    const timeout = new Promise<never>((_, rej) =>
      setTimeout(() => rej(new Error("no webhook within 30 s")), 30_000).unref(),
    );
    await Promise.race([arrived, timeout]);
    const got = received[0]!;
    const t = Number(/^t=(\d+),/.exec(got.signature)?.[1]);
    assert.equal(got.signature, signWebhook(secret, t, got.body), "signature verifies");
    assert.ok(Math.abs(Date.now() / 1000 - t) < 60, "fresh timestamp");
    const payload = JSON.parse(got.body) as {
      type: string;
      run: { run_id: string; status: string; tenant_id: string; result: { exit_code: number } };
    };
    assert.equal(payload.type, "run.dead_lettered");
    assert.equal(payload.run.run_id, run.body.run_id);
    assert.equal(payload.run.status, "failed");
    assert.equal(payload.run.tenant_id, tenantId);
    assert.equal(payload.run.result.exit_code, 7);
  });
});
