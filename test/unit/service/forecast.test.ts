/**
 * The capacity forecast (src/service/forecast.ts) equals forecasts computed by hand for schedules
 * across the two DST changes of America/New_York in 2026:
 * - 2026-03-08, clocks go 02:00 EST → 03:00 EDT (07:00Z): a wall time in the gap fires at the
 *   first instant after it (02:30 → 03:00 EDT = 07:00Z), wall times that map to one instant give
 *   one occurrence;
 * - 2026-11-01, clocks go 02:00 EDT → 01:00 EST (06:00Z): a wall time that occurs twice fires
 *   only at its first occurrence, so a half-hourly cron is silent from 05:30Z to 07:00Z.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Driver, cfg, spec } from "../jobs/driver.ts";
import { forecastJobOf, forecastRunsDue, type ForecastJob } from "../../../src/service/forecast.ts";
import { emptyJobState } from "../../../src/job-state/job-state.ts";

const ms = (iso: string) => Date.parse(iso);
const NY = "America/New_York";
const cron = (
  tenant: string,
  expr: string,
  next: string,
  tz = NY,
  enabled = true,
): ForecastJob => ({
  tenant_id: tenant,
  schedule: { cron: expr, time_zone: tz },
  enabled,
  next_run_at_ms: ms(next),
});
/** A per-minute array with the given non-zero entries. */
const minutes = (n: number, entries: Record<number, number>, fill = 0): number[] => {
  const a = new Array<number>(n).fill(fill);
  for (const [m, v] of Object.entries(entries)) a[Number(m)] = v;
  return a;
};

describe("forecast of runs due per minute", () => {
  it("spring forward (New York, 2026-03-08): the hour around the gap, per minute and per tenant", () => {
    const now = ms("2026-03-08T06:30:40Z"); // 01:30:40 EST; minute 0 starts 06:30:00Z
    const jobs: ForecastJob[] = [
      cron("t1", "30 2 * * *", "2026-03-08T07:00:00Z"), // 02:30 does not exist → 03:00 EDT = 07:00Z (minute 30)
      cron("t1", "0 3 * * *", "2026-03-08T07:00:00Z"), // 03:00 EDT = 07:00Z (minute 30)
      cron("t2", "*/15 * * * *", "2026-03-08T06:45:00Z"), // 06:30Z already fired; 06:45, 07:00 (02:00-02:45 all → 03:00), 07:15
      cron("t2", "* * * * *", "2026-03-08T06:31:00Z", NY, false), // paused: nothing
      {
        tenant_id: "t3",
        schedule: { at: "2026-03-08T07:10:30Z" },
        enabled: true,
        next_run_at_ms: ms("2026-03-08T07:10:30Z"),
      }, // minute 40
      cron("t3", "*/20 * * * * *", "2026-03-08T06:30:40Z", "Europe/Berlin"), // every 20 s: minute 0 has only :40, then 3 a minute
      {
        tenant_id: "t4",
        schedule: { at: "2026-03-08T05:00:00Z" },
        enabled: true,
        next_run_at_ms: null,
      }, // a past one-shot
    ];
    const f = forecastRunsDue(jobs, now, { minutes: 60 });
    assert.equal(f.startMs, ms("2026-03-08T06:30:00Z"));
    assert.deepEqual(f.byTenant.get("t1"), minutes(60, { 30: 2 }));
    assert.deepEqual(f.byTenant.get("t2"), minutes(60, { 15: 1, 30: 1, 45: 1 }));
    assert.deepEqual(f.byTenant.get("t3"), minutes(60, { 0: 1, 40: 4 }, 3));
    assert.equal(f.byTenant.has("t4"), false);
    assert.deepEqual(f.perMinute, minutes(60, { 0: 1, 15: 4, 30: 6, 40: 4, 45: 4 }, 3));
    assert.equal(f.jobsScanned, 7);
    assert.equal(f.truncated, false);
  });

  it("fall back (New York, 2026-11-01): the repeated hour fires once, over three hours", () => {
    const now = ms("2026-11-01T05:00:00Z"); // 01:00 EDT
    const jobs: ForecastJob[] = [
      // 01:00 EDT 05:00Z, 01:30 EDT 05:30Z; 01:00 and 01:30 EST (06:00Z, 06:30Z) repeat: skipped; 02:00 EST 07:00Z, 02:30 EST 07:30Z
      cron("t1", "*/30 * * * *", "2026-11-01T05:00:00Z"),
      cron("t1", "30 1 * * *", "2026-11-01T05:30:00Z"), // the first 01:30 only
      cron("t2", "0 2 * * *", "2026-11-01T07:00:00Z"), // 02:00 EST
      cron("t2", "0 * * * *", "2026-11-01T05:00:00Z", "UTC"), // control: 05:00Z, 06:00Z, 07:00Z
    ];
    const f = forecastRunsDue(jobs, now, { minutes: 180 });
    assert.deepEqual(f.byTenant.get("t1"), minutes(180, { 0: 1, 30: 2, 120: 1, 150: 1 }));
    assert.deepEqual(f.byTenant.get("t2"), minutes(180, { 0: 1, 60: 1, 120: 2 }));
    assert.deepEqual(f.perMinute, minutes(180, { 0: 2, 30: 2, 60: 1, 120: 3, 150: 1 }));
  });

  it("is bounded: jobs scanned and occurrences enumerated, reporting truncation", () => {
    const every = cron("t1", "* * * * * *", "2026-01-01T00:00:00Z", "UTC"); // 60 a minute
    const now = ms("2026-01-01T00:00:00Z");
    const full = forecastRunsDue([every, every], now, { minutes: 60 });
    assert.equal(
      full.perMinute.reduce((a, b) => a + b, 0),
      7200,
    );
    assert.equal(full.truncated, false);
    const fewJobs = forecastRunsDue([every, every, every], now, { minutes: 60, maxJobs: 2 });
    assert.deepEqual([fewJobs.jobsScanned, fewJobs.truncated], [2, true]);
    const fewOccurrences = forecastRunsDue([every], now, { minutes: 60, maxOccurrences: 1000 });
    assert.equal(
      fewOccurrences.perMinute.reduce((a, b) => a + b, 0),
      1000,
    );
    assert.equal(fewOccurrences.truncated, true);
  });

  it("reads a stored job actor state: deleted and empty states forecast nothing", () => {
    assert.equal(forecastJobOf(emptyJobState()), undefined);
  });

  it("an occurrence prepared ahead (look-ahead moved next_run_at past it) is still forecast until it starts", () => {
    const d = new Driver(cfg({ lookaheadMs: 60_000 }), { autoClaim: true });
    d.create(spec());
    d.advance(0);
    const prepared = d.state.runs[0]!;
    assert.ok(
      d.state.next_run_at_ms! > prepared.scheduled_for_ms,
      "next_run_at already past the prepared occurrence",
    );
    assert.equal(forecastJobOf(d.state)?.next_run_at_ms, prepared.scheduled_for_ms);
    d.heartbeat(prepared.run_id, prepared.fence, prepared.scheduled_for_ms); // started: handled
    assert.equal(forecastJobOf(d.state)?.next_run_at_ms, d.state.next_run_at_ms);
  });
});
