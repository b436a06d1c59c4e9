/**
 * The NATS API's request handler without NATS (src/nats-api/handler.ts), over the same in-memory
 * fakes as the REST route tests: every operation's reply and status, the tenant taken from the
 * subject and never from a body, malformed and oversize payloads answered with the REST error
 * shape (never a throw), and — the point of the shared application layer — the same error
 * object as REST for the same bad input.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createOperations } from "../../../src/app/operations.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { KairosError } from "../../../src/lib/errors.ts";
import { natsApiConfig, type NatsApiConfig } from "../../../src/nats-api/config.ts";
import { createNatsApiHandler, type NatsApiHandler } from "../../../src/nats-api/handler.ts";
import { apiSubject, parseApiSubject, type ApiOperation } from "../../../src/nats-api/subjects.ts";
import type { ApiReply, ErrorReply } from "../../../src/nats-api/wire.ts";
import { ALLOW_ANY_IMAGE, parseImagePolicy } from "../../../src/sandbox/image-policy.ts";
import { FakeJobs, FakeTenants } from "../http/fakes.ts";
import { NOW, harness, validJob } from "../http/helpers.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { KvSubscriptions } from "../../../src/notify/subscriptions.ts";

const enc = new TextEncoder();

interface H {
  jobs: FakeJobs;
  clock: FakeClock;
  errors: unknown[];
  handle: NatsApiHandler;
  /** A request as tenant `ta` (or `tenant`): body JSON unless a string or bytes. */
  req(
    op: ApiOperation,
    id?: string,
    body?: unknown,
    headers?: Record<string, string>,
    tenant?: string,
  ): Promise<ApiReply>;
}

function nh(cfg: Partial<NatsApiConfig> = {}, imagePolicy = ALLOW_ANY_IMAGE): H {
  const clock = new FakeClock(NOW);
  const jobs = new FakeJobs(clock);
  const errors: unknown[] = [];
  const handle = createNatsApiHandler({
    clusterName: "kairos",
    operations: createOperations({
      jobs,
      clock,
      imagePolicy,
      subscriptions: new KvSubscriptions(new MemoryKv("tenants"), clock),
    }),
    tenants: new FakeTenants(),
    clock,
    config: natsApiConfig({ tenantPerSecond: 0, ...cfg }),
    logError: (e) => errors.push(e),
  });
  return {
    jobs,
    clock,
    errors,
    handle,
    req(op, id, body, headers = {}, tenant = "ta") {
      const data =
        body === undefined
          ? new Uint8Array()
          : body instanceof Uint8Array
            ? body
            : enc.encode(typeof body === "string" ? body : JSON.stringify(body));
      const lower = Object.fromEntries(
        Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]),
      );
      return handle({
        subject: apiSubject("kairos", tenant, op, id),
        data,
        header: (n) => lower[n.toLowerCase()],
      });
    },
  };
}

function ok<T>(r: ApiReply, status: number): T {
  assert.equal(r.ok, true, JSON.stringify(r));
  assert.equal(r.status, status, JSON.stringify(r));
  return (r as { result: T }).result;
}

function err(r: ApiReply, status: number, code: string, field?: string): ErrorReply["error"] {
  assert.equal(r.ok, false, JSON.stringify(r));
  const e = r;
  assert.equal(e.status, status, JSON.stringify(r));
  assert.equal(e.error.code, code, JSON.stringify(r));
  assert.equal(typeof e.error.message, "string");
  if (field !== undefined) assert.equal(e.error.field, field, JSON.stringify(r));
  return e.error;
}

interface Job {
  job_id: string;
  tenant_id: string;
  version: number;
  enabled: boolean;
}
interface Run {
  run_id: string;
  job_id: string;
}

