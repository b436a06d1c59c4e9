/**
 * Run tokens at the HTTP API (src/http/auth.ts, jwks.ts) over the fake services: a token reads its
 * own run and its own job and nothing else (403), another tenant's run of its own id is 404, an
 * expired, tampered or unknown-key token is a 401 saying why, a node without run-token keys
 * refuses tokens, the API key path is unchanged, and /.well-known/jwks.json serves the public
 * keys with cache headers and no authentication. Through real nodes: test/e2e/run-token.test.ts.
 */
import { describe, it, before } from "node:test";
import assert from "node:assert/strict";
import { decodeJwt } from "jose";
import { createApp } from "../../../src/http/app.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { generateRunTokenKey } from "../../../src/cli/run-token-keys.ts";
import { rotatedRunTokenKeySet } from "../../../src/secrets/run-token-keys.ts";
import {
  RunTokenIssuer,
  RunTokenVerifier,
  runTokenConfig,
  type RunTokenConfig,
} from "../../../src/secrets/run-token.ts";
import { FakeJobs, FakeTenants } from "./fakes.ts";
import { NOW, expectError, validJob } from "./helpers.ts";

interface Setup {
  app: ReturnType<typeof createApp>;
  clock: FakeClock;
  issuer: RunTokenIssuer;
  /** Tenant A's two jobs and one run of each; tenant B's job and run. */
  a1: { job: string; run: string };
  a2: { job: string; run: string };
  b1: { job: string; run: string };
}

async function setup(cfg: RunTokenConfig, withTokens = true): Promise<Setup> {
  const clock = new FakeClock(NOW);
  const jobs = new FakeJobs(clock);
  const app = createApp({
    jobs,
    tenants: new FakeTenants(),
    clock,
    rateLimits: { tenantPerSecond: 0 },
    ...(withTokens ? { runTokens: new RunTokenVerifier(cfg) } : {}),
  });
  const make = async (key: string) => {
    const post = (path: string, body?: unknown) =>
      app.request(path, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    const job = ((await (await post("/v1/jobs", validJob())).json()) as { job_id: string }).job_id;
    const run = ((await (await post(`/v1/jobs/${job}/runs`)).json()) as { run_id: string }).run_id;
    return { job, run };
  };
  return {
    app,
    clock,
    issuer: await RunTokenIssuer.create(cfg),
    a1: await make(FakeTenants.KEY_A),
    a2: await make(FakeTenants.KEY_A),
    b1: await make(FakeTenants.KEY_B),
  };
}

const mint = (s: Setup, tenant: string, r: { job: string; run: string }, nowMs = NOW) =>
  s.issuer.mint(
    { tenant, job: r.job, run: r.run, attempt: 1, fence: 7, startAtMs: nowMs, timeoutS: 60 },
    nowMs,
  );

const call = (s: Setup, method: string, path: string, token: string, body?: unknown) =>
  s.app.request(path, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });

