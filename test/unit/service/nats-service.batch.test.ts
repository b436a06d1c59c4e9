/**
 * `NatsJobsService.createJobs` (a batch's creates together) over in-memory KV and a fake router
 * standing in for the job actors: the actor creates go out as one request per partition, each
 * item keeps its own outcome — a create the group left pending is sent again on its own, a
 * refused one leaves no count, entry or key, a new id that is another job's is tried again — and
 * a replayed batch answers its first jobs.
 */
import { jobsServiceFixture } from "../../support/jobs-service.ts";
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { ActorRouter, ItemResult } from "../../../src/cluster/router.ts";
import { partitionOf } from "../../../src/cluster/placement.ts";
import { readJobCount } from "../../../src/slots/job-quota.ts";
import type { JobSpec } from "../../../src/protocol/model.ts";
import { CREATE_WAVE, NatsJobsService } from "../../../src/service/nats-service.ts";
import { KairosError, isKairosError } from "../../../src/lib/errors.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import { systemClock } from "../../../src/lib/clock.ts";

const TENANT = "tbatchbatchbatch";
const PARTITIONS = 4;

interface CreateMsg {
  kind: string;
  job_id: string;
  spec: JobSpec;
  request_hash: string;
}
type Addr = { type: string; id: string };

/** What the fake actor does with a create sent in a group (by job name): answered as usual by default. */
type GroupAnswer = "pending" | "refuse" | "answer";

function setup(maxJobs: number) {
  const jobs = new Map<string, { hash: string; name: string }>(); // job_id → its create
  const single: string[] = []; // names of the creates sent one by one
  const groups: { partition: number; names: string[] }[] = [];
  const inGroup = new Map<string, GroupAnswer>(); // job name → how its group answers it
  const refused = new Set<string>(); // job names the actor refuses whenever asked
  const taken = new Set<string>(); // job ids that are another job's
  const actorCreate = (addr: Addr, m: CreateMsg): unknown => {
    const id = addr.id.split(".")[1]!;
    const name = m.spec.name!;
    if (refused.has(name)) throw new KairosError("invalid_schedule", `${name}: refused`);
    if (taken.has(id)) throw new KairosError("conflict", `job ${id} already exists`);
    const had = jobs.get(id);
    if (had && had.hash !== m.request_hash)
      throw new KairosError("conflict", `job ${id} already exists`);
    jobs.set(id, { hash: m.request_hash, name });
    return { job: { job_id: id, name, task: {} } };
  };
  const router = {
    now: () => 1_000_000,
    clock: systemClock,
    async request(addr: Addr, m: CreateMsg) {
      single.push(m.spec.name!);
      return actorCreate(addr, m);
    },
    async requestMany(items: { to: Addr; msg: CreateMsg }[]): Promise<ItemResult[]> {
      const partitions = new Set(items.map((it) => partitionOf(it.to, PARTITIONS)));
      assert.equal(partitions.size, 1, "a group request goes to one partition");
      groups.push({ partition: [...partitions][0]!, names: items.map((it) => it.msg.spec.name!) });
      return items.map((it): ItemResult => {
        const how = inGroup.get(it.msg.spec.name!) ?? "answer";
        if (how === "pending")
          return { ok: false, e: { code: "unavailable", message: "pending: still queued" } };
        try {
          return { ok: true, v: actorCreate(it.to, it.msg) };
        } catch (e) {
          const k = e as KairosError;
          if (how === "refuse" || isKairosError(e))
            return { ok: false, e: { code: k.code, message: k.message } };
          throw e;
        }
      });
    },
  } as unknown as ActorRouter;
  const fx = jobsServiceFixture(router, {
    tenantId: TENANT,
    name: "b",
    maxJobs,
    partitions: PARTITIONS,
    random: seededRandom(11),
  });
  /** The job ids the tenant's catalog lists. */
  const listed = async (): Promise<string[]> => (await fx.catalog()).map((x) => x.i).sort();
  const { buckets, service, ready } = fx;
  return { buckets, service, jobs, single, groups, inGroup, refused, taken, ready, listed };
}

const spec = (name: string) => ({ name, enabled: true }) as unknown as JobSpec;
const items = (n: number, keyed = false, prefix = "j") =>
  Array.from({ length: n }, (_, i) =>
    keyed
      ? { spec: spec(`${prefix}${i}`), idempotencyKey: `${prefix}-key-${i}` }
      : { spec: spec(`${prefix}${i}`) },
  );
const ids = (out: Awaited<ReturnType<NatsJobsService["createJobs"]>>) =>
  out.map((o) => (o.ok ? o.job.job_id : null));

