/**
 * The tenants' live figures (pure parts): a scheduler node's rolling series per tenant
 * (src/history/tenant-series.ts) — starts and their lags by 5 s step, runs waiting sampled,
 * one tenant never in another's, bounded — and the API node's sum of the nodes' answers
 * (src/history/tenant-stats.ts): steps aligned, lag percentiles after the sum, forecasts by
 * minute, a malformed answer dropped and the figures marked partial.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  LAG_BOUNDS_MS,
  TenantSeries,
  lagBucket,
  lagQuantileMs,
} from "../../../src/history/tenant-series.ts";
import { mergeTenantStats, parseNodeStats } from "../../../src/history/tenant-stats.ts";
import { STATS_POINTS, STATS_STEP_MS, type NodeTenantStats } from "../../../src/protocol/stats.ts";
import { openApiDocument } from "../../../src/http/openapi.ts";
import { validates } from "../http/json-schema-lite.ts";

const T0 = Date.parse("2026-12-06T10:00:00Z");
const A = "taaaaaaaaaaaaaaaa";
const B = "tbbbbbbbbbbbbbbbb";

function answer(node: string, nowMs: number, s: TenantSeries, tenant: string): NodeTenantStats {
  const r = s.read(tenant, nowMs);
  return { v: 1, node, now_ms: nowMs, points: r.points, waiting_now: r.waitingNow, forecast: null };
}

describe("lag buckets and percentiles", () => {
  it("buckets grow by about a third from 1 ms to an hour; a lag falls in the first bucket not below it", () => {
    assert.equal(LAG_BOUNDS_MS[0], 1);
    for (let i = 1; i < LAG_BOUNDS_MS.length; i++) {
      const r = LAG_BOUNDS_MS[i]! / LAG_BOUNDS_MS[i - 1]!;
      assert.ok(r > 1.3 && r < 1.36, `ratio ${r} at ${i}`);
    }
    assert.ok(LAG_BOUNDS_MS[LAG_BOUNDS_MS.length - 1]! >= 3_000_000);
    assert.equal(lagBucket(-5), 0);
    assert.equal(lagBucket(1), 0);
    assert.equal(lagBucket(1.01), 1);
    assert.equal(lagBucket(1e9), LAG_BOUNDS_MS.length);
  });

  it("a percentile lies within its bucket, about a third of the true value", () => {
    const counts = new Map<number, number>();
    const lags = Array.from({ length: 1000 }, (_, i) => 10 + i); // 10 ms .. 1009 ms
    for (const l of lags) counts.set(lagBucket(l), (counts.get(lagBucket(l)) ?? 0) + 1);
    const p50 = lagQuantileMs(counts, 0.5)!;
    const p99 = lagQuantileMs(counts, 0.99)!;
    assert.ok(Math.abs(p50 - 509) / 509 < 0.34, `p50 ${p50}`);
    assert.ok(Math.abs(p99 - 999) / 999 < 0.34, `p99 ${p99}`);
    assert.ok(p99 > p50);
    assert.equal(lagQuantileMs(new Map(), 0.5), null);
    assert.equal(lagQuantileMs(new Map([[LAG_BOUNDS_MS.length, 3]]), 0.99), LAG_BOUNDS_MS.at(-1));
  });
});

describe("a node's series per tenant", () => {
  it("counts starts and lags per 5 s step, for their tenant only", () => {
    const s = new TenantSeries();
    s.started(A, T0 + 100, 20);
    s.started(A, T0 + 4_900, 40);
    s.started(A, T0 + 5_000, 2_000);
    s.started(B, T0 + 200, 5);
    const a = s.read(A, T0 + 6_000);
    assert.deepEqual(
      a.points.map((p) => [p.t, p.started]),
      [
        [T0, 2],
        [T0 + STATS_STEP_MS, 1],
      ],
    );
    assert.equal(
      a.points[0]!.lag.reduce((n, [, c]) => n + c, 0),
      2,
    );
    const b = s.read(B, T0 + 6_000);
    assert.deepEqual(
      b.points.map((p) => [p.t, p.started]),
      [[T0, 1]],
    );
    assert.deepEqual(s.read("tccccccccccccccccc", T0).points, []);
  });

  it("keeps 10 minutes: an older step is out of the window and its slot is reused", () => {
    const s = new TenantSeries();
    s.started(A, T0, 10);
    const later = T0 + STATS_POINTS * STATS_STEP_MS;
    assert.deepEqual(s.read(A, later).points, [], "10 minutes later the step is gone");
    s.started(A, later, 10); // the same ring slot
    assert.deepEqual(
      s.read(A, later).points.map((p) => [p.t, p.started]),
      [[later, 1]],
    );
  });

  it("samples runs waiting: a tenant that stops waiting gets 0; an idle one is dropped", () => {
    const s = new TenantSeries();
    s.sampleWaiting(new Map([[A, [3, 1] as [number, number]]]), T0);
    assert.deepEqual(s.read(A, T0).waitingNow, [3, 1]);
    s.sampleWaiting(new Map(), T0 + STATS_STEP_MS);
    const r = s.read(A, T0 + STATS_STEP_MS);
    assert.deepEqual(
      r.points.map((p) => p.waiting),
      [
        [3, 1],
        [0, 0],
      ],
    );
    assert.deepEqual(r.waitingNow, [0, 0]);
    assert.equal(s.size, 1);
    s.sampleWaiting(new Map(), T0 + 11 * 60_000);
    assert.equal(s.size, 0, "nothing in the window: dropped");
  });

  it("holds at most its bound of tenants, the least recently active dropped first", () => {
    const s = new TenantSeries(3);
    for (const t of ["t1", "t2", "t3"]) s.started(t, T0, 1);
    s.started("t1", T0 + 1, 1);
    s.started("t4", T0 + 2, 1);
    assert.equal(s.size, 3);
    assert.deepEqual(s.read("t2", T0 + 3).points, [], "t2 was the least recently active");
    assert.equal(s.read("t1", T0 + 3).points[0]!.started, 2);
  });
});

describe("the tenant's figures summed over the nodes", () => {
  it("sums steps, takes lag percentiles after the sum, and leaves out the unfinished step", () => {
    const n1 = new TenantSeries();
    const n2 = new TenantSeries();
    for (let i = 0; i < 99; i++) n1.started(A, T0 + 10, 10);
    n2.started(A, T0 + 20, 5_000); // the 1 % that is slow
    n2.sampleWaiting(new Map([[A, [2, 0] as [number, number]]]), T0 + 30);
    n1.started(A, T0 + STATS_STEP_MS + 1, 10); // in the step still filling at `now`
    const now = T0 + STATS_STEP_MS + 500;
    const v = mergeTenantStats(A, now, [answer("n1", now, n1, A), answer("n2", now, n2, A)], 2);
    assert.equal(v.series.length, STATS_POINTS);
    const last = v.series.at(-1)!;
    assert.equal(last.at, new Date(T0).toISOString());
    assert.equal(last.started, 100);
    assert.equal(last.started_per_s, 20);
    assert.equal(last.waiting, 2);
    assert.ok(last.lag_p50_s! > 0.0075 && last.lag_p50_s! <= 0.01, `p50 ${last.lag_p50_s}`);
    assert.ok(last.lag_p99_s! <= 0.01, "p99 of 100 with one slow: the 99th is still fast");
    assert.equal(v.totals.started, 100, "the unfinished step is not in the series");
    assert.deepEqual(v.waiting, { slot: 2, worker: 0 });
    assert.deepEqual(v.nodes, { asked: 2, answered: 2 });
    assert.equal(v.partial, false);
    assert.equal(v.series[0]!.waiting, null, "a step no node sampled is unknown, not 0");
    // What the API sends is what its OpenAPI document says.
    const doc = openApiDocument() as { components: { schemas: Record<string, object> } };
    const schema = doc.components.schemas["TenantStats"] as Record<string, unknown>;
    assert.equal(validates(schema, v, doc), true);
    assert.equal(validates(schema, { ...v, series: v.series.slice(1) }, doc), false);
  });

  it("aligns each node's forecast on the current minute and sums them", () => {
    const now = T0 + 90_000; // minute 1 of the hour
    const a = (startMs: number, per: number[]): NodeTenantStats => ({
      v: 1,
      node: "n",
      now_ms: now,
      points: [],
      waiting_now: [0, 0],
      forecast: { start_ms: startMs, per_minute: per },
    });
    const v = mergeTenantStats(
      A,
      now,
      [a(T0 + 60_000, [1, 2, 3]), a(T0, [7, 4, 5]), { ...a(T0, []), forecast: null }],
      3,
    );
    assert.equal(v.forecast!.from, new Date(T0 + 60_000).toISOString());
    assert.deepEqual(v.forecast!.per_minute.slice(0, 4), [5, 7, 3, 0]);
    assert.equal(v.forecast!.per_minute.length, 60);
    assert.equal(v.forecast!.total, 15);
    const none = mergeTenantStats(A, now, [{ ...a(T0, []), forecast: null }], 1);
    assert.equal(none.forecast, null);
  });

  it("drops an answer that is not one; fewer answers than nodes asked is partial", () => {
    const good = answer("n1", T0, new TenantSeries(), A);
    assert.ok(parseNodeStats(good));
    for (const bad of [
      null,
      "x",
      { ...good, v: 2 },
      { ...good, points: [{ t: T0 + 1, started: 1, lag: [], waiting: null }] },
      { ...good, points: [{ t: T0, started: -1, lag: [], waiting: null }] },
      { ...good, points: [{ t: T0, started: 1, lag: [[999, 1]], waiting: null }] },
      { ...good, points: Array.from({ length: STATS_POINTS + 1 }, () => good.points[0]) },
      { ...good, waiting_now: [1] },
      { ...good, forecast: { start_ms: T0, per_minute: new Array(61).fill(0) } },
    ])
      assert.equal(parseNodeStats(bad), undefined, JSON.stringify(bad).slice(0, 80));
    const v = mergeTenantStats(A, T0, [good], 3);
    assert.deepEqual(v.nodes, { asked: 3, answered: 1 });
    assert.equal(v.partial, true);
  });
});
