/** The fleet benchmark's figures from run records: idle slots count, shares are of all slots, turnaround per worker. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { measure, taskSleeps, turnarounds, turnaroundsOf } from "../../../bench/fleet.ts";
import { waterFill } from "../../../bench/water-fill.ts";
import type { RunView } from "../../../src/protocol/model.ts";

const T = Date.UTC(2026, 0, 1);
const iso = (ms: number) => new Date(T + ms).toISOString();
function run(
  tenant: string,
  worker: string,
  startMs: number,
  endMs: number,
  dueMs = startMs,
): RunView {
  return {
    run_id: `r-${tenant}-${worker}-${startMs}`,
    job_id: "j",
    tenant_id: tenant,
    scheduled_for: iso(dueMs),
    status: "succeeded",
    attempts: [
      {
        attempt: 1,
        worker,
        started_at: iso(startMs),
        finished_at: iso(endMs),
        exit_code: 0,
        outcome: "succeeded",
        error: null,
      },
    ],
  } as unknown as RunView;
}

describe("fleet benchmark figures", () => {
  it("water-fills: a capped tenant keeps its cap, the rest split by weight", () => {
    assert.deepEqual(
      waterFill(8, [
        { demand: Infinity, weight: 1 },
        { demand: Infinity, weight: 2 },
        { demand: 1, weight: 1 },
      ]).map((x) => +x.toFixed(3)),
      [2.333, 4.667, 1],
    );
  });

  it("turnaround matches each start to the earliest free slot before it", () => {
    assert.deepEqual(
      turnarounds([
        [0, 100],
        [0, 200],
        [130, 300],
        [250, 400],
      ]),
      [30, 50],
    );
  });

  it("a turnaround whose run was due only after the slot freed is one kept for it (not while due)", () => {
    assert.deepEqual(
      turnaroundsOf([
        [0, 100, 0],
        [0, 200, 0],
        [130, 300, 90], // due at 90, before the free at 100: idle while due
        [250, 400, 250], // due at 250, after the free at 200: kept for it
      ]),
      [
        { ms: 30, whileDue: true },
        { ms: 50, whileDue: false },
      ],
    );
  });

  it("one tenant using half of two slots for 10 s: utilisation 0.5, its share error against the whole fleet", () => {
    const plans = [
      { name: "heavy-a", weight: 1, cap: null, jobs: 1, cron: "", sleeps: [], id: "ta" },
      { name: "light", weight: 1, cap: null, jobs: 1, cron: "", sleeps: [], id: "tl" },
    ];
    const runs = [run("ta", "w1", 0, 10_000), run("tl", "w1", 2_000, 2_100, 2_000)];
    const m = measure(plans, runs, {
      slots: 2,
      seconds: 10,
      warmupS: 0,
      windowStart: T,
      windowEnd: T + 10_000,
      workers: 1,
      tasks: ["2"],
    });
    assert.equal(m["utilisation"], 0.505);
    // heavy-a could have had 2 − 0.01 slots and used 1: off by (0.99)/2 of the fleet.
    assert.equal(m["max_share_error"], 0.495);
    assert.equal(m["small_tenant_p99_lag_ms"], 0);
    assert.equal(m["cap_exceeded"], 0);
  });

  it("--tasks: the default mix, a list, and a clear error for a bad one", () => {
    assert.deepEqual(taskSleeps([]), ["0.2", "2", "20"]);
    assert.deepEqual(taskSleeps(["--tasks", "2"]), ["2"]);
    assert.deepEqual(taskSleeps(["--tasks", "0.5, 3"]), ["0.5", "3"]);
    for (const bad of ["", "0", "-1", "2,,3", "x", "61"])
      assert.throws(() => taskSleeps(["--tasks", bad]), /--tasks must be task lengths/);
  });
});
