/**
 * Every validation error names the field: a table of bad create bodies, each with the field and
 * a message pattern expected in the 400; plus body-level errors (malformed JSON, wrong
 * Content-Type, oversized body) and the OpenAPI document generated from the same schemas,
 * whose CreateJobRequest schema must reject the same shape errors (checked with a small JSON
 * Schema checker) and accept the valid bodies.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { openApiDocument } from "../../../src/http/openapi.ts";
import { parseCreateBody } from "../../../src/app/schemas.ts";
import { expectError, harness, NOW, validJob } from "./helpers.ts";
import { validates } from "./json-schema-lite.ts";

type Body = Record<string, unknown>;
const task = (over: Body): Body => ({
  image: "busybox",
  args: ["echo", "hi"],
  timeout_s: 30,
  ...over,
});

/** [what, body, field, message pattern, also a JSON-Schema (shape) error?] */
const BAD: [string, Body, string, RegExp, boolean][] = [
  [
    "bad cron token",
    validJob({ schedule: { cron: "*/5 * * * FOO" } }),
    "schedule.cron",
    /day-of-week|FOO/i,
    false,
  ],
  [
    "cron out of range",
    validJob({ schedule: { cron: "61 * * * *" } }),
    "schedule.cron",
    /61/,
    false,
  ],
  [
    "too many cron fields",
    validJob({ schedule: { cron: "* * * * * * *" } }),
    "schedule.cron",
    /fields/,
    false,
  ],
  [
    "unknown zone",
    validJob({ schedule: { cron: "0 9 * * *", time_zone: "Mars/Olympus" } }),
    "schedule.time_zone",
    /Mars\/Olympus/,
    false,
  ],
  [
    "at in the past",
    validJob({ schedule: { at: "2020-01-01T00:00:00Z" } }),
    "schedule.at",
    /past/,
    false,
  ],
  [
    "at without offset",
    validJob({ schedule: { at: "2030-01-01T00:00:00" } }),
    "schedule.at",
    /RFC 3339/,
    false,
  ],
  [
    "cron and at together",
    validJob({ schedule: { cron: "* * * * *", at: "2030-01-01T00:00:00Z" } }),
    "schedule",
    /not both/,
    true,
  ],
  ["empty schedule", validJob({ schedule: {} }), "schedule.cron", /required/, true],
  ["schedule a string", validJob({ schedule: "@daily" }), "schedule", /must be an object/, true],
  [
    "cron a number",
    validJob({ schedule: { cron: 5 } }),
    "schedule.cron",
    /must be a string, got number 5/,
    true,
  ],
  [
    "unknown schedule field",
    validJob({ schedule: { cron: "* * * * *", tz: "UTC" } }),
    "schedule.tz",
    /unknown field/,
    true,
  ],
  ["missing schedule", { task: task({}) }, "schedule", /required/, true],
  ["missing task", { schedule: { cron: "* * * * *" } }, "task", /^task: required$/, true],
  ["task a string", validJob({ task: "echo" }), "task", /must be an object, got string/, true],
  [
    "negative timeout",
    validJob({ task: task({ timeout_s: -5 }) }),
    "task.timeout_s",
    /^task\.timeout_s: must be an integer >= 1, got -5$/,
    true,
  ],
  [
    "huge timeout",
    validJob({ task: task({ timeout_s: 86_401 }) }),
    "task.timeout_s",
    /<= 86400, got 86401/,
    true,
  ],
  [
    "fractional timeout",
    validJob({ task: task({ timeout_s: 1.5 }) }),
    "task.timeout_s",
    /must be an integer, got 1.5/,
    true,
  ],
  [
    "timeout as string",
    validJob({ task: task({ timeout_s: "30" }) }),
    "task.timeout_s",
    /must be an integer, got "30"/,
    true,
  ],
  [
    "missing timeout",
    validJob({ task: { image: "x", args: ["y"] } }),
    "task.timeout_s",
    /required/,
    true,
  ],
  ["empty image", validJob({ task: task({ image: "" }) }), "task.image", /empty/, true],
  [
    "long image",
    validJob({ task: task({ image: "i".repeat(513) }) }),
    "task.image",
    /at most 512/,
    true,
  ],
  ["no args", validJob({ task: task({ args: [] }) }), "task.args", /at least 1 element/, true],
  [
    "args not strings",
    validJob({ task: task({ args: ["sh", 1] }) }),
    "task.args[1]",
    /must be a string/,
    true,
  ],
  [
    "too many args",
    validJob({ task: task({ args: Array.from({ length: 257 }, () => "a") }) }),
    "task.args",
    /at most 256/,
    true,
  ],
  [
    "long arg",
    validJob({ task: task({ args: ["a".repeat(4097)] }) }),
    "task.args[0]",
    /at most 4096/,
    true,
  ],
  [
    "env KAIROS_",
    validJob({ task: task({ env: { KAIROS_RUN_ID: "x" } }) }),
    "task.env.KAIROS_RUN_ID",
    /reserved/,
    true,
  ],
  [
    "env bad name",
    validJob({ task: task({ env: { "1BAD": "x" } }) }),
    "task.env.1BAD",
    /environment variable name/,
    true,
  ],
  // What the worker refuses is refused here (src/sandbox/task-rules.ts): the reserved prefix in any
  // case, NUL bytes in arguments, values and the image (the image's grammar is not in the schema).
  [
    "env kairos_ in lower case",
    validJob({ task: task({ env: { kairos_run_id: "x" } }) }),
    "task.env.kairos_run_id",
    /KAIROS_ prefix \(in any case\) is reserved/,
    true,
  ],
  [
    "env Kairos_ in mixed case",
    validJob({ task: task({ env: { Kairos_Token: "x" } }) }),
    "task.env.Kairos_Token",
    /reserved/,
    true,
  ],
  [
    "secret_env kairos_",
    validJob({ task: task({ secret_env: { kairos_secret: "x" } }) }),
    "task.secret_env.kairos_secret",
    /reserved/,
    true,
  ],
  [
    "NUL in an argument",
    validJob({ task: task({ args: ["sh", "-c", "echo a\u0000b"] }) }),
    "task.args[2]",
    /must not contain NUL bytes/,
    true,
  ],
  [
    "NUL in an env value",
    validJob({ task: task({ env: { A: "x\u0000" } }) }),
    "task.env.A",
    /must not contain NUL bytes/,
    true,
  ],
  [
    "NUL in a secret_env value",
    validJob({ task: task({ secret_env: { TOKEN: "\u0000" } }) }),
    "task.secret_env.TOKEN",
    /must not contain NUL bytes/,
    true,
  ],
  [
    "NUL in the image",
    validJob({ task: task({ image: "busybox\u0000" }) }),
    "task.image",
    /lowercase letters/,
    false,
  ],
  [
    "image with spaces",
    validJob({ task: task({ image: " " }) }),
    "task.image",
    /lowercase letters/,
    false,
  ],
  [
    "env value not string",
    validJob({ task: task({ env: { A: 1 } }) }),
    "task.env.A",
    /must be a string/,
    true,
  ],
  [
    "env too many",
    validJob({
      task: task({ env: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`V${i}`, "x"])) }),
    }),
    "task.env",
    /at most 64/,
    true,
  ],
  [
    "resources memory",
    validJob({ task: task({ resources: { memory_mb: 8 } }) }),
    "task.resources.memory_mb",
    />= 16, got 8/,
    true,
  ],
  [
    "resources cpus",
    validJob({ task: task({ resources: { cpus: 0.01 } }) }),
    "task.resources.cpus",
    /number >= 0.1/,
    true,
  ],
  [
    "resources unknown",
    validJob({ task: task({ resources: { gpus: 1 } }) }),
    "task.resources.gpus",
    /unknown field/,
    true,
  ],
  [
    "unknown overlap",
    validJob({ overlap: "sometimes" }),
    "overlap",
    /^overlap: must be one of skip, queue, allow, replace, got "sometimes"$/,
    true,
  ],
  [
    "retry attempts",
    validJob({ retry: { max_attempts: 0 } }),
    "retry.max_attempts",
    />= 1, got 0/,
    true,
  ],
  [
    "retry backoff",
    validJob({ retry: { backoff: "linear" } }),
    "retry.backoff",
    /exponential, fixed/,
    true,
  ],
  [
    "retry max below base",
    validJob({ retry: { base_s: 60, max_s: 30 } }),
    "retry.max_s",
    />= base_s \(60\)/,
    false,
  ],
  [
    "misfire policy",
    validJob({ misfire: { policy: "later" } }),
    "misfire.policy",
    /run_once, run_all, skip/,
    true,
  ],
  [
    "misfire deadline",
    validJob({ misfire: { starting_deadline_s: 0 } }),
    "misfire.starting_deadline_s",
    />= 1/,
    true,
  ],
  ["flex window", validJob({ flex_window_s: 3601 }), "flex_window_s", /<= 3600/, true],
  [
    "enabled a string",
    validJob({ enabled: "yes" }),
    "enabled",
    /must be a boolean, got string "yes"/,
    true,
  ],
  ["name too long", validJob({ name: "n".repeat(201) }), "name", /at most 200/, true],
  ["name a number", validJob({ name: 7 }), "name", /must be a string/, true],
  [
    "unknown top-level field",
    validJob({ priority: 1 }),
    "priority",
    /^priority: unknown field$/,
    true,
  ],
  [
    "unknown field wins over others",
    { Task: task({}), schedule: { cron: "* * * * *" } },
    "Task",
    /unknown field/,
    true,
  ],
  ["body an array", [] as unknown as Body, "body", /must be an object, got an array/, true],
];

