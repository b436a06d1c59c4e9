/**
 * A pause stops what has not started, under a backlog: three jobs every second of 2 s tasks on a
 * worker with 2 slots pile up runs waiting for a slot; once each PATCH `{"enabled": false}`
 * returns, no task of that job starts — the waiting runs are cancelled, the ones running finish.
 * Real nats-server and node processes (noop executor: `["sleep", "2"]` takes 2 s).
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

interface Attempt {
  started_at: string | null;
}
interface Run {
  run_id: string;
  status: string;
  reason: string | null;
  attempts: Attempt[];
}
const TERMINAL = new Set([
  "succeeded",
  "failed",
  "timed_out",
  "cancelled",
  "skipped",
  "missed",
  "throttled",
]);

describe("pause under a backlog", { timeout: 180_000 }, () => {
  let fx: KairosFixture;
  let api: Api;
  before(async () => {
    fx = await startKairosFixture();
    const node = fx.spawn("s1", "api,scheduler");
    api = apiClient(await fx.apiUrl(node), (await fx.newTenant("pause")).api_key);
    const w = fx.spawn("w1", "worker", ["--executor", "noop", "--slots", "2"]);
    await w.waitFor((e) => e.type === "node_started", 30_000, "w1 started");
  });
  after(async () => {
    await fx?.stop();
  });

  const runsOf = async (jobId: string): Promise<Run[]> => {
    const out: Run[] = [];
    let cursor: string | undefined;
    do {
      const r = await api.call<{ runs: Run[]; next_cursor: string | null }>(
        "GET",
        `/v1/jobs/${jobId}/runs?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
      );
      assert.equal(r.status, 200, JSON.stringify(r.body));
      out.push(...r.body.runs);
      cursor = r.body.next_cursor ?? undefined;
    } while (cursor);
    return out;
  };

  it("no task of a paused job starts once its PATCH returns; its waiting runs are cancelled", async () => {
    const jobs: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await api.call<{ job_id: string }>("POST", "/v1/jobs", {
        name: `busy-${i}`,
        schedule: { cron: "* * * * * *", time_zone: "UTC" },
        overlap: "allow",
        task: { image: "noop", args: ["sleep", "2"], timeout_s: 60 },
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      jobs.push(r.body.job_id);
    }
    // A backlog: runs waiting for a slot on every job.
    await eventually(
      async () => {
        const waiting = await Promise.all(
          jobs.map(async (j) => (await runsOf(j)).filter((r) => r.status === "queued").length),
        );
        return waiting.every((n) => n >= 3) ? waiting : undefined;
      },
      60_000,
      "three runs waiting on every job",
    );
    const pausedAt = new Map<string, number>();
    await Promise.all(
      jobs.map(async (j) => {
        const r = await api.call("PATCH", `/v1/jobs/${j}`, { enabled: false });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        pausedAt.set(j, Date.now());
      }),
    );
    // Every run ends: the running ones finish, the rest were cancelled by the pause.
    const all = await eventually(
      async () => {
        const runs = await Promise.all(jobs.map((j) => runsOf(j)));
        return runs.every((rs) => rs.every((r) => TERMINAL.has(r.status))) ? runs : undefined;
      },
      60_000,
      "every run of the paused jobs ended",
    );
    let cancelled = 0;
    jobs.forEach((j, i) => {
      for (const r of all[i]!) {
        for (const a of r.attempts) {
          if (a.started_at)
            assert.ok(
              Date.parse(a.started_at) <= pausedAt.get(j)!,
              `${r.run_id} started at ${a.started_at}, after its job's pause returned at ${new Date(pausedAt.get(j)!).toISOString()}`,
            );
        }
        if (r.status === "cancelled") {
          // A run its worker held may have started unheard: its worker's answer says which, and a
          // start it reports is checked above (before the pause returned) like any other.
          assert.match(r.reason ?? "", /^job paused (before|after) it started/, r.run_id);
          if (r.reason!.startsWith("job paused after"))
            assert.ok(
              r.attempts.some((a) => a.started_at !== null),
              `${r.run_id}: stopped after its start, but no attempt says when it started`,
            );
          cancelled++;
        }
      }
    });
    assert.ok(cancelled >= 9, `the waiting runs were cancelled (${cancelled})`);
  });
});
