/**
 * The forecast service's timing (src/server/forecast.ts): it refreshes at start and then in the
 * middle of every minute (REFRESH_AT_MS, :30), never at a minute's start, when cron bursts are
 * due (a refresh at :01 listed and decoded every job state of the node in a burst's second); at
 * each minute's start it re-publishes the gauge shifted by one, from memory. Its reads decode only
 * the job states whose revision changed since the last.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { EventBus } from "../../../src/cluster/events.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import type { KvStore } from "../../../src/cluster/kv.ts";
import { encode } from "../../../src/cluster/codec.ts";
import { ForecastService, REFRESH_AT_MS, readForecastJobs } from "../../../src/server/forecast.ts";
import { forecastRunsDue } from "../../../src/service/forecast.ts";
import { Driver, cfg, spec } from "../jobs/driver.ts";
import { SimClock } from "../../sim/sim-clock.ts";

const MINUTE = 60_000;

describe("forecast service", () => {
  it("refreshes at start, then at :30 of every minute, never in a minute's first seconds", async () => {
    const t0 = 1_800_000_000_000 - (1_800_000_000_000 % MINUTE) + 1_000; // :01 of a minute
    const clock = new SimClock(t0);
    // When each refresh begins (it reads the bucket first).
    const at: number[] = [];
    const kv = new MemoryKv();
    const publishedAt: number[] = [];
    const svc = new ForecastService({
      actors: () => {
        at.push(clock.now());
        return kv;
      },
      held: () => [0, 1],
      events: new EventBus(),
      clock,
      log: () => undefined,
      publish: () => publishedAt.push(clock.now()),
    });
    svc.start();
    await clock.runUntil(t0 + 3 * MINUTE + 5_000);
    svc.stop();
    assert.equal(REFRESH_AT_MS, 30_000);
    assert.deepEqual(
      at.map((x) => x - t0),
      [0, 29_000, 89_000, 149_000],
      "at start, then each :30",
    );
    for (const x of at.slice(1)) assert.equal(x % MINUTE, REFRESH_AT_MS);
    // Published after each refresh, and again at each minute's start (minute 0 shifted, no listing).
    const starts = publishedAt.filter((x) => x % MINUTE < 1_000).map((x) => x - t0);
    assert.deepEqual(starts, [59_010, 119_010, 179_010], "re-published at each minute's start");
    assert.equal(at.length, 4, "no listing at a minute's start");
  });
});

describe("forecast reads (readForecastJobs)", () => {
  it("decodes only the job states whose revision changed since the last read, and forecasts alike", async () => {
    const kv = new MemoryKv();
    const d = new Driver(cfg(), { autoClaim: true });
    d.create(spec({ schedule: { cron: "*/10 * * * * *", time_zone: "UTC" } }));
    const put = (key: string, s: unknown) => kv.put(key, encode({ s }));
    await put("job.0.ta.j1", d.state);
    await put("job.0.ta.j2", d.state);
    await put("job.1.tb.j3", d.state);
    // Counts the values read out of the listing (a value not read is not decoded).
    let valuesRead = 0;
    const counting: KvStore = Object.create(kv) as KvStore;
    counting.list = async (filter: string) =>
      (await kv.list(filter)).map((e) => ({
        key: e.key,
        revision: e.revision,
        get value() {
          valuesRead++;
          return e.value;
        },
      }));
    const first = await readForecastJobs(counting, [0, 1], 100);
    assert.equal(valuesRead, 3);
    assert.equal(first.jobs.length, 3);

    valuesRead = 0;
    await put("job.0.ta.j2", { ...d.state, deleted: true }); // a new revision: decoded again
    await kv.delete("job.1.tb.j3"); // gone: dropped from what is kept
    const second = await readForecastJobs(counting, [0, 1], 100, first.read);
    assert.equal(valuesRead, 1, "only j2, whose revision changed, is decoded");
    assert.deepEqual(
      [...second.read.keys()],
      ["job.0.ta.j1"],
      "kept: jobs only (j2 is deleted now, j3 gone)",
    );
    assert.equal(second.jobs.length, 1, "j2 deleted: not forecast");
    assert.equal(second.jobs[0], first.jobs[0], "j1's input kept as it was");

    const now = d.state.next_run_at_ms! - 5_000;
    const kept = forecastRunsDue(second.jobs, now, { minutes: 2 });
    const fresh = forecastRunsDue((await readForecastJobs(kv, [0, 1], 100)).jobs, now, {
      minutes: 2,
    });
    assert.deepEqual(kept.perMinute, fresh.perMinute);
    assert.ok(kept.perMinute.reduce((a, b) => a + b) > 0, "something is due");
  });
});