describe("create body validation names the field", () => {
  for (const [what, body, field, msg] of BAD) {
    it(`${what} → 400 ${field}`, async () => {
      const h = harness();
      const e = await expectError(
        await h.req("POST", "/v1/jobs", { body }),
        400,
        "invalid_argument",
        field,
      );
      assert.match(e.message, msg);
      assert.ok(e.message.startsWith(`${field}: `), e.message);
      assert.equal(h.jobs.calls.length, 0, "nothing reaches the service");
    });
  }

  it("valid variants are accepted with the documented defaults", () => {
    const spec = parseCreateBody(
      validJob({
        schedule: { at: "2030-01-01T00:00:00Z" },
        task: task({ env: { A_1: "x" }, resources: { memory_mb: 256, cpus: 0.5 } }),
        retry: { max_attempts: 3, base_s: 7200 },
        misfire: { policy: "skip", starting_deadline_s: 60 },
        name: null,
      }),
      NOW,
    );
    assert.deepEqual(spec.retry, {
      max_attempts: 3,
      backoff: "exponential",
      base_s: 7200,
      max_s: 7200,
    });
    assert.deepEqual(spec.misfire, { policy: "skip", starting_deadline_s: 60 });
    assert.deepEqual(spec.task.resources, { memory_mb: 256, cpus: 0.5 });
    assert.equal(spec.name, null);
    assert.deepEqual(
      parseCreateBody(
        validJob({ schedule: { cron: "@daily", time_zone: "America/New_York" } }),
        NOW,
      ).schedule,
      { cron: "@daily", time_zone: "America/New_York" },
    );
  });
});

