/**
 * `GET /v1/stats` (src/http/routes/stats.ts) over a recording source: the figures asked for are
 * always the key's tenant's — another tenant's key gets its own, a tenant id in the query is a
 * 400 that reaches no source — behind the same authentication and rate limit as every route;
 * without a source the route does not exist.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createApp } from "../../../src/http/app.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import type { TenantStatsSource, TenantStatsView } from "../../../src/protocol/stats.ts";
import { FakeJobs, FakeTenants } from "./fakes.ts";
import { NOW } from "./helpers.ts";

function app(stats: TenantStatsSource | undefined, perSecond = 0) {
  const clock = new FakeClock(NOW);
  return createApp({
    jobs: new FakeJobs(clock),
    tenants: new FakeTenants(),
    clock,
    rateLimits: { tenantPerSecond: perSecond, tenantBurst: 2 },
    ...(stats ? { stats } : {}),
  });
}

const view = (tenantId: string): TenantStatsView => ({
  tenant_id: tenantId,
  at: new Date(NOW).toISOString(),
  step_s: 5,
  series: [],
  totals: { started: 0, lag_p50_s: null, lag_p99_s: null },
  waiting: { slot: 0, worker: 0 },
  forecast: null,
  nodes: { asked: 1, answered: 1 },
  partial: false,
});

function recorder(): TenantStatsSource & { asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    tenantStats: (id) => {
      asked.push(id);
      return Promise.resolve(view(id));
    },
  };
}

const get = (a: ReturnType<typeof app>, path: string, key: string | null) =>
  a.request(path, { headers: key === null ? {} : { authorization: `Bearer ${key}` } });

describe("GET /v1/stats", () => {
  it("answers the key's tenant's figures, whoever else the caller names", async () => {
    const src = recorder();
    const a = app(src);
    const ra = await get(a, "/v1/stats", FakeTenants.KEY_A);
    assert.equal(ra.status, 200);
    assert.equal(ra.headers.get("cache-control"), "no-store");
    assert.equal(((await ra.json()) as TenantStatsView).tenant_id, "ta");
    const rb = await get(a, "/v1/stats", FakeTenants.KEY_B);
    assert.equal(((await rb.json()) as TenantStatsView).tenant_id, "tb");
    for (const q of ["?tenant_id=tb", "?tenant=tb", "?x=1", "?tenant_id=ta"]) {
      const r = await get(a, `/v1/stats${q}`, FakeTenants.KEY_A);
      assert.equal(r.status, 400, q);
      const body = (await r.json()) as { error: { code: string; field: string } };
      assert.equal(body.error.code, "invalid_argument");
      assert.equal(body.error.field, q.slice(1).split("=")[0]);
    }
    assert.deepEqual(src.asked, ["ta", "tb"], "refused requests reached no source");
  });

  it("needs a valid key and counts against the tenant's rate limit", async () => {
    const src = recorder();
    const a = app(src, 1);
    assert.equal((await get(a, "/v1/stats", null)).status, 401);
    assert.equal((await get(a, "/v1/stats", "kai_not_a_key")).status, 401);
    assert.equal((await get(a, "/v1/stats", FakeTenants.KEY_A)).status, 200);
    assert.equal((await get(a, "/v1/stats", FakeTenants.KEY_A)).status, 200);
    assert.equal((await get(a, "/v1/stats", FakeTenants.KEY_A)).status, 429);
    assert.deepEqual(src.asked, ["ta", "ta"]);
  });

  it("does not exist without a source", async () => {
    assert.equal((await get(app(undefined), "/v1/stats", FakeTenants.KEY_A)).status, 404);
  });
});
