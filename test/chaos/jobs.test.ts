/**
 * Jobs under failure, with real processes: two scheduler nodes (one also serves the API) and
 * separate worker processes, all on one nats-server, run leases of 3 s.
 * - a worker killed with -9 mid-run: the run is retried on another worker after its lease expires;
 * - a worker paused past its lease and resumed: it kills its task itself (self-fencing: its last
 *   acknowledged heartbeat is older than the lease), while another worker finishes the run;
 * - a scheduler node killed while its jobs fire: no occurrence is lost, none runs twice.
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
import { until, type NodeProc } from "../support/nodes.ts";

interface Run {
  run_id: string;
  scheduled_for: string;
  status: string;
  attempts: { worker: string | null; started_at: string | null; outcome: string | null }[];
}

const LEASE = ["--run-lease-ttl-ms", "3000"];
const sh = (script: string, timeout_s = 30) => ({
  image: "busybox",
  args: ["/bin/sh", "-c", script],
  timeout_s,
});

describe("jobs under failure (real processes)", { timeout: 300_000 }, () => {
  let fx: KairosFixture;
  let api: Api;
  let s1: NodeProc;
  let s2: NodeProc;
  const workers = new Map<string, NodeProc>();

  const spawnWorker = (id: string) => {
    const w = fx.spawn(id, "worker", ["--slots", "4", ...LEASE]);
    workers.set(id, w);
    return w;
  };
  const getRun = async (id: string) => (await api.call<Run>("GET", `/v1/runs/${id}`)).body;

  before(async () => {
    fx = await startKairosFixture({ partitions: 16 });
    s1 = fx.spawn("s1", "api,scheduler", LEASE);
    s2 = fx.spawn("s2", "scheduler", LEASE);
    const url = await fx.apiUrl(s1);
    api = apiClient(url, (await fx.newTenant("chaos")).api_key);
    const ws = [spawnWorker("w1"), spawnWorker("w2")];
    await Promise.all(
      ws.map((w) => w.waitFor((e) => e.type === "node_started", 30_000, "worker started")),
    );
    await until(
      [s1, s2],
      () => s1.held().size + s2.held().size === 16 && s1.held().size > 0 && s2.held().size > 0,
      30_000,
      "partitions owned",
    );
  });
  after(async () => {
    await fx?.stop();
  });

  async function startLongRun(
    script: string,
    maxAttempts: number,
  ): Promise<{ runId: string; worker: string }> {
    const job = await api.call<{ job_id: string }>("POST", "/v1/jobs", {
      schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
      task: sh(script),
      retry: { max_attempts: maxAttempts, backoff: "fixed", base_s: 1, max_s: 1 },
    });
    assert.equal(job.status, 201, JSON.stringify(job.body));
    const run = await api.call<Run>("POST", `/v1/jobs/${job.body.job_id}/runs`);
    const running = await eventually(
      async () => {
        const r = await getRun(run.body.run_id);
        return r.status === "running" && r.attempts[0]?.worker ? r : undefined;
      },
      20_000,
      "run running",
    );
    return { runId: run.body.run_id, worker: running.attempts[0]!.worker! };
  }

  it("a killed worker's run is retried on another worker after its lease expires", async () => {
    const { runId, worker } = await startLongRun("sleep 3; echo done", 3);
    const victim = workers.get(worker)!;
    victim.signal("SIGKILL");
    await victim.exited;
    workers.delete(worker);
    const done = await eventually(
      async () => {
        const r = await getRun(runId);
        return r.status === "succeeded" ? r : undefined;
      },
      30_000,
      "run succeeded on another worker",
    );
    assert.equal(done.attempts[0]!.outcome, "lease_lost");
    assert.notEqual(done.attempts.at(-1)!.worker, worker);
    spawnWorker("w3");
  });

  it("a worker paused past its lease, then resumed, kills its task on its own (self-fencing) and reports nothing", async () => {
    const { runId, worker } = await startLongRun("sleep 5; echo done", 2);
    const paused = workers.get(worker)!;
    paused.signal("SIGSTOP");
    const retried = await eventually(
      async () => {
        const r = await getRun(runId);
        return r.attempts.length >= 2 && r.attempts[1]!.worker !== worker ? r : undefined;
      },
      30_000,
      "second attempt on another worker",
    );
    assert.equal(retried.attempts[0]!.outcome, "lease_lost");
    paused.signal("SIGCONT");
    const e = await paused.waitFor(
      // On waking, its last acknowledged heartbeat is older than the lease: it kills the task
      // itself before it could hear lease_lost.
      (ev) =>
        (ev.type as string) === "worker_self_fenced" ||
        (ev.type as string) === "worker_lease_lost" ||
        (ev.type as string) === "worker_stale_fence",
      20_000,
      "resumed worker stops the attempt whose lease it lost",
    );
    assert.equal((e as unknown as { run_id: string }).run_id, runId);
    const done = await eventually(
      async () => {
        const r = await getRun(runId);
        return r.status === "succeeded" ? r : undefined;
      },
      30_000,
      "run succeeded",
    );
    assert.equal(done.attempts.length, 2);
    assert.notEqual(done.attempts[1]!.worker, worker);
    // Its late completion did not land: the run kept the second attempt's result.
    assert.ok(
      !paused.events.some(
        (ev) =>
          (ev.type as string) === "worker_completed" &&
          (ev as unknown as { run_id: string }).run_id === runId &&
          (ev as unknown as { attempt: number }).attempt === 1,
      ),
    );
  });

  it("a scheduler node killed while its jobs fire loses no occurrence and completes none twice", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const j = await api.call<{ job_id: string }>("POST", "/v1/jobs", {
        schedule: { cron: "* * * * * *", time_zone: "UTC" },
        task: sh("true", 5),
        overlap: "allow",
        // Longer than any failover here: this test is about occurrences lost, not late. (With the
        // default deadline of a job every second, 10 s, a run still waiting for a slot when a
        // loaded machine's failover ends may truthfully end `missed`.)
        misfire: { policy: "run_once", starting_deadline_s: 60 },
      });
      assert.equal(j.status, 201);
      ids.push(j.body.job_id);
    }
    const firstRuns = async () =>
      await Promise.all(
        ids.map(
          async (id) =>
            (await api.call<{ runs: Run[] }>("GET", `/v1/jobs/${id}/runs?status=succeeded`)).body
              .runs.length,
        ),
      );
    await eventually(
      async () => ((await firstRuns()).every((n) => n >= 2) ? true : undefined),
      30_000,
      "jobs running",
    );
    s2.signal("SIGKILL");
    await s2.exited;
    await until([s1], () => s1.held().size === 16, 20_000, "s1 owns every partition");
    const recoveredAt = Date.now();
    await eventually(
      async () => (Date.now() - recoveredAt > 3000 ? true : undefined),
      10_000,
      "runs after recovery",
    );
    for (const id of ids)
      assert.equal((await api.call("PATCH", `/v1/jobs/${id}`, { enabled: false })).status, 200);
    for (const id of ids) {
      const all = await eventually(
        async () => {
          const rs = (await api.call<{ runs: Run[] }>("GET", `/v1/jobs/${id}/runs?limit=200`)).body
            .runs;
          return rs.every((r) => ["succeeded", "cancelled", "missed"].includes(r.status))
            ? rs
            : undefined;
          // Runs waiting for a slot from a tenant actor that lived on the killed node re-ask every
          // SLOT_RECHECK_MS (10 s); allow for that plus their execution.
        },
        60_000,
        `job ${id} settled`,
      );
      const ran = all.filter((r) => r.status === "succeeded");
      const times = ran.map((r) => Date.parse(r.scheduled_for)).sort((a, b) => a - b);
      for (let i = 1; i < times.length; i++)
        assert.equal(
          times[i]! - times[i - 1]!,
          1000,
          `job ${id}: occurrence lost after ${new Date(times[i - 1]!).toISOString()}; runs: ${JSON.stringify(
            all.map((r) => [r.scheduled_for, r.status, r.attempts.map((a) => a.outcome)]),
          )}`,
        );
      assert.equal(new Set(times).size, times.length, "one run per occurrence");
      // At-least-once with fencing: during the failover a worker may fence itself (its
      // acknowledgements stop for longer than the 3 s run lease) or an offer may lapse before it
      // started; the run is then offered again. Every earlier attempt must have ended lease_lost
      // (stopped, never completed) — never a second completed execution.
      for (const r of ran) {
        const earlier = r.attempts.slice(0, -1);
        assert.ok(
          earlier.every((a) => a.outcome === "lease_lost"),
          `run ${r.run_id} completed more than once: ${JSON.stringify(r.attempts)}`,
        );
      }
      assert.ok(times.length >= 6, `job ${id} ran ${times.length} occurrences`);
    }
  });
});
