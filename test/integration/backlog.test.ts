/**
 * Bounded backlogs on a real nats-server: one node (scheduler + worker, noop executor, 2 slots,
 * each run 4 s). Tenant `busy` (max_concurrent 1, max_waiting_runs 2) has two jobs due every
 * second; tenant `solo` (max_concurrent 1, the default bound) has one, under a job bound of 3.
 * Far more runs fall due than start: the occurrences beyond the bounds get terminal `throttled`
 * records with the bound in their reason — the tenant's for `busy`, the job's for `solo` — and
 * are counted in `kairos_runs_throttled_total{tenant}`; a run waiting past its starting deadline
 * ends `missed`; the tenant's waiting list never exceeds its bound.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { decode } from "../../src/cluster/codec.ts";
import { METRICS, registry } from "../../src/metrics/index.ts";
import type { JobSpec, RunView } from "../../src/protocol/model.ts";
import { eventually } from "../support/kairos.ts";
import { startOneNode, type OneNode } from "../support/one-node.ts";

let fx: OneNode;

before(async () => {
  fx = await startOneNode("backlog", {
    workerSlots: 2,
    noopDurationMs: 4_000,
    metricsTenantLabels: true,
    job: { maxWaitingRuns: 3 },
  });
});

after(async () => {
  await fx?.stop();
});

const everySecond = (): JobSpec => ({
  name: null,
  schedule: { cron: "* * * * * *", time_zone: "UTC" },
  task: { image: "noop", args: ["noop"], env: {}, timeout_s: 60 },
  retry: { max_attempts: 1, backoff: "exponential", base_s: 10, max_s: 3600 },
  overlap: "allow",
  misfire: { policy: "run_once", starting_deadline_s: null },
  flex_window_s: 0,
  enabled: true,
});

/** The throttled-run counter's value for a tenant (tenant labels are on in this node). */
async function throttledMetric(tenant: string): Promise<number> {
  const m = registry.getSingleMetric(METRICS.runsThrottled);
  const values = (await m?.get())?.values ?? [];
  return values.filter((v) => v.labels["tenant"] === tenant).reduce((n, v) => n + v.value, 0);
}

describe("bounded backlogs (real nats-server)", () => {
  it("occurrences beyond the tenant's and the job's bounds are recorded throttled with the bound, counted by tenant; late waiters end missed", async () => {
    await fx.ready();
    const { proc, tenants, jobs: svc } = fx;
    const busy = (await tenants.createTenant("busy")).tenant.tenant_id;
    const solo = (await tenants.createTenant("solo")).tenant.tenant_id;
    await tenants.setQuota(busy, { max_concurrent_runs: 1, max_waiting_runs: 2 });
    await tenants.setQuota(solo, { max_concurrent_runs: 1 });
    const jobs = {
      [busy]: [
        (await svc.createJob(busy, everySecond())).job.job_id,
        (await svc.createJob(busy, everySecond())).job.job_id,
      ],
      [solo]: [(await svc.createJob(solo, everySecond())).job.job_id],
    };
    const records = async () =>
      (await proc.node.buckets.runs.list(">"))
        .map((e) => decode<RunView>(e.value))
        .filter((r) => typeof r?.run_id === "string" && typeof r.status === "string");
    // The tenant's waiting list, sampled while the backlog builds: never above its bound.
    let maxSeenWaiting = 0;
    let last = "";
    const seen = await eventually(
      async () => {
        const s = await proc.node.router.request<{ waiting: number; max_waiting: number }>(
          { type: "tenant", id: busy },
          { kind: "status" },
        );
        maxSeenWaiting = Math.max(maxSeenWaiting, s.waiting);
        const rs = await records();
        const of = (t: string, prefix: string) =>
          rs.filter(
            (r) => r.tenant_id === t && r.status === "throttled" && r.reason?.startsWith(prefix),
          );
        const missed = rs.filter((r) => r.status === "missed");
        const by = new Map<string, number>();
        for (const r of rs) {
          const k = `${r.tenant_id === busy ? "busy" : "solo"}:${r.status}:${(r.reason ?? "").slice(0, 22)}`;
          by.set(k, (by.get(k) ?? 0) + 1);
        }
        last = `${JSON.stringify([...by])} tenant ${JSON.stringify(s)}`;
        return of(busy, "backlog: the tenant has").length >= 5 &&
          of(solo, "backlog: the job has").length >= 3 &&
          missed.length >= 1
          ? rs
          : undefined;
      },
      60_000,
      "throttled records of both bounds and a missed run",
    ).catch((e: unknown) => {
      throw new Error(`${String(e)}; records and busy's tenant actor: ${last}`);
    });
    assert.ok(maxSeenWaiting <= 2, `busy's waiting list reached ${maxSeenWaiting} (bound 2)`);
    const tBusy = seen.find((r) => r.tenant_id === busy && r.status === "throttled")!;
    assert.match(
      tBusy.reason ?? "",
      /^backlog: the tenant has \d+ runs waiting for a slot \(max_waiting_runs 2\)$/,
    );
    assert.equal(tBusy.attempts.length, 0);
    assert.ok(tBusy.finished_at !== null);
    const tSolo = seen.find((r) => r.tenant_id === solo && r.status === "throttled")!;
    assert.equal(tSolo.reason, "backlog: the job has 3 runs waiting for a slot (at most 3)");
    const missed = seen.find((r) => r.status === "missed")!;
    assert.match(
      missed.reason ?? "",
      /^starting deadline: not started within 10 s of its due time$/,
    );
    assert.equal(missed.started_at, null);
    // Stop the backlogs, then every throttled record is counted once, by tenant.
    for (const [t, ids] of Object.entries(jobs))
      for (const id of ids) await svc.patchJob(t, id, { enabled: false });
    for (const t of [busy, solo]) {
      let last = "";
      await eventually(
        async () => {
          const n = (await records()).filter(
            (r) => r.tenant_id === t && r.status === "throttled",
          ).length;
          const m = await throttledMetric(t);
          last = `records ${n}, metric ${m}`;
          return n > 0 && m === n ? true : undefined;
        },
        10_000,
        `kairos_runs_throttled_total for ${t} equal to its throttled records`,
      ).catch((e: unknown) => {
        throw new Error(`${String(e)} (${last})`);
      });
    }
  });
});
