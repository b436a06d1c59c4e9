/**
 * The transport-agnostic operations (src/app/operations.ts) directly: the tenant is the caller's
 * argument and nothing else; inputs are checked in one order on every transport (ids, then
 * headers, then the body — read only when everything before it passed); the tenant's own image
 * policy replaces the operator's.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createOperations } from "../../../src/app/operations.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { isKairosError } from "../../../src/lib/errors.ts";
import type { Tenant } from "../../../src/protocol/service.ts";
import { ALLOW_ANY_IMAGE, parseImagePolicy } from "../../../src/sandbox/image-policy.ts";
import { FakeJobs } from "../http/fakes.ts";
import { NOW, validJob } from "../http/helpers.ts";

const tenant = (id: string, image_policy?: string[]): Tenant => ({
  tenant_id: id,
  name: id,
  created_at: "2026-01-01T00:00:00Z",
  max_concurrent_runs: 1,
  max_jobs: 10,
  weight: 1,
  webhook_url: null,
  ...(image_policy ? { image_policy } : {}),
});

function setup(policy = ALLOW_ANY_IMAGE) {
  const clock = new FakeClock(NOW);
  const jobs = new FakeJobs(clock);
  return { jobs, ops: createOperations({ jobs, clock, imagePolicy: policy }) };
}

async function fails(p: Promise<unknown>, code: string, field?: string): Promise<void> {
  await assert.rejects(
    p,
    (e: unknown) =>
      isKairosError(e) && e.code === code && (field === undefined || e.field === field),
  );
}

describe("operations", () => {
  it("act for the tenant they are given; another tenant's job is not_found", async () => {
    const { jobs, ops } = setup();
    const { job, created } = await ops.createJob(tenant("ta"), { body: async () => validJob() });
    assert.equal(created, true);
    assert.equal(job.tenant_id, "ta");
    await fails(ops.getJob(tenant("tb"), job.job_id), "not_found");
    await fails(ops.deleteJob(tenant("tb"), job.job_id), "not_found");
    assert.deepEqual(
      jobs.calls.map((c) => c.tenantId),
      ["ta", "tb", "tb"],
    );
  });

  it("check ids, then headers, then the body; the body is not read when an earlier input is bad", async () => {
    const { jobs, ops } = setup();
    let reads = 0;
    const body = async () => {
      reads++;
      return { nope: 1 };
    };
    await fails(ops.patchJob(tenant("ta"), { jobId: "bad id", ifMatch: "x", body }), "not_found");
    await fails(
      ops.patchJob(tenant("ta"), { jobId: "j1", ifMatch: "x", body }),
      "invalid_argument",
      "If-Match",
    );
    await fails(
      ops.createJob(tenant("ta"), { idempotencyKey: "", body }),
      "invalid_argument",
      "Idempotency-Key",
    );
    assert.equal(reads, 0);
    await fails(ops.createJob(tenant("ta"), { body }), "invalid_argument", "nope");
    assert.equal(reads, 1);
    await fails(
      ops.listRuns(tenant("ta"), { jobId: "j1", limit: "0", status: "bogus" }),
      "invalid_argument",
      "limit",
    );
    await fails(
      ops.listRuns(tenant("ta"), { jobId: "j1", status: "bogus" }),
      "invalid_argument",
      "status",
    );
    await fails(
      ops.listJobs(tenant("ta"), { cursor: "c".repeat(1025) }),
      "invalid_argument",
      "cursor",
    );
    assert.equal(jobs.calls.length, 0, "the service saw none of it");
  });

  it("the tenant's own image policy replaces the operator's", async () => {
    const { ops } = setup(parseImagePolicy(["registry.example.com/ops/"], "operator"));
    await fails(
      ops.createJob(tenant("ta"), { body: async () => validJob() }),
      "policy_denied",
      "task.image",
    );
    const own = tenant("ta", ["busybox"]);
    assert.equal((await ops.createJob(own, { body: async () => validJob() })).created, true);
  });

  it("network egress only for a tenant with an egress policy (422 policy_denied), on create and patch", async () => {
    const { jobs, ops } = setup();
    const egressTask = { image: "busybox", args: ["wget", "http://example.com/"], timeout_s: 30 };
    const body = async () => validJob({ task: { ...egressTask, network: "egress" } });
    await fails(ops.createJob(tenant("ta"), { body }), "policy_denied", "task.network");
    const allowed: Tenant = { ...tenant("ta"), egress_policy: ["example.com"] };
    const { job } = await ops.createJob(allowed, { body });
    assert.equal(job.task.network, "egress");
    await fails(
      ops.patchJob(tenant("ta"), {
        jobId: job.job_id,
        body: async () => ({ task: { ...egressTask, network: "egress" } }),
      }),
      "policy_denied",
      "task.network",
    );
    // "none" (the default) needs no policy, and is not stored: absent means none.
    const { job: plain } = await ops.createJob(tenant("ta"), {
      body: async () => validJob({ task: { ...egressTask, network: "none" } }),
    });
    assert.equal(plain.task.network, undefined);
    await fails(
      ops.createJob(allowed, {
        body: async () => validJob({ task: { ...egressTask, network: "bridge" } }),
      }),
      "invalid_argument",
      "task.network",
    );
    assert.equal(jobs.calls.filter((c) => c.method === "createJob").length, 2);
  });
});
