/**
 * `POST /v1/runs/{run_id}/cancel` with `app.request()` over the in-memory fake JobsService: the
 * caller named from the API key, the optional `{"reason"}` body and its validation (before the
 * service is called), idempotency, 409 on an ended run, 404 for malformed ids and another
 * tenant's run. The cancel itself is the job actor's (test/unit/jobs/run-cancel.test.ts) and is
 * exercised end to end in test/e2e/cancel.test.ts.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { RunViewSchema } from "../../../src/http/views.ts";
import { FakeTenants } from "./fakes.ts";
import { expectError, harness, validJob } from "./helpers.ts";

interface Run {
  run_id: string;
  status: string;
  reason: string | null;
}

async function queuedRun(h: ReturnType<typeof harness>, key = FakeTenants.KEY_A): Promise<Run> {
  const job = await h.req("POST", "/v1/jobs", { body: validJob(), key });
  assert.equal(job.status, 201);
  const { job_id } = (await job.json()) as { job_id: string };
  const run = await h.req("POST", `/v1/jobs/${job_id}/runs`, { key });
  assert.equal(run.status, 202);
  return (await run.json()) as Run;
}

const cancelCalls = (h: ReturnType<typeof harness>) =>
  h.jobs.calls.filter((c) => c.method === "cancelRun");

describe("POST /v1/runs/{run_id}/cancel", () => {
  it("cancels with no body: 200, the run cancelled, the API key's id named as the caller", async () => {
    const h = harness();
    const run = await queuedRun(h);
    const res = await h.req("POST", `/v1/runs/${run.run_id}/cancel`);
    assert.equal(res.status, 200);
    const body = RunViewSchema.parse(await res.json());
    assert.equal(body.status, "cancelled");
    assert.equal(body.reason, "cancelled by request of API key k-ta");
    assert.deepEqual(cancelCalls(h)[0], {
      method: "cancelRun",
      tenantId: "ta",
      args: [run.run_id, "API key k-ta", undefined],
    });
  });

  it("an empty JSON body or {} is a cancel without a reason; a reason reaches the service", async () => {
    const h = harness();
    for (const body of ["", "{}", "  "]) {
      const run = await queuedRun(h);
      const res = await h.req("POST", `/v1/runs/${run.run_id}/cancel`, { body });
      assert.equal(res.status, 200, `${JSON.stringify(body)}: ${await res.clone().text()}`);
    }
    const run = await queuedRun(h);
    const res = await h.req("POST", `/v1/runs/${run.run_id}/cancel`, {
      body: { reason: "deploy freeze" },
    });
    assert.equal(res.status, 200);
    assert.equal(
      ((await res.json()) as Run).reason,
      "cancelled by request of API key k-ta: deploy freeze",
    );
  });

  it("is idempotent: a second cancel answers 200 with the run as it is", async () => {
    const h = harness();
    const run = await queuedRun(h);
    const first = (await (await h.req("POST", `/v1/runs/${run.run_id}/cancel`)).json()) as Run;
    const again = await h.req("POST", `/v1/runs/${run.run_id}/cancel`, {
      body: { reason: "twice" },
    });
    assert.equal(again.status, 200);
    assert.deepEqual(await again.json(), first);
  });

  it("a run that ended otherwise is 409 conflict", async () => {
    const h = harness();
    const run = await queuedRun(h);
    h.jobs.endRun(run.run_id, "succeeded");
    const e = await expectError(
      await h.req("POST", `/v1/runs/${run.run_id}/cancel`),
      409,
      "conflict",
    );
    assert.match(e.message, /already ended succeeded/);
  });

  it("an unknown run, a malformed id and another tenant's run are 404", async () => {
    const h = harness();
    const theirs = await queuedRun(h, FakeTenants.KEY_B);
    await expectError(await h.req("POST", "/v1/runs/nope/cancel"), 404, "not_found");
    await expectError(await h.req("POST", `/v1/runs/${theirs.run_id}/cancel`), 404, "not_found");
    for (const bad of ["a.b", "x".repeat(65), "%20"]) {
      await expectError(await h.req("POST", `/v1/runs/${bad}/cancel`), 404, "not_found");
    }
    const get = await h.req("GET", `/v1/runs/${theirs.run_id}`, { key: FakeTenants.KEY_B });
    assert.equal(((await get.json()) as Run).status, "queued", "the other tenant's run goes on");
  });

  it("bad bodies are 400 naming the field, before the service is called", async () => {
    const h = harness();
    const run = await queuedRun(h);
    const cases: [string, string | Record<string, unknown>, string][] = [
      ["malformed JSON", "{", "body"],
      ["not an object", "[]", "body"],
      ["a string", '"stop"', "body"],
      ["an unknown field", { reason: "x", force: true }, "force"],
      ["a tenant_id", { tenant_id: "tb" }, "tenant_id"],
      ["reason not a string", { reason: 3 }, "reason"],
      ["reason empty", { reason: "" }, "reason"],
      ["reason too long", { reason: "x".repeat(201) }, "reason"],
      ["reason with a line break", { reason: "a\nb" }, "reason"],
    ];
    for (const [what, body, field] of cases) {
      const e = await expectError(
        await h.req("POST", `/v1/runs/${run.run_id}/cancel`, { body }),
        400,
        "invalid_argument",
        field,
      );
      assert.ok(e.message.startsWith(field), `${what}: ${e.message}`);
    }
    await expectError(
      await h.req("POST", `/v1/runs/${run.run_id}/cancel`, {
        body: "reason=x",
        headers: { "content-type": "application/x-www-form-urlencoded" },
      }),
      400,
      "invalid_argument",
      "Content-Type",
    );
    assert.equal(cancelCalls(h).length, 0, "no bad request reached the service");
    const ok = await h.req("POST", `/v1/runs/${run.run_id}/cancel`, {
      body: { reason: "x".repeat(200) },
    });
    assert.equal(ok.status, 200, "200 characters are accepted");
  });

  it("needs an API key: 401 without one", async () => {
    const h = harness();
    const run = await queuedRun(h);
    await expectError(
      await h.req("POST", `/v1/runs/${run.run_id}/cancel`, { key: null }),
      401,
      "unauthenticated",
    );
    await expectError(
      await h.req("POST", `/v1/runs/${run.run_id}/cancel`, { key: FakeTenants.REVOKED }),
      401,
      "unauthenticated",
    );
  });
});