describe("resources above the cluster's per-task maxima (what the worker would refuse)", () => {
  const over: [Body, string, RegExp][] = [
    [
      { memory_mb: 2049 },
      "task.resources.memory_mb",
      /2049 is above this cluster's maximum of 2048 MiB per task/,
    ],
    [{ cpus: 2.5 }, "task.resources.cpus", /2\.5 is above this cluster's maximum of 2 CPUs/],
    [{ pids: 513 }, "task.resources.pids", /513 is above this cluster's maximum of 512 processes/],
  ];
  for (const [resources, field, msg] of over) {
    it(`${JSON.stringify(resources)} → 422 policy_denied ${field}, on create and on patch; nothing changes`, async () => {
      const h = harness();
      const e = await expectError(
        await h.req("POST", "/v1/jobs", { body: validJob({ task: task({ resources }) }) }),
        422,
        "policy_denied",
        field,
      );
      assert.match(e.message, msg);
      assert.equal(h.jobs.calls.length, 0, "nothing reaches the service");
      const created = (await (await h.req("POST", "/v1/jobs", { body: validJob() })).json()) as {
        job_id: string;
      };
      const calls = h.jobs.calls.length;
      await expectError(
        await h.req("PATCH", `/v1/jobs/${created.job_id}`, { body: { task: task({ resources }) } }),
        422,
        "policy_denied",
        field,
      );
      assert.equal(h.jobs.calls.length, calls, "the patch did not reach the service");
    });
  }

  it("the maxima themselves are accepted; an operator's own maxima replace the defaults", async () => {
    const h = harness();
    assert.equal(
      (
        await h.req("POST", "/v1/jobs", {
          body: validJob({ task: task({ resources: { memory_mb: 2048, cpus: 2, pids: 512 } }) }),
        })
      ).status,
      201,
    );
    const small = harness(undefined, { maxMemoryMb: 512, maxCpus: 1, maxPids: 64 });
    await expectError(
      await small.req("POST", "/v1/jobs", {
        body: validJob({ task: task({ resources: { memory_mb: 1024 } }) }),
      }),
      422,
      "policy_denied",
      "task.resources.memory_mb",
    );
    assert.equal(
      (
        await small.req("POST", "/v1/jobs", {
          body: validJob({ task: task({ resources: { memory_mb: 512, cpus: 1, pids: 64 } }) }),
        })
      ).status,
      201,
    );
    const big = harness(undefined, { maxMemoryMb: 8192, maxCpus: 8, maxPids: 2048 });
    assert.equal(
      (
        await big.req("POST", "/v1/jobs", {
          body: validJob({ task: task({ resources: { memory_mb: 8192, cpus: 8, pids: 2048 } }) }),
        })
      ).status,
      201,
    );
  });
});

describe("body-level errors", () => {
  it("malformed JSON → 400 field body", async () => {
    const h = harness();
    for (const b of ["{", "{'a':1}", "nul", "[1,]", '{"a":1}}']) {
      const e = await expectError(
        await h.req("POST", "/v1/jobs", { body: b }),
        400,
        "invalid_argument",
        "body",
      );
      assert.match(e.message, /malformed JSON/);
    }
    await expectError(
      await h.req("POST", "/v1/jobs", { body: "   " }),
      400,
      "invalid_argument",
      "body",
    );
    await expectError(
      await h.req("POST", "/v1/jobs", { body: "42" }),
      400,
      "invalid_argument",
      "body",
    );
  });

  it("wrong or missing Content-Type → 400 field Content-Type", async () => {
    const h = harness();
    const json = JSON.stringify(validJob());
    for (const type of ["application/x-www-form-urlencoded", "text/plain", "application/jsonx"]) {
      const res = await h.req("POST", "/v1/jobs", {
        body: json,
        headers: { "content-type": type },
      });
      const e = await expectError(res, 400, "invalid_argument", "Content-Type");
      assert.match(e.message, /application\/json/);
    }
    const none = await h.app.request("/v1/jobs", {
      method: "POST",
      headers: { authorization: "Bearer kai_tenant_a_key" },
      body: json,
    });
    await expectError(none, 400, "invalid_argument", "Content-Type");
    const withCharset = await h.req("POST", "/v1/jobs", {
      body: json,
      headers: { "content-type": "application/json; charset=utf-8" },
    });
    assert.equal(withCharset.status, 201);
  });

  it("oversized body → 413, with or without Content-Length, at the configured limit", async () => {
    const h = harness(1024);
    const big = JSON.stringify(validJob({ name: "x".repeat(1100) }));
    await expectError(
      await h.req("POST", "/v1/jobs", { body: big }),
      413,
      "payload_too_large",
      "body",
    );
    await expectError(
      await h.req("POST", "/v1/jobs", {
        body: big,
        headers: { "content-length": String(big.length) },
      }),
      413,
      "payload_too_large",
      "body",
    );
    await expectError(
      await h.req("PATCH", "/v1/jobs/j1", { body: big }),
      413,
      "payload_too_large",
      "body",
    );
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < 4; i++) c.enqueue(new TextEncoder().encode("x".repeat(400)));
        c.close();
      },
    });
    const res = await h.app.request("/v1/jobs", {
      method: "POST",
      headers: { authorization: "Bearer kai_tenant_a_key", "content-type": "application/json" },
      body: stream,
      duplex: "half",
    });
    await expectError(res, 413, "payload_too_large", "body");
    assert.equal(
      (await h.req("POST", "/v1/jobs", { body: validJob() })).status,
      201,
      "a small body still passes",
    );
  });
});

