/**
 * Health and metrics on a real nats-server: `/readyz` answers 503 while NATS is down and 200 again
 * after it is back (same port, same data), `/healthz` answers 200 throughout, on a scheduler +
 * worker node's `--metrics-port` listener; `/metrics` lists every metric name of the contract.
 * An API node answers `/healthz` and `/readyz` on its API port but never `/metrics` (404); its
 * metrics listener, given a token, answers `/metrics` only with that token (401 otherwise). After
 * a run, a scrape names no tenant unless the node was told to (`metricsTenantLabels`).
 *
 * Readiness is observed the way an orchestrator does: by asking `/readyz` (every 100 ms, bounded;
 * the wait names the phase and the last answer on timeout).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { makeNodeConfig } from "../../src/cluster/config.ts";
import { launchNatsServer, type NatsServerHandle } from "../../src/dev/nats-launcher.ts";
import { METRICS } from "../../src/metrics/index.ts";
import { startKairos, type KairosProcess } from "../../src/server/start.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";
import { connectNats } from "../../src/cluster/nats.ts";
import { openBuckets } from "../../src/cluster/buckets.ts";
import { KvTenantDirectory } from "../../src/tenants/index.ts";
import { systemClock } from "../../src/lib/clock.ts";

let nats: NatsFixture;
let restarted: NatsServerHandle | undefined;

before(async () => {
  nats = await startNats({ clusters: ["health"] });
});

after(async () => {
  await restarted?.stop();
  await nats?.stop();
});

async function get(url: string): Promise<{ status: number; body: string }> {
  const r = await fetch(url);
  return { status: r.status, body: await r.text() };
}

async function waitForStatus(
  url: string,
  status: number,
  phase: string,
  timeoutMs: number,
): Promise<{ status: number; body: string }> {
  const deadline = Date.now() + timeoutMs;
  let last: { status: number; body: string } | string = "no answer yet";
  while (Date.now() < deadline) {
    try {
      last = await get(url);
      if (last.status === status) return last;
    } catch (e) {
      last = String(e);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(
    `${phase}: expected ${url} to answer ${status} within ${timeoutMs} ms; last answer: ${typeof last === "string" ? last : `${last.status} ${last.body}`}`,
  );
}

describe("health and readiness", () => {
  let p: KairosProcess;

  it("a scheduler+worker node is ready, not ready while NATS is down, ready again after", async () => {
    const server = nats.servers[0]!;
    p = await startKairos(
      makeNodeConfig({
        natsUrl: nats.url,
        natsAuth: { credsFile: nats.credsFor(["scheduler", "worker"]) },
        nodeId: "health-1",
        clusterName: "health",
        roles: ["scheduler", "worker"],
        partitions: 4,
      }),
      { executor: "noop", workerSlots: 1, apiHost: "127.0.0.1", apiPort: 0, metricsPort: 0 },
    );
    assert.equal(p.api, undefined);
    const base = p.metrics!.url;
    const ready = JSON.parse(
      (await waitForStatus(`${base}/readyz`, 200, "start-up", 20_000)).body,
    ) as { ready: boolean; checks: Record<string, { ok: boolean }> };
    assert.equal(ready.ready, true);
    assert.deepEqual(Object.keys(ready.checks).sort(), ["executor", "nats", "partitions"]);
    const metrics = (await get(`${base}/metrics`)).body;
    for (const name of Object.values(METRICS))
      assert.match(metrics, new RegExp(`^# TYPE ${name} `, "m"), `${name} is exposed`);
    assert.match(metrics, /^kairos_partitions_held 4$/m);
    assert.match(metrics, /^kairos_kv_op_seconds_count\{op="get",bucket="[a-z0-9_-]+"\} [1-9]/m);

    await server.stop();
    const down = JSON.parse(
      (await waitForStatus(`${base}/readyz`, 503, "NATS stopped", 15_000)).body,
    ) as { ready: boolean; checks: Record<string, { ok: boolean }> };
    assert.equal(down.ready, false);
    assert.equal(down.checks["nats"]?.ok, false);
    assert.equal((await get(`${base}/healthz`)).status, 200, "liveness does not depend on NATS");

    restarted = await launchNatsServer({
      storeDir: server.storeDir,
      port: server.port,
      auth: nats.auth,
    });
    await waitForStatus(`${base}/readyz`, 200, "NATS restarted", 30_000);
    await p.stop();
  });

  it("an API node serves /healthz and /readyz on its API port, /metrics only on its metrics listener", async () => {
    const api = await startKairos(
      makeNodeConfig({
        natsUrl: restarted?.url ?? nats.url,
        natsAuth: { credsFile: nats.credsFor(["api"]) },
        nodeId: "health-api",
        clusterName: "health",
        roles: ["api"],
      }),
      { executor: "noop", workerSlots: 1, apiHost: "127.0.0.1", apiPort: 0 },
    );
    try {
      assert.equal(api.metrics, undefined, "no metrics listener unless asked for");
      assert.equal((await get(`${api.api!.url}/healthz`)).status, 200);
      const r = await waitForStatus(`${api.api!.url}/readyz`, 200, "api start-up", 10_000);
      assert.deepEqual(Object.keys((JSON.parse(r.body) as { checks: object }).checks), ["nats"]);
      const m = await get(`${api.api!.url}/metrics`);
      assert.equal(m.status, 404, m.body);
      assert.doesNotMatch(m.body, /kairos_/);
    } finally {
      await api.stop();
    }
  });

  it("a metrics token guards /metrics; tenant ids appear in no label unless asked for", async () => {
    const token = "t0ken-for-the-metrics-listener";
    const start = (nodeId: string, tenantLabels: boolean) =>
      startKairos(
        makeNodeConfig({
          natsUrl: restarted?.url ?? nats.url,
          natsAuth: { credsFile: nats.credsFor(["api", "scheduler", "worker"]) },
          nodeId,
          clusterName: "health",
          roles: ["api", "scheduler", "worker"],
          partitions: 4,
        }),
        {
          executor: "noop",
          workerSlots: 2,
          apiHost: "127.0.0.1",
          apiPort: 0,
          metricsPort: 0,
          metricsToken: token,
          metricsTenantLabels: tenantLabels,
        },
      );
    // Tenants are written as admin (a node's own NATS user may not mint API keys).
    const adminNc = await connectNats({
      url: restarted?.url ?? nats.url,
      name: "health-admin",
      credsFile: nats.credsFor("admin"),
    });
    const admin = new KvTenantDirectory(
      (await openBuckets(adminNc, { clusterName: "health", replicas: 1 })).tenants,
      { clock: systemClock },
    );
    const runOnce = async (
      p: KairosProcess,
      name: string,
    ): Promise<{ tenantId: string; text: string }> => {
      const t = await admin.createTenant(name);
      const call = async (
        method: string,
        path: string,
        body?: unknown,
      ): Promise<{ status: number; json: Record<string, unknown> }> => {
        const res = await fetch(`${p.api!.url}${path}`, {
          method,
          headers: {
            authorization: `Bearer ${t.apiKey}`,
            ...(body !== undefined ? { "content-type": "application/json" } : {}),
          },
          ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        });
        return { status: res.status, json: (await res.json()) as Record<string, unknown> };
      };
      await waitForStatus(`${p.metrics!.url}/readyz`, 200, "node start-up", 20_000);
      const job = await call("POST", "/v1/jobs", {
        schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
        task: { image: "busybox", args: ["true"], timeout_s: 10 },
      });
      assert.equal(job.status, 201, JSON.stringify(job.json));
      const run = await call("POST", `/v1/jobs/${String(job.json["job_id"])}/runs`);
      assert.equal(run.status, 202, JSON.stringify(run.json));
      const deadline = Date.now() + 20_000;
      let status = "";
      while (status !== "succeeded") {
        if (Date.now() > deadline)
          assert.fail(
            `run ${String(run.json["run_id"])} did not succeed within 20 s; last status ${status}`,
          );
        status = String(
          (await call("GET", `/v1/runs/${String(run.json["run_id"])}`)).json["status"],
        );
        if (status !== "succeeded") await new Promise((r) => setTimeout(r, 100));
      }
      const res = await fetch(`${p.metrics!.url}/metrics`, {
        headers: { authorization: `Bearer ${token}` },
      });
      assert.equal(res.status, 200);
      return { tenantId: t.tenant.tenant_id, text: await res.text() };
    };

    const plain = await start("health-plain", false);
    try {
      for (const auth of [
        undefined,
        "Bearer wrong-token-of-some-length",
        `Basic ${token}`,
        `Bearer ${token}x`,
      ]) {
        const r = await fetch(
          `${plain.metrics!.url}/metrics`,
          auth === undefined ? {} : { headers: { authorization: auth } },
        );
        const body = await r.text();
        assert.equal(r.status, 401, `${auth ?? "no header"}: ${body}`);
        assert.doesNotMatch(body, /kairos_/);
      }
      assert.equal(
        (await get(`${plain.metrics!.url}/healthz`)).status,
        200,
        "probes need no token",
      );
      assert.equal((await get(`${plain.api!.url}/metrics`)).status, 404);
      const { tenantId, text } = await runOnce(plain, "metrics-plain");
      assert.match(text, /^kairos_attempts_total\{outcome="succeeded"\} [1-9]/m);
      assert.doesNotMatch(text, /tenant=/, "no tenant label by default");
      assert.equal(text.includes(tenantId), false, "the tenant id appears nowhere in the scrape");
    } finally {
      await plain.stop();
    }
    const labelled = await start("health-labelled", true);
    try {
      const { tenantId, text } = await runOnce(labelled, "metrics-labelled");
      assert.match(
        text,
        new RegExp(`^kairos_attempts_total\\{tenant="${tenantId}",outcome="succeeded"\\} 1$`, "m"),
      );
    } finally {
      await labelled.stop();
      await adminNc.close();
    }
  });
});
