/**
 * Health and metrics on a real nats-server: `/readyz` answers 503 while NATS is down and 200 again
 * after it is back (same port, same data), `/healthz` answers 200 throughout, on a scheduler +
 * worker node's `--metrics-port` listener; an API node serves the same routes on its API port;
 * `/metrics` lists every metric name of the contract.
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

async function waitForStatus(url: string, status: number, phase: string, timeoutMs: number): Promise<{ status: number; body: string }> {
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
  assert.fail(`${phase}: expected ${url} to answer ${status} within ${timeoutMs} ms; last answer: ${typeof last === "string" ? last : `${last.status} ${last.body}`}`);
}

describe("health and readiness", () => {
  let p: KairosProcess;

  it("a scheduler+worker node is ready, not ready while NATS is down, ready again after", async () => {
    const server = nats.servers[0]!;
    p = await startKairos(
      makeNodeConfig({ natsUrl: nats.url, natsAuth: { credsFile: nats.credsFor(["scheduler", "worker"]) }, nodeId: "health-1", clusterName: "health", roles: ["scheduler", "worker"], partitions: 4 }),
      { executor: "noop", workerSlots: 1, apiHost: "127.0.0.1", apiPort: 0, metricsPort: 0 },
    );
    assert.equal(p.api, undefined);
    const base = p.metrics!.url;
    const ready = JSON.parse((await waitForStatus(`${base}/readyz`, 200, "start-up", 20_000)).body) as { ready: boolean; checks: Record<string, { ok: boolean }> };
    assert.equal(ready.ready, true);
    assert.deepEqual(Object.keys(ready.checks).sort(), ["executor", "nats", "partitions"]);
    const metrics = (await get(`${base}/metrics`)).body;
    for (const name of Object.values(METRICS)) assert.match(metrics, new RegExp(`^# TYPE ${name} `, "m"), `${name} is exposed`);
    assert.match(metrics, /^kairos_partitions_held 4$/m);
    assert.match(metrics, /^kairos_kv_op_seconds_count\{op="get",bucket="[a-z0-9_-]+"\} [1-9]/m);

    await server.stop();
    const down = JSON.parse((await waitForStatus(`${base}/readyz`, 503, "NATS stopped", 15_000)).body) as { ready: boolean; checks: Record<string, { ok: boolean }> };
    assert.equal(down.ready, false);
    assert.equal(down.checks["nats"]?.ok, false);
    assert.equal((await get(`${base}/healthz`)).status, 200, "liveness does not depend on NATS");

    restarted = await launchNatsServer({ storeDir: server.storeDir, port: server.port, auth: nats.auth });
    await waitForStatus(`${base}/readyz`, 200, "NATS restarted", 30_000);
    await p.stop();
  });

  it("an API node serves /healthz, /readyz and /metrics on its API port", async () => {
    const api = await startKairos(
      makeNodeConfig({ natsUrl: restarted?.url ?? nats.url, natsAuth: { credsFile: nats.credsFor(["api"]) }, nodeId: "health-api", clusterName: "health", roles: ["api"] }),
      { executor: "noop", workerSlots: 1, apiHost: "127.0.0.1", apiPort: 0 },
    );
    try {
      assert.equal(api.metrics, undefined);
      assert.equal((await get(`${api.api!.url}/healthz`)).status, 200);
      const r = await waitForStatus(`${api.api!.url}/readyz`, 200, "api start-up", 10_000);
      assert.deepEqual(Object.keys((JSON.parse(r.body) as { checks: object }).checks), ["nats"]);
      assert.match((await get(`${api.api!.url}/metrics`)).body, /^# TYPE kairos_dispatch_lag_seconds histogram$/m);
    } finally {
      await api.stop();
    }
  });
});