describe("/openapi.json", () => {
  const doc = openApiDocument() as {
    openapi: string;
    paths: Record<string, Record<string, unknown>>;
    components: {
      schemas: Record<string, Record<string, unknown>>;
      securitySchemes: Record<string, unknown>;
    };
  };

  it("is served as JSON and lists every route with its methods", async () => {
    const h = harness();
    const res = await h.req("GET", "/openapi.json", { key: null });
    assert.equal(res.status, 200);
    const served = (await res.json()) as typeof doc;
    assert.equal(served.openapi, "3.1.0");
    const routes = Object.entries(served.paths)
      .flatMap(([p, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${p}`))
      .sort();
    assert.deepEqual(routes, [
      "DELETE /v1/jobs/{job_id}",
      "DELETE /v1/subscriptions/{subscription_id}",
      "GET /.well-known/jwks.json",
      "GET /healthz",
      "GET /openapi.json",
      "GET /v1/admin/cluster",
      "GET /v1/jobs",
      "GET /v1/jobs/{job_id}",
      "GET /v1/jobs/{job_id}/runs",
      "GET /v1/runs",
      "GET /v1/runs/{run_id}",
      "GET /v1/stats",
      "GET /v1/subscriptions",
      "GET /v1/subscriptions/{subscription_id}",
      "PATCH /v1/jobs/{job_id}",
      "POST /v1/jobs",
      "POST /v1/jobs/{job_id}/runs",
      "POST /v1/jobs:batch",
      "POST /v1/runs/{run_id}/cancel",
      "POST /v1/subscriptions",
    ]);
    assert.deepEqual(served.components.securitySchemes, {
      bearer: {
        type: "http",
        scheme: "bearer",
        description: "API key from `kairos admin tenant create`",
      },
      runToken: {
        type: "http",
        scheme: "bearer",
        bearerFormat: "JWT",
        description:
          "An attempt's KAIROS_RUN_TOKEN (EdDSA-signed JWT; keys at /.well-known/jwks.json): reads only its own run and its own job, until the attempt's deadline",
      },
    });
    for (const id of [
      "CreateJobRequest",
      "PatchJobRequest",
      "Job",
      "Run",
      "JobPage",
      "RunPage",
      "Error",
    ])
      assert.ok(served.components.schemas[id], id);
    const text = JSON.stringify(served);
    for (const m of text.matchAll(/"\$ref":"#\/components\/schemas\/(\w+)"/g))
      assert.ok(served.components.schemas[m[1]!], `dangling $ref ${m[1]}`);
  });

  it("its CreateJobRequest schema rejects the shape errors the validator rejects and accepts valid bodies", () => {
    const schema = doc.components.schemas["CreateJobRequest"]!;
    for (const [what, body, , , shape] of BAD) {
      if (shape) assert.equal(validates(schema, body, doc), false, `JSON Schema accepted: ${what}`);
    }
    for (const body of [
      validJob(),
      validJob({
        schedule: { at: "2030-01-01T00:00:00Z" },
        retry: { max_attempts: 2 },
        name: null,
        task: task({ env: { A: "b" } }),
      }),
    ]) {
      parseCreateBody(body, NOW);
      assert.equal(validates(schema, body, doc), true, JSON.stringify(body));
    }
  });

  it("documents defaults, limits and the error shape from the schemas", () => {
    const create = doc.components.schemas["CreateJobRequest"] as {
      properties: Record<string, { default?: unknown }>;
      required: string[];
    };
    assert.deepEqual(create.required.sort(), ["schedule", "task"]);
    assert.equal(create.properties["overlap"]?.default, "skip");
    assert.equal(create.properties["enabled"]?.default, true);
    const err = doc.components.schemas["Error"] as {
      properties: { error: { required: string[] } };
    };
    assert.deepEqual(err.properties.error.required.sort(), ["code", "message"]);
    const post = doc.paths["/v1/jobs"]!["post"] as { responses: Record<string, unknown> };
    for (const s of ["201", "200", "400", "401", "409", "413", "429", "503"])
      assert.ok(post.responses[s], `POST /v1/jobs documents ${s}`);
  });
});
