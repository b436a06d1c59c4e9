/**
 * Jobs end to end on a real cluster: one `kairos node` with every role (process executor) on a
 * real nats-server, driven over HTTP exactly as a customer would.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { apiClient, eventually, type Api, type KairosFixture } from "../support/kairos.ts";
import { spawnOneNode } from "../support/one-node.ts";

interface Run {
  run_id: string;
  scheduled_for: string;
  status: string;
  attempt: number;
  attempts: {
    worker: string | null;
    started_at: string | null;
    finished_at: string | null;
    outcome: string | null;
  }[];
  result: { exit_code: number | null; output: string } | null;
  reason: string | null;
  trigger: string;
}
interface Job {
  job_id: string;
  version: number;
  next_run_at: string | null;
  next_runs?: string[];
}

const sh = (script: string, timeout_s = 10) => ({
  image: "busybox",
  args: ["/bin/sh", "-c", script],
  timeout_s,
});

async function runs(api: Api, jobId: string, query = ""): Promise<Run[]> {
  const r = await api.call<{ runs: Run[] }>("GET", `/v1/jobs/${jobId}/runs?limit=200${query}`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.runs;
}

describe("jobs end to end (single node, process executor)", { timeout: 300_000 }, () => {
  let fx: KairosFixture;
  let api: Api;

  before(async () => {
    ({ fx, api } = await spawnOneNode({
      nodeId: "e2e-1",
      roles: "api,scheduler,worker",
      flags: ["--slots", "8"],
      tenant: "acme",
    }));
  });
  after(async () => {
    await fx?.stop();
  });

  it("a job every 2 s produces one run per occurrence with exit 0 and the output tail", async () => {
    const created = await api.call<Job>("POST", "/v1/jobs", {
      name: "tick",
      schedule: { cron: "*/2 * * * * *", time_zone: "UTC" },
      task: sh('echo "tick $KAIROS_RUN_ID attempt $KAIROS_ATTEMPT"'),
      overlap: "allow",
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const jobId = created.body.job_id;
    const done = await eventually(
      async () => {
        const rs = (await runs(api, jobId)).filter((r) => r.status === "succeeded");
        return rs.length >= 4 ? rs : undefined;
      },
      30_000,
      "4 succeeded runs",
    );
    await api.call("PATCH", `/v1/jobs/${jobId}`, { enabled: false });
    const all = (await runs(api, jobId)).filter(
      (r) => r.status !== "queued" && r.status !== "leased" && r.status !== "running",
    );
    const times = all.map((r) => Date.parse(r.scheduled_for)).sort((a, b) => a - b);
    for (let i = 1; i < times.length; i++)
      assert.equal(times[i]! - times[i - 1]!, 2000, "one run per occurrence, none skipped");
    assert.equal(new Set(times).size, times.length, "no duplicate occurrence");
    for (const r of done) {
      assert.equal(r.result?.exit_code, 0);
      assert.equal(r.result?.output, `tick ${r.run_id} attempt 1\n`);
      assert.equal(r.attempts.length, 1);
    }
  });

  it("exit 3 with 3 attempts ends failed with 3 attempts whose gaps grow", async () => {
    const job = await api.call<Job>("POST", "/v1/jobs", {
      schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
      task: sh("exit 3"),
      retry: { max_attempts: 3, backoff: "exponential", base_s: 1, max_s: 30 },
    });
    assert.equal(job.status, 201, JSON.stringify(job.body));
    const now = await api.call<Run>("POST", `/v1/jobs/${job.body.job_id}/runs`);
    assert.equal(now.status, 202);
    const run = await eventually(
      async () => {
        const r = await api.call<Run>("GET", `/v1/runs/${now.body.run_id}`);
        return r.body.status === "failed" ? r.body : undefined;
      },
      30_000,
      "run failed after 3 attempts",
    );
    assert.equal(run.attempts.length, 3);
    assert.deepEqual(
      run.attempts.map((a) => a.outcome),
      ["failed", "failed", "failed"],
    );
    assert.match(run.reason ?? "", /dead-lettered after 3 attempt/);
    const starts = run.attempts.map((a) => Date.parse(a.started_at!));
    const gap1 = starts[1]! - starts[0]!;
    const gap2 = starts[2]! - starts[1]!;
    assert.ok(gap1 >= 1000 && gap2 >= 2000 && gap2 > gap1 - 1000, `gaps ${gap1} then ${gap2}`);
  });

  it("a task sleeping past timeout_s ends timed_out", async () => {
    const job = await api.call<Job>("POST", "/v1/jobs", {
      schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
      task: sh("sleep 30", 1),
    });
    const now = await api.call<Run>("POST", `/v1/jobs/${job.body.job_id}/runs`);
    const run = await eventually(
      async () => {
        const r = await api.call<Run>("GET", `/v1/runs/${now.body.run_id}`);
        return ["timed_out", "failed", "succeeded", "cancelled"].includes(r.body.status)
          ? r.body
          : undefined;
      },
      30_000,
      "the run ends",
    );
    assert.equal(run.status, "timed_out", JSON.stringify(run));
    assert.equal(run.attempts[0]?.outcome, "timed_out");
  });

  it("overlap skip with a long task records skipped runs", async () => {
    const job = await api.call<Job>("POST", "/v1/jobs", {
      schedule: { cron: "* * * * * *", time_zone: "UTC" },
      task: sh("sleep 3"),
      overlap: "skip",
    });
    const rs = await eventually(
      async () => {
        const all = await runs(api, job.body.job_id);
        return all.some((r) => r.status === "skipped") && all.some((r) => r.status === "succeeded")
          ? all
          : undefined;
      },
      30_000,
      "a skipped and a succeeded run",
    );
    await api.call("DELETE", `/v1/jobs/${job.body.job_id}`);
    const skipped = rs.filter((r) => r.status === "skipped");
    assert.match(skipped[0]!.reason ?? "", /overlap/);
  });

  it("pause stops runs; resume restarts them without catching up the paused period", async () => {
    const job = await api.call<Job>("POST", "/v1/jobs", {
      schedule: { cron: "* * * * * *", time_zone: "UTC" },
      task: sh("true"),
      overlap: "allow",
    });
    const id = job.body.job_id;
    await eventually(
      async () => ((await runs(api, id)).length >= 2 ? true : undefined),
      20_000,
      "first runs",
    );
    const paused = await api.call<Job>("PATCH", `/v1/jobs/${id}`, { enabled: false });
    assert.equal(paused.body.next_run_at, null);
    const pausedAt = Date.now();
    const countAtPause = (await runs(api, id)).length;
    // A paused period of at least 3 s (an interval of time is what is being tested here).
    await eventually(
      async () => (Date.now() - pausedAt >= 3000 ? true : undefined),
      10_000,
      "paused period",
    );
    const ran = (r: Run) => r.attempts.some((a) => a.started_at !== null);
    const during = (await runs(api, id)).filter(
      (r) => Date.parse(r.scheduled_for) > pausedAt && ran(r),
    );
    assert.deepEqual(
      during,
      [],
      "no runs while paused (runs created ahead are cancelled before they start)",
    );
    const resumedAt = Date.now();
    const resumed = await api.call<Job>("PATCH", `/v1/jobs/${id}`, { enabled: true });
    assert.ok(Date.parse(resumed.body.next_run_at!) > resumedAt - 1000);
    await eventually(
      async () => ((await runs(api, id)).length >= countAtPause + 2 ? true : undefined),
      20_000,
      "runs after resume",
    );
    const gap = (await runs(api, id)).filter(
      (r) =>
        Date.parse(r.scheduled_for) > pausedAt &&
        Date.parse(r.scheduled_for) < resumedAt - 1000 &&
        r.status !== "cancelled",
    );
    assert.deepEqual(gap, [], "paused period not caught up");
    assert.equal((await api.call("DELETE", `/v1/jobs/${id}`)).status, 204);
    assert.equal((await api.call("GET", `/v1/jobs/${id}`)).status, 404);
  });

  it("run now, stale If-Match, Idempotency-Key replay, and another tenant's key", async () => {
    const body = {
      schedule: { cron: "0 0 1 1 *", time_zone: "Asia/Kolkata" },
      task: sh("echo once"),
    };
    const a = await api.call<Job>("POST", "/v1/jobs", body, { "idempotency-key": "create-1" });
    const b = await api.call<Job>("POST", "/v1/jobs", body, { "idempotency-key": "create-1" });
    assert.equal(a.status, 201);
    assert.ok(b.status === 200 || b.status === 201);
    assert.equal(b.body.job_id, a.body.job_id);
    const id = a.body.job_id;
    assert.equal(a.headers.get("etag"), `"1"`);
    const p1 = await api.call<Job>(
      "PATCH",
      `/v1/jobs/${id}`,
      { name: "renamed" },
      { "if-match": `"1"` },
    );
    assert.equal(p1.status, 200);
    assert.equal(p1.body.version, 2);
    const stale = await api.call(
      "PATCH",
      `/v1/jobs/${id}`,
      { name: "again" },
      { "if-match": `"1"` },
    );
    assert.equal(stale.status, 412);
    const now = await api.call<Run>("POST", `/v1/jobs/${id}/runs`);
    assert.equal(now.status, 202);
    assert.equal(now.body.trigger, "manual");
    await eventually(
      async () =>
        (await api.call<Run>("GET", `/v1/runs/${now.body.run_id}`)).body.status === "succeeded"
          ? true
          : undefined,
      20_000,
      "manual run succeeded",
    );
    const other = await fx.newTenant("globex");
    const spy = apiClient(api.url, other.api_key);
    assert.equal((await spy.call("GET", `/v1/jobs/${id}`)).status, 404);
    assert.equal((await spy.call("GET", `/v1/runs/${now.body.run_id}`)).status, 404);
    assert.equal((await spy.call("PATCH", `/v1/jobs/${id}`, { enabled: false })).status, 404);
    assert.equal((await spy.call("GET", `/v1/jobs/${id}/runs`)).status, 404);
    const list = await spy.call<{ jobs: Job[] }>("GET", "/v1/jobs");
    assert.deepEqual(list.body.jobs, []);
  });
});