describe("NATS API subjects", () => {
  it("build and parse each operation; unknown operations and missing or extra ids parse as no operation", () => {
    const p = parseApiSubject("kairos", apiSubject("kairos", "ta", "jobs.patch", "j1"));
    assert.deepEqual(p, { tenantToken: "ta", op: "jobs.patch", id: "j1", raw: "jobs.patch.j1" });
    assert.equal(parseApiSubject("kairos", "kairos.kairos.api.ta.jobs.create")?.op, "jobs.create");
    for (const tail of ["jobs.get", "jobs.create.x", "jobs.explode", "jobs", "runs.get.r1.extra"]) {
      assert.equal(parseApiSubject("kairos", `kairos.kairos.api.ta.${tail}`)?.op, undefined, tail);
    }
    assert.equal(parseApiSubject("kairos", "kairos.other.api.ta.jobs.list"), null);
  });
});

describe("NATS API config", () => {
  it("defaults are REST's limits; bad values are invalid_argument naming the option; frozen", () => {
    const c = natsApiConfig();
    assert.equal(c.enabled, true);
    assert.equal(c.maxBodyBytes, 64 * 1024);
    assert.ok(Object.isFrozen(c));
    for (const bad of [
      { maxBodyBytes: 2 * 1024 * 1024 },
      { maxInFlight: 0 },
      { tenantPerSecond: -1 },
      { tenantBurst: 0.5 },
      { tenantCacheMs: -1 },
    ]) {
      assert.throws(
        () => natsApiConfig(bad),
        (e: unknown) =>
          e instanceof KairosError &&
          e.code === "invalid_argument" &&
          (e.field ?? "").startsWith("nats_api."),
        JSON.stringify(bad),
      );
    }
  });
});

