/**
 * Per-run credentials through real nodes on a real nats-server: the scheduler (holding the key
 * set) signs each attempt's KAIROS_RUN_TOKEN; the worker (no key) hands it to the task; the task
 * reads its own run and job with it; the token verifies against /.well-known/jwks.json; the API
 * refuses it for another run, job or tenant and for writes (403), and refuses an expired token, a
 * tampered one and one of an unknown key (401). An API-only node given only the public keys
 * accepts the same tokens. With KAIROS_DOCKER=1, the same token reaches a container and verifies.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLocalJWKSet, jwtVerify, type JSONWebKeySet } from "jose";
import {
  generateRunTokenKey,
  newRunTokenKeysFile,
  readRunTokenKeysFile,
} from "../../src/cli/run-token-keys.ts";
import { publicJwks, rotatedRunTokenKeySet } from "../../src/secrets/run-token-keys.ts";
import { RUN_TOKEN_TYP, RunTokenIssuer, runTokenConfig } from "../../src/secrets/run-token.ts";
import {
  apiClient,
  eventually,
  startKairosFixture,
  type Api,
  type KairosFixture,
} from "../support/kairos.ts";
import { dockerSkip, ensureTestImage, TEST_IMAGE } from "../support/docker-image.ts";

const ISSUER = "kairos:kairos"; // the fixture's cluster is "kairos"

interface Run {
  run_id: string;
  job_id: string;
  status: string;
  result: { output: string } | null;
}

/** Creates a one-shot job far ahead, runs it now, and waits for the run to end. */
async function runOnce(api: Api, task: Record<string, unknown>): Promise<Run> {
  const job = await api.call<{ job_id: string }>("POST", "/v1/jobs", {
    schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
    task,
  });
  assert.equal(job.status, 201, JSON.stringify(job.body));
  const now = await api.call<Run>("POST", `/v1/jobs/${job.body.job_id}/runs`);
  assert.equal(now.status, 202, JSON.stringify(now.body));
  return eventually(
    async () => {
      const r = (await api.call<Run>("GET", `/v1/runs/${now.body.run_id}`)).body;
      return r.status === "succeeded" || r.status === "failed" ? r : undefined;
    },
    60_000,
    `run ${now.body.run_id} ends`,
  );
}

/** The token a task printed as `token=<jwt>`. */
function printedToken(run: Run): string {
  const m = /token=([A-Za-z0-9_.-]+)/.exec(run.result?.output ?? "");
  assert.ok(m, `the task printed its token: ${JSON.stringify(run)}`);
  return m[1]!;
}

const PRINT_TOKEN = ["/bin/sh", "-c", 'printf "token=%s\\n" "$KAIROS_RUN_TOKEN"'];

async function verifyAgainstJwks(apiUrl: string, token: string) {
  const res = await fetch(`${apiUrl}/.well-known/jwks.json`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("cache-control") ?? "", /^public, max-age=/);
  const jwks = (await res.json()) as JSONWebKeySet;
  assert.ok(!JSON.stringify(jwks).includes('"d"'), "no private part published");
  const { payload, protectedHeader } = await jwtVerify(token, createLocalJWKSet(jwks), {
    issuer: ISSUER,
    typ: RUN_TOKEN_TYP,
    algorithms: ["EdDSA"],
  });
  return { payload, protectedHeader };
}

