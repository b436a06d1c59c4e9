/**
 * The dead-letter outbox survives a kill -9 of the scheduler, and dead letters are listable by
 * their tenant only. On a real nats-server with spawned nodes: an api+worker node and a
 * scheduler (--webhook-allow-http --webhook-allow-private: the receiver is plain http on
 * 127.0.0.1). The receiver holds the first delivery open and the scheduler is killed with
 * SIGKILL while it waits for the answer; a second scheduler takes the partitions over and its
 * outbox sweep delivers the same run again (same Kairos-Delivery-Id), after which the outbox
 * entry is gone. Then GET /v1/runs?status=dead_lettered pages the tenant's dead letters and
 * shows none of another tenant's.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer, type ServerResponse, type Server } from "node:http";
import { openBuckets, type Buckets } from "../../src/cluster/buckets.ts";
import { signWebhook } from "../../src/notify/webhook.ts";
import type { RunView } from "../../src/protocol/model.ts";
import {
  apiClient,
  eventually,
  startKairosFixture,
  type Api,
  type KairosFixture,
} from "../support/kairos.ts";
import type { NodeProc } from "../support/nodes.ts";

interface Received {
  signature: string;
  deliveryId: string;
  body: string;
}

const SCHEDULER_FLAGS = [
  "--webhook-allow-http",
  "--webhook-allow-private",
  "--lease-ttl-ms",
  "3000",
];

describe("dead-letter outbox", { timeout: 180_000 }, () => {
  let fx: KairosFixture;
  let buckets: Buckets;
  let server: Server;
  let api: Api;
  let apiB: Api;
  let secret: string;
  let s1: NodeProc;
  const received: Received[] = [];
  const held: ServerResponse[] = [];
  let onReceive: (() => void) | undefined;

  before(async () => {
    server = createServer((req, res) => {
      let body = "";
      req
        .setEncoding("utf8")
        .on("data", (c: string) => (body += c))
        .on("end", () => {
          received.push({
            signature: String(req.headers["kairos-signature"] ?? ""),
            deliveryId: String(req.headers["kairos-delivery-id"] ?? ""),
            body,
          });
          // The first delivery is never answered: the scheduler is killed while it waits.
          if (received.length === 1) held.push(res);
          else res.writeHead(204).end();
          onReceive?.();
        });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const addr = server.address();
    const port = typeof addr === "object" && addr ? addr.port : 0;
    fx = await startKairosFixture();
    buckets = await openBuckets(fx.nc, { clusterName: "kairos", replicas: 1 });
    const front = fx.spawn("ob-api", "api,worker");
    s1 = fx.spawn("ob-s1", "scheduler", SCHEDULER_FLAGS);
    const a = await fx.newTenant("outbox-a");
    const b = await fx.newTenant("outbox-b");
    secret = (await fx.tenants.setWebhook(a.tenant_id, `http://127.0.0.1:${port}/kairos`)).secret!;
    const url = await fx.apiUrl(front);
    api = apiClient(url, a.api_key);
    apiB = apiClient(url, b.api_key);
  });
  after(async () => {
    for (const r of held) r.destroy();
    await fx?.stop();
    await new Promise((r) => server?.close(r));
  });

  const failingJob = async (c: Api): Promise<string> => {
    const job = await c.call<{ job_id: string }>("POST", "/v1/jobs", {
      schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
      task: { image: "busybox", args: ["/bin/sh", "-c", "exit 7"], timeout_s: 10 },
    });
    assert.equal(job.status, 201, JSON.stringify(job.body));
    return job.body.job_id;
  };
  const runNow = async (c: Api, jobId: string): Promise<string> => {
    const r = await eventually(
      async () => {
        const x = await c.call<{ run_id: string }>("POST", `/v1/jobs/${jobId}/runs`);
        return x.status === 202 ? x.body.run_id : undefined;
      },
      30_000,
      "run now accepted",
    );
    return r;
  };
  const waitReceived = (n: number, ms: number, phase: string) =>
    new Promise<void>((resolve, reject) => {
      const t = setTimeout(
        () =>
          reject(
            new Error(`${phase}: ${received.length} deliveries after ${ms} ms, expected ${n}`),
          ),
        ms,
      );
      const check = () => {
        if (received.length >= n) {
          clearTimeout(t);
          resolve();
        }
      };
      onReceive = check;
      check();
    });

  let deadRunId = "";

  it("a delivery cut by kill -9 of the scheduler is delivered again by the next owner", async () => {
    const jobId = await failingJob(api);
    deadRunId = await runNow(api, jobId);
    await waitReceived(1, 60_000, "first delivery");
    assert.equal(received[0]!.deliveryId, deadRunId);
    assert.ok(
      await buckets.runs.list("ob.*.*." + deadRunId).then((l) => l.length === 1),
      "outbox entry pending while the delivery is unanswered",
    );
    s1.signal("SIGKILL");
    await s1.exited;
    fx.spawn("ob-s2", "scheduler", SCHEDULER_FLAGS);
    await waitReceived(2, 60_000, "redelivery by the next scheduler");
    const again = received[1]!;
    assert.equal(again.deliveryId, deadRunId, "same delivery id (the run id)");
    const t = Number(/^t=(\d+),/.exec(again.signature)?.[1]);
    assert.equal(again.signature, signWebhook(secret, t, again.body), "signature verifies");
    const payload = JSON.parse(again.body) as { type: string; run: RunView };
    assert.equal(payload.type, "run.dead_lettered");
    assert.equal(payload.run.run_id, deadRunId);
    assert.equal(payload.run.status, "failed");
    await eventually(
      async () => ((await buckets.runs.list("ob.>")).length === 0 ? true : undefined),
      20_000,
      "outbox entry deleted after the 2xx",
    );
  });

  it("dead letters are listed per tenant, paged, oldest first; another tenant sees none of them", async () => {
    const jobId = await failingJob(api);
    const more = [await runNow(api, jobId)];
    await eventually(
      async () =>
        (await api.call<{ status: string }>("GET", `/v1/runs/${more[0]}`)).body.status === "failed"
          ? true
          : undefined,
      60_000,
      "second run failed",
    );
    more.push(await runNow(api, jobId));
    await eventually(
      async () =>
        (await api.call<{ status: string }>("GET", `/v1/runs/${more[1]}`)).body.status === "failed"
          ? true
          : undefined,
      60_000,
      "third run failed",
    );
    const jobB = await failingJob(apiB);
    const runB = await runNow(apiB, jobB);
    await eventually(
      async () =>
        (await apiB.call<{ status: string }>("GET", `/v1/runs/${runB}`)).body.status === "failed"
          ? true
          : undefined,
      60_000,
      "tenant B's run failed",
    );

    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const q: string = cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`;
      const page = await api.call<{ runs: RunView[]; next_cursor: string | null }>(
        "GET",
        `/v1/runs?status=dead_lettered&limit=2${q}`,
      );
      assert.equal(page.status, 200, JSON.stringify(page.body));
      assert.ok(page.body.runs.length <= 2);
      for (const r of page.body.runs) {
        assert.ok(r.status === "failed" || r.status === "timed_out");
        seen.push(r.run_id);
      }
      cursor = page.body.next_cursor;
      pages++;
    } while (cursor !== null && pages < 10);
    assert.deepEqual(seen, [deadRunId, ...more], "every dead letter once, oldest first");
    assert.equal(pages, 2);

    const b = await apiB.call<{ runs: RunView[]; next_cursor: string | null }>(
      "GET",
      "/v1/runs?status=dead_lettered",
    );
    assert.deepEqual(
      b.body.runs.map((r) => r.run_id),
      [runB],
      "tenant B sees its own dead letter only",
    );
    // The tenant-wide list (newest first) filters by a run status; anything else is refused.
    const bad = await api.call<{ error: { code: string } }>("GET", "/v1/runs?status=nope");
    assert.equal(bad.status, 400);
    const forged = await apiB.call(
      "GET",
      `/v1/runs?status=dead_lettered&cursor=${encodeURIComponent(Buffer.from("dl\n0").toString("base64url"))}`,
    );
    assert.deepEqual(
      (forged.body as { runs: RunView[] }).runs.map((r) => r.run_id),
      [runB],
      "a cursor cannot widen the tenant",
    );
  });
});
