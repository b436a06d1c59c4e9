/**
 * Run-path metrics on a real cluster: a scheduler node, process-executor workers,
 * two tenants' workload, then `/metrics` scraped from the scheduler's metrics listener (with
 * `--metrics-tenant-labels`): the dispatch-lag histogram
 * counts exactly the runs started per tenant, attempts are counted by outcome, a run that fails
 * its last attempt raises the dead-letter counter (its earlier failure the retry counter), and a
 * worker killed with SIGKILL mid-attempt raises the lease-expiry counter; runs due with no free
 * slot of their tenant, or no worker, show in kairos_runs_waiting by reason until they start.
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
import type { NodeProc } from "../support/nodes.ts";

interface Attempt {
  worker: string | null;
  outcome: string | null;
}
interface Run {
  run_id: string;
  tenant_id: string;
  status: string;
  started_at: string | null;
  attempts: Attempt[];
}

/** Sum of the samples of `name` whose labels include `labels` (Prometheus text format). */
function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = new Map(
      [...(m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1]!, x[2]!]),
    );
    if (Object.entries(labels).every(([k, v]) => have.get(k) === v)) sum += Number(m[3]);
  }
  return sum;
}

const TTL = ["--run-lease-ttl-ms", "3000"];
const evtRun = (e: unknown): { type: string; run_id?: string } =>
  e as { type: string; run_id?: string };

