/**
 * A job through the whole path with the docker executor: HTTP → job actor → tenant slot →
 * worker → locked-down container → run record. Skipped unless KAIROS_DOCKER=1 or
 * KAIROS_REQUIRE_DOCKER=1 (CI), where a missing engine fails.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { eventually, type Api, type KairosFixture } from "../support/kairos.ts";
import { spawnOneNode } from "../support/one-node.ts";
import { dockerSkip, ensureTestImage, TEST_IMAGE } from "../support/docker-image.ts";

interface Run {
  run_id: string;
  status: string;
  attempts: { outcome: string | null; error: string | null }[];
  result: { exit_code: number | null; output: string } | null;
  reason: string | null;
}

describe("jobs on the docker executor", { skip: dockerSkip(), timeout: 180_000 }, () => {
  let fx: KairosFixture;
  let api: Api;
  before(async () => {
    await ensureTestImage();
    ({ fx, api } = await spawnOneNode({ nodeId: "d1", roles: "api,scheduler", tenant: "docker" }));
    // The fixture passes --executor process; the later flag wins.
    const worker = fx.spawn("d2", "worker", ["--executor", "docker", "--pull", "never"]);
    await worker.waitFor((e) => e.type === "node_started", 30_000, "docker worker started");
  });
  after(async () => {
    await fx?.stop();
  });

  it("runs a task in a container: identity in env, output captured, not root, no network", async () => {
    const job = await api.call<{ job_id: string }>("POST", "/v1/jobs", {
      schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
      task: {
        image: TEST_IMAGE,
        args: ["/bin/sh", "-c", 'echo "run=$KAIROS_RUN_ID uid=$(id -u)"; ls /sys/class/net'],
        timeout_s: 30,
      },
    });
    assert.equal(job.status, 201, JSON.stringify(job.body));
    const now = await api.call<Run>("POST", `/v1/jobs/${job.body.job_id}/runs`);
    const done = await eventually(
      async () => {
        const r = (await api.call<Run>("GET", `/v1/runs/${now.body.run_id}`)).body;
        return r.status === "succeeded" || r.status === "failed" ? r : undefined;
      },
      60_000,
      "docker run finished",
    );
    assert.equal(done.status, "succeeded", JSON.stringify(done));
    assert.equal(done.result?.output, `run=${now.body.run_id} uid=65534\nlo\n`);
  });

  it("an image that does not exist fails once, without retries, and says why", async () => {
    const job = await api.call<{ job_id: string }>("POST", "/v1/jobs", {
      schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
      task: { image: "kairos-test/does-not-exist:1", args: ["true"], timeout_s: 10 },
      retry: { max_attempts: 3, backoff: "fixed", base_s: 1, max_s: 1 },
    });
    const now = await api.call<Run>("POST", `/v1/jobs/${job.body.job_id}/runs`);
    const done = await eventually(
      async () => {
        const r = (await api.call<Run>("GET", `/v1/runs/${now.body.run_id}`)).body;
        return r.status === "failed" ? r : undefined;
      },
      60_000,
      "run failed",
    );
    assert.equal(done.attempts.length, 1);
    assert.match(done.reason ?? "", /not retryable/);
    assert.match(done.attempts[0]!.error ?? "", /does-not-exist/);
  });
});
