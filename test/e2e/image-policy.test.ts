/**
 * The image policy through a real cluster with the docker executor: the API node runs with
 * `--image-policy kairos-test/`, so a job naming `busybox` is refused at create (422
 * policy_denied, nothing created) while `kairos-test/busybox:1` runs in a container; a tenant
 * given its own policy (kairos admin tenant images) is held to it instead. Skipped unless
 * KAIROS_DOCKER=1 or KAIROS_REQUIRE_DOCKER=1.
 *
 * Without Docker: under a `*` policy a real node still refuses what is not an image reference
 * (400) and a registry on a loopback or private address (422), unless the operator's policy
 * names that registry (`--image-policy '*,localhost:5000/'`).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { apiClient, eventually, type Api, type KairosFixture } from "../support/kairos.ts";
import { spawnOneNode } from "../support/one-node.ts";
import { dockerSkip, ensureTestImage, TEST_IMAGE } from "../support/docker-image.ts";

interface Run {
  run_id: string;
  status: string;
  result: { exit_code: number | null; output: string } | null;
}
const inAnHour = () => ({ at: new Date(Date.now() + 3600_000).toISOString() });

describe("image policy end to end (docker)", { skip: dockerSkip(), timeout: 180_000 }, () => {
  let fx: KairosFixture;
  let api: Api;
  let apiUrl: string;
  before(async () => {
    await ensureTestImage();
    ({
      fx,
      api,
      url: apiUrl,
    } = await spawnOneNode({
      nodeId: "ip1",
      roles: "api,scheduler,worker",
      flags: ["--executor", "docker", "--image-policy", "kairos-test/"],
      tenant: "policed",
    }));
  });
  after(async () => {
    await fx?.stop();
  });

  it("refuses an image outside the operator's policy at create (422), and runs one inside it", async () => {
    const bad = await api.call<{ error: { code: string; field: string; message: string } }>(
      "POST",
      "/v1/jobs",
      {
        schedule: inAnHour(),
        task: { image: "busybox", args: ["true"], timeout_s: 10 },
      },
    );
    assert.equal(bad.status, 422, JSON.stringify(bad.body));
    assert.equal(bad.body.error.code, "policy_denied");
    assert.equal(bad.body.error.field, "task.image");
    assert.deepEqual(
      (await api.call<{ jobs: unknown[] }>("GET", "/v1/jobs")).body.jobs,
      [],
      "nothing was created",
    );

    const job = await api.call<{ job_id: string }>("POST", "/v1/jobs", {
      schedule: inAnHour(),
      task: { image: TEST_IMAGE, args: ["/bin/sh", "-c", "echo inside-policy"], timeout_s: 30 },
    });
    assert.equal(job.status, 201, JSON.stringify(job.body));
    const now = await api.call<Run>("POST", `/v1/jobs/${job.body.job_id}/runs`);
    const done = await eventually(
      async () => {
        const r = (await api.call<Run>("GET", `/v1/runs/${now.body.run_id}`)).body;
        return r.status === "succeeded" || r.status === "failed" ? r : undefined;
      },
      60_000,
      "run finished",
    );
    assert.equal(done.status, "succeeded", JSON.stringify(done));
    assert.equal(done.result?.output, "inside-policy\n");

    const patch = await api.call<{ error: { code: string } }>(
      "PATCH",
      `/v1/jobs/${job.body.job_id}`,
      { task: { image: "other/image:1", args: ["true"], timeout_s: 10 } },
    );
    assert.equal(patch.status, 422, JSON.stringify(patch.body));
    assert.equal(patch.body.error.code, "policy_denied");
  });

  it("a tenant's own policy replaces the operator's", async () => {
    const t = await fx.newTenant("own-policy");
    await fx.tenants.setImagePolicy(t.tenant_id, ["registry.example.com/own-policy/"]);
    const own = apiClient(apiUrl, t.api_key);
    const r = await own.call<{ error: { code: string } }>("POST", "/v1/jobs", {
      schedule: inAnHour(),
      task: { image: TEST_IMAGE, args: ["true"], timeout_s: 10 },
    });
    assert.equal(r.status, 422, JSON.stringify(r.body));
    const ok = await own.call("POST", "/v1/jobs", {
      schedule: inAnHour(),
      task: { image: "registry.example.com/own-policy/app:1", args: ["true"], timeout_s: 10 },
    });
    assert.equal(ok.status, 201, JSON.stringify(ok.body));
  });
});

describe("image references under the * policy (no Docker needed)", { timeout: 120_000 }, () => {
  let fx: KairosFixture;
  let api: Api;
  before(async () => {
    ({ fx, api } = await spawnOneNode({
      nodeId: "ip2",
      roles: "api,scheduler",
      flags: ["--image-policy", "*,localhost:5000/"],
      tenant: "any-image",
    }));
  });
  after(async () => {
    await fx?.stop();
  });

  const create = (image: string) =>
    api.call<{ error?: { code: string; field: string; message: string } }>("POST", "/v1/jobs", {
      schedule: inAnHour(),
      task: { image, args: ["true"], timeout_s: 10 },
    });

  it("refuses malformed references (400) and internal registries (422); allows what the operator names", async () => {
    for (const image of ["busybox;id", "x?fromImage=evil", "busybox id"]) {
      const r = await create(image);
      assert.equal(r.status, 400, `${image}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error?.field, "task.image");
    }
    for (const image of [
      "127.0.0.1:2375/x",
      "[::1]/x",
      "10.0.0.8:5000/x",
      "192.168.0.3/x",
      "localhost:5001/x",
    ]) {
      const r = await create(image);
      assert.equal(r.status, 422, `${image}: ${JSON.stringify(r.body)}`);
      assert.deepEqual([r.body.error?.code, r.body.error?.field], ["policy_denied", "task.image"]);
    }
    assert.deepEqual(
      (await api.call<{ jobs: unknown[] }>("GET", "/v1/jobs")).body.jobs,
      [],
      "nothing was created",
    );
    for (const image of ["localhost:5000/team/app:1", "busybox"]) {
      const r = await create(image);
      assert.equal(r.status, 201, `${image}: ${JSON.stringify(r.body)}`);
    }
  });
});
