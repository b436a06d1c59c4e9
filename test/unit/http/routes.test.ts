/**
 * Route tests with `app.request()` over the in-memory fake JobsService: happy paths, statuses
 * and headers (ETag, Location, 201/200 replay, 202, 204), auth, tenant scoping, paging params,
 * If-Match forms, error mapping of service errors, health and the socket server.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { KairosError } from "../../../src/lib/errors.ts";
import type { RunView } from "../../../src/protocol/model.ts";
import { serveApi } from "../../../src/http/server.ts";
import { JobViewSchema, RunViewSchema } from "../../../src/http/views.ts";
import { FakeTenants } from "./fakes.ts";
import { expectError, harness, validJob } from "./helpers.ts";

interface Job {
  job_id: string;
  version: number;
  enabled: boolean;
  next_runs?: string[];
  next_run_at: string | null;
}

async function create(
  h: ReturnType<typeof harness>,
  over: Record<string, unknown> = {},
  key?: string,
): Promise<Job> {
  const res = await h.req("POST", "/v1/jobs", { body: validJob(over), ...(key ? { key } : {}) });
  assert.equal(res.status, 201, await res.clone().text());
  return (await res.json()) as Job;
}

describe("jobs routes", () => {
  it("POST /v1/jobs creates: 201, ETag, Location, defaults applied, tenant from the key", async () => {
    const h = harness();
    const res = await h.req("POST", "/v1/jobs", { body: validJob({ name: "nightly" }) });
    assert.equal(res.status, 201);
    const job = (await res.json()) as Record<string, unknown> & Job;
    assert.equal(res.headers.get("etag"), `"${job.version}"`);
    assert.equal(res.headers.get("location"), `/v1/jobs/${job.job_id}`);
    JobViewSchema.parse(job);
    assert.deepEqual(job["schedule"], { cron: "*/5 * * * *", time_zone: "UTC" });
    assert.deepEqual(job["retry"], {
      max_attempts: 1,
      backoff: "exponential",
      base_s: 10,
      max_s: 3600,
    });
    assert.deepEqual(job["misfire"], { policy: "run_once", starting_deadline_s: null });
    assert.equal(job["overlap"], "skip");
    assert.equal(job["flex_window_s"], 0);
    assert.equal(job["enabled"], true);
    assert.deepEqual((job["task"] as { env: unknown }).env, {});
    assert.equal(job["tenant_id"], "ta");
    assert.equal(job.next_run_at, "2026-03-01T00:05:00Z");
    assert.equal(h.jobs.calls[0]?.tenantId, "ta");
  });

  it("the tenant comes only from the key: a tenant_id in the body is an unknown field", async () => {
    const h = harness();
    await expectError(
      await h.req("POST", "/v1/jobs", { body: validJob({ tenant_id: "tb" }) }),
      400,
      "invalid_argument",
      "tenant_id",
    );
  });

  it("Idempotency-Key: the replay is 200 with the same job; another body is 409; the key reaches the service", async () => {
    const h = harness();
    const headers = { "idempotency-key": "req-123" };
    const a = await h.req("POST", "/v1/jobs", { body: validJob(), headers });
    const b = await h.req("POST", "/v1/jobs", { body: validJob(), headers });
    assert.equal(a.status, 201);
    assert.equal(b.status, 200);
    assert.equal(b.headers.get("idempotent-replayed"), "true");
    assert.equal(b.headers.get("etag"), '"1"');
    assert.equal(((await a.json()) as Job).job_id, ((await b.json()) as Job).job_id);
    assert.equal(h.jobs.calls[0]?.args[1], "req-123");
    await expectError(
      await h.req("POST", "/v1/jobs", { body: validJob({ enabled: false }), headers }),
      409,
      "conflict",
    );
  });

  it("Idempotency-Key: empty, too long or with spaces/control characters is 400 naming the header", async () => {
    const h = harness();
    for (const k of ["x".repeat(256), "a b", "", "tab\there"]) {
      await expectError(
        await h.req("POST", "/v1/jobs", { body: validJob(), headers: { "idempotency-key": k } }),
        400,
        "invalid_argument",
        "Idempotency-Key",
      );
    }
    assert.equal(h.jobs.calls.length, 0);
    assert.equal(
      (
        await h.req("POST", "/v1/jobs", {
          body: validJob(),
          headers: { "idempotency-key": "x".repeat(255) },
        })
      ).status,
      201,
    );
  });

  it("GET /v1/jobs/{id} returns the job with next_runs and ETag", async () => {
    const h = harness();
    const job = await create(h);
    const res = await h.req("GET", `/v1/jobs/${job.job_id}`);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("etag"), '"1"');
    const body = (await res.json()) as Job;
    assert.deepEqual(body.next_runs, [
      "2026-03-01T00:05:00Z",
      "2026-03-01T00:10:00Z",
      "2026-03-01T00:15:00Z",
      "2026-03-01T00:20:00Z",
      "2026-03-01T00:25:00Z",
    ]);
  });

  it("GET /v1/jobs pages with cursor and limit", async () => {
    const h = harness();
    for (let i = 0; i < 5; i++) await create(h);
    const p1 = (await (await h.req("GET", "/v1/jobs?limit=2")).json()) as {
      jobs: Job[];
      next_cursor: string | null;
    };
    assert.equal(p1.jobs.length, 2);
    assert.ok(p1.next_cursor);
    const p2 = (await (await h.req("GET", `/v1/jobs?limit=2&cursor=${p1.next_cursor}`)).json()) as {
      jobs: Job[];
      next_cursor: string | null;
    };
    assert.notEqual(p2.jobs[0]?.job_id, p1.jobs[0]?.job_id);
    const all = (await (await h.req("GET", "/v1/jobs")).json()) as {
      jobs: Job[];
      next_cursor: string | null;
    };
    assert.equal(all.jobs.length, 5);
    assert.equal(all.next_cursor, null);
    assert.deepEqual(h.jobs.calls.at(-1)?.args[0], { limit: 50 });
  });

  it("paging parameters are validated and name the parameter", async () => {
    const h = harness();
    for (const q of ["limit=0", "limit=201", "limit=abc", "limit=1.5", "limit=-1"]) {
      await expectError(await h.req("GET", `/v1/jobs?${q}`), 400, "invalid_argument", "limit");
    }
    await expectError(
      await h.req("GET", `/v1/jobs?cursor=${"c".repeat(2000)}`),
      400,
      "invalid_argument",
      "cursor",
    );
    await expectError(
      await h.req("GET", "/v1/jobs?cursor=bogus"),
      400,
      "invalid_argument",
      "cursor",
    );
  });

  it("GET /v1/jobs passes the name and state filters on; bad ones are 400s naming them", async () => {
    const h = harness();
    await h.req("GET", "/v1/jobs?name=Report&state=paused&limit=5");
    assert.deepEqual(h.jobs.calls.at(-1)?.args[0], { limit: 5, name: "Report", state: "paused" });
    await h.req("GET", "/v1/jobs?name=&state=");
    assert.deepEqual(h.jobs.calls.at(-1)?.args[0], { limit: 50 }, "empty: no filter");
    const bad: [string, string][] = [
      ["state=stopped", "state"],
      ["state=Paused", "state"],
      [`name=${"n".repeat(201)}`, "name"],
      ["name=a%0Ab", "name"],
      ["name=%7F", "name"],
    ];
    for (const [q, field] of bad)
      await expectError(await h.req("GET", `/v1/jobs?${q}`), 400, "invalid_argument", field);
    await h.req("GET", `/v1/jobs?name=${"n".repeat(200)}`);
    assert.equal((h.jobs.calls.at(-1)?.args[0] as { name: string }).name.length, 200);
  });

  it("PATCH applies the change, bumps the version, and honours every If-Match form", async () => {
    const h = harness();
    const job = await create(h);
    const r1 = await h.req("PATCH", `/v1/jobs/${job.job_id}`, {
      body: { enabled: false },
      headers: { "if-match": '"1"' },
    });
    assert.equal(r1.status, 200);
    assert.equal(r1.headers.get("etag"), '"2"');
    assert.equal(((await r1.json()) as Job).enabled, false);
    const r2 = await h.req("PATCH", `/v1/jobs/${job.job_id}`, {
      body: { enabled: true },
      headers: { "if-match": 'W/"2"' },
    });
    assert.equal(r2.status, 200);
    const r3 = await h.req("PATCH", `/v1/jobs/${job.job_id}`, {
      body: { overlap: "queue" },
      headers: { "if-match": "3" },
    });
    assert.equal(r3.status, 200);
    const r4 = await h.req("PATCH", `/v1/jobs/${job.job_id}`, { body: { overlap: "allow" } });
    assert.equal(r4.status, 200);
    assert.equal(h.jobs.calls.at(-1)?.args[2], undefined);
    const r5 = await h.req("PATCH", `/v1/jobs/${job.job_id}`, {
      body: { overlap: "allow" },
      headers: { "if-match": "*" },
    });
    assert.equal(r5.status, 200);
    assert.equal(h.jobs.calls.at(-1)?.args[2], undefined);
  });

  it("PATCH with a stale If-Match is 412; a malformed one is 400 naming If-Match", async () => {
    const h = harness();
    const job = await create(h);
    await expectError(
      await h.req("PATCH", `/v1/jobs/${job.job_id}`, {
        body: { enabled: false },
        headers: { "if-match": '"7"' },
      }),
      412,
      "precondition_failed",
    );
    for (const bad of ["abc", '"v1"', '"1", "2"', "W/1", "-1", '""']) {
      await expectError(
        await h.req("PATCH", `/v1/jobs/${job.job_id}`, {
          body: { enabled: false },
          headers: { "if-match": bad },
        }),
        400,
        "invalid_argument",
        "If-Match",
      );
    }
  });

  it("PATCH validates like create, sends only the fields given, and rejects an empty patch", async () => {
    const h = harness();
    const job = await create(h);
    const ok = await h.req("PATCH", `/v1/jobs/${job.job_id}`, {
      body: { retry: { max_attempts: 3 } },
    });
    assert.equal(ok.status, 200);
    assert.deepEqual(h.jobs.calls.at(-1)?.args[1], {
      retry: { max_attempts: 3, backoff: "exponential", base_s: 10, max_s: 3600 },
    });
    await expectError(
      await h.req("PATCH", `/v1/jobs/${job.job_id}`, { body: {} }),
      400,
      "invalid_argument",
      "body",
    );
    await expectError(
      await h.req("PATCH", `/v1/jobs/${job.job_id}`, {
        body: { schedule: { cron: "* * * * * * *" } },
      }),
      400,
      "invalid_argument",
      "schedule.cron",
    );
    await expectError(
      await h.req("PATCH", `/v1/jobs/${job.job_id}`, { body: { version: 3 } }),
      400,
      "invalid_argument",
      "version",
    );
    await expectError(
      await h.req("PATCH", `/v1/jobs/${job.job_id}`, { body: { name: null, enabled: "no" } }),
      400,
      "invalid_argument",
      "enabled",
    );
  });

  it("DELETE is 204 with no body; the job is then 404", async () => {
    const h = harness();
    const job = await create(h);
    const res = await h.req("DELETE", `/v1/jobs/${job.job_id}`);
    assert.equal(res.status, 204);
    assert.equal(await res.text(), "");
    await expectError(await h.req("GET", `/v1/jobs/${job.job_id}`), 404, "not_found");
    await expectError(await h.req("DELETE", `/v1/jobs/${job.job_id}`), 404, "not_found");
  });

  it("POST /v1/jobs/{id}/runs is 202 with the run; GET /v1/runs/{id} and the runs list find it", async () => {
    const h = harness();
    const job = await create(h);
    const res = await h.req("POST", `/v1/jobs/${job.job_id}/runs`);
    assert.equal(res.status, 202);
    const run = RunViewSchema.parse(await res.json());
    assert.equal(res.headers.get("location"), `/v1/runs/${run.run_id}`);
    assert.equal(run.trigger, "manual");
    const got = await h.req("GET", `/v1/runs/${run.run_id}`);
    assert.equal(got.status, 200);
    assert.equal(((await got.json()) as { run_id: string }).run_id, run.run_id);
    await h.req("POST", `/v1/jobs/${job.job_id}/runs`);
    const list = (await (
      await h.req("GET", `/v1/jobs/${job.job_id}/runs?status=queued&limit=1`)
    ).json()) as { runs: { run_id: string }[]; next_cursor: string | null };
    assert.equal(list.runs.length, 1);
    assert.ok(list.next_cursor);
    assert.deepEqual(h.jobs.calls.at(-1)?.args[1], { limit: 1, status: "queued" });
    const page2 = (await (
      await h.req("GET", `/v1/jobs/${job.job_id}/runs?cursor=${list.next_cursor}`)
    ).json()) as { runs: { run_id: string }[] };
    assert.equal(page2.runs[0]?.run_id, run.run_id);
  });

  it("GET /v1/runs?status=dead_lettered pages the tenant's dead letters", async () => {
    const h = harness();
    const res = await h.req("GET", "/v1/runs?status=dead_lettered&limit=5&cursor=abc");
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { runs: [], next_cursor: null });
    const call = h.jobs.calls.at(-1);
    assert.equal(call?.method, "listDeadLetters");
    assert.deepEqual(call?.args[0], { limit: 5, cursor: "abc" });
  });

  it("GET /v1/runs pages the tenant's runs across its jobs; every parameter is checked", async () => {
    const h = harness();
    const a = await create(h);
    const b = await create(h);
    const ra = (await (await h.req("POST", `/v1/jobs/${a.job_id}/runs`)).json()) as RunView;
    const rb = (await (await h.req("POST", `/v1/jobs/${b.job_id}/runs`)).json()) as RunView;
    const res = await h.req("GET", "/v1/runs?limit=1");
    assert.equal(res.status, 200);
    const page = (await res.json()) as { runs: RunView[]; next_cursor: string | null };
    assert.deepEqual(
      page.runs.map((r) => r.run_id),
      [rb.run_id],
    );
    assert.equal(h.jobs.calls.at(-1)?.method, "listTenantRuns");
    assert.deepEqual(h.jobs.calls.at(-1)?.args, [{ limit: 1 }]);
    const next = (await (
      await h.req("GET", `/v1/runs?limit=1&cursor=${page.next_cursor}`)
    ).json()) as { runs: RunView[] };
    assert.deepEqual(
      next.runs.map((r) => r.run_id),
      [ra.run_id],
    );
    assert.equal((await h.req("GET", "/v1/runs?status=succeeded")).status, 200);
    assert.deepEqual(h.jobs.calls.at(-1)?.args[0], { limit: 50, status: "succeeded" });
    // Every status (a run not ended is matched as its owner holds it).
    assert.equal((await h.req("GET", "/v1/runs?status=running")).status, 200);
    assert.deepEqual(h.jobs.calls.at(-1)?.args[0], { limit: 50, status: "running" });
    for (const [q, field] of [
      ["status=done", "status"],
      ["limit=0", "limit"],
      ["limit=201", "limit"],
      ["limit=x", "limit"],
      [`cursor=${"c".repeat(1025)}`, "cursor"],
    ] as const) {
      const e = await expectError(
        await h.req("GET", `/v1/runs?${q}`),
        400,
        "invalid_argument",
        field,
      );
      if (q === "status=done") assert.match(e.message, /retry_wait.*dead_lettered/);
    }
  });

  it("GET runs validates status against the run statuses", async () => {
    const h = harness();
    const job = await create(h);
    const e = await expectError(
      await h.req("GET", `/v1/jobs/${job.job_id}/runs?status=done`),
      400,
      "invalid_argument",
      "status",
    );
    assert.match(e.message, /retry_wait/);
    assert.equal((await h.req("GET", `/v1/jobs/${job.job_id}/runs?status=retry_wait`)).status, 200);
  });

  it("malformed path ids are 404, like ids that do not exist, and never reach the service", async () => {
    const h = harness();
    for (const p of [
      "/v1/jobs/a%20b",
      `/v1/jobs/${"x".repeat(65)}`,
      "/v1/jobs/a.b",
      "/v1/runs/%2e%2e",
      "/v1/jobs/%C3%A9/runs",
    ]) {
      await expectError(await h.req("GET", p), 404, "not_found");
    }
    assert.equal(h.jobs.calls.length, 0);
    await expectError(await h.req("GET", "/v1/jobs/job999999"), 404, "not_found");
  });

  it("another tenant's job and runs are 404 for every route", async () => {
    const h = harness();
    const job = await create(h);
    const run = (await (await h.req("POST", `/v1/jobs/${job.job_id}/runs`)).json()) as {
      run_id: string;
    };
    const B = FakeTenants.KEY_B;
    await expectError(await h.req("GET", `/v1/jobs/${job.job_id}`, { key: B }), 404, "not_found");
    await expectError(
      await h.req("PATCH", `/v1/jobs/${job.job_id}`, { key: B, body: { enabled: false } }),
      404,
      "not_found",
    );
    await expectError(
      await h.req("DELETE", `/v1/jobs/${job.job_id}`, { key: B }),
      404,
      "not_found",
    );
    await expectError(
      await h.req("POST", `/v1/jobs/${job.job_id}/runs`, { key: B }),
      404,
      "not_found",
    );
    await expectError(
      await h.req("GET", `/v1/jobs/${job.job_id}/runs`, { key: B }),
      404,
      "not_found",
    );
    await expectError(await h.req("GET", `/v1/runs/${run.run_id}`, { key: B }), 404, "not_found");
    const list = (await (await h.req("GET", "/v1/jobs", { key: B })).json()) as { jobs: unknown[] };
    assert.deepEqual(list.jobs, []);
  });
});