describe("run-path metrics after a workload", { timeout: 180_000 }, () => {
  let fx: KairosFixture;
  let base: string;
  let metricsUrl: string;
  let a: Api;
  let b: Api;
  let w1: NodeProc;
  const tenants: Record<"a" | "b", string> = { a: "", b: "" };
  before(async () => {
    fx = await startKairosFixture();
    // Per-tenant series need the operator's consent (--metrics-tenant-labels); /metrics is on
    // the node's metrics listener only.
    const sched = fx.spawn("sched", "api,scheduler", [
      ...TTL,
      "--metrics-port",
      "0",
      "--metrics-tenant-labels",
    ]);
    base = await fx.apiUrl(sched);
    metricsUrl = await fx.metricsUrl(sched);
    w1 = fx.spawn("w1", "worker", TTL);
    await w1.waitFor((e) => e.type === "node_started", 30_000, "w1 started");
    const ta = await fx.newTenant("metrics-a");
    const tb = await fx.newTenant("metrics-b");
    tenants.a = ta.tenant_id;
    tenants.b = tb.tenant_id;
    a = apiClient(base, ta.api_key);
    b = apiClient(base, tb.api_key);
  });
  after(async () => {
    await fx?.stop();
  });

  const scrape = async (): Promise<string> => (await fetch(metricsUrl)).text();
  const runNow = async (api: Api, script: string, maxAttempts = 3): Promise<string> => {
    const job = await api.call<{ job_id: string }>("POST", "/v1/jobs", {
      schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
      task: { image: "busybox", args: ["/bin/sh", "-c", script], timeout_s: 120 },
      retry: { max_attempts: maxAttempts, backoff: "fixed", base_s: 1, max_s: 1 },
    });
    assert.equal(job.status, 201, JSON.stringify(job.body));
    return (await api.call<Run>("POST", `/v1/jobs/${job.body.job_id}/runs`)).body.run_id;
  };
  const finished = (api: Api, runId: string): Promise<Run> =>
    eventually(
      async () => {
        const r = (await api.call<Run>("GET", `/v1/runs/${runId}`)).body;
        return ["succeeded", "failed", "timed_out", "cancelled"].includes(r.status) ? r : undefined;
      },
      60_000,
      `run ${runId} finished`,
    );

  let startedA = 0;

  it("lag count = runs started per tenant; attempts by outcome; a dead letter and its retry", async () => {
    const ids = {
      a: await Promise.all([1, 2, 3].map(() => runNow(a, "echo a"))),
      b: [await runNow(b, "echo b"), await runNow(b, "echo boom; exit 7", 2)],
    };
    const runsA = await Promise.all(ids.a.map((id) => finished(a, id)));
    const runsB = await Promise.all(ids.b.map((id) => finished(b, id)));
    assert.deepEqual(
      runsA.map((r) => r.status),
      ["succeeded", "succeeded", "succeeded"],
    );
    assert.deepEqual(
      runsB.map((r) => r.status),
      ["succeeded", "failed"],
    );
    startedA = runsA.filter((r) => r.started_at !== null).length;
    const startedB = runsB.filter((r) => r.started_at !== null).length;
    const text = await scrape();
    const lag = "kairos_dispatch_lag_seconds_count";
    assert.equal(
      sample(text, lag, { tenant: tenants.a }),
      startedA,
      "lag observations of tenant a = its runs started",
    );
    assert.equal(
      sample(text, lag, { tenant: tenants.b }),
      startedB,
      "lag observations of tenant b = its runs started",
    );
    assert.equal(startedA + startedB, 5);
    assert.equal(
      sample(text, "kairos_attempts_total", { tenant: tenants.a, outcome: "succeeded" }),
      3,
    );
    assert.equal(
      sample(text, "kairos_attempts_total", { tenant: tenants.b, outcome: "succeeded" }),
      1,
    );
    assert.equal(
      sample(text, "kairos_attempts_total", { tenant: tenants.b, outcome: "failed" }),
      2,
    );
    assert.equal(sample(text, "kairos_retries_total", { tenant: tenants.b }), 1);
    assert.equal(sample(text, "kairos_retries_total", { tenant: tenants.a }), 0);
    assert.equal(sample(text, "kairos_dead_letters_total", { tenant: tenants.b }), 1);
    assert.equal(sample(text, "kairos_dead_letters_total", { tenant: tenants.a }), 0);
    assert.equal(sample(text, "kairos_lease_expiries_total"), 0);
  });

  it("a worker killed with SIGKILL mid-attempt raises lease expiries", async () => {
    const id = await runNow(a, '[ "$KAIROS_ATTEMPT" = 1 ] && sleep 60; echo ok');
    await w1.waitFor(
      (e) => evtRun(e).type === "worker_started" && evtRun(e).run_id === id,
      30_000,
      "long attempt started on w1",
    );
    const w2 = fx.spawn("w2", "worker", TTL);
    await w2.waitFor((e) => e.type === "node_started", 30_000, "w2 started");
    w1.signal("SIGKILL");
    const r = await finished(a, id);
    assert.equal(r.status, "succeeded", JSON.stringify(r));
    assert.deepEqual(
      r.attempts.map((x) => [x.worker, x.outcome]),
      [
        ["w1", "lease_lost"],
        ["w2", "succeeded"],
      ],
    );
    const text = await scrape();
    assert.equal(sample(text, "kairos_lease_expiries_total"), 1);
    assert.equal(
      sample(text, "kairos_lease_expiries_total", { kind: "counted" }),
      1,
      "it had started: counted",
    );
    assert.equal(
      sample(text, "kairos_attempts_total", { tenant: tenants.a, outcome: "lease_lost" }),
      1,
    );
    assert.equal(sample(text, "kairos_retries_total", { tenant: tenants.a }), 1);
    assert.equal(
      sample(text, "kairos_dispatch_lag_seconds_count", { tenant: tenants.a }),
      startedA + 1,
      "a run is observed once, at its first start",
    );
  });

  it("runs waiting: by reason (tenant slot, worker) while due and not started, 0 once started", async () => {
    await fx.nodes.find((n) => n.nodeId === "w2")!.stop(); // no worker left
    const tc = await fx.newTenant("metrics-c");
    await fx.tenants.setQuota(tc.tenant_id, { max_concurrent_runs: 1 });
    const c = apiClient(base, tc.api_key);
    const ids = [await runNow(c, "echo c"), await runNow(c, "echo c"), await runNow(c, "echo c")];
    const waiting = async (): Promise<[number, number]> => {
      const text = await scrape();
      return [
        sample(text, "kairos_runs_waiting", { reason: "slot" }),
        sample(text, "kairos_runs_waiting", { reason: "worker" }),
      ];
    };
    // One run holds the tenant's only slot and waits for a worker; the other two wait for the slot.
    await eventually(
      async () => ((await waiting()).join() === "2,1" ? true : undefined),
      20_000,
      "runs_waiting slot=2 worker=1",
    );
    const w3 = fx.spawn("w3", "worker", TTL);
    await w3.waitFor((e) => e.type === "node_started", 30_000, "w3 started");
    const done = await Promise.all(ids.map((id) => finished(c, id)));
    assert.deepEqual(
      done.map((r) => r.status),
      ["succeeded", "succeeded", "succeeded"],
    );
    assert.deepEqual(await waiting(), [0, 0]);
  });
});
