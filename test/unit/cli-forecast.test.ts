/** `kairos admin forecast`: flag validation, and the report (per hour, peak, tenants by runs). */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { forecastReport, formatForecast, parseForecastFlags } from "../../src/cli/forecast.ts";
import { forecastRunsDue } from "../../src/service/forecast.ts";
import { isKairosError } from "../../src/lib/errors.ts";

describe("kairos admin forecast", () => {
  it("--hours 1-168 (default 1), --max-jobs a positive integer; anything else names the flag", () => {
    assert.deepEqual(parseForecastFlags({}), { hours: 1, maxJobs: 1_000_000 });
    assert.deepEqual(parseForecastFlags({ hours: "168", maxJobs: "10" }), {
      hours: 168,
      maxJobs: 10,
    });
    for (const [hours, flag] of [
      ["0", "--hours"],
      ["169", "--hours"],
      ["1.5", "--hours"],
      ["", "--hours"],
      ["-2", "--hours"],
    ] as const) {
      assert.throws(
        () => parseForecastFlags({ hours }),
        (e: unknown) =>
          isKairosError(e, "invalid_argument") && (e as Error).message.startsWith(flag),
        hours,
      );
    }
    assert.throws(() => parseForecastFlags({ maxJobs: "0" }), /--max-jobs/);
  });

  it("reports totals per hour, the peak minute and tenants by runs", () => {
    const now = Date.parse("2026-11-01T05:00:00Z");
    const f = forecastRunsDue(
      [
        {
          tenant_id: "small",
          schedule: { cron: "0 * * * *", time_zone: "UTC" },
          enabled: true,
          next_run_at_ms: now,
        },
        {
          tenant_id: "big",
          schedule: { cron: "*/30 * * * *", time_zone: "America/New_York" },
          enabled: true,
          next_run_at_ms: now,
        },
      ],
      now,
      { minutes: 120 },
    );
    const r = forecastReport(f, false);
    // big: 05:00Z and 05:30Z, then the repeated 01:xx EST hour is skipped (06:00Z, 06:30Z); small: 05:00Z, 06:00Z
    assert.deepEqual(r.per_hour, [3, 1]);
    assert.equal(r.total, 4);
    assert.deepEqual(r.peak, { minute: "2026-11-01T05:00Z", runs: 2 });
    assert.deepEqual(
      r.tenants.map((t) => [t.tenant_id, t.total]),
      [
        ["big", 2],
        ["small", 2],
      ],
    );
    assert.equal(r.from, "2026-11-01T05:00Z");
    const text = formatForecast(r);
    assert.match(text, /^forecast from 2026-11-01T05:00Z for 2 h: 4 runs due \(2 jobs scanned\)/);
    assert.match(text, /2026-11-01T06:00Z\s+1\s+1/);
  });
});