describe("NATS API handler: operations", () => {
  it("create (201, tenant from the subject), replay with Idempotency-Key (200), conflict (409)", async () => {
    const h = nh();
    const a = ok<Job>(
      await h.req("jobs.create", undefined, validJob(), { "Idempotency-Key": "k1" }),
      201,
    );
    assert.equal(a.tenant_id, "ta");
    assert.equal(h.jobs.calls[0]?.tenantId, "ta");
    assert.equal(h.jobs.calls[0]?.args[1], "k1");
    const b = ok<Job>(
      await h.req("jobs.create", undefined, validJob(), { "idempotency-key": "k1" }),
      200,
    );
    assert.equal(b.job_id, a.job_id);
    err(
      await h.req("jobs.create", undefined, validJob({ enabled: false }), {
        "Idempotency-Key": "k1",
      }),
      409,
      "conflict",
    );
    err(
      await h.req("jobs.create", undefined, validJob(), { "Idempotency-Key": "a b" }),
      400,
      "invalid_argument",
      "Idempotency-Key",
    );
  });

  it("list, get, patch with If-Match (stale: 412), run now (202), runs list and get, delete (204)", async () => {
    const h = nh();
    const job = ok<Job>(await h.req("jobs.create", undefined, validJob()), 201);
    const page = ok<{ jobs: Job[]; next_cursor: string | null }>(
      await h.req("jobs.list", undefined, { limit: 10 }),
      200,
    );
    assert.deepEqual(
      page.jobs.map((j) => j.job_id),
      [job.job_id],
    );
    assert.equal(page.next_cursor, null);
    ok(await h.req("jobs.list"), 200); // no body: defaults
    assert.equal(ok<Job>(await h.req("jobs.get", job.job_id), 200).job_id, job.job_id);
    const p = ok<Job>(
      await h.req("jobs.patch", job.job_id, { enabled: false }, { "If-Match": '"1"' }),
      200,
    );
    assert.equal(p.version, 2);
    assert.equal(p.enabled, false);
    err(
      await h.req("jobs.patch", job.job_id, { enabled: true }, { "If-Match": "1" }),
      412,
      "precondition_failed",
    );
    err(
      await h.req("jobs.patch", job.job_id, { enabled: true }, { "If-Match": "one" }),
      400,
      "invalid_argument",
      "If-Match",
    );
    const run = ok<Run>(await h.req("jobs.run", job.job_id), 202);
    assert.equal(run.job_id, job.job_id);
    const runs = ok<{ runs: Run[] }>(
      await h.req("runs.list", job.job_id, { limit: 5, status: "queued" }),
      200,
    );
    assert.deepEqual(
      runs.runs.map((r) => r.run_id),
      [run.run_id],
    );
    assert.equal(ok<Run>(await h.req("runs.get", run.run_id, {}), 200).run_id, run.run_id);
    ok(await h.req("runs.dead_lettered", undefined, { limit: 1 }), 200);
    assert.deepEqual(
      ok<{ runs: Run[] }>(await h.req("runs.tenant", undefined, { limit: 5 }), 200).runs.map(
        (r) => r.run_id,
      ),
      [run.run_id],
    );
    err(await h.req("runs.tenant", undefined, { status: "nope" }), 400, "invalid_argument");
    assert.equal(ok(await h.req("jobs.delete", job.job_id), 204), null);
    err(await h.req("jobs.get", job.job_id), 404, "not_found");
  });

  it("another tenant's job and run are not_found, exactly like unknown or malformed ids", async () => {
    const h = nh();
    const job = ok<Job>(await h.req("jobs.create", undefined, validJob()), 201);
    const run = ok<Run>(await h.req("jobs.run", job.job_id), 202);
    const asB = (op: ApiOperation, id?: string, body?: unknown) => h.req(op, id, body, {}, "tb");
    const e1 = err(await asB("jobs.get", job.job_id), 404, "not_found");
    const e2 = err(await asB("jobs.get", "j-unknown"), 404, "not_found");
    assert.equal(e1.message.replace(job.job_id, "X"), e2.message.replace("j-unknown", "X"));
    err(await asB("jobs.patch", job.job_id, { enabled: false }), 404, "not_found");
    err(await asB("jobs.delete", job.job_id), 404, "not_found");
    err(await asB("jobs.run", job.job_id), 404, "not_found");
    err(await asB("runs.list", job.job_id), 404, "not_found");
    err(await asB("runs.get", run.run_id), 404, "not_found");
    assert.deepEqual(ok<{ jobs: Job[] }>(await asB("jobs.list"), 200).jobs, []);
    err(await h.req("jobs.get", "bad%id"), 404, "not_found");
    assert.equal(
      ok<Job>(await h.req("jobs.get", job.job_id), 200).enabled,
      true,
      "B changed nothing",
    );
  });

  it("the image policy applies as over REST (422 policy_denied on task.image)", async () => {
    const h = nh({}, parseImagePolicy(["registry.example.com/acme/"], "test"));
    err(await h.req("jobs.create", undefined, validJob()), 422, "policy_denied", "task.image");
    assert.equal(h.jobs.calls.length, 0);
  });
});

describe("NATS API handler: the tenant is the subject's", () => {
  it("a tenant_id in any body is refused before anything happens — another tenant's or its own", async () => {
    const h = nh();
    for (const t of ["tb", "ta"]) {
      err(
        await h.req("jobs.create", undefined, validJob({ tenant_id: t })),
        400,
        "invalid_argument",
        "tenant_id",
      );
      err(
        await h.req("jobs.list", undefined, { tenant_id: t }),
        400,
        "invalid_argument",
        "tenant_id",
      );
      err(await h.req("jobs.get", "j1", { tenant_id: t }), 400, "invalid_argument", "tenant_id");
    }
    const job = ok<Job>(await h.req("jobs.create", undefined, validJob()), 201);
    err(
      await h.req("jobs.patch", job.job_id, { tenant_id: "tb", enabled: false }),
      400,
      "invalid_argument",
      "tenant_id",
    );
    assert.deepEqual(
      h.jobs.calls.map((c) => c.method),
      ["createJob"],
    );
  });

  it("a subject naming no tenant is 401 unauthenticated; an unknown operation is 404", async () => {
    const h = nh();
    err(await h.req("jobs.list", undefined, undefined, {}, "tnobody"), 401, "unauthenticated");
    err(
      await h.handle({
        subject: "kairos.kairos.api.ta.jobs.explode",
        data: new Uint8Array(),
        header: () => undefined,
      }),
      404,
      "not_found",
    );
    assert.equal(h.jobs.calls.length, 0);
  });
});

