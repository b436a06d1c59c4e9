/**
 * `npm run chaos -- --minutes 20 [--seed N] [--every-s 10] [--workers 3]`: the ledger chaos
 * scenario of test/chaos/ledger.test.ts for a given duration, a random fault (seeded) about
 * every `--every-s` seconds. Prints a human report, then one JSON line with the figures; exits
 * 1 when an invariant is violated (2 when the run itself broke).
 */
import { parseArgs } from "node:util";
import { FAULT_KINDS, formatReport, runLedgerChaos } from "./ledger-harness.ts";

const { values } = parseArgs({
  options: {
    minutes: { type: "string", default: "20" },
    seed: { type: "string" },
    "every-s": { type: "string", default: "10" },
    workers: { type: "string", default: "3" },
    examples: { type: "string", default: "30" },
  },
});
const seed = values.seed !== undefined ? Number(values.seed) : Date.now() % 1_000_000;
const minutes = Number(values.minutes);
if (!(minutes > 0)) {
  console.error("--minutes must be a positive number");
  process.exit(2);
}

let stopCluster: (() => Promise<void>) | undefined;
for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.on(sig, () => {
    console.error(`chaos: ${sig}, stopping the cluster`);
    void (stopCluster?.() ?? Promise.resolve()).finally(() => process.exit(130));
  });
}

// Retention stays on (it is part of the run path under test) but keeps every run of the session:
// one run per job every min(steps) seconds, plus margin; the product default (1,000) when that is enough.
const steps = [3, 4, 5, 6];
const keepRuns = Math.max(1000, Math.ceil((minutes * 60) / Math.min(...steps)) + 200);

try {
  const report = await runLedgerChaos({
    seed, executor: "process", schedulers: 3, workers: Number(values.workers), slots: 8, partitions: 16,
    tenants: [{ name: "alpha", jobs: 9 }, { name: "beta", jobs: 9 }, { name: "capped", jobs: 4, cap: 2 }],
    runLeaseTtlMs: 3000, faults: { durationMs: minutes * 60_000, kinds: FAULT_KINDS }, faultEveryMs: Number(values["every-s"]) * 1000,
    taskSeconds: [1, 2], longTasks: { every: 6, seconds: 4.5 }, steps, ...(keepRuns > 1000 ? { keepRuns } : {}),
    log: (l) => console.error(`[${new Date().toISOString()}] ${l}`),
  }, (s) => { stopCluster = s; });
  console.log(formatReport(report, Number(values.examples)));
  process.exit(report.violations > 0 ? 1 : 0);
} catch (e) {
  console.error("chaos: the run broke:", e);
  await stopCluster?.();
  process.exit(2);
}
