/**
 * Ledger chaos on real processes (engine: ./ledger-harness.ts). Every execution of every attempt
 * is written down by the task itself (process executor) or taken from the Docker engine's event
 * stream (docker executor) while a seeded schedule of faults runs: kill -9 / SIGTERM of
 * schedulers, kill -9 and SIGSTOP of workers, a NATS server restart, and a worker cut off from
 * NATS through a TCP proxy. Afterwards: (a) no attempt executed twice, (b) no two executions of
 * a run overlapping, (c) exactly one run record per occurrence, (d) no run stuck, (e) no tenant
 * above its max_concurrent_runs. The long version is `npm run chaos -- --minutes 20`.
 *
 * KAIROS_CHAOS_SEED=<n> replays a fault schedule; KAIROS_CHAOS_KEEP=1 keeps the ledger folder.
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { dockerSkip, ensureTestImage } from "../support/docker-image.ts";
import { FAULT_KINDS, formatReport, ledgerClockWorks, prng, runLedgerChaos, type ChaosOptions, type FaultKind } from "./ledger-harness.ts";

const SEED = Number(process.env["KAIROS_CHAOS_SEED"] ?? 7321);

/** Every fault kind once, in an order drawn from the seed. */
function shuffled(seed: number): FaultKind[] {
  const rng = prng(seed ^ 0x5eed);
  const xs = [...FAULT_KINDS];
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
  return xs;
}

describe("ledger chaos (real processes)", { timeout: 420_000 }, () => {
  const stops: (() => Promise<void>)[] = [];
  after(async () => {
    await Promise.all(stops.map((s) => s()));
  });

  it("process executor: every fault kind once; attempts run once, runs never overlap, occurrences recorded once, nothing stuck, caps held", { timeout: 240_000 }, async () => {
    assert.ok(ledgerClockWorks(), "`date +%s%3N` must print epoch milliseconds");
    const o: ChaosOptions = {
      seed: SEED, executor: "process", schedulers: 3, workers: 3, slots: 8, partitions: 16,
      tenants: [{ name: "alpha", jobs: 9 }, { name: "beta", jobs: 9 }, { name: "capped", jobs: 4, cap: 2 }],
      runLeaseTtlMs: 3000, faults: { list: shuffled(SEED) }, faultEveryMs: 10_000,
      taskSeconds: [1, 2], steps: [3, 4, 5, 6],
      log: (l) => console.log(`# ${l}`),
    };
    const r = await runLedgerChaos(o, (s) => stops.push(s));
    console.log(formatReport(r, 20));
    assert.equal(r.faultsTotal, FAULT_KINDS.length);
    assert.ok(r.executions > 50, `enough executions: ${r.executions}`);
    assert.deepEqual(r.examples.map((v) => `[${v.invariant}] ${v.text}`), [], "invariant violations (see the report above)");
  });

  it("docker executor: kill -9 of workers; no attempt executed twice, no overlapping executions (from engine events)", { skip: dockerSkip(), timeout: 180_000 }, async () => {
    await ensureTestImage();
    const o: ChaosOptions = {
      seed: SEED, executor: "docker", schedulers: 2, workers: 2, slots: 4, partitions: 8,
      tenants: [{ name: "docker", jobs: 4 }],
      runLeaseTtlMs: 3000, faults: { list: ["kill9_worker", "kill9_worker"] }, faultEveryMs: 10_000,
      taskSeconds: [2, 2], steps: [4, 5],
      log: (l) => console.log(`# ${l}`),
    };
    const r = await runLedgerChaos(o, (s) => stops.push(s));
    console.log(formatReport(r, 20));
    assert.ok(r.executions > 5, `enough container executions: ${r.executions}`);
    const ab = r.examples.filter((v) => v.invariant === "a" || v.invariant === "b");
    assert.deepEqual(ab.map((v) => `[${v.invariant}] ${v.text}`), [], "attempts executed twice / overlapping executions (see the report above)");
  });
});
