/**
 * The forecast on a real cluster: two scheduler nodes each publish kairos_forecast_runs_due for
 * the jobs of the partitions they hold; summed over the nodes it is the cluster's forecast, and
 * `kairos admin forecast --json` (which reads every job from KV) gives the same per tenant.
 * Jobs, all UTC: tenant a every minute; tenant b every fifth minute, and a paused every-minute
 * job (nothing). Minute 0 (the current one) is not compared: whether its occurrence has
 * fired yet depends on the second.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import {
  apiClient,
  eventually,
  startKairosFixture,
  type KairosFixture,
} from "../support/kairos.ts";

const run = promisify(execFile);

function gauge(text: string): number[] {
  const out = new Array<number>(60).fill(0);
  for (const m of text.matchAll(/^kairos_forecast_runs_due\{minute="(\d+)"\} (\S+)$/gm))
    out[Number(m[1])] = Number(m[2]);
  return out;
}
/** Runs due in minute m of a window starting at `startMs`: a's every minute, b's every fifth. */
const expected = (startMs: number, m: number, who: "a" | "b" | "all"): number => {
  const a = 1;
  const b = (Math.floor(startMs / 60_000) + m) % 5 === 0 ? 1 : 0;
  return who === "a" ? a : who === "b" ? b : a + b;
};

describe("capacity forecast on a real cluster", { timeout: 180_000 }, () => {
  let fx: KairosFixture;
  const tenants = { a: "", b: "" };
  const metricsUrls: string[] = [];
  before(async () => {
    fx = await startKairosFixture();
    const n1 = fx.spawn("f1", "api,scheduler", ["--metrics-port", "0"]);
    const base = await fx.apiUrl(n1);
    metricsUrls.push(await fx.metricsUrl(n1));
    const ta = await fx.newTenant("forecast-a");
    const tb = await fx.newTenant("forecast-b");
    tenants.a = ta.tenant_id;
    tenants.b = tb.tenant_id;
    const job = async (key: string, cron: string, enabled = true) => {
      const r = await apiClient(base, key).call("POST", "/v1/jobs", {
        schedule: { cron, time_zone: "UTC" },
        enabled,
        task: { image: "busybox", args: ["true"], timeout_s: 10 },
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
    };
    await job(ta.api_key, "* * * * *");
    await job(tb.api_key, "*/5 * * * *");
    await job(tb.api_key, "* * * * *", false);
    // A second scheduler: partitions move, and both nodes recompute their forecast.
    const n2 = fx.spawn("f2", "scheduler", ["--metrics-port", "0"]);
    metricsUrls.push(await fx.metricsUrl(n2));
    await n2.waitFor((x) => x.type === "partition_acquired", 30_000, "f2 holds a partition");
  });
  after(async () => {
    await fx?.stop();
  });

  it("the gauge summed over the schedulers equals the hand-computed forecast of the next hour", async () => {
    await eventually(
      async () => {
        const startMs = Math.floor(Date.now() / 60_000) * 60_000;
        const per = await Promise.all(
          metricsUrls.map(async (u) => gauge(await (await fetch(u)).text())),
        );
        const total = per[0]!.map((v, m) => v + per[1]![m]!);
        for (let m = 1; m < 60; m++) if (total[m] !== expected(startMs, m, "all")) return undefined;
        return true;
      },
      75_000,
      "forecast gauge = expected (refreshed 2 s after partition moves, then every minute)",
    );
  });

  it("kairos admin forecast --hours 2 --json: the cluster's forecast per minute and per tenant", async () => {
    const { stdout } = await run(process.execPath, [
      "--import",
      "tsx",
      "src/cli/main.ts",
      "admin",
      "forecast",
      "--nats",
      fx.nats.url,
      "--nats-creds",
      fx.nats.credsFor("admin"),
      "--hours",
      "2",
      "--json",
    ]);
    const r = JSON.parse(stdout) as {
      from: string;
      minutes: number;
      total: number;
      per_minute: number[];
      per_hour: number[];
      tenants: { tenant_id: string; total: number; per_minute: number[] }[];
      jobs_scanned: number;
      truncated: boolean;
    };
    const startMs = Date.parse(r.from);
    assert.equal(startMs % 60_000, 0);
    assert.ok(Math.abs(Date.now() - startMs) < 120_000);
    assert.equal(r.minutes, 120);
    assert.equal(r.jobs_scanned, 3);
    assert.equal(r.truncated, false);
    const byTenant = new Map(r.tenants.map((t) => [t.tenant_id, t]));
    for (let m = 1; m < 120; m++) {
      assert.equal(r.per_minute[m], expected(startMs, m, "all"), `minute ${m}`);
      assert.equal(byTenant.get(tenants.a)!.per_minute[m], expected(startMs, m, "a"));
      assert.equal(byTenant.get(tenants.b)!.per_minute[m], expected(startMs, m, "b"));
    }
    assert.equal(r.per_hour.length, 2);
    assert.equal(r.per_hour[0]! + r.per_hour[1]!, r.total);
  });
});
