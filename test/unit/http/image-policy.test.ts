/**
 * The image policy at the API: a create or patch naming an image outside the tenant's policy
 * is a 422 `policy_denied` naming `task.image`, and nothing is created or changed. The
 * operator's policy applies to tenants without their own; a tenant's own replaces it.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createApp } from "../../../src/http/app.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { parseImagePolicy } from "../../../src/sandbox/image-policy.ts";
import type { Tenant } from "../../../src/protocol/service.ts";
import { FakeJobs, FakeTenants } from "./fakes.ts";
import { NOW, expectError, validJob } from "./helpers.ts";

/** Tenant A has no policy of its own; tenant B may only use reg.example.com/team-b/. */
class PolicyTenants extends FakeTenants {
  override async authenticate(apiKey: string): Promise<Tenant | null> {
    const t = await super.authenticate(apiKey);
    return t && apiKey === FakeTenants.KEY_B
      ? { ...t, image_policy: ["reg.example.com/team-b/"] }
      : t;
  }
}

function app() {
  const clock = new FakeClock(NOW);
  const jobs = new FakeJobs(clock);
  const a = createApp({
    jobs,
    tenants: new PolicyTenants(),
    clock,
    imagePolicy: parseImagePolicy(["kairos-test/", "busybox:1.36"]),
    logError: (e) => assert.fail(String(e)),
  });
  const req = (method: string, path: string, body: unknown, key = FakeTenants.KEY_A) =>
    Promise.resolve(
      a.request(path, {
        method,
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      }),
    );
  return { jobs, req };
}
const withImage = (image: string) => validJob({ task: { image, args: ["true"], timeout_s: 30 } });

describe("image policy at the API", () => {
  it("create: 422 policy_denied for an image outside the operator's policy; nothing created", async () => {
    const { req } = app();
    const err = await expectError(
      await req("POST", "/v1/jobs", withImage("busybox")),
      422,
      "policy_denied",
      "task.image",
    );
    assert.match(
      err.message,
      /task\.image: image "busybox" is not allowed for this tenant \(allowed: kairos-test\/, busybox:1\.36\)/,
    );
    const list = await req("GET", "/v1/jobs", undefined);
    assert.deepEqual(((await list.json()) as { jobs: unknown[] }).jobs, []);
    assert.equal((await req("POST", "/v1/jobs", withImage("kairos-test/busybox:1"))).status, 201);
    assert.equal(
      (await req("POST", "/v1/jobs", withImage("docker.io/library/busybox:1.36"))).status,
      201,
    );
  });

  it("patch: 422 for a task with a forbidden image; the job keeps its task", async () => {
    const { req } = app();
    const created = (await (
      await req("POST", "/v1/jobs", withImage("kairos-test/busybox:1"))
    ).json()) as { job_id: string };
    const bad = { task: { image: "evil.example.com/x:1", args: ["true"], timeout_s: 30 } };
    await expectError(
      await req("PATCH", `/v1/jobs/${created.job_id}`, bad),
      422,
      "policy_denied",
      "task.image",
    );
    const job = (await (await req("GET", `/v1/jobs/${created.job_id}`, undefined)).json()) as {
      task: { image: string };
    };
    assert.equal(job.task.image, "kairos-test/busybox:1");
    assert.equal(
      (await req("PATCH", `/v1/jobs/${created.job_id}`, { enabled: false })).status,
      200,
      "a patch without a task is not checked",
    );
  });

  it("a tenant's own policy replaces the operator's", async () => {
    const { req } = app();
    await expectError(
      await req("POST", "/v1/jobs", withImage("kairos-test/busybox:1"), FakeTenants.KEY_B),
      422,
      "policy_denied",
      "task.image",
    );
    assert.equal(
      (await req("POST", "/v1/jobs", withImage("reg.example.com/team-b/app:3"), FakeTenants.KEY_B))
        .status,
      201,
    );
  });

  it("an image ID is refused under a policy (400, it names no repository)", async () => {
    const { req } = app();
    await expectError(
      await req("POST", "/v1/jobs", withImage("5e2e2a0ab7d6")),
      400,
      "invalid_argument",
      "task.image",
    );
  });
});

describe("image references under the default policy (*)", () => {
  const anyApp = () => {
    const clock = new FakeClock(NOW);
    const jobs = new FakeJobs(clock);
    const a = createApp({
      jobs,
      tenants: new PolicyTenants(),
      clock,
      logError: (e) => assert.fail(String(e)),
    });
    const req = (method: string, path: string, body: unknown) =>
      Promise.resolve(
        a.request(path, {
          method,
          headers: {
            authorization: `Bearer ${FakeTenants.KEY_A}`,
            "content-type": "application/json",
          },
          body: JSON.stringify(body),
        }),
      );
    return { jobs, req };
  };

  it("a string that is not an image reference is 400 on create and patch; nothing is created", async () => {
    const { req } = anyApp();
    for (const image of [
      "busybox;id",
      "x?fromImage=evil",
      "busybox id",
      "5e2e2a0ab7d6",
      "Busybox",
      "busybox\u0000",
    ]) {
      await expectError(
        await req("POST", "/v1/jobs", withImage(image)),
        400,
        "invalid_argument",
        "task.image",
      );
    }
    assert.deepEqual(
      ((await (await req("GET", "/v1/jobs", undefined)).json()) as { jobs: unknown[] }).jobs,
      [],
    );
    const created = (await (await req("POST", "/v1/jobs", withImage("busybox"))).json()) as {
      job_id: string;
    };
    await expectError(
      await req("PATCH", `/v1/jobs/${created.job_id}`, {
        task: { image: "x?fromImage=evil", args: ["true"], timeout_s: 30 },
      }),
      400,
      "invalid_argument",
      "task.image",
    );
  });

  it("a registry on a loopback or private address is 422 policy_denied; a public one is fine", async () => {
    const { req } = anyApp();
    for (const image of [
      "127.0.0.1:2375/x",
      "localhost:5000/x",
      "[::1]/x",
      "10.0.0.7/x",
      "192.168.1.1:5000/team/app:1",
    ]) {
      const err = await expectError(
        await req("POST", "/v1/jobs", withImage(image)),
        422,
        "policy_denied",
        "task.image",
      );
      assert.match(err.message, /loopback, private or link-local/);
    }
    assert.equal(
      (await req("POST", "/v1/jobs", withImage("reg.example.com:5000/team/app:1"))).status,
      201,
    );
  });
});
