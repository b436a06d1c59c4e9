/**
 * The simulation's sandbox model (test/sim/executor.ts): what stops a task whose worker is frozen.
 * Production has a Docker container count down the lease its worker last renewed and the process
 * supervisor kill the task within 250 ms of the worker's freeze (src/sandbox/supervisor.ts); the
 * simulation must not let a frozen worker's task run on where production would kill it (sim seed
 * 1071 ran attempt 2 of a run while attempt 1 still ran on a paused worker), nor kill it earlier.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Ledger, SimExecutor, WATCHDOG_MS, type SimSandbox } from "../sim/executor.ts";
import { SimClock, SimProcess } from "../sim/sim-clock.ts";
import { seededRandom } from "../../src/lib/random.ts";

const T0 = Date.UTC(2026, 0, 5, 12, 0, 0);

function setup(sandbox: SimSandbox) {
  const sim = new SimClock(T0);
  const process = new SimProcess(sim, "w1#1", 0);
  const ledger = new Ledger();
  // A 10 s task (durationMs fixed), never failing.
  const executor = new SimExecutor({
    workerId: "w1",
    sim,
    process,
    random: seededRandom(1),
    ledger,
    durationMs: [10_000, 10_000],
    failRate: 0,
    sandbox,
    watchdogRandom: seededRandom(2),
  });
  const start = (leaseMs: number | undefined) =>
    executor.start(
      {
        image: "sim",
        args: [],
        env: {},
        timeoutS: 60,
        ...(leaseMs !== undefined ? { leaseMs } : {}),
      },
      {
        runId: "r1",
        attempt: 1,
        jobId: "j1",
        tenantId: "t1",
        scheduledFor: new Date(T0).toISOString(),
        workerId: "w1",
        fence: 1,
      },
    );
  return { sim, process, ledger, start };
}

describe("simulation sandbox: a frozen worker's task", () => {
  it("docker: the container is killed when the lease its worker last renewed runs out (within a quarter second), not before", async () => {
    const t = setup("docker");
    const x = t.start(3_000);
    await t.sim.runUntil(T0 + 1_000);
    x.renewLease?.(3_000); // until T0 + 4 s
    t.process.pause();
    await t.sim.runUntil(T0 + 3_990);
    assert.equal(t.ledger.all[0]!.endMs, null, "still running inside its lease");
    await t.sim.runUntil(T0 + 4_000 + WATCHDOG_MS);
    assert.equal(t.ledger.all[0]!.outcome, "killed");
    assert.ok(t.ledger.all[0]!.endMs! - T0 <= 4_000 + WATCHDOG_MS);
  });

  it("docker: a worker that keeps renewing keeps its task (it runs to its end)", async () => {
    const t = setup("docker");
    const x = t.start(3_000);
    for (let s = 1; s <= 10; s++) {
      await t.sim.runUntil(T0 + s * 1_000);
      x.renewLease?.(3_000);
    }
    await t.sim.runUntil(T0 + 10_500);
    assert.equal(t.ledger.all[0]!.outcome, "exit 0");
  });

  it("process: the supervisor kills the task within 250 ms of its worker's freeze, whatever the lease", async () => {
    const t = setup("process");
    t.start(60_000);
    await t.sim.runUntil(T0 + 2_000);
    t.process.pause();
    await t.sim.runUntil(T0 + 2_000 + WATCHDOG_MS);
    assert.equal(t.ledger.all[0]!.outcome, "killed");
  });

  it("process: a running worker's task runs to its end", async () => {
    const t = setup("process");
    t.start(1_000);
    await t.sim.runUntil(T0 + 10_500);
    assert.equal(t.ledger.all[0]!.outcome, "exit 0");
  });

  it("none (self-tests only): a frozen worker's task runs on to its end — what the simulation did before seed 1071", async () => {
    const t = setup("none");
    t.start(1_000);
    t.process.pause();
    await t.sim.runUntil(T0 + 10_500);
    assert.equal(t.ledger.all[0]!.outcome, "exit 0");
  });
});
