/**
 * `npm run chaos -- --minutes 30 --nats-cluster 3 [--seed N] [--every-s 8] [--workers 3]
 * [--commands 0.5]`: the ledger chaos scenario of test/chaos/ledger.test.ts for a given
 * duration: a random fault (seeded, every kind of test/chaos/ledger-types.ts the topology allows)
 * at most every `--every-s` seconds (each also waits for the cluster to recover from the last), a
 * user's command during a `--commands` share of them. `--nats-cluster 3`: a 3-server NATS cluster
 * with R3 buckets (default 1: one server, R1). Prints a human
 * report, then one JSON line with the figures (the at-least-once re-runs among them); exits 1
 * when an invariant is violated (2 when the run itself broke).
 */
import { parseArgs } from "node:util";
import { formatReport, runLedgerChaos } from "./ledger-harness.ts";
import { FAULT_KINDS } from "./ledger-types.ts";

const { values } = parseArgs({
  options: {
    minutes: { type: "string", default: "20" },
    seed: { type: "string" },
    "every-s": { type: "string", default: "8" },
    workers: { type: "string", default: "3" },
    "nats-cluster": { type: "string", default: "1" },
    commands: { type: "string", default: "0.5" },
    examples: { type: "string", default: "30" },
  },
});
const seed = values.seed !== undefined ? Number(values.seed) : Date.now() % 1_000_000;
const minutes = Number(values.minutes);
const natsServers = Number(values["nats-cluster"]);
const commandShare = Number(values.commands);
const fail = (why: string): never => {
  console.error(why);
  process.exit(2);
};
if (!(minutes > 0)) fail("--minutes must be a positive number");
if (natsServers !== 1 && natsServers !== 3)
  fail("--nats-cluster must be 1 (one server, R1 buckets) or 3 (a 3-server cluster, R3 buckets)");
if (!(commandShare >= 0 && commandShare <= 1))
  fail("--commands must be a share of faults between 0 and 1");
if (!Number.isSafeInteger(seed) || seed < 0) fail("--seed must be a whole number ≥ 0");

let stopCluster: (() => Promise<void>) | undefined;
for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.on(sig, () => {
    console.error(`chaos: ${sig}, stopping the cluster`);
    void (stopCluster?.() ?? Promise.resolve()).finally(() => process.exit(130));
  });
}

// Retention stays on (it is part of the run path under test) but keeps every run of this chaos run:
// one run per job every min(steps) seconds, plus margin; the product default (1,000) when that is enough.
const steps = [3, 4, 5, 6];
const keepRuns = Math.max(1000, Math.ceil((minutes * 60) / Math.min(...steps)) + 200);

try {
  const report = await runLedgerChaos(
    {
      seed,
      executor: "process",
      natsServers: natsServers as 1 | 3,
      schedulers: 3,
      workers: Number(values.workers),
      slots: 8,
      partitions: 16,
      tenants: [
        { name: "alpha", jobs: 9 },
        { name: "beta", jobs: 9 },
        { name: "capped", jobs: 4, cap: 2 },
      ],
      runLeaseTtlMs: 3000,
      faults: { durationMs: minutes * 60_000, kinds: FAULT_KINDS },
      faultEveryMs: Number(values["every-s"]) * 1000,
      commandShare,
      taskSeconds: [1, 2],
      longTasks: { every: 6, seconds: 4.5 },
      steps,
      ...(keepRuns > 1000 ? { keepRuns } : {}),
      log: (l) => console.error(`[${new Date().toISOString()}] ${l}`),
    },
    (s) => {
      stopCluster = s;
    },
  );
  console.log(formatReport(report, Number(values.examples)));
  process.exit(report.violations > 0 ? 1 : 0);
} catch (e) {
  console.error("chaos: the run broke:", e);
  await stopCluster?.();
  process.exit(2);
}
