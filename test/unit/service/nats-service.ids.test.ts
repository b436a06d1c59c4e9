/**
 * New job ids in NatsJobsService (`newTimedJobId`: creation time, then 7 random characters) over
 * in-memory KV and a fake router that answers creates as the job actor does (`conflict` for an id
 * that is another job's): a create whose new id is taken tries another, leaving the other job,
 * its catalog entry and the quota as they were; with an idempotency key the key names the job
 * made, so a replay answers it.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { jobsServiceFixture } from "../../support/jobs-service.ts";
import type { ActorRouter } from "../../../src/cluster/router.ts";
import { readJobCount } from "../../../src/slots/job-quota.ts";
import type { JobSpec } from "../../../src/protocol/model.ts";
import { CREATE_ID_TRIES } from "../../../src/service/nats-service.ts";
import { KairosError, isKairosError } from "../../../src/lib/errors.ts";
import { seededRandom, type Random } from "../../../src/lib/random.ts";

const TENANT = "tidsidsidsidsids";
const NOW = 1_796_000_000_000;

function setup() {
  const jobs = new Map<string, { hash: string; name: string }>();
  const router = {
    now: () => NOW,
    async request(
      addr: { id: string },
      msg: { kind: string; request_hash?: string; spec?: JobSpec },
    ) {
      const id = addr.id.split(".")[1]!;
      if (msg.kind !== "create") throw new Error(`unexpected ${msg.kind}`);
      const had = jobs.get(id);
      if (had !== undefined && had.hash !== msg.request_hash)
        throw new KairosError("conflict", `job ${id} already exists`);
      if (had === undefined) jobs.set(id, { hash: msg.request_hash!, name: msg.spec!.name! });
      return { job: { job_id: id, name: jobs.get(id)!.name, task: {} } };
    },
  } as unknown as ActorRouter;
  // Seeded, except that values queued in `script` come first: two creates given the same values
  // draw the same id.
  const seeded = seededRandom(11);
  const script: number[] = [];
  const random: Random = { next: () => script.shift() ?? seeded.next() };
  const { buckets, service, ready, catalog } = jobsServiceFixture(router, {
    tenantId: TENANT,
    name: "ids",
    maxJobs: 100,
    partitions: 4,
    random,
  });
  const sameIdNext = (times = 1) => {
    for (let i = 0; i < 7 * times; i++) script.push(0.5);
  };
  const listed = async () => new Map((await catalog()).map((e) => [e.i, e.n]));
  return { buckets, service, jobs, ready, sameIdNext, listed };
}

const spec = (name: string) => ({ name, enabled: true }) as unknown as JobSpec;

describe("NatsJobsService: new job ids", () => {
  it("a create whose new id is another job's makes its job under another id; the other stays listed", async () => {
    const h = setup();
    await h.ready;
    h.sameIdNext();
    const first = await h.service.createJob(TENANT, spec("first"));
    assert.match(
      first.job.job_id,
      new RegExp(`^j${NOW.toString(36).padStart(9, "0")}[0-9a-z]{7}$`),
    );
    h.sameIdNext();
    const second = await h.service.createJob(TENANT, spec("second"));
    assert.equal(second.created, true);
    assert.notEqual(second.job.job_id, first.job.job_id);
    assert.equal(h.jobs.get(first.job.job_id)!.name, "first");
    assert.equal(h.jobs.get(second.job.job_id)!.name, "second");
    const listed = await h.listed();
    assert.equal(listed.get(first.job.job_id), "first", "the other job's entry is untouched");
    assert.equal(listed.get(second.job.job_id), "second");
    assert.equal(listed.size, 2);
    assert.equal(await readJobCount(h.buckets.tenants, TENANT), 2, "the taken try is uncounted");
  });

  it("with an idempotency key, the key names the job made: a replay answers it", async () => {
    const h = setup();
    await h.ready;
    h.sameIdNext();
    const first = await h.service.createJob(TENANT, spec("first"));
    h.sameIdNext();
    const made = await h.service.createJob(TENANT, spec("keyed"), "key-1");
    assert.notEqual(made.job.job_id, first.job.job_id);
    const replay = await h.service.createJob(TENANT, spec("keyed"), "key-1");
    assert.deepEqual(replay, { job: made.job, created: false });
    assert.equal(await readJobCount(h.buckets.tenants, TENANT), 2);
  });

  it("gives up, retryable, after CREATE_ID_TRIES taken ids, leaving nothing of its tries", async () => {
    const h = setup();
    await h.ready;
    h.sameIdNext();
    const first = await h.service.createJob(TENANT, spec("first"));
    h.sameIdNext(CREATE_ID_TRIES);
    await assert.rejects(
      h.service.createJob(TENANT, spec("unlucky"), "key-2"),
      (e) => isKairosError(e, "unavailable") && e.retryable,
    );
    assert.deepEqual([...(await h.listed())], [[first.job.job_id, "first"]]);
    assert.equal(await readJobCount(h.buckets.tenants, TENANT), 1);
    assert.equal((await h.buckets.idempotency.list("*")).length, 0, "the key is free again");
  });
});