describe("NATS API handler: bad payloads are error replies, never throws", () => {
  it("malformed JSON, empty create, invalid UTF-8, non-object params, unknown and mistyped params", async () => {
    const h = nh();
    assert.match(
      err(await h.req("jobs.create", undefined, "{nope"), 400, "invalid_argument", "body").message,
      /malformed JSON/,
    );
    err(await h.req("jobs.create"), 400, "invalid_argument", "body");
    err(
      await h.req("jobs.create", undefined, new Uint8Array([0x7b, 0xff, 0xfe, 0x7d])),
      400,
      "invalid_argument",
      "body",
    );
    err(await h.req("jobs.list", undefined, "[1,2]"), 400, "invalid_argument", "body");
    err(await h.req("jobs.list", undefined, "nul"), 400, "invalid_argument", "body");
    err(await h.req("jobs.list", undefined, { limit: 1.5 }), 400, "invalid_argument", "limit");
    err(await h.req("jobs.list", undefined, { limit: "20" }), 400, "invalid_argument", "limit");
    err(await h.req("jobs.list", undefined, { limit: 0 }), 400, "invalid_argument", "limit");
    err(await h.req("jobs.list", undefined, { limit: 201 }), 400, "invalid_argument", "limit");
    err(await h.req("jobs.list", undefined, { cursor: 5 }), 400, "invalid_argument", "cursor");
    err(await h.req("jobs.list", undefined, { page: 2 }), 400, "invalid_argument", "page");
    err(await h.req("runs.list", "j1", { status: "exploded" }), 400, "invalid_argument", "status");
    err(await h.req("jobs.delete", "j1", { force: true }), 400, "invalid_argument", "force");
    assert.equal(h.jobs.calls.length, 0);
    assert.deepEqual(h.errors, []);
  });

  it("a payload over maxBodyBytes is 413 payload_too_large, and the next request is served", async () => {
    const h = nh({ maxBodyBytes: 2048 });
    const big = validJob({ name: "x".repeat(3000) });
    err(await h.req("jobs.create", undefined, big), 413, "payload_too_large", "body");
    ok(await h.req("jobs.create", undefined, validJob()), 201);
  });

  it("random subjects, headers and bytes always get a well-formed reply with a status < 500", async () => {
    const h = nh();
    let seed = 42;
    const rnd = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
    const ops: string[] = [
      "jobs.create",
      "jobs.list",
      "jobs.get.j1",
      "jobs.patch.j1",
      "jobs.delete.x",
      "jobs.run.y",
      "runs.list.j",
      "runs.get.r",
      "runs.dead_lettered",
      "runs.tenant",
      "x.y",
      "jobs",
    ];
    const bodies = [
      "",
      "{}",
      "null",
      "[]",
      "1",
      '"s"',
      "{",
      '{"limit":-1}',
      '{"schedule":{"cron":"nope"}}',
      '{"task":{}}',
      "\u0000",
      '{"__proto__":{"x":1}}',
    ];
    for (let i = 0; i < 300; i++) {
      const bytes =
        i % 5 === 0
          ? new Uint8Array(Array.from({ length: rnd(64) }, () => rnd(256)))
          : enc.encode(bodies[rnd(bodies.length)]);
      const r = await h.handle({
        subject: `kairos.kairos.api.ta.${ops[rnd(ops.length)]!}`,
        data: bytes,
        header: (n) => (rnd(4) === 0 ? `${n}:${rnd(1000)}` : undefined),
      });
      assert.equal(typeof r.ok, "boolean");
      assert.ok(r.status < 500, JSON.stringify(r));
      if (!r.ok) assert.equal(typeof r.error.code, "string");
    }
    assert.deepEqual(h.errors, []);
  });

  it("a bug in the service is a 500 with a generic message; the details are logged, not sent", async () => {
    const h = nh();
    h.jobs.failWith = new Error("secret internal detail");
    const e = err(await h.req("jobs.list"), 500, "internal");
    assert.equal(e.message, "internal error");
    assert.equal(h.errors.length, 1);
  });

  it("over the tenant's rate: 429 rate_limited with retry_after_s", async () => {
    const h = nh({ tenantPerSecond: 1, tenantBurst: 2 });
    ok(await h.req("jobs.list"), 200);
    ok(await h.req("jobs.list"), 200);
    const r = await h.req("jobs.list");
    err(r, 429, "rate_limited");
    assert.equal((r as ErrorReply).retry_after_s, 1);
    ok(await h.req("jobs.list", undefined, undefined, {}, "tb"), 200); // another tenant's bucket
  });
});

