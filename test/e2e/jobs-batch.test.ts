/**
 * The batch create (`POST /v1/jobs:batch`) on a real cluster: one `kairos node` (api and
 * scheduler) on a real nats-server, over HTTP as a customer calls it. Each item gets the result a
 * single create would have given — jobs made, errors with their place, idempotency keys replayed,
 * the quota held across the items — and a bad envelope is one 400.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { apiClient, startKairosFixture, type Api, type KairosFixture } from "../support/kairos.ts";

interface Result {
  index: number;
  status: number;
  job?: { job_id: string; name: string | null };
  error?: { code: string; message: string; field?: string };
}
interface Batch {
  created: number;
  replayed: number;
  failed: number;
  results: Result[];
}

const job = (name: string) => ({
  name,
  schedule: { cron: "0 9 * * 1-5", time_zone: "Asia/Kolkata" },
  task: { image: "busybox", args: ["true"], timeout_s: 10 },
});

describe("batch create end to end", { timeout: 300_000 }, () => {
  let fx: KairosFixture;
  let api: Api;
  let url: string;

  before(async () => {
    fx = await startKairosFixture();
    url = await fx.apiUrl(fx.spawn("batch-1", "api,scheduler"));
    const t = await fx.newTenant("acme");
    api = apiClient(url, t.api_key);
  });
  after(async () => {
    await fx?.stop();
  });

  it("creates every valid item, answers each in order, and names a bad item's place", async () => {
    const r = await api.call<Batch>("POST", "/v1/jobs:batch", {
      jobs: [
        { job: job("a") },
        { job: { ...job("b"), schedule: { cron: "61 * * * *" } } },
        { job: job("c"), idempotency_key: "c-1" },
        { job: { ...job("d"), task: { image: "busybox", args: ["true"], timeout_s: -1 } } },
        { job: job("e"), nope: 1 },
        "not an item",
      ],
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(
      r.body.results.map((x) => [x.index, x.status]),
      [
        [0, 201],
        [1, 400],
        [2, 201],
        [3, 400],
        [4, 400],
        [5, 400],
      ],
      JSON.stringify(r.body.results.map((x) => x.error ?? x.status)),
    );
    assert.deepEqual([r.body.created, r.body.replayed, r.body.failed], [2, 0, 4]);
    const [a, b, , d, e, f] = r.body.results;
    assert.equal(b!.error!.code, "invalid_argument");
    assert.equal(b!.error!.field, "jobs[1].job.schedule.cron");
    assert.match(b!.error!.message, /^jobs\[1\]: /);
    assert.equal(d!.error!.field, "jobs[3].job.task.timeout_s");
    assert.equal(e!.error!.field, "jobs[4].nope");
    assert.equal(f!.error!.field, "jobs[5]");
    // The jobs exist, as made by a single create.
    const got = await api.call<{ name: string }>("GET", `/v1/jobs/${a!.job!.job_id}`);
    assert.equal(got.status, 200);
    assert.equal(got.body.name, "a");
  });

  it("replays items by their idempotency keys and refuses a key used twice in one batch", async () => {
    const body = {
      jobs: [
        { job: job("k1"), idempotency_key: "k-1" },
        { job: job("k2"), idempotency_key: "k-2" },
      ],
    };
    const first = await api.call<Batch>("POST", "/v1/jobs:batch", body);
    assert.deepEqual(
      first.body.results.map((x) => x.status),
      [201, 201],
    );
    const again = await api.call<Batch>("POST", "/v1/jobs:batch", {
      jobs: [...body.jobs, { job: job("k3"), idempotency_key: "k-3" }],
    });
    assert.deepEqual(
      again.body.results.map((x) => x.status),
      [200, 200, 201],
    );
    assert.deepEqual(
      again.body.results.slice(0, 2).map((x) => x.job!.job_id),
      first.body.results.map((x) => x.job!.job_id),
    );
    // A key replayed with another body is a conflict, as for a single create.
    const changed = await api.call<Batch>("POST", "/v1/jobs:batch", {
      jobs: [{ job: job("other"), idempotency_key: "k-1" }],
    });
    assert.equal(changed.body.results[0]!.status, 409);
    assert.equal(changed.body.results[0]!.error!.field, "jobs[0].idempotency_key");
    const twice = await api.call<Batch>("POST", "/v1/jobs:batch", {
      jobs: [
        { job: job("t1"), idempotency_key: "same" },
        { job: job("t2"), idempotency_key: "same" },
      ],
    });
    assert.deepEqual(
      twice.body.results.map((x) => x.status),
      [201, 400],
    );
    assert.match(twice.body.results[1]!.error!.message, /the same key as jobs\[0\]/);
  });

  it("holds the max_jobs quota across the items of concurrent batches", async () => {
    const t = await fx.newTenant("small");
    await fx.tenants.setQuota(t.tenant_id, { max_jobs: 50 });
    const small = apiClient(url, t.api_key);
    const batches = await Promise.all(
      Array.from({ length: 3 }, (_, k) =>
        small.call<Batch>("POST", "/v1/jobs:batch", {
          jobs: Array.from({ length: 30 }, (_, i) => ({ job: job(`q-${k}-${i}`) })),
        }),
      ),
    );
    const statuses = batches.flatMap((b) => b.body.results.map((x) => x.status));
    assert.equal(statuses.filter((s) => s === 201).length, 50, "exactly the quota is created");
    assert.equal(statuses.filter((s) => s === 422).length, 40);
    const refused = batches.flatMap((b) => b.body.results).find((x) => x.status === 422)!;
    assert.equal(refused.error!.code, "quota_exceeded");
    // The listing holds exactly 50 jobs.
    let listed = 0;
    let cursor: string | null = null;
    do {
      const page: { status: number; body: { jobs: unknown[]; next_cursor: string | null } } =
        await small.call("GET", `/v1/jobs?limit=200${cursor ? `&cursor=${cursor}` : ""}`);
      listed += page.body.jobs.length;
      cursor = page.body.next_cursor;
    } while (cursor !== null);
    assert.equal(listed, 50);
  });

  /** Every job of a tenant (matching `query`), walked 200 a page. */
  async function listAll(client: Api, query = ""): Promise<{ job_id: string; name: string }[]> {
    const out: { job_id: string; name: string }[] = [];
    let cursor: string | null = null;
    do {
      const page: {
        status: number;
        body: { jobs: { job_id: string; name: string }[]; next_cursor: string | null };
      } = await client.call(
        "GET",
        `/v1/jobs?limit=200${query}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
      );
      assert.equal(page.status, 200);
      out.push(...page.body.jobs);
      cursor = page.body.next_cursor;
    } while (cursor !== null);
    return out;
  }

  it("a batch partly over the quota: the items that fit are made, the others leave nothing, and its replay makes them once the quota allows", async () => {
    const t = await fx.newTenant("partial");
    await fx.tenants.setQuota(t.tenant_id, { max_jobs: 5 });
    const client = apiClient(url, t.api_key);
    const body = {
      jobs: Array.from({ length: 8 }, (_, i) => ({
        job: job(`p-${i}`),
        idempotency_key: `p-${i}`,
      })),
    };
    const first = await client.call<Batch>("POST", "/v1/jobs:batch", body);
    assert.equal(first.status, 200);
    assert.deepEqual(
      first.body.results.map((x) => x.status),
      [201, 201, 201, 201, 201, 422, 422, 422],
      "the quota is granted in the items' order",
    );
    assert.equal(first.body.results[5]!.error!.code, "quota_exceeded");
    // Nothing of the refused items: not listed, and their keys are free.
    assert.deepEqual((await listAll(client)).map((j) => j.name).sort(), [
      "p-0",
      "p-1",
      "p-2",
      "p-3",
      "p-4",
    ]);
    await fx.tenants.setQuota(t.tenant_id, { max_jobs: 8 });
    const again = await client.call<Batch>("POST", "/v1/jobs:batch", body);
    assert.deepEqual(
      again.body.results.map((x) => x.status),
      [200, 200, 200, 200, 200, 201, 201, 201],
    );
    assert.deepEqual(
      again.body.results.slice(0, 5).map((x) => x.job!.job_id),
      first.body.results.slice(0, 5).map((x) => x.job!.job_id),
      "a replayed item answers its first job",
    );
    assert.deepEqual([again.body.created, again.body.replayed, again.body.failed], [3, 5, 0]);
    const listed = await listAll(client);
    assert.equal(listed.length, 8);
    assert.deepEqual(
      listed.map((j) => j.job_id).sort(),
      again.body.results.map((x) => x.job!.job_id).sort(),
    );
    // At the quota: a further create is refused.
    const over = await client.call<Batch>("POST", "/v1/jobs:batch", {
      jobs: [{ job: job("p-8") }],
    });
    assert.equal(over.body.results[0]!.status, 422);
  });

  it("a large batch over every partition: each item its own job, listed, and replayed whole by its keys", async () => {
    const t = await fx.newTenant("large");
    const client = apiClient(url, t.api_key);
    const n = 600;
    const body = {
      jobs: Array.from({ length: n }, (_, i) => ({
        job: { ...job(`l-${i}`), enabled: i % 3 !== 0 },
        idempotency_key: `l-${i}`,
      })),
    };
    const first = await client.call<Batch>("POST", "/v1/jobs:batch", body);
    assert.equal(first.status, 200);
    assert.deepEqual([first.body.created, first.body.replayed, first.body.failed], [n, 0, 0]);
    first.body.results.forEach((x, i) => {
      assert.equal(x.index, i);
      assert.equal(x.job!.name, `l-${i}`, "each result is its own item's job");
    });
    const ids = first.body.results.map((x) => x.job!.job_id);
    assert.equal(new Set(ids).size, n);
    const listed = await listAll(client);
    assert.deepEqual(listed.map((j) => j.job_id).sort(), [...ids].sort());
    // Paused items are listed as paused.
    const paused = await listAll(client, "&state=paused");
    assert.equal(paused.length, n / 3);
    assert.ok(paused.every((j) => Number(j.name.slice(2)) % 3 === 0));
    // The same batch again: every item replayed with its first job; one item changed conflicts.
    const replay = await client.call<Batch>("POST", "/v1/jobs:batch", {
      jobs: body.jobs.map((it, i) => (i === 7 ? { ...it, job: job("changed") } : it)),
    });
    assert.deepEqual(
      [replay.body.created, replay.body.replayed, replay.body.failed],
      [0, n - 1, 1],
    );
    assert.equal(replay.body.results[7]!.status, 409);
    assert.equal(replay.body.results[7]!.error!.field, "jobs[7].idempotency_key");
    replay.body.results.forEach((x, i) => {
      if (i !== 7) assert.equal(x.job!.job_id, ids[i]);
    });
    assert.equal((await listAll(client)).length, n);
  });

  it("refuses a bad envelope whole, with the field", async () => {
    const cases: [unknown, string][] = [
      [[], "body"],
      [{}, "jobs"],
      [{ jobs: [] }, "jobs"],
      [{ jobs: Array.from({ length: 1001 }, () => ({ job: job("x") })) }, "jobs"],
      [{ jobs: [{ job: job("x") }], extra: true }, "extra"],
    ];
    for (const [body, field] of cases) {
      const r = await api.call<{ error: { code: string; field: string } }>(
        "POST",
        "/v1/jobs:batch",
        body,
      );
      assert.equal(r.status, 400, JSON.stringify(body).slice(0, 80));
      assert.equal(r.body.error.field, field);
    }
    // Over 4 MiB: 413, not a dropped connection.
    const big = { jobs: [{ job: { ...job("big"), name: "x".repeat(5 * 1024 * 1024) } }] };
    const r = await api.call<{ error: { code: string } }>("POST", "/v1/jobs:batch", big);
    assert.equal(r.status, 413);
    // The single create keeps its own 64 KiB limit.
    const one = await api.call<{ error: { code: string } }>("POST", "/v1/jobs", {
      ...job("one"),
      name: "x".repeat(100 * 1024),
    });
    assert.equal(one.status, 413);
  });
});
