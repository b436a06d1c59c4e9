/** Per-tenant request limits and throttled failed authentications (429 with Retry-After). */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createApp } from "../../../src/http/app.ts";
import { TokenBuckets } from "../../../src/http/rate-limit.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { FakeJobs, FakeTenants } from "./fakes.ts";
import { NOW } from "./helpers.ts";

function app(limits: {
  tenantPerSecond: number;
  tenantBurst: number;
  authFailuresPerSecond: number;
  authFailuresBurst: number;
}) {
  const clock = new FakeClock(NOW);
  let address: string | undefined = "192.0.2.1";
  const a = createApp({
    jobs: new FakeJobs(clock),
    tenants: new FakeTenants(),
    clock,
    rateLimits: limits,
    clientAddress: () => address,
    logError: () => undefined,
  });
  const get = (key: string | null) =>
    Promise.resolve(
      a.request("/v1/jobs", { headers: key === null ? {} : { authorization: `Bearer ${key}` } }),
    );
  return { clock, get, setAddress: (x: string | undefined) => (address = x) };
}

describe("rate limits", () => {
  it("a tenant past its burst gets 429 rate_limited with Retry-After; another tenant does not; tokens come back", async () => {
    const t = app({
      tenantPerSecond: 2,
      tenantBurst: 3,
      authFailuresPerSecond: 0,
      authFailuresBurst: 1,
    });
    for (let i = 0; i < 3; i++) assert.equal((await t.get(FakeTenants.KEY_A)).status, 200);
    const r = await t.get(FakeTenants.KEY_A);
    assert.equal(r.status, 429);
    assert.equal(r.headers.get("retry-after"), "1");
    assert.equal(((await r.json()) as { error: { code: string } }).error.code, "rate_limited");
    assert.equal((await t.get(FakeTenants.KEY_B)).status, 200, "tenants have separate buckets");
    t.clock.advance(500); // one token at 2/s
    assert.equal((await t.get(FakeTenants.KEY_A)).status, 200);
    assert.equal((await t.get(FakeTenants.KEY_A)).status, 429);
  });

  it("failed authentications are throttled per address before the key is looked up", async () => {
    const t = app({
      tenantPerSecond: 0,
      tenantBurst: 1,
      authFailuresPerSecond: 0.5,
      authFailuresBurst: 2,
    });
    assert.equal((await t.get("kai_wrong")).status, 401);
    assert.equal((await t.get(null)).status, 401);
    const r = await t.get("kai_wrong");
    assert.equal(r.status, 429);
    assert.equal(r.headers.get("retry-after"), "2", "one failure token per 2 s");
    assert.equal(
      (await t.get(FakeTenants.KEY_A)).status,
      429,
      "a throttled address is refused before any lookup",
    );
    t.setAddress("192.0.2.2");
    assert.equal((await t.get(FakeTenants.KEY_A)).status, 200, "other addresses are not affected");
    t.setAddress("192.0.2.1");
    t.clock.advance(2000);
    assert.equal((await t.get(FakeTenants.KEY_A)).status, 200, "a failure token came back");
    t.setAddress(undefined);
    for (let i = 0; i < 5; i++)
      assert.equal((await t.get("kai_wrong")).status, 401, "no address (no socket): not throttled");
  });

  it("token buckets are bounded in keys and validate their settings", () => {
    const b = new TokenBuckets(1, 1, 3);
    for (let i = 0; i < 10; i++) b.take(`k${i}`, 0);
    assert.equal(b.size, 3);
    assert.equal(b.take("k9", 0), 1000, "recently used keys stay");
    assert.equal(b.take("k0", 0), 0, "an evicted key starts full");
    assert.throws(() => new TokenBuckets(-1, 1), /per second/);
    assert.throws(() => new TokenBuckets(1, 0), /burst/);
    assert.equal(new TokenBuckets(0, 0).take("x", 0), 0, "0 per second: no limit");
  });
});
