/**
 * A tenant's live figures (`GET /v1/stats`) on a real cluster: one node with the api, scheduler
 * and worker roles and a second scheduler, on a real nats-server with each role's own NATS user.
 * Tenant a has a job due every second; tenant b has none. a's figures show its runs started,
 * their dispatch lag and the forecast of 60 runs a minute, summed over both schedulers; b — with
 * its own real key — sees none of a's, and naming a's tenant id in the query is refused. A worker
 * identity asking a scheduler directly on the bus gets no answer (its permissions refuse it).
 * The operators' view (`GET /v1/admin/cluster`) answers an operator key — nodes, partitions and
 * holders, workers and slots, fair shares — and refuses both tenants' real keys (403) and a
 * revoked operator key (401).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { encode } from "../../src/cluster/codec.ts";
import { openBuckets } from "../../src/cluster/buckets.ts";
import { systemClock } from "../../src/lib/clock.ts";
import { KvOperatorKeys } from "../../src/tenants/operator-keys.ts";
import type { ClusterView, TenantStatsView } from "../../src/protocol/stats.ts";
import {
  apiClient,
  eventually,
  startKairosFixture,
  type Api,
  type KairosFixture,
} from "../support/kairos.ts";

describe("a tenant's live figures on a real cluster", { timeout: 180_000 }, () => {
  let fx: KairosFixture;
  let a: Api;
  let b: Api;
  let aId = "";
  let url = "";
  before(async () => {
    fx = await startKairosFixture();
    const n1 = fx.spawn("s1", "api,scheduler,worker", ["--slots", "4"]);
    url = await fx.apiUrl(n1);
    const ta = await fx.newTenant("stats-a");
    const tb = await fx.newTenant("stats-b");
    aId = ta.tenant_id;
    a = apiClient(url, ta.api_key);
    b = apiClient(url, tb.api_key);
    const r = await a.call("POST", "/v1/jobs", {
      name: "every-second",
      schedule: { cron: "* * * * * *", time_zone: "UTC" },
      overlap: "allow",
      task: { image: "busybox", args: ["true"], timeout_s: 10 },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    // A second scheduler: the figures are summed over both, and partitions moving make both
    // nodes forecast again (with a's job in it) two seconds later.
    const n2 = fx.spawn("s2", "scheduler");
    await n2.waitFor((x) => x.type === "partition_acquired", 30_000, "s2 holds a partition");
  });
  after(async () => {
    await fx?.stop();
  });

  const stats = async (api: Api, query = ""): Promise<TenantStatsView> => {
    const r = await api.call<TenantStatsView>("GET", `/v1/stats${query}`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body;
  };

  it("shows the tenant its runs started, their lag and its forecast, from every scheduler", async () => {
    const v = await eventually(
      async () => {
        const s = await stats(a);
        const f = s.forecast?.per_minute ?? [];
        const forecastDone = f.slice(1, 59).every((n) => n === 60);
        return s.totals.started >= 3 && s.nodes.answered === 2 && forecastDone ? s : undefined;
      },
      60_000,
      "a's figures: 3 runs started, both schedulers answering, 60 runs due a minute",
    );
    assert.equal(v.tenant_id, aId);
    assert.equal(v.nodes.asked, 2);
    assert.equal(v.partial, false);
    assert.equal(v.step_s, 5);
    assert.equal(v.series.length, 120);
    assert.ok(v.totals.lag_p50_s !== null && v.totals.lag_p99_s !== null);
    assert.ok(v.totals.lag_p99_s >= v.totals.lag_p50_s);
    assert.equal(
      v.series.reduce((n, p) => n + p.started, 0),
      v.totals.started,
    );
    const busy = v.series.filter((p) => p.started > 0);
    assert.ok(busy.every((p) => p.started_per_s === p.started / 5 && p.lag_p50_s !== null));
    assert.ok(v.forecast!.total >= 58 * 60);
    assert.ok(Date.parse(v.series.at(-1)!.at) <= Date.now() - 5_000, "no unfinished step");
  });

  it("another tenant's key sees none of it, and cannot name the tenant", async () => {
    const s = await stats(b);
    assert.notEqual(s.tenant_id, aId);
    assert.equal(s.totals.started, 0);
    assert.equal(s.totals.lag_p50_s, null);
    assert.ok(s.series.every((p) => p.started === 0 && p.lag_p50_s === null && !p.waiting));
    assert.deepEqual(s.waiting, { slot: 0, worker: 0 });
    assert.equal(s.forecast?.total ?? 0, 0);
    for (const q of [`?tenant_id=${aId}`, `?tenant=${aId}`]) {
      const r = await b.call<{ error: { code: string } }>("GET", `/v1/stats${q}`);
      assert.equal(r.status, 400, q);
      assert.equal(r.body.error.code, "invalid_argument");
    }
    // a's own figures are still a's (the refused requests changed nothing).
    assert.equal((await stats(a)).tenant_id, aId);
  });

  it("a worker identity asking a scheduler on the bus gets no answer", async () => {
    const nc = await fx.nats.connect("stats-attacker", ["worker"]);
    try {
      await assert.rejects(
        nc.request("kairos.kairos.stats.s1", encode({ tenant_id: aId }), { timeout: 1_500 }),
      );
    } finally {
      await nc.close();
    }
  });

  it("the operators' view answers an operator key, and refuses the tenants' real keys", async () => {
    const b2 = await openBuckets(fx.nc, { clusterName: "kairos", replicas: 1 });
    const keys = new KvOperatorKeys(b2.tenants, systemClock);
    const op = await keys.create("e2e-operator");
    const admin = apiClient(url, op.key);
    const v = await eventually(
      async () => {
        const r = await admin.call<ClusterView>("GET", "/v1/admin/cluster");
        assert.equal(r.status, 200, JSON.stringify(r.body));
        const x = r.body;
        const ok =
          x.schedulers.length === 2 &&
          x.schedulers.every((s) => s.answered) &&
          x.partitions.unheld.length === 0 &&
          x.workers.some((w) => w.slots === 4) &&
          x.fair_shares?.tenants.some((t) => t.tenant_id === aId);
        return ok ? x : undefined;
      },
      30_000,
      "both schedulers, every partition held, the worker's 4 slots, a's fair share",
    );
    assert.deepEqual(
      v.nodes.map((n) => n.node_id),
      ["s1", "s2"],
    );
    assert.equal(v.partitions.count, 8);
    assert.equal(v.partitions.held.length, 8);
    assert.deepEqual(new Set(v.partitions.held.map((p) => p.node)), new Set(["s1", "s2"]));
    assert.ok(v.fair_shares!.capacity >= 4);
    const share = v.fair_shares!.tenants.find((t) => t.tenant_id === aId)!;
    assert.ok(share.weight === 1 && share.demand >= 0);
    // Both tenants' real keys: refused, whatever they name.
    for (const t of [a, b])
      for (const path of ["/v1/admin/cluster", `/v1/admin/cluster?tenant_id=${aId}`]) {
        const r = await t.call<{ error: { code: string } }>("GET", path);
        assert.equal(r.status, 403, path);
        assert.equal(r.body.error.code, "permission_denied");
      }
    // The operator key is no tenant's key.
    assert.equal((await admin.call("GET", "/v1/jobs")).status, 401);
    assert.equal((await admin.call("GET", "/v1/stats")).status, 401);
    // Revoked: refused once the API node's 5 s cache has let go of it.
    await keys.revoke(op.keyId);
    await eventually(
      async () =>
        (await admin.call("GET", "/v1/admin/cluster")).status === 401 ? true : undefined,
      15_000,
      "the revoked operator key refused",
    );
  });
});
