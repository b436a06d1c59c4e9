/**
 * The jobs list (`GET /v1/jobs`) on a real cluster: two `kairos node`s (api and scheduler) on a
 * real nats-server, over HTTP as a customer calls it. The `name` (a part of the name, any case)
 * and `state` filters, alone and together; a job is found under its new name or state as soon as
 * its PATCH is answered, on the other node too, and gone once its DELETE is; a walk 3 at a time
 * while jobs are created and deleted on both nodes returns every job that stayed exactly once;
 * bad filters, cursors and limits are 400s naming the parameter.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { apiClient, startKairosFixture, type Api, type KairosFixture } from "../support/kairos.ts";

interface Job {
  job_id: string;
  name: string | null;
  enabled: boolean;
}
interface JobPage {
  jobs: Job[];
  next_cursor: string | null;
}
interface ErrorBody {
  error: { code: string; field?: string; message: string };
}

const job = (name: string, enabled = true) => ({
  name,
  enabled,
  schedule: { cron: "0 9 * * 1-5", time_zone: "Asia/Kolkata" },
  task: { image: "busybox", args: ["true"], timeout_s: 10 },
});

describe("jobs list end to end", { timeout: 300_000 }, () => {
  let fx: KairosFixture;
  let a: Api;
  let b: Api;

  before(async () => {
    fx = await startKairosFixture();
    const [urlA, urlB] = await Promise.all([
      fx.apiUrl(fx.spawn("list-1", "api,scheduler")),
      fx.apiUrl(fx.spawn("list-2", "api,scheduler")),
    ]);
    const t = await fx.newTenant("acme");
    a = apiClient(urlA, t.api_key);
    b = apiClient(urlB, t.api_key);
  });
  after(async () => {
    await fx?.stop();
  });

  /** Every job of a filtered list, following the cursor (pages may be short). */
  async function all(api: Api, query: string, limit = 200): Promise<Job[]> {
    const out: Job[] = [];
    let cursor: string | null = null;
    do {
      const q: string = `${query}&limit=${limit}${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`;
      const r = await api.call<JobPage>("GET", `/v1/jobs?${q}`);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      out.push(...r.body.jobs);
      cursor = r.body.next_cursor;
    } while (cursor !== null);
    return out;
  }
  const names = (jobs: Job[]) => jobs.map((j) => j.name).sort();

  it("filters by a part of the name in any case, by state, and by both", async () => {
    const made = await a.call<{ results: { status: number; job: Job }[] }>(
      "POST",
      "/v1/jobs:batch",
      {
        jobs: [
          { job: job("Nightly report") },
          { job: job("weekly REPORT", false) },
          { job: job("cleanup") },
          { job: job("report-archive", false) },
        ],
      },
    );
    assert.ok(
      made.body.results.every((r) => r.status === 201),
      JSON.stringify(made.body),
    );
    assert.deepEqual(names(await all(b, "name=report")), [
      "Nightly report",
      "report-archive",
      "weekly REPORT",
    ]);
    assert.deepEqual(names(await all(a, "state=paused")), ["report-archive", "weekly REPORT"]);
    assert.deepEqual(names(await all(a, "state=enabled&name=RePoRt")), ["Nightly report"]);
    assert.deepEqual(names(await all(b, "name=nothing-like-it")), []);
    assert.deepEqual(names(await all(a, "name=")), names(await all(a, "")), "empty: no filter");
  });

  it("a patched job is found under its new name and state, and a deleted one is gone", async () => {
    const { body: j } = await a.call<Job>("POST", "/v1/jobs", job("hourly sync"));
    const p1 = await a.call<Job>("PATCH", `/v1/jobs/${j.job_id}`, { enabled: false });
    assert.equal(p1.status, 200);
    assert.ok(
      (await all(b, "state=paused")).some((x) => x.job_id === j.job_id),
      "paused on B",
    );
    assert.ok(!(await all(b, "state=enabled")).some((x) => x.job_id === j.job_id));
    const p2 = await b.call<Job>("PATCH", `/v1/jobs/${j.job_id}`, {
      name: "hourly mirror",
      enabled: true,
    });
    assert.equal(p2.status, 200);
    assert.deepEqual(
      (await all(a, "name=MIRROR&state=enabled")).map((x) => x.job_id),
      [j.job_id],
    );
    assert.deepEqual(await all(a, "name=hourly sync"), []);
    assert.equal((await b.call("DELETE", `/v1/jobs/${j.job_id}`)).status, 204);
    assert.ok(!(await all(a, "")).some((x) => x.job_id === j.job_id), "gone from the list");
  });

  it("a walk while jobs come and go on both nodes returns every job that stayed exactly once", async () => {
    const stay = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const r = await a.call<{ results: { job: Job }[] }>("POST", "/v1/jobs:batch", {
        jobs: Array.from({ length: 40 }, (_, k) => ({ job: job(`stay ${i}-${k}`) })),
      });
      for (const x of r.body.results) stay.add(x.job.job_id);
    }
    const churn = (api: Api, n: number) =>
      (async () => {
        for (let i = 0; i < n; i++) {
          const { body } = await api.call<Job>("POST", "/v1/jobs", job(`churn ${i}`));
          if (i % 2 === 0) await api.call("DELETE", `/v1/jobs/${body.job_id}`);
        }
      })();
    const walk = (async () => {
      const seen: string[] = [];
      let cursor: string | null = null;
      do {
        const q: string = cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`;
        const r = await (seen.length % 2 === 0 ? a : b).call<JobPage>(
          "GET",
          `/v1/jobs?limit=3${q}`,
        );
        assert.equal(r.status, 200);
        seen.push(...r.body.jobs.map((x) => x.job_id));
        cursor = r.body.next_cursor;
      } while (cursor !== null);
      return seen;
    })();
    const [seen] = await Promise.all([walk, churn(a, 30), churn(b, 30)]);
    assert.equal(new Set(seen).size, seen.length, "no job twice");
    assert.deepEqual([...seen].sort(), [...seen], "in id order");
    for (const id of stay) assert.ok(seen.includes(id), `job ${id} that stayed is listed`);
  });

  it("answers bad filters, cursors and limits with a 400 naming the parameter", async () => {
    const cases: [string, string][] = [
      ["state=stopped", "state"],
      ["state=ENABLED", "state"],
      [`name=${"x".repeat(201)}`, "name"],
      ["name=a%01b", "name"],
      ["cursor=not-a-cursor", "cursor"],
      [`cursor=${Buffer.from("a\nb").toString("base64url")}`, "cursor"],
      ["limit=0", "limit"],
      ["limit=201", "limit"],
    ];
    for (const [q, field] of cases) {
      const r = await a.call<ErrorBody>("GET", `/v1/jobs?${q}`);
      assert.equal(r.status, 400, `${q}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.code, "invalid_argument");
      assert.equal(r.body.error.field, field, q);
    }
  });
});
