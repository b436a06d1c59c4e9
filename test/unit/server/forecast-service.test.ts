/**
 * The forecast service's timing (src/server/forecast.ts): it refreshes at start and then in the
 * middle of every minute (REFRESH_AT_MS, :30), never at a minute's start, when cron bursts are
 * due (a refresh at :01 listed and decoded every job state of the node in a burst's second); at
 * each minute's start it re-publishes the gauge shifted by one, from memory.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { EventBus } from "../../../src/cluster/events.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { ForecastService, REFRESH_AT_MS } from "../../../src/server/forecast.ts";
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
