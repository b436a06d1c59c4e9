/**
 * /v1/subscriptions with `app.request()`: create (a webhook's secret shown once), list, get,
 * delete; every bad input a 400 naming its field, never a 5xx; another tenant's subscription is
 * not found; the per-tenant limit is a 422; a `job_id` must name one of the tenant's jobs.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { FakeTenants } from "./fakes.ts";
import { expectError, harness, validJob } from "./helpers.ts";
import { MAX_SUBSCRIPTIONS_PER_TENANT } from "../../../src/protocol/events.ts";

const hook = { events: ["run.failed"], webhook: { url: "https://hooks.example.com/k" } };

describe("subscription routes", () => {
  it("creates, lists, gets and deletes; the secret is shown only at creation", async () => {
    const h = harness();
    const res = await h.req("POST", "/v1/subscriptions", { body: hook });
    assert.equal(res.status, 201);
    const created = (await res.json()) as { subscription_id: string; secret: string };
    assert.match(created.secret, /^whsec_/);
    assert.equal(res.headers.get("location"), `/v1/subscriptions/${created.subscription_id}`);
    const mail = await h.req("POST", "/v1/subscriptions", {
      body: { events: ["run.missed", "run.skipped"], email: { to: "ops@example.com" } },
    });
    assert.equal(mail.status, 201);
    assert.equal("secret" in ((await mail.json()) as object), false);

    const list = (await (await h.req("GET", "/v1/subscriptions")).json()) as {
      subscriptions: Record<string, unknown>[];
    };
    assert.equal(list.subscriptions.length, 2);
    assert.equal(list.subscriptions[0]!["subscription_id"], created.subscription_id);
    for (const s of list.subscriptions) assert.equal("secret" in s, false, "never listed");
    const got = await h.req("GET", `/v1/subscriptions/${created.subscription_id}`);
    assert.equal(got.status, 200);
    const view = (await got.json()) as Record<string, unknown>;
    assert.deepEqual(view["webhook"], { url: "https://hooks.example.com/k" });
    assert.equal(view["email"], null);
    assert.equal(view["job_id"], null);
    assert.equal("secret" in view, false);

    // Another tenant sees none of them.
    const other = await h.req("GET", `/v1/subscriptions/${created.subscription_id}`, {
      key: FakeTenants.KEY_B,
    });
    await expectError(other, 404, "not_found");
    await expectError(
      await h.req("DELETE", `/v1/subscriptions/${created.subscription_id}`, {
        key: FakeTenants.KEY_B,
      }),
      404,
      "not_found",
    );
    const del = await h.req("DELETE", `/v1/subscriptions/${created.subscription_id}`);
    assert.equal(del.status, 204);
    await expectError(
      await h.req("GET", `/v1/subscriptions/${created.subscription_id}`),
      404,
      "not_found",
    );
    await expectError(await h.req("GET", "/v1/subscriptions/not..valid"), 404, "not_found");
  });

  it("answers every bad body with a 400 naming the field", async () => {
    const h = harness();
    const cases: [unknown, string][] = [
      [[], "body"],
      [{ webhook: { url: "https://x.example" } }, "events"],
      [{ events: [], webhook: { url: "https://x.example" } }, "events"],
      [{ events: "run.failed", webhook: { url: "https://x.example" } }, "events"],
      [{ events: ["run.exploded"], webhook: { url: "https://x.example" } }, "events[0]"],
      [
        { events: ["run.failed", "run.failed"], webhook: { url: "https://x.example" } },
        "events[1]",
      ],
      [{ events: ["run.failed"] }, "webhook"],
      [
        { events: ["run.failed"], webhook: { url: "https://x.example" }, email: { to: "a@b.co" } },
        "email",
      ],
      [{ events: ["run.failed"], webhook: { url: "ftp://x.example" } }, "webhook.url"],
      [{ events: ["run.failed"], webhook: { url: "not a url" } }, "webhook.url"],
      [{ events: ["run.failed"], webhook: { url: "https://u:p@x.example" } }, "webhook.url"],
      [{ events: ["run.failed"], webhook: { url: 7 } }, "webhook.url"],
      [{ events: ["run.failed"], webhook: { url: "https://x.example", x: 1 } }, "webhook.x"],
      [{ events: ["run.failed"], webhook: "https://x.example" }, "webhook"],
      [{ events: ["run.failed"], email: { to: "Ops <ops@example.com>" } }, "email.to"],
      [{ events: ["run.failed"], email: { to: "a@b.co, c@d.co" } }, "email.to"],
      [{ events: ["run.failed"], email: { to: "ops@example.com\r\nBcc: x@y.co" } }, "email.to"],
      [{ events: ["run.failed"], email: { to: "nobody" } }, "email.to"],
      [{ events: ["run.failed"], email: {} }, "email.to"],
      [{ events: ["run.failed"], email: { to: "a@b.co" }, job_id: "a.b" }, "job_id"],
      [{ events: ["run.failed"], email: { to: "a@b.co" }, job_id: "nosuchjob" }, "job_id"],
      [{ events: ["run.failed"], email: { to: "a@b.co" }, tenant_id: "tb" }, "tenant_id"],
    ];
    for (const [body, field] of cases) {
      const res = await h.req("POST", "/v1/subscriptions", { body });
      await expectError(res, 400, "invalid_argument", field);
    }
    await expectError(
      await h.req("POST", "/v1/subscriptions", { body: "{" }),
      400,
      "invalid_argument",
      "body",
    );
    assert.deepEqual(h.errors, [], "no 5xx");
  });

  it("scopes to one of the tenant's jobs, and bounds the subscriptions per tenant", async () => {
    const h = harness();
    const job = (await (await h.req("POST", "/v1/jobs", { body: validJob() })).json()) as {
      job_id: string;
    };
    const scoped = await h.req("POST", "/v1/subscriptions", {
      body: { ...hook, job_id: job.job_id },
    });
    assert.equal(scoped.status, 201);
    assert.equal(((await scoped.json()) as { job_id: string }).job_id, job.job_id);
    // Tenant B may not name tenant A's job.
    await expectError(
      await h.req("POST", "/v1/subscriptions", {
        body: { ...hook, job_id: job.job_id },
        key: FakeTenants.KEY_B,
      }),
      400,
      "invalid_argument",
      "job_id",
    );
    for (let i = 1; i < MAX_SUBSCRIPTIONS_PER_TENANT; i++)
      assert.equal((await h.req("POST", "/v1/subscriptions", { body: hook })).status, 201);
    await expectError(
      await h.req("POST", "/v1/subscriptions", { body: hook }),
      422,
      "quota_exceeded",
      "subscriptions",
    );
  });
});