describe("authentication", () => {
  it("missing, malformed, unknown and revoked keys are 401 with WWW-Authenticate", async () => {
    const h = harness();
    const cases: Record<string, string>[] = [
      {},
      { authorization: "Basic dXNlcjpwYXNz" },
      { authorization: "Bearer" },
      { authorization: "Bearer a b" },
      { authorization: `Bearer ${"k".repeat(600)}` },
      { authorization: "Bearer kai_nope" },
      { authorization: `Bearer ${FakeTenants.REVOKED}` },
    ];
    for (const headers of cases) {
      const res = await h.req("GET", "/v1/jobs", { key: null, headers });
      assert.equal(res.headers.get("www-authenticate"), 'Bearer realm="kairos"');
      await expectError(res, 401, "unauthenticated");
    }
    assert.equal(h.jobs.calls.length, 0);
  });

  it("the scheme is case-insensitive", async () => {
    const h = harness();
    const res = await h.req("GET", "/v1/jobs", {
      key: null,
      headers: { authorization: `bearer ${FakeTenants.KEY_A}` },
    });
    assert.equal(res.status, 200);
  });

  it("auth is checked before the body: an unauthenticated bad body is 401, not 400", async () => {
    const h = harness();
    await expectError(
      await h.req("POST", "/v1/jobs", { key: null, body: "{nope" }),
      401,
      "unauthenticated",
    );
  });

  it("/healthz and /openapi.json need no key; unknown routes are 404", async () => {
    const h = harness();
    const res = await h.req("GET", "/healthz", { key: null });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { ok: true });
    assert.equal((await h.req("GET", "/openapi.json", { key: null })).status, 200);
    await expectError(await h.req("GET", "/nope", { key: null }), 404, "not_found");
    await expectError(await h.req("PUT", "/v1/jobs"), 404, "not_found");
  });
});

