/**
 * The metrics contract (src/metrics) and the readiness checks (src/health): every metric name of
 * the contract is exposed with its labels, the typed recorders move the right series, gauge sources
 * are read at scrape time, and placement readiness names what is missing.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import {
  METRICS,
  addClockSkewSource,
  addGaugeSource,
  addRunsWaitingSource,
  countAttempt,
  countDeadLetter,
  countThrottled,
  countLeaseExpiry,
  countRetry,
  countBusRefusal,
  countWorkerBench,
  metricsText,
  observeDispatchLag,
  observeSlotIdle,
  setForecastRunsDue,
  startKvOp,
} from "../../src/metrics/index.ts";
import { prometheusSink } from "../../src/history/run-metrics.ts";
import { FakeClock } from "../../src/lib/clock.ts";
import {
  checkReadiness,
  partitionsCheck,
  type ReadinessCheck,
} from "../../src/health/readiness.ts";

const value = (text: string, series: string): number | undefined => {
  const line = text.split("\n").find((l) => l.startsWith(series + " "));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
};

describe("metrics", () => {
  // A node dropped without its stop() (the simulation's crashed node) must not be kept alive by the
  // metrics module: the simulation grew by megabytes a seed while it was.
  it("a clock-skew source is read while its owner keeps it, and is dropped once its owner is gone", async () => {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    const kept = () => new Map([["kept-node", 1500]]);
    const remove = addClockSkewSource(kept);
    ((): void => void addClockSkewSource(() => new Map([["gone-node", 2500]])))();
    await new Promise((r) => setImmediate(r));
    gc();
    const { body } = await metricsText();
    assert.equal(value(body, `kairos_clock_skew_seconds{node="kept-node"}`), 1.5);
    assert.equal(
      value(body, `kairos_clock_skew_seconds{node="gone-node"}`),
      undefined,
      "a source nobody holds is still read",
    );
    remove();
  });

  it("exposes every metric of the contract with its type", async () => {
    const { body, contentType } = await metricsText();
    assert.match(contentType, /^text\/plain/);
    const types: Record<string, string> = {
      [METRICS.dispatchLag]: "histogram",
      [METRICS.runsWaiting]: "gauge",
      [METRICS.leaseExpiries]: "counter",
      [METRICS.attempts]: "counter",
      [METRICS.retries]: "counter",
      [METRICS.deadLetters]: "counter",
      [METRICS.runsThrottled]: "counter",
      [METRICS.partitionsHeld]: "gauge",
      [METRICS.actorsActive]: "gauge",
      [METRICS.mailboxDepth]: "gauge",
      [METRICS.kvOp]: "histogram",
      [METRICS.forecast]: "gauge",
      [METRICS.logLinesDropped]: "counter",
      [METRICS.busRefusals]: "counter",
      [METRICS.slotIdle]: "histogram",
      [METRICS.workerBenches]: "counter",
    };
    assert.equal(Object.keys(types).length, Object.keys(METRICS).length);
    for (const [name, type] of Object.entries(types))
      assert.match(body, new RegExp(`^# TYPE ${name} ${type}$`, "m"));
  });

  it("records run-path events under their labels", async () => {
    observeDispatchLag("tA", 0.2);
    observeDispatchLag("tA", -1); // clock skew: counted as 0
    countAttempt("tA", "succeeded");
    countAttempt("tA", "lease_lost");
    countLeaseExpiry("counted");
    countRetry("tA");
    countDeadLetter("tA");
    countThrottled("tA");
    startKvOp("update", "kairos_runs")();
    setForecastRunsDue([3, 0, 7]);
    countBusRefusal("nats_api", "not_an_inbox");
    countBusRefusal("adverts", "inflated");
    countWorkerBench();
    observeSlotIdle(0.0004);
    observeSlotIdle(3);
    const { body } = await metricsText();
    assert.equal(value(body, "kairos_slot_idle_seconds_count"), 2);
    assert.equal(
      value(body, 'kairos_bus_refusals_total{responder="adverts",reason="inflated"}'),
      1,
    );
    assert.equal(value(body, "kairos_worker_benches_total"), 1);
    assert.equal(value(body, 'kairos_slot_idle_seconds_bucket{le="0.001"}'), 1);
    assert.equal(value(body, 'kairos_dispatch_lag_seconds_count{tenant="tA"}'), 2);
    assert.equal(value(body, 'kairos_dispatch_lag_seconds_bucket{le="0.005",tenant="tA"}'), 1);
    assert.equal(value(body, 'kairos_attempts_total{tenant="tA",outcome="succeeded"}'), 1);
    assert.equal(value(body, 'kairos_attempts_total{tenant="tA",outcome="lease_lost"}'), 1);
    assert.equal(value(body, 'kairos_lease_expiries_total{kind="counted"}'), 1);
    assert.equal(value(body, 'kairos_retries_total{tenant="tA"}'), 1);
    assert.equal(value(body, 'kairos_dead_letters_total{tenant="tA"}'), 1);
    assert.equal(value(body, 'kairos_runs_throttled_total{tenant="tA"}'), 1);
    assert.equal(value(body, 'kairos_kv_op_seconds_count{op="update",bucket="kairos_runs"}'), 1);
    assert.equal(value(body, 'kairos_forecast_runs_due{minute="0"}'), 3);
    assert.equal(value(body, 'kairos_forecast_runs_due{minute="2"}'), 7);
    assert.equal(value(body, 'kairos_forecast_runs_due{minute="59"}'), 0);
    assert.equal(
      value(body, 'kairos_bus_refusals_total{responder="nats_api",reason="not_an_inbox"}'),
      1,
    );
  });

  it("the node's sink names no tenant unless asked to (--metrics-tenant-labels)", async () => {
    const quiet = prometheusSink(false);
    quiet.dispatchLag("tQuiet", 0.01);
    quiet.attempt("tQuiet", "failed");
    quiet.retry("tQuiet");
    quiet.deadLetter("tQuiet");
    const labelled = prometheusSink(true);
    labelled.attempt("tLoud", "failed");
    const { body } = await metricsText();
    assert.equal(body.includes("tQuiet"), false, "a tenant of the quiet sink appears nowhere");
    assert.equal(value(body, 'kairos_attempts_total{outcome="failed"}'), 1);
    assert.equal(value(body, "kairos_retries_total"), 1);
    assert.equal(value(body, "kairos_dead_letters_total"), 1);
    assert.equal(value(body, "kairos_dispatch_lag_seconds_count"), 1);
    assert.equal(value(body, 'kairos_attempts_total{tenant="tLoud",outcome="failed"}'), 1);
  });

  it("reads gauge sources at scrape time and sums several nodes", async () => {
    let held = 3;
    const off1 = addGaugeSource("partitions_held", () => held);
    const off2 = addGaugeSource("partitions_held", () => 2);
    const off3 = addRunsWaitingSource(() => ({ slot: 4, worker: 1 }));
    try {
      assert.equal(value((await metricsText()).body, "kairos_partitions_held"), 5);
      held = 10;
      const body = (await metricsText()).body;
      assert.equal(value(body, "kairos_partitions_held"), 12);
      assert.equal(value(body, 'kairos_runs_waiting{reason="slot"}'), 4);
      assert.equal(value(body, 'kairos_runs_waiting{reason="worker"}'), 1);
    } finally {
      off1();
      off2();
      off3();
    }
  });
});

describe("readiness", () => {
  it("placement is settled when every partition assigned here is held", async () => {
    const desired = ["a", "b", "a", undefined, "a"];
    let held: number[] = [0, 2];
    const check = partitionsCheck(
      "a",
      () => desired,
      () => held,
    );
    const r1 = await check.run();
    assert.equal(r1.ok, false);
    assert.match(r1.detail, /not yet held: 4$/);
    held = [0, 2, 4, 1]; // holding one more (being handed off) is fine
    assert.equal((await check.run()).ok, true);
    assert.equal(
      (
        await partitionsCheck(
          "c",
          () => desired,
          () => [],
        ).run()
      ).ok,
      true,
      "nothing assigned: settled",
    );
  });

  it("a check that hangs or throws fails within its budget; the others still answer", async () => {
    const hang: ReadinessCheck = { name: "nats", run: () => new Promise(() => undefined) };
    const boom: ReadinessCheck = {
      name: "executor",
      run: () => Promise.reject(new Error("engine down")),
    };
    const fine: ReadinessCheck = {
      name: "partitions",
      run: async () => ({ ok: true, detail: "ok" }),
    };
    const clock = new FakeClock();
    const pending = checkReadiness([hang, boom, fine], clock, 50);
    await new Promise((r) => setImmediate(r)); // the checks that answer have answered
    clock.advance(50);
    const r = await pending;
    assert.equal(r.ready, false);
    assert.deepEqual(r.checks, {
      nats: { ok: false, detail: "no answer within 50 ms" },
      executor: { ok: false, detail: "engine down" },
      partitions: { ok: true, detail: "ok" },
    });
  });
});
