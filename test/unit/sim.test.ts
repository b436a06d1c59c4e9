/**
 * The deterministic cluster simulation (test/sim/) under `npm test`: a fixed set of seeds plus a
 * few random ones (printed, so a failure can be replayed with `npm run sim -- --seeds 1 --seed S`),
 * and self-tests proving the invariants can fail.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { runSimulation } from "../sim/cluster.ts";
import { report } from "../sim/report.ts";

/** Whether `invariant` fires in one of seeds 1..`seeds` run with `o` (a self-test's re-opened hole). */
async function firesWithin(seeds: number, o: { reopenHole1?: boolean; skipProbes?: boolean }, invariant: string): Promise<boolean> {
  for (let seed = 1; seed <= seeds; seed++) {
    const r = await runSimulation({ seed, ...o });
    if (r.violations.some((v) => v.invariant === invariant)) return true;
  }
  return false;
}

// 1071: a worker paused 5 s just after starting an attempt (its lease never renewed); at d004e19
// only the sandbox's own deadline (container lease countdown or supervisor) stopped the task
// before the owner re-offered the run — see "seed 1071 holds with either sandbox" below and
// test/unit/sim-executor.test.ts.
const FIXED = [1, 3, 8, 1071];
// KAIROS_SIM_RANDOM_SEEDS=0 turns the random ones off (e.g. while a known violation is open).
const RANDOM = Array.from({ length: Number(process.env.KAIROS_SIM_RANDOM_SEEDS ?? "2") }, () => Math.floor(Math.random() * 2 ** 31));

describe("cluster simulation", { timeout: 110_000 }, () => {
  it("is deterministic: one seed replays to the same ledger", async () => {
    const a = await runSimulation({ seed: 42, durationMs: 40_000, quietTailMs: 15_000 });
    const b = await runSimulation({ seed: 42, durationMs: 40_000, quietTailMs: 15_000 });
    assert.ok(a.stats.executions > 0, "nothing ran");
    assert.equal(a.stats.digest, b.stats.digest, "the ledgers differ");
    assert.deepEqual(a.violations.map((v) => v.detail), b.violations.map((v) => v.detail));
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
    const r = await runSimulation({ seed: 1, durationMs: 30_000, quietTailMs: 10_000, brokenExecutor: true, noFaults: true });
    assert.ok(r.violations.some((v) => v.invariant === "attempt_on_two_workers"), "invariant (a) did not fire");
  });

  // What kept seed 1071 green was the sandbox's deadline: at d004e19 the same seed with nothing
  // stopping a frozen worker's task (`--sandbox none`) overlapped. The next commit's completion
  // reports shifted the seeds' message draws, and since then no seed of 1001–1300 overlaps with
  // `none` either, so the model itself is tested directly (test/unit/sim-executor.test.ts) and
  // here only that both production sandboxes keep seed 1071 green.
  it("seed 1071 holds with either sandbox (docker lease countdown, process supervisor)", async () => {
    for (const sandbox of ["docker", "process"] as const) {
      const r = await runSimulation({ seed: 1071, sandbox });
      assert.deepEqual(r.violations.map((v) => v.invariant), [], `sandbox ${sandbox}`);
    }
  });

  // The test-only switch JobActorConfig.testOnlyHole1 re-opens hole 1 (one fence offered to up to
  // three workers, heartbeats and completions checked by fence alone); measured: found at seed 22
  // (at seed 11 before the eighth session's completion reports shifted the seeds' message draws;
  // seeds 1–60: 22, 29, 42).
  it("self-test: re-opened hole 1 (one fence offered to several workers) is caught by invariant (a)", async () => {
    assert.ok(await firesWithin(40, { reopenHole1: true }, "attempt_on_two_workers"), "hole 1 re-opened but invariant (a) never fired in 40 seeds");
  });

  // The test-only switch JobActorConfig.testOnlyNoProbe lapses silent leases without a probe, as
  // before the twelfth session; measured at bac0f0c with an uncommitted env switch of the same
  // effect: seeds 1–300 gave 26 run_reexecuted violations (its commit message).
  it("self-test: silent leases lapsing without a probe (a run executed again after it ended) is caught by invariant (h)", async () => {
    assert.ok(await firesWithin(40, { skipProbes: true }, "run_reexecuted"), "probes skipped but invariant (h) never fired in 40 seeds");
  });
});