describe("run tokens at the HTTP API", () => {
  let cfg: RunTokenConfig;
  before(async () => {
    cfg = runTokenConfig({
      keys: rotatedRunTokenKeySet(undefined, await generateRunTokenKey()),
      issuer: "kairos:test",
    });
  });

  it("a token reads its own run and its own job", async () => {
    const s = await setup(cfg);
    const t = await mint(s, "ta", s.a1);
    const run = await call(s, "GET", `/v1/runs/${s.a1.run}`, t);
    assert.equal(run.status, 200, await run.clone().text());
    assert.equal(((await run.json()) as { run_id: string }).run_id, s.a1.run);
    const job = await call(s, "GET", `/v1/jobs/${s.a1.job}`, t);
    assert.equal(job.status, 200);
    assert.equal(((await job.json()) as { job_id: string }).job_id, s.a1.job);
  });

  it("a token is refused (403) for another run or job of its tenant, another tenant's, lists and every write", async () => {
    const s = await setup(cfg);
    const t = await mint(s, "ta", s.a1);
    const refused: [string, string, unknown?][] = [
      ["GET", `/v1/runs/${s.a2.run}`],
      ["GET", `/v1/jobs/${s.a2.job}`],
      ["GET", `/v1/runs/${s.b1.run}`],
      ["GET", `/v1/jobs/${s.b1.job}`],
      ["GET", "/v1/jobs"],
      ["GET", `/v1/jobs/${s.a1.job}/runs`],
      ["GET", "/v1/runs?status=dead_lettered"],
      ["POST", "/v1/jobs", validJob()],
      ["PATCH", `/v1/jobs/${s.a1.job}`, { enabled: false }],
      ["DELETE", `/v1/jobs/${s.a1.job}`],
      ["POST", `/v1/jobs/${s.a1.job}/runs`],
      ["POST", `/v1/runs/${s.a1.run}/cancel`],
      ["HEAD", `/v1/runs/${s.a1.run}`],
      ["GET", `/v1/runs/${s.a1.run}/`],
      ["GET", `/v1/runs/${s.a1.run}%2F..`],
    ];
    for (const [method, path, body] of refused) {
      const res = await call(s, method, path, t, body);
      const text = await res.text();
      assert.equal(res.status, 403, `${method} ${path}: ${res.status} ${text}`);
      if (method !== "HEAD") {
        const e = JSON.parse(text) as { error: { code: string; message: string } };
        assert.equal(e.error.code, "permission_denied");
        assert.match(e.error.message, /only read its own run/);
      }
    }
    // Nothing was written: the job is still there and enabled.
    const job = await call(s, "GET", `/v1/jobs/${s.a1.job}`, t);
    assert.equal(((await job.json()) as { enabled: boolean }).enabled, true);
  });

  it("a token of tenant B that names tenant A's run id reads nothing of it (404)", async () => {
    const s = await setup(cfg);
    // A token for tenant B carrying A's ids: the tenant is the token's, so A's run is not found.
    const t = await mint(s, "tb", s.a1);
    await expectError(await call(s, "GET", `/v1/runs/${s.a1.run}`, t), 404, "not_found");
    await expectError(await call(s, "GET", `/v1/jobs/${s.a1.job}`, t), 404, "not_found");
  });

  it("refuses an expired, tampered or unknown-key token with a 401 that says why", async () => {
    const s = await setup(cfg);
    const t = await mint(s, "ta", s.a1);
    const [h, p, sig] = t.split(".");
    const claims = JSON.parse(Buffer.from(p!, "base64url").toString()) as Record<string, unknown>;
    const tampered = `${h}.${Buffer.from(JSON.stringify({ ...claims, run: s.a2.run })).toString("base64url")}.${sig}`;
    const bad = await expectError(
      await call(s, "GET", `/v1/runs/${s.a2.run}`, tampered),
      401,
      "unauthenticated",
    );
    assert.match(bad.message, /signature does not verify/);
    const other = await RunTokenIssuer.create(
      runTokenConfig({
        keys: rotatedRunTokenKeySet(undefined, await generateRunTokenKey()),
        issuer: "kairos:test",
      }),
    );
    const foreign = await other.mint(
      {
        tenant: "ta",
        job: s.a1.job,
        run: s.a1.run,
        attempt: 1,
        fence: 7,
        startAtMs: NOW,
        timeoutS: 60,
      },
      NOW,
    );
    const unknown = await expectError(
      await call(s, "GET", `/v1/runs/${s.a1.run}`, foreign),
      401,
      "unauthenticated",
    );
    assert.match(unknown.message, /unknown key/);
    const res = await call(s, "GET", `/v1/runs/${s.a1.run}`, foreign);
    assert.equal(res.headers.get("www-authenticate"), 'Bearer realm="kairos"');
    // Last: the clock only moves forward. At exp the token is refused.
    s.clock.advance(decodeJwt(t).exp! * 1000 - NOW);
    const expired = await expectError(
      await call(s, "GET", `/v1/runs/${s.a1.run}`, t),
      401,
      "unauthenticated",
    );
    assert.match(expired.message, /run token refused: expired at /);
  });

  it("a node without run-token keys refuses tokens and serves an empty key set", async () => {
    const s = await setup(cfg, false);
    const t = await mint(s, "ta", s.a1);
    const e = await expectError(
      await call(s, "GET", `/v1/runs/${s.a1.run}`, t),
      401,
      "unauthenticated",
    );
    assert.match(e.message, /does not accept run tokens/);
    const jwks = await s.app.request("/.well-known/jwks.json");
    assert.deepEqual(await jwks.json(), { keys: [] });
  });

  it("the API key path is as before: keys work, long or malformed headers are refused alike", async () => {
    const s = await setup(cfg);
    const ok = await call(s, "GET", `/v1/jobs/${s.a2.job}`, FakeTenants.KEY_A);
    assert.equal(ok.status, 200);
    const write = await call(s, "PATCH", `/v1/jobs/${s.a2.job}`, FakeTenants.KEY_A, {
      enabled: false,
    });
    assert.equal(write.status, 200);
    for (const cred of [`kai_${"x".repeat(600)}`, "kai_unknown", "a.b"]) {
      await expectError(await call(s, "GET", "/v1/jobs", cred), 401, "unauthenticated");
    }
    const long = await expectError(
      await call(s, "GET", "/v1/jobs", `kai_${"x".repeat(600)}`),
      401,
      "unauthenticated",
    );
    assert.equal(long.message, "Authorization must be: Bearer <api key>");
  });

  it("GET /.well-known/jwks.json: public keys only, no authentication, cacheable", async () => {
    const s = await setup(cfg);
    const res = await s.app.request("/.well-known/jwks.json");
    assert.equal(res.status, 200);
    assert.match(res.headers.get("cache-control") ?? "", /^public, max-age=\d+$/);
    const body = (await res.json()) as { keys: Record<string, unknown>[] };
    assert.equal(body.keys.length, 1);
    assert.deepEqual(Object.keys(body.keys[0]!).sort(), ["alg", "crv", "kid", "kty", "use", "x"]);
    assert.equal(body.keys[0]!["kid"], cfg.keys.keys[0]!.kid);
  });
});