describe("NatsJobsService.createJobs", () => {
  it("sends the actor creates as one request per partition, each item answered in order", async () => {
    const h = setup(1000);
    await h.ready;
    const out = await h.service.createJobs(TENANT, items(40));
    assert.equal(out.length, 40);
    out.forEach((o, i) => {
      assert.ok(o.ok);
      assert.equal(o.created, true);
      assert.equal(o.job.name, `j${i}`, "each outcome is its own item's");
    });
    assert.deepEqual(h.single, [], "nothing was sent on its own");
    assert.ok(h.groups.length <= PARTITIONS, `${h.groups.length} group requests`);
    assert.equal(
      h.groups.reduce((n, g) => n + g.names.length, 0),
      40,
    );
    assert.deepEqual(await h.listed(), [...(ids(out) as string[])].sort());
    assert.equal(await readJobCount(h.buckets.tenants, TENANT), 40);
  });

  it("a batch larger than a wave goes a wave at a time, in order", async () => {
    const h = setup(10_000);
    await h.ready;
    const n = CREATE_WAVE * 2 + 10;
    const out = await h.service.createJobs(TENANT, items(n));
    out.forEach((o, i) => assert.ok(o.ok && o.job.name === `j${i}`));
    const waveOf = (name: string) => Math.floor(Number(name.slice(1)) / CREATE_WAVE);
    let last = 0;
    for (const g of h.groups) {
      const waves = new Set(g.names.map(waveOf));
      assert.equal(waves.size, 1, "a group request holds creates of one wave");
      const w = [...waves][0]!;
      assert.ok(w >= last, "waves in order");
      last = w;
    }
    assert.equal(last, 2);
    assert.equal(await readJobCount(h.buckets.tenants, TENANT), n);
  });

  it("a create the group left pending is sent on its own; a refused one leaves no count or entry", async () => {
    const h = setup(1000);
    await h.ready;
    h.inGroup.set("j1", "pending");
    h.inGroup.set("j4", "pending");
    h.refused.add("j2");
    const out = await h.service.createJobs(TENANT, items(6, true));
    assert.deepEqual(
      out.map((o) => o.ok),
      [true, true, false, true, true, true],
    );
    const bad = out[2]!;
    assert.ok(!bad.ok && isKairosError(bad.error, "invalid_schedule"));
    // j2 is sent again on its own (its refusal as a single create reports it), j1 and j4 too.
    assert.deepEqual([...h.single].sort(), ["j1", "j2", "j4"]);
    const made = ids(out).filter((x): x is string => x !== null);
    assert.deepEqual(await h.listed(), [...made].sort(), "the refused create is not listed");
    assert.equal(await readJobCount(h.buckets.tenants, TENANT), 5);
    // Retried with its key: refused again (the actor's refusal is the same), still nothing of it.
    const retry = await h.service.createJobs(TENANT, [
      { spec: spec("j2"), idempotencyKey: "j-key-2" },
    ]);
    const again = retry[0];
    assert.ok(again !== undefined && !again.ok && isKairosError(again.error, "invalid_schedule"));
    assert.equal(await readJobCount(h.buckets.tenants, TENANT), 5);
    assert.deepEqual(await h.listed(), [...made].sort());
  });

  it("a new id that is another job's is tried again under another id", async () => {
    const h = setup(1000);
    await h.ready;
    // The first id the service draws is taken: find it by creating once on a twin service.
    const twin = setup(1000);
    await twin.ready;
    const [first] = await twin.service.createJobs(TENANT, items(1));
    assert.ok(first?.ok);
    h.taken.add(first.job.job_id);
    const [made] = await h.service.createJobs(TENANT, items(1));
    assert.ok(made?.ok && made.created);
    assert.notEqual(made.job.job_id, first.job.job_id);
    // The taken id's entry is the other job's (kept); the new one is listed.
    assert.ok((await h.listed()).includes(made.job.job_id));
    assert.equal(await readJobCount(h.buckets.tenants, TENANT), 1);
  });

  it("over the quota: the items that fit, in order, and nothing of the others", async () => {
    const h = setup(3);
    await h.ready;
    const out = await h.service.createJobs(TENANT, items(5, true));
    assert.deepEqual(
      out.map((o) => (o.ok ? "ok" : (o.error as KairosError).code)),
      ["ok", "ok", "ok", "quota_exceeded", "quota_exceeded"],
    );
    assert.equal(h.jobs.size, 3, "the actor was asked for those that fit only");
    assert.equal((await h.listed()).length, 3);
    assert.equal(await readJobCount(h.buckets.tenants, TENANT), 3);
  });

  it("a replayed batch answers its first jobs, uncounted; a key with another body conflicts", async () => {
    const h = setup(1000);
    await h.ready;
    const first = await h.service.createJobs(TENANT, items(10, true));
    const again = await h.service.createJobs(TENANT, [
      ...items(10, true),
      { spec: spec("other"), idempotencyKey: "j-key-3" },
    ]);
    assert.deepEqual(ids(again).slice(0, 10), ids(first));
    assert.ok(again.slice(0, 10).every((o) => o.ok && !o.created));
    const changed = again[10]!;
    assert.ok(
      !changed.ok && isKairosError(changed.error, "conflict"),
      "the same key with another body",
    );
    assert.equal(await readJobCount(h.buckets.tenants, TENANT), 10);
    assert.equal((await h.listed()).length, 10);
  });
});
