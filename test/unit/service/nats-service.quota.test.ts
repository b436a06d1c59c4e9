/**
 * The `max_jobs` quota in NatsJobsService over in-memory KV and a fake router standing in for the
 * job actors: 422-class `quota_exceeded` before the actor is asked, delete frees a place, an
 * Idempotency-Key replay is not counted twice, refusals and timeouts of the actor, and the seed
 * of a missing counter from the jobs that exist.
 */
import { jobsServiceFixture } from "../../support/jobs-service.ts";
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Buckets } from "../../../src/cluster/buckets.ts";
import { encode } from "../../../src/cluster/codec.ts";
import type { ActorRouter } from "../../../src/cluster/router.ts";
import { readJobCount } from "../../../src/slots/job-quota.ts";
import type { JobSpec } from "../../../src/protocol/model.ts";
import { KairosError, isKairosError } from "../../../src/lib/errors.ts";
import { seededRandom } from "../../../src/lib/random.ts";

const TENANT = "tquotaquotaquota";

function setup(maxJobs: number) {
  const jobs = new Map<string, string>(); // job_id → request_hash
  const asked: { kind: string; job_id?: string }[] = [];
  let failNext: Error | undefined;
  const router = {
    now: () => 0,
    async request(_addr: unknown, msg: { kind: string; job_id?: string; request_hash?: string }) {
      asked.push(msg);
      if (failNext) {
        const e = failNext;
        failNext = undefined;
        throw e;
      }
      const id = String((_addr as { id: string }).id).split(".")[1]!;
      if (msg.kind === "create") {
        jobs.set(id, msg.request_hash!);
        return { job: { job_id: id } };
      }
      if (msg.kind === "delete") {
        if (!jobs.delete(id)) throw new KairosError("not_found", "job not found");
        return null;
      }
      throw new Error(`unexpected ${msg.kind}`);
    },
  } as unknown as ActorRouter;
  const { buckets, service, ready } = jobsServiceFixture(router, {
    tenantId: TENANT,
    name: "q",
    maxJobs,
    partitions: 4,
    random: seededRandom(7),
  });
  return { buckets, service, jobs, asked, ready, fail: (e: Error) => (failNext = e) };
}

const spec = (n = 0) => ({ name: `job${n}` }) as unknown as JobSpec;
const count = (b: Buckets) => readJobCount(b.tenants, TENANT);

describe("NatsJobsService: max_jobs", () => {
  it("creates up to max_jobs, then quota_exceeded with a precise message before the job actor is asked", async () => {
    const h = setup(2);
    await h.ready;
    await h.service.createJob(TENANT, spec(1));
    await h.service.createJob(TENANT, spec(2));
    const asked = h.asked.length;
    await assert.rejects(
      h.service.createJob(TENANT, spec(3)),
      (e) =>
        isKairosError(e, "quota_exceeded") &&
        e.message.startsWith(`max_jobs: tenant ${TENANT} has 2 jobs and its max_jobs quota is 2`),
    );
    assert.equal(h.asked.length, asked, "the job actor was not asked");
    assert.equal(h.jobs.size, 2);
    assert.equal(await count(h.buckets), 2);
  });

  it("delete frees a place; deleting an unknown job does not uncount", async () => {
    const h = setup(1);
    await h.ready;
    const { job } = await h.service.createJob(TENANT, spec());
    await assert.rejects(h.service.createJob(TENANT, spec(2)), (e) =>
      isKairosError(e, "quota_exceeded"),
    );
    await h.service.deleteJob(TENANT, job.job_id);
    assert.equal(await count(h.buckets), 0);
    await assert.rejects(h.service.deleteJob(TENANT, job.job_id), (e) =>
      isKairosError(e, "not_found"),
    );
    await h.service.createJob(TENANT, spec(2));
    assert.equal(await count(h.buckets), 1);
  });

  it("an Idempotency-Key replay is not counted twice; a key refused by the quota is forgotten", async () => {
    const h = setup(2);
    await h.ready;
    const a = await h.service.createJob(TENANT, spec(), "key-1");
    const b = await h.service.createJob(TENANT, spec(), "key-1");
    assert.equal(a.created, true);
    assert.equal(b.created, false);
    assert.equal(b.job.job_id, a.job.job_id);
    assert.equal(await count(h.buckets), 1);
    await h.service.createJob(TENANT, spec(2));
    await assert.rejects(h.service.createJob(TENANT, spec(3), "key-2"), (e) =>
      isKairosError(e, "quota_exceeded"),
    );
    await h.service.deleteJob(TENANT, a.job.job_id);
    const retried = await h.service.createJob(TENANT, spec(3), "key-2");
    assert.equal(
      retried.created,
      true,
      "the retry is a new create, counted, not a replay of nothing",
    );
    assert.equal(await count(h.buckets), 2);
  });

  it("a definite refusal of the job actor uncounts; a timeout keeps the reservation (the job may exist)", async () => {
    const h = setup(5);
    await h.ready;
    h.fail(new KairosError("invalid_schedule", "bad"));
    await assert.rejects(h.service.createJob(TENANT, spec()), (e) =>
      isKairosError(e, "invalid_schedule"),
    );
    assert.equal(await count(h.buckets), 0);
    h.fail(new KairosError("timeout", "no owner answered"));
    await assert.rejects(h.service.createJob(TENANT, spec()), (e) => isKairosError(e, "timeout"));
    assert.equal(await count(h.buckets), 1);
  });

  it("a missing counter is seeded from the tenant's live jobs (deleted ones and other tenants not counted)", async () => {
    const h = setup(3);
    await h.ready;
    const state = (tenant: string, job: string, deleted = false) =>
      encode({
        s: {
          job: { tenant_id: tenant, job_id: job, spec: spec(), version: 1, created_at_ms: 0 },
          deleted,
        },
      });
    await h.buckets.actors.put(`job.1.${TENANT}.ja`, state(TENANT, "ja"));
    await h.buckets.actors.put(`job.2.${TENANT}.jb`, state(TENANT, "jb"));
    await h.buckets.actors.put(`job.2.${TENANT}.jc`, state(TENANT, "jc", true));
    await h.buckets.actors.put("job.3.tother.jd", state("tother", "jd"));
    await h.service.createJob(TENANT, spec());
    assert.equal(await count(h.buckets), 3);
    await assert.rejects(h.service.createJob(TENANT, spec(2)), (e) =>
      isKairosError(e, "quota_exceeded"),
    );
  });

  it("a tenant without a record has no quota and no counter", async () => {
    const h = setup(1);
    for (let i = 0; i < 3; i++) await h.service.createJob("tnorecordnorecor", spec(i));
    assert.equal(await readJobCount(h.buckets.tenants, "tnorecordnorecor"), null);
  });
});
