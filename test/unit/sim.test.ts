/**
 * The deterministic cluster simulation (test/sim/) under `npm test`: a fixed set of seeds plus a
 * few random ones (printed, so a failure can be replayed with `npm run sim -- --seeds 1 --seed S`),
 * self-tests proving the invariants can fail on whole seeds (each invariant's own self-test is
 * test/unit/sim-invariants.test.ts), and the lease keeper's thread at production settings.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { SimCluster, runSimulation } from "../sim/cluster.ts";
import { report } from "../sim/report.ts";
import type { JobFaults } from "../../src/job-state/faults.ts";

/** Whether `invariant` fires in one of seeds 1..`seeds` run with `faults` (a self-test: a defence switched off). */
async function firesWithin(seeds: number, faults: JobFaults, invariant: string): Promise<boolean> {
  for (let seed = 1; seed <= seeds; seed++) {
    const r = await runSimulation({ seed, faults });
    if (r.violations.some((v) => v.invariant === invariant)) return true;
  }
  return false;
}

// Seeds 1 and 1071 run the production settings, 3 and 8 the short ones. (1071 once traced a worker
// paused just after a start, stopped only by its sandbox's deadline; every change to the
// simulation since changed what each seed does — see test/unit/sim-executor.test.ts for that model.)
const FIXED = [1, 3, 8, 1071];
// KAIROS_SIM_RANDOM_SEEDS=0 turns the random ones off (e.g. while a known violation is open).
const RANDOM = Array.from({ length: Number(process.env.KAIROS_SIM_RANDOM_SEEDS ?? "2") }, () =>
  Math.floor(Math.random() * 2 ** 31),
);

describe("cluster simulation", { timeout: 110_000 }, () => {
  for (const profile of ["short", "production"] as const) {
    it(`is deterministic: one seed replays to the same ledger (${profile} settings)`, async () => {
      const o = { seed: 42, profile, durationMs: 60_000, quietTailMs: 20_000 };
      const a = await runSimulation(o);
      const b = await runSimulation(o);
      assert.ok(a.stats.executions > 0, "nothing ran");
      assert.equal(a.stats.digest, b.stats.digest, "the ledgers differ");
      assert.deepEqual(
        a.violations.map((v) => v.detail),
        b.violations.map((v) => v.detail),
      );
    });
  }

  // The production settings renew partition leases from the lease keeper's thread
  // (test/sim/lease-thread.ts): a main event loop frozen for less than leaseMainStallMs (15 s)
  // keeps its partitions — the thread renews them — and one frozen for longer loses them.
  it("production settings: a stalled main loop keeps its partitions through the lease thread, up to leaseMainStallMs", async () => {
    const c = new SimCluster({ seed: 5, profile: "production", noFaults: true });
    for (const id of ["n1", "n2", "n3"]) c.start(id, "scheduler");
    const t0 = c.profile.startMs;
    await c.sim.runUntil(t0); // the starts arm their first timers now, not at +5 s
    await c.sim.runUntil(t0 + 5_000);
    const n1 = c.procs.get("n1")!;
    const lost: number[] = [];
    n1.node.events.on((e) => e.type === "partition_lost" && lost.push(e.partition));
    const held = n1.node.heldPartitions();
    assert.ok(
      held.length > 0 && n1.thread !== undefined,
      "n1 holds partitions and renews from a thread",
    );
    n1.process.pause(); // the main loop only: its thread runs on
    await c.sim.runUntil(t0 + 15_000);
    n1.process.resume();
    await c.sim.runUntil(t0 + 16_000);
    assert.deepEqual(lost, [], "a 10 s stall lost partitions");
    assert.deepEqual(n1.node.heldPartitions(), held);
    n1.process.pause();
    await c.sim.runUntil(t0 + 38_000);
    n1.process.resume();
    await c.sim.runUntil(t0 + 39_000);
    assert.deepEqual(
      [...new Set(lost)].sort(),
      [...held].sort(),
      "a 22 s stall (past leaseMainStallMs) kept its partitions",
    );
  });

  for (const seed of [...FIXED, ...RANDOM]) {
    it(`seed ${seed}: every invariant holds`, async (t) => {
      t.diagnostic(`replay: npm run sim -- --seeds 1 --seed ${seed}`);
      const r = await runSimulation({ seed });
      const lines: string[] = [];
      report(r, (s) => lines.push(s));
      assert.equal(r.violations.length, 0, lines.join("\n"));
    });
  }

  it("self-test: a broken executor (one fence on several workers) is caught by invariant (a)", async () => {
    const r = await runSimulation({
      seed: 1,
      durationMs: 30_000,
      quietTailMs: 10_000,
      brokenExecutor: true,
      noFaults: true,
    });
    assert.ok(
      r.violations.some((v) => v.invariant === "attempt_on_two_workers"),
      "invariant (a) did not fire",
    );
  });

  // Both production sandboxes (the model itself: test/unit/sim-executor.test.ts).
  it("seed 1071 holds with either sandbox (docker lease countdown, process supervisor)", async () => {
    for (const sandbox of ["docker", "process"] as const) {
      const r = await runSimulation({ seed: 1071, sandbox });
      assert.deepEqual(
        r.violations.map((v) => v.invariant),
        [],
        `sandbox ${sandbox}`,
      );
    }
  });

  // The injected fault offers one fence to up to three workers and checks heartbeats and
  // completions by fence alone; with the production settings and users, seeds 1–40 fire at 14
  // and 16.
  it("self-test: one fence offered to several workers is caught by invariant (a)", async () => {
    assert.ok(
      await firesWithin(40, { fenceSharedByWorkers: true }, "attempt_on_two_workers"),
      "one fence offered to several workers but invariant (a) never fired in 40 seeds",
    );
  });

  // The injected fault `lapseWithoutProbe` lapses silent leases without a probe, as
  // before probes existed; with (h) judged without the old exemption of any worker or bus
  // fault: seeds 1–40 fire at 4, 7, 27 and 36.
  it("self-test: silent leases lapsing without a probe (a run executed again after it ended) is caught by invariant (h)", async () => {
    assert.ok(
      await firesWithin(40, { lapseWithoutProbe: true }, "run_reexecuted"),
      "probes skipped but invariant (h) never fired in 40 seeds",
    );
  });
});