describe("NATS API and REST answer the same error for the same input (one application layer)", () => {
  const bad: Record<string, unknown>[] = [
    validJob({ task: { image: "busybox", args: [], timeout_s: 30 } }),
    validJob({ schedule: { cron: "61 * * * *" } }),
    validJob({ schedule: { at: "2020-01-01T00:00:00Z" } }),
    validJob({ retry: { max_attempts: 99 } }),
    validJob({ Task: {} }),
    validJob({ task: { image: "busybox", args: ["x"], timeout_s: 30, env: { KAIROS_X: "1" } } }),
    { schedule: { cron: "* * * * *", at: "2030-01-01T00:00:00Z" } },
    {},
  ];
  it("create", async () => {
    const rest = harness();
    const nats = nh();
    for (const body of bad) {
      const res = await rest.req("POST", "/v1/jobs", { body });
      const r = await nats.req("jobs.create", undefined, body);
      assert.equal(r.ok, false);
      assert.equal(r.status, res.status, JSON.stringify(body));
      assert.deepEqual(
        r.error,
        ((await res.json()) as { error: unknown }).error,
        JSON.stringify(body),
      );
    }
  });
  it("patch", async () => {
    const rest = harness();
    const nats = nh();
    const id = "job000001";
    await rest.req("POST", "/v1/jobs", { body: validJob() });
    await nats.req("jobs.create", undefined, validJob());
    for (const body of [...bad.slice(0, 6), { enabled: "yes" }, {}]) {
      const res = await rest.req("PATCH", `/v1/jobs/${id}`, { body });
      const r = await nats.req("jobs.patch", id, body);
      assert.equal(r.status, res.status, JSON.stringify(body));
      assert.deepEqual(
        (r as ErrorReply).error,
        ((await res.json()) as { error: unknown }).error,
        JSON.stringify(body),
      );
    }
  });
  it("service errors map to the same status and code", async () => {
    const nats = nh();
    for (const [code, status] of [
      ["quota_exceeded", 422],
      ["no_owner", 503],
      ["timeout", 503],
      ["overloaded", 429],
      ["stale_fence", 500],
    ] as const) {
      nats.jobs.failWith = new KairosError(code, "x");
      const r = await nats.req("jobs.list");
      assert.equal(r.status, status, code);
      if (status === 503 || status === 429) assert.equal((r as ErrorReply).retry_after_s, 1);
    }
  });
});

