/**
 * The operators' routes (src/http/admin.ts) over fakes: only an operator key reads
 * `GET /v1/admin/cluster`; a tenant's valid key is 403 and reaches no view, anything else 401
 * (throttled per address like the tenants' failures); an operator key is no tenant key on the
 * tenant routes; without operator deps the routes do not exist.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createApp } from "../../../src/http/app.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import type { ClusterView, OperatorKeyCheck } from "../../../src/protocol/stats.ts";
import { FakeJobs, FakeTenants } from "./fakes.ts";
import { NOW } from "./helpers.ts";

const OP_KEY = `kop_${"a".repeat(43)}`;
const VIEW: ClusterView = {
  at: new Date(NOW).toISOString(),
  nodes: [],
  partitions: { count: 0, held: [], unheld: [] },
  schedulers: [],
  workers: [],
  fair_shares: null,
};

function app(withOperator = true, address?: string) {
  const clock = new FakeClock(NOW);
  const reads: number[] = [];
  const keys: OperatorKeyCheck = {
    authenticate: (k) => Promise.resolve(k === OP_KEY ? { keyId: "o1", name: "ops" } : null),
  };
  const a = createApp({
    jobs: new FakeJobs(clock),
    tenants: new FakeTenants(),
    clock,
    rateLimits: { tenantPerSecond: 0, authFailuresPerSecond: 1, authFailuresBurst: 3 },
    ...(address === undefined ? {} : { clientAddress: () => address }),
    ...(withOperator
      ? {
          operator: {
            keys,
            view: {
              clusterView: () => {
                reads.push(1);
                return Promise.resolve(VIEW);
              },
            },
          },
        }
      : {}),
  });
  return { a, reads };
}

const get = (a: ReturnType<typeof app>["a"], path: string, key: string | null) =>
  a.request(path, { headers: key === null ? {} : { authorization: `Bearer ${key}` } });

describe("the operators' routes", () => {
  it("an operator key reads the cluster view; a tenant's key is 403 and reads nothing", async () => {
    const { a, reads } = app();
    const ok = await get(a, "/v1/admin/cluster", OP_KEY);
    assert.equal(ok.status, 200);
    assert.deepEqual(await ok.json(), VIEW);
    for (const key of [FakeTenants.KEY_A, FakeTenants.KEY_B]) {
      const r = await get(a, "/v1/admin/cluster", key);
      assert.equal(r.status, 403, key);
      const body = (await r.json()) as { error: { code: string; message: string } };
      assert.equal(body.error.code, "permission_denied");
      assert.match(body.error.message, /operator key/);
    }
    for (const key of [null, "kop_wrong", `kop_${"b".repeat(43)}`, "kai_nope"]) {
      const r = await get(a, "/v1/admin/cluster", key);
      assert.equal(r.status, 401, String(key));
    }
    assert.equal((await get(a, "/v1/admin/cluster?tenant_id=ta", OP_KEY)).status, 400);
    assert.equal(reads.length, 1, "only the operator's one good read reached the view");
  });

  it("an operator key is not a tenant's: the tenant routes refuse it", async () => {
    const { a } = app();
    for (const path of ["/v1/jobs", "/v1/stats", "/v1/runs?status=dead_lettered"])
      assert.equal((await get(a, path, OP_KEY)).status, 401, path);
  });

  it("failed operator authentications are throttled per address", async () => {
    const { a } = app(true, "10.0.0.9");
    for (let i = 0; i < 3; i++)
      assert.equal((await get(a, "/v1/admin/cluster", FakeTenants.KEY_A)).status, 403);
    assert.equal((await get(a, "/v1/admin/cluster", OP_KEY)).status, 429, "even a good key waits");
  });

  it("do not exist without operator deps", async () => {
    const { a } = app(false);
    assert.equal((await get(a, "/v1/admin/cluster", OP_KEY)).status, 404);
    assert.equal((await get(a, "/v1/admin/cluster", FakeTenants.KEY_A)).status, 404);
  });
});