describe("error mapping", () => {
  const cases: [KairosError, number, string | null][] = [
    [new KairosError("conflict", "busy"), 409, null],
    [new KairosError("quota_exceeded", "max_jobs"), 422, null],
    [new KairosError("overloaded", "slow down"), 429, "1"],
    [new KairosError("no_owner", "handoff"), 503, "1"],
    [new KairosError("unavailable", "nats down"), 503, "1"],
    [new KairosError("timeout", "slow"), 503, "1"],
    [new KairosError("invalid_schedule", "bad", { field: "schedule.cron" }), 400, null],
    [new KairosError("permission_denied", "not yours"), 403, null],
  ];
  for (const [err, status, retryAfter] of cases) {
    it(`${err.code} → ${status}`, async () => {
      const h = harness();
      h.jobs.failWith = err;
      const res = await h.req("GET", "/v1/jobs");
      assert.equal(res.headers.get("retry-after"), retryAfter);
      const e = await expectError(res, status, err.code);
      assert.equal(e.message, err.message);
    });
  }

  it("POST /v1/jobs over the tenant's max_jobs: 422 quota_exceeded with the service's message, no Location", async () => {
    const h = harness();
    const msg =
      "max_jobs: tenant ta has 2 jobs and its max_jobs quota is 2; delete a job or raise the quota (kairos admin tenant quota ta --max-jobs N)";
    h.jobs.failWith = new KairosError("quota_exceeded", msg, { retryable: false });
    const res = await h.req("POST", "/v1/jobs", {
      body: validJob(),
      headers: { "idempotency-key": "q-1" },
    });
    assert.equal(res.headers.get("location"), null);
    assert.equal(res.headers.get("retry-after"), null);
    const e = await expectError(res, 422, "quota_exceeded");
    assert.equal(e.message, msg);
  });

  it("an unknown error is a 500 with a generic message; the detail is logged, not sent", async () => {
    const h = harness();
    h.jobs.failWith = new Error("secret internal detail");
    const res = await h.req("GET", "/v1/jobs");
    const e = await expectError(res, 500, "internal");
    assert.doesNotMatch(e.message, /secret/);
    assert.equal(h.errors.length, 1);
    h.jobs.failWith = new KairosError("stale_fence", "not for clients");
    await expectError(await h.req("GET", "/v1/jobs"), 500, "internal");
    assert.equal(h.errors.length, 2);
  });
});

describe("serveApi", () => {
  it("serves the app on a loopback socket and closes", async () => {
    const h = harness();
    const server = await serveApi(h.app, { host: "127.0.0.1", port: 0 });
    try {
      assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
      const res = await fetch(`${server.url}/healthz`);
      assert.deepEqual(await res.json(), { ok: true });
      const big = await fetch(`${server.url}/v1/jobs`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${FakeTenants.KEY_A}`,
          "content-type": "application/json",
        },
        body: JSON.stringify(validJob({ name: "x".repeat(70_000) })),
      });
      await expectError(big, 413, "payload_too_large", "body");
      const created = await fetch(`${server.url}/v1/jobs`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${FakeTenants.KEY_A}`,
          "content-type": "application/json",
        },
        body: JSON.stringify(validJob()),
      });
      assert.equal(created.status, 201);
      assert.equal(created.headers.get("etag"), '"1"');
      await created.body?.cancel();
    } finally {
      await server.close();
    }
  });
});