describe("NATS API: runs.cancel", () => {
  it("cancels (200, the caller named as the NATS API), idempotent, 409 once ended otherwise, 404 for another tenant's run", async () => {
    const h = nh();
    const job = ok<Job>(await h.req("jobs.create", undefined, validJob()), 201);
    const run = ok<Run>(await h.req("jobs.run", job.job_id), 202);
    const second = ok<Run>(await h.req("jobs.run", job.job_id), 202);
    err(await h.req("runs.cancel", second.run_id, undefined, {}, "tb"), 404, "not_found");
    const c = ok<{ status: string; reason: string }>(await h.req("runs.cancel", run.run_id), 200);
    assert.equal(c.status, "cancelled");
    assert.equal(c.reason, "cancelled by request of the NATS API");
    assert.deepEqual(ok(await h.req("runs.cancel", run.run_id, {}), 200), c, "idempotent");
    const noted = ok<{ reason: string }>(
      await h.req("runs.cancel", second.run_id, { reason: "no longer needed" }),
      200,
    );
    assert.equal(noted.reason, "cancelled by request of the NATS API: no longer needed");
    const third = ok<Run>(await h.req("jobs.run", job.job_id), 202);
    h.jobs.endRun(third.run_id, "failed");
    err(await h.req("runs.cancel", third.run_id), 409, "conflict");
    err(await h.req("runs.cancel", "bad%id"), 404, "not_found");
  });

  it("bad bodies are the same errors as over REST, and reach no service", async () => {
    const rest = harness();
    const nats = nh();
    await rest.req("POST", "/v1/jobs", { body: validJob() });
    await nats.req("jobs.create", undefined, validJob());
    const runId = "run000002";
    ok(await nats.req("jobs.run", "job000001"), 202);
    assert.equal((await rest.req("POST", "/v1/jobs/job000001/runs")).status, 202);
    for (const body of [
      "{",
      "[]",
      { force: true },
      { reason: 7 },
      { reason: "" },
      { reason: "a\tb" },
    ]) {
      const res = await rest.req("POST", `/v1/runs/${runId}/cancel`, { body });
      const r = await nats.req("runs.cancel", runId, body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.deepEqual(
        (r as ErrorReply).error,
        ((await res.json()) as { error: unknown }).error,
        JSON.stringify(body),
      );
    }
    err(
      await nats.req("runs.cancel", runId, { tenant_id: "ta" }),
      400,
      "invalid_argument",
      "tenant_id",
    );
    assert.equal(nats.jobs.calls.filter((c) => c.method === "cancelRun").length, 0);
  });
});

describe("NATS API subscriptions", () => {
  it("create, list, get and delete mirror REST; bad bodies and other tenants' ids as REST", async () => {
    const h = nh();
    const created = ok<{ subscription_id: string; secret: string }>(
      await h.req("subscriptions.create", undefined, {
        events: ["run.failed"],
        webhook: { url: "https://hooks.example.com/k" },
      }),
      201,
    );
    assert.match(created.secret, /^whsec_/);
    const list = ok<{ subscriptions: { subscription_id: string }[] }>(
      await h.req("subscriptions.list"),
      200,
    );
    assert.deepEqual(
      list.subscriptions.map((x) => x.subscription_id),
      [created.subscription_id],
    );
    const got = ok<Record<string, unknown>>(
      await h.req("subscriptions.get", created.subscription_id),
      200,
    );
    assert.equal("secret" in got, false);
    err(
      await h.req("subscriptions.get", created.subscription_id, undefined, {}, "tb"),
      404,
      "not_found",
    );
    err(
      await h.req("subscriptions.create", undefined, {
        events: ["run.nope"],
        email: { to: "a@b.co" },
      }),
      400,
      "invalid_argument",
      "events[0]",
    );
    err(
      await h.req("subscriptions.create", undefined, {
        tenant_id: "tb",
        events: ["run.failed"],
        email: { to: "a@b.co" },
      }),
      400,
      "invalid_argument",
      "tenant_id",
    );
    err(
      await h.req("subscriptions.list", undefined, { limit: 5 }),
      400,
      "invalid_argument",
      "limit",
    );
    ok(await h.req("subscriptions.delete", created.subscription_id), 204);
    err(await h.req("subscriptions.get", created.subscription_id), 404, "not_found");
    assert.deepEqual(h.errors, []);
  });
});
