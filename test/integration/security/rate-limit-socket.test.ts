/**
 * Failed authentications are throttled per client address over a real socket (the address comes
 * from @hono/node-server's request, not from a header a client could forge): after the burst, the
 * same client gets 429 with Retry-After, even for a valid key, until a token comes back.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createApp, serveApi, type ApiServer } from "../../../src/http/index.ts";
import { systemClock } from "../../../src/lib/clock.ts";
import { FakeJobs, FakeTenants } from "../../unit/http/fakes.ts";

describe("throttled 401s over a socket", () => {
  let server: ApiServer;
  before(async () => {
    const app = createApp({
      jobs: new FakeJobs(systemClock),
      tenants: new FakeTenants(),
      clock: systemClock,
      logError: () => undefined,
      rateLimits: { authFailuresPerSecond: 0.01, authFailuresBurst: 3 },
    });
    server = await serveApi(app, { port: 0 });
  });
  after(async () => {
    await server?.close();
  });

  it("three failures, then 429 for this address", async () => {
    const get = (key: string) =>
      fetch(`${server.url}/v1/jobs`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal((await get(FakeTenants.KEY_A)).status, 200);
    for (let i = 0; i < 3; i++) assert.equal((await get("kai_guess")).status, 401);
    const r = await get(FakeTenants.KEY_A);
    assert.equal(r.status, 429);
    assert.ok(
      Number(r.headers.get("retry-after")) >= 60,
      `Retry-After ${r.headers.get("retry-after")}`,
    );
    assert.equal(((await r.json()) as { error: { code: string } }).error.code, "rate_limited");
    // A forged X-Forwarded-For does not give a fresh bucket.
    assert.equal(
      (
        await fetch(`${server.url}/v1/jobs`, {
          headers: { authorization: "Bearer kai_guess", "x-forwarded-for": "203.0.113.9" },
        })
      ).status,
      429,
    );
  });
});
