/**
 * The tenant's runs across its jobs (`GET /v1/runs`) on a real cluster: two `kairos node`s (api,
 * scheduler, worker; process executor) on a real nats-server, partitions spread over both, so the
 * runs of one tenant are created by both nodes' job actors and logged by both. Every run is
 * listed once, newest first, whichever node is asked; a walk 2 at a time returns each once; the
 * `status` filter; a run not ended is shown as its owner holds it (running, not its record's
 * queued) and filtered by that; another tenant sees none of them; bad parameters are 400s naming
 * the parameter; `status=dead_lettered` is still the dead-letter list.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  apiClient,
  eventually,
  startKairosFixture,
  type Api,
  type KairosFixture,
} from "../support/kairos.ts";

interface Run {
  run_id: string;
  job_id: string;
  tenant_id: string;
  status: string;
}
interface RunPage {
  runs: Run[];
  next_cursor: string | null;
}
interface ErrorBody {
  error: { code: string; field?: string; message: string };
}

const TERMINAL = new Set(["succeeded", "failed", "timed_out", "cancelled", "skipped", "missed"]);

const job = (name: string, script: string) => ({
  name,
  schedule: { cron: "0 0 1 1 *", time_zone: "UTC" }, // never fires on its own during the test
  task: { image: "busybox", args: ["sh", "-c", script], timeout_s: 30 },
  retry: { max_attempts: 1 },
});

describe("tenant runs list end to end", { timeout: 300_000 }, () => {
  let fx: KairosFixture;
  let a: Api;
  let b: Api;
  let other: Api;

  before(async () => {
    fx = await startKairosFixture({ partitions: 8 });
    const [urlA, urlB] = await Promise.all([
      fx.apiUrl(fx.spawn("tr-1", "api,scheduler,worker", ["--slots", "4"])),
      fx.apiUrl(fx.spawn("tr-2", "api,scheduler,worker", ["--slots", "4"])),
    ]);
    const t = await fx.newTenant("acme");
    a = apiClient(urlA, t.api_key);
    b = apiClient(urlB, t.api_key);
    other = apiClient(urlA, (await fx.newTenant("other")).api_key);
  });
  after(async () => {
    await fx?.stop();
  });

  async function walk(api: Api, query: string): Promise<Run[]> {
    const out: Run[] = [];
    let cursor: string | null = null;
    for (let pages = 0; pages < 1_000; pages++) {
      const c: string = cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`;
      const r = await api.call<RunPage>("GET", `/v1/runs?${query}${c}`);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      out.push(...r.body.runs);
      cursor = r.body.next_cursor;
      if (cursor === null) return out;
    }
    throw new Error("the walk did not end");
  }

  it("lists every run of every job once, newest first, on either node", async () => {
    const jobs: string[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await a.call<{ job_id: string }>(
        "POST",
        "/v1/jobs",
        job(`j${i}`, i % 3 === 0 ? "exit 3" : "echo ok"),
      );
      assert.equal(r.status, 201, JSON.stringify(r.body));
      jobs.push(r.body.job_id);
    }
    // One run at a time, each waited for in the list: their order is then the order of creation.
    const made: Run[] = [];
    for (let i = 0; i < 12; i++) {
      const api = i % 2 === 0 ? a : b;
      const r = await api.call<Run>("POST", `/v1/jobs/${jobs[i % jobs.length]}/runs`);
      assert.equal(r.status, 202, JSON.stringify(r.body));
      made.push(r.body);
      await eventually(
        async () => {
          const p = await b.call<RunPage>("GET", "/v1/runs?limit=1");
          return p.body.runs[0]?.run_id === r.body.run_id ? true : undefined;
        },
        15_000,
        `run ${i} (${r.body.run_id}) at the head of the tenant's runs`,
      );
    }
    const ended = await eventually(
      async () => {
        const all = await walk(a, "limit=200");
        return all.length === made.length && all.every((r) => TERMINAL.has(r.status))
          ? all
          : undefined;
      },
      60_000,
      "every run listed as ended",
    );
    const newestFirst = made.map((r) => r.run_id).reverse();
    assert.deepEqual(
      ended.map((r) => r.run_id),
      newestFirst,
    );
    assert.deepEqual(
      (await walk(b, "limit=2")).map((r) => r.run_id),
      newestFirst,
      "a walk 2 at a time on the other node",
    );
    const failed = made.filter((_, i) => (i % jobs.length) % 3 === 0).map((r) => r.run_id);
    assert.deepEqual(
      (await walk(a, "status=failed&limit=3")).map((r) => r.run_id),
      [...failed].reverse(),
    );
    assert.deepEqual(
      (await walk(a, "status=succeeded")).map((r) => r.run_id),
      newestFirst.filter((id) => !failed.includes(id)),
    );
    // The dead-letter list is unchanged: oldest first, the failed runs (max_attempts 1).
    const dl = await eventually(
      async () => {
        const p = await walk(a, "status=dead_lettered");
        return p.length === failed.length ? p : undefined;
      },
      30_000,
      "the dead letters",
    );
    assert.deepEqual(new Set(dl.map((r) => r.run_id)), new Set(failed));
    assert.deepEqual(await walk(other, "limit=200"), [], "another tenant sees none of them");
  });

  it("shows a run that has not ended as its owner holds it, and filters by it, on either node", async () => {
    const r0 = await a.call<{ job_id: string }>("POST", "/v1/jobs", job("sleeper", "sleep 60"));
    assert.equal(r0.status, 201, JSON.stringify(r0.body));
    const started = await b.call<Run>("POST", `/v1/jobs/${r0.body.job_id}/runs`);
    assert.equal(started.status, 202, JSON.stringify(started.body));
    const runId = started.body.run_id;
    // Its record says queued until it ends; the list shows it running, from either API node
    // (its owner is one of the two scheduler nodes).
    for (const api of [a, b])
      await eventually(
        async () => {
          const p = await api.call<RunPage>("GET", "/v1/runs?status=running&limit=5");
          assert.equal(p.status, 200, JSON.stringify(p.body));
          return p.body.runs.some((r) => r.run_id === runId && r.status === "running")
            ? true
            : undefined;
        },
        30_000,
        `run ${runId} listed running`,
      );
    const head = await a.call<RunPage>("GET", "/v1/runs?limit=1");
    assert.equal(head.body.runs[0]?.run_id, runId);
    assert.equal(head.body.runs[0]?.status, "running", "the unfiltered list shows it live too");
    const queued = await a.call<RunPage>("GET", "/v1/runs?status=queued&limit=200");
    assert.ok(!queued.body.runs.some((r) => r.run_id === runId), "not listed queued");
    const cancel = await a.call<Run>("POST", `/v1/runs/${runId}/cancel`);
    assert.equal(cancel.status, 200, JSON.stringify(cancel.body));
    await eventually(
      async () => {
        const p = await b.call<RunPage>("GET", "/v1/runs?status=cancelled&limit=5");
        return p.body.runs.some((r) => r.run_id === runId) ? true : undefined;
      },
      30_000,
      `run ${runId} listed cancelled`,
    );
    const running = await a.call<RunPage>("GET", "/v1/runs?status=running&limit=200");
    assert.ok(!running.body.runs.some((r) => r.run_id === runId), "no longer listed running");
    assert.deepEqual(
      (await other.call<RunPage>("GET", "/v1/runs?status=running")).body.runs,
      [],
      "another tenant sees none of it",
    );
  });

  it("answers bad parameters with a 400 naming the parameter", async () => {
    const cases: [string, string, RegExp][] = [
      ["status=started", "status", /retry_wait/],
      ["status=nope", "status", /succeeded/],
      ["limit=0", "limit", /1 to 200/],
      ["limit=abc", "limit", /1 to 200/],
      ["cursor=not-a-cursor", "cursor", /not a cursor/],
      [`cursor=${Buffer.from("dl\n5").toString("base64url")}`, "cursor", /not a cursor/],
      [`cursor=${"x".repeat(2_000)}`, "cursor", /at most/],
    ];
    for (const [q, field, message] of cases) {
      const r = await a.call<ErrorBody>("GET", `/v1/runs?${q}`);
      assert.equal(r.status, 400, `${q}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.code, "invalid_argument", q);
      assert.equal(r.body.error.field, field, q);
      assert.match(r.body.error.message, message, q);
    }
  });
});