describe("run tokens through real nodes", { timeout: 180_000 }, () => {
  let fx: KairosFixture;
  let keysFile: string;
  let apiUrl: string;
  let publicApiUrl: string;
  let a: Api;
  let b: Api;
  let tenantA: string;
  let a1: Run;
  let a2: Run;
  let b1: Run;
  let tokenA1: string;
  let tokenB1: string;
  let taskSaw: string;

  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), "kairos-run-token-"));
    keysFile = await newRunTokenKeysFile(join(dir, "run-token-keys.json"));
    const publicFile = join(dir, "public.json");
    writeFileSync(publicFile, JSON.stringify(publicJwks(readRunTokenKeysFile(keysFile))));
    fx = await startKairosFixture();
    // The key set on the scheduler (it signs) and API node; the worker has none.
    const node = fx.spawn("rt-1", "api,scheduler", ["--run-token-keys", keysFile]);
    fx.spawn("rt-w", "worker");
    // An API-only node with the public keys only.
    const apiOnly = fx.spawn("rt-api", "api", ["--run-token-keys", publicFile]);
    const ta = await fx.newTenant("tokens-a");
    const tb = await fx.newTenant("tokens-b");
    tenantA = ta.tenant_id;
    apiUrl = await fx.apiUrl(node);
    publicApiUrl = await fx.apiUrl(apiOnly);
    a = apiClient(apiUrl, ta.api_key);
    b = apiClient(apiUrl, tb.api_key);
    // The task reads its own run and job with its token, then prints it.
    const script = [
      "const h = { authorization: `Bearer ${process.env.KAIROS_RUN_TOKEN}` };",
      "const base = process.env.API_URL;",
      "const run = await fetch(`${base}/v1/runs/${process.env.KAIROS_RUN_ID}`, { headers: h });",
      "const job = await fetch(`${base}/v1/jobs/${process.env.KAIROS_JOB_ID}`, { headers: h });",
      "const r = await run.json();",
      "console.log(`run=${run.status}:${r.status} job=${job.status}`);",
      "console.log(`token=${process.env.KAIROS_RUN_TOKEN}`);",
    ].join("\n");
    a1 = await runOnce(a, {
      image: "busybox",
      args: [process.execPath, "--input-type=module", "-e", script],
      env: { API_URL: apiUrl },
      timeout_s: 30,
    });
    taskSaw = a1.result?.output ?? "";
    tokenA1 = printedToken(a1);
    a2 = await runOnce(a, { image: "busybox", args: PRINT_TOKEN, timeout_s: 30 });
    b1 = await runOnce(b, { image: "busybox", args: PRINT_TOKEN, timeout_s: 30 });
    tokenB1 = printedToken(b1);
  });
  after(async () => {
    await fx?.stop();
  });

  it("the task reads its own run and job with its token; the token verifies against the JWKS", async () => {
    assert.equal(a1.status, "succeeded", JSON.stringify(a1));
    // (The run's status as its record shows it while the task runs: its start may not be written yet.)
    assert.match(taskSaw, /run=200:[a-z_]+ job=200/);
    const { payload, protectedHeader } = await verifyAgainstJwks(apiUrl, tokenA1);
    assert.equal(protectedHeader.kid, readRunTokenKeysFile(keysFile).keys[0]!.kid);
    assert.equal(payload["tenant"], tenantA);
    assert.equal(payload["job"], a1.job_id);
    assert.equal(payload["run"], a1.run_id);
    assert.equal(payload["attempt"], 1);
    assert.ok(Number.isInteger(payload["fence"]) && (payload["fence"] as number) > 0);
    // exp: start + timeout (30 s) + the start allowance (5 min), and not much more.
    const lifetime = payload.exp! - payload.iat!;
    assert.ok(lifetime >= 330 && lifetime < 330 + 300 + 60, `lifetime ${lifetime} s`);
    // The API-only node, holding only the public keys, accepts it too.
    const viaPublic = apiClient(publicApiUrl, tokenA1);
    assert.equal((await viaPublic.call("GET", `/v1/runs/${a1.run_id}`)).status, 200);
    assert.equal((await verifyAgainstJwks(publicApiUrl, tokenA1)).payload["run"], a1.run_id);
  });

  it("refuses the token (403) for another run or job, another tenant's, lists and writes", async () => {
    const t = apiClient(apiUrl, tokenA1);
    assert.equal((await t.call("GET", `/v1/runs/${a1.run_id}`)).status, 200);
    assert.equal((await t.call("GET", `/v1/jobs/${a1.job_id}`)).status, 200);
    const refused: [string, string, unknown?][] = [
      ["GET", `/v1/runs/${a2.run_id}`],
      ["GET", `/v1/jobs/${a2.job_id}`],
      ["GET", `/v1/runs/${b1.run_id}`],
      ["GET", `/v1/jobs/${b1.job_id}`],
      ["GET", "/v1/jobs"],
      ["GET", `/v1/jobs/${a1.job_id}/runs`],
      ["PATCH", `/v1/jobs/${a1.job_id}`, { enabled: false }],
      ["DELETE", `/v1/jobs/${a1.job_id}`],
      ["POST", `/v1/jobs/${a1.job_id}/runs`],
      ["POST", `/v1/runs/${a1.run_id}/cancel`],
      [
        "POST",
        "/v1/jobs",
        {
          schedule: { cron: "* * * * *" },
          task: { image: "busybox", args: ["true"], timeout_s: 5 },
        },
      ],
    ];
    for (const [method, path, body] of refused) {
      const r = await t.call<{ error: { code: string } }>(method, path, body);
      assert.equal(r.status, 403, `${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.code, "permission_denied");
    }
    // Tenant B's token reads nothing of tenant A's.
    const tb = apiClient(apiUrl, tokenB1);
    assert.equal((await tb.call("GET", `/v1/runs/${b1.run_id}`)).status, 200);
    assert.equal((await tb.call("GET", `/v1/runs/${a1.run_id}`)).status, 403);
    assert.equal((await tb.call("GET", `/v1/jobs/${a1.job_id}`)).status, 403);
    // Nothing was written: A's job is still there and enabled, with no new run.
    const job = await a.call<{ enabled: boolean }>("GET", `/v1/jobs/${a1.job_id}`);
    assert.equal(job.status, 200);
    assert.equal(job.body.enabled, true);
    const runs = await a.call<{ runs: unknown[] }>("GET", `/v1/jobs/${a1.job_id}/runs`);
    assert.equal(runs.body.runs.length, 1);
    assert.equal((await a.call<{ jobs: unknown[] }>("GET", "/v1/jobs")).body.jobs.length, 2);
  });

  it("refuses (401) an expired token, a tampered one and one signed by an unknown key", async () => {
    const cfg = runTokenConfig({ keys: readRunTokenKeysFile(keysFile), issuer: ISSUER });
    const issuer = await RunTokenIssuer.create(cfg);
    const grant = {
      tenant: tenantA,
      job: a1.job_id,
      run: a1.run_id,
      attempt: 1,
      fence: 1,
      timeoutS: 30,
    };
    // Signed by the cluster's own key, for this very run, two hours ago: only its expiry is wrong.
    const past = Date.now() - 2 * 3600_000;
    const expired = await issuer.mint({ ...grant, startAtMs: past }, past);
    const live = await issuer.mint({ ...grant, startAtMs: Date.now() }, Date.now());
    assert.equal((await apiClient(apiUrl, live).call("GET", `/v1/runs/${a1.run_id}`)).status, 200);
    const r1 = await apiClient(apiUrl, expired).call<{ error: { code: string; message: string } }>(
      "GET",
      `/v1/runs/${a1.run_id}`,
    );
    assert.equal(r1.status, 401, JSON.stringify(r1.body));
    assert.match(r1.body.error.message, /run token refused: expired at /);

    // Tenant B's token with A's ids put in: the signature no longer verifies.
    const [h, p, s] = tokenB1.split(".");
    const claims = JSON.parse(Buffer.from(p!, "base64url").toString()) as Record<string, unknown>;
    const tampered = `${h}.${Buffer.from(JSON.stringify({ ...claims, tenant: tenantA, run: a1.run_id, job: a1.job_id })).toString("base64url")}.${s}`;
    const r2 = await apiClient(apiUrl, tampered).call<{ error: { message: string } }>(
      "GET",
      `/v1/runs/${a1.run_id}`,
    );
    assert.equal(r2.status, 401, JSON.stringify(r2.body));
    assert.match(r2.body.error.message, /signature does not verify/);

    const stranger = await RunTokenIssuer.create(
      runTokenConfig({
        keys: rotatedRunTokenKeySet(undefined, await generateRunTokenKey()),
        issuer: ISSUER,
      }),
    );
    const foreign = await stranger.mint({ ...grant, startAtMs: Date.now() }, Date.now());
    const r3 = await apiClient(apiUrl, foreign).call<{ error: { message: string } }>(
      "GET",
      `/v1/runs/${a1.run_id}`,
    );
    assert.equal(r3.status, 401, JSON.stringify(r3.body));
    assert.match(r3.body.error.message, /unknown key/);
  });
});

describe("run tokens in a container", { skip: dockerSkip(), timeout: 180_000 }, () => {
  let fx: KairosFixture;
  let api: Api;
  let apiUrl: string;
  before(async () => {
    await ensureTestImage();
    const dir = mkdtempSync(join(tmpdir(), "kairos-run-token-d-"));
    const keysFile = await newRunTokenKeysFile(join(dir, "run-token-keys.json"));
    fx = await startKairosFixture();
    const node = fx.spawn("rtd-1", "api,scheduler", ["--run-token-keys", keysFile]);
    const worker = fx.spawn("rtd-2", "worker", ["--executor", "docker"]);
    await worker.waitFor((e) => e.type === "node_started", 30_000, "docker worker started");
    apiUrl = await fx.apiUrl(node);
    api = apiClient(apiUrl, (await fx.newTenant("tokens-docker")).api_key);
  });
  after(async () => {
    await fx?.stop();
  });

  it("the container's KAIROS_RUN_TOKEN verifies against the JWKS and reads its run", async () => {
    const run = await runOnce(api, { image: TEST_IMAGE, args: PRINT_TOKEN, timeout_s: 30 });
    assert.equal(run.status, "succeeded", JSON.stringify(run));
    const token = printedToken(run);
    const { payload } = await verifyAgainstJwks(apiUrl, token);
    assert.equal(payload["run"], run.run_id);
    assert.equal(payload["job"], run.job_id);
    assert.equal(
      (await apiClient(apiUrl, token).call("GET", `/v1/runs/${run.run_id}`)).status,
      200,
    );
  });
});
