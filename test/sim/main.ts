/**
 * `npm run sim -- --seeds N [--seed S] [--sandbox docker|process|none] [--trace] [--verbose]`:
 * runs N seeded cluster simulations (seeds
 * S, S+1, …; S defaults to a random one, printed) and checks the invariants of invariants.ts.
 * On a violation it prints the seed, the invariant and the last events before it; the last line
 * is `simulation: N seeds, V violations`; the exit code is 1 when any invariant broke.
 * Replay one seed with `--seeds 1 --seed S`. `--sandbox` fixes what kills a frozen worker's task
 * for every worker (default: seeded per worker, docker or process; `none`: nothing stops a frozen
 * worker's task — for experiments). `--trace` prints every event; `--broken-executor` is the
 * invariant (a) self-test.
 */
import { runSimulation } from "./cluster.ts";
import type { SimSandbox } from "./executor.ts";
import { report } from "./report.ts";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

async function main(): Promise<void> {
  const seeds = Number(arg("seeds") ?? "10");
  // The entry point may read the host's randomness: only to choose a first seed, which it prints.
  const first = Number(arg("seed") ?? Math.floor(Math.random() * 2 ** 31));
  const verbose = process.argv.includes("--verbose");
  const sandbox = arg("sandbox");
  if (sandbox !== undefined && !["docker", "process", "none"].includes(sandbox)) {
    throw new Error(`--sandbox must be docker, process or none, not ${JSON.stringify(sandbox)}`);
  }
  const t0 = performance.now();
  let violations = 0;
  const byInvariant = new Map<string, number[]>();
  for (let i = 0; i < seeds; i++) {
    const seed = first + i;
    const r = await runSimulation({ seed, brokenExecutor: process.argv.includes("--broken-executor"),
      ...(sandbox !== undefined ? { sandbox: sandbox as SimSandbox } : {}),
      ...(process.argv.includes("--trace") ? { echo: (l: string) => console.log(`  | ${l}`) } : {}) });
    violations += r.violations.length;
    report(r);
    for (const v of r.violations) byInvariant.set(v.invariant, [...(byInvariant.get(v.invariant) ?? []), seed]);
    if (verbose || r.violations.length > 0) {
      console.log(`seed ${seed}: ${r.violations.length} violation(s), ${r.stats.executions} executions, ${r.stats.runs} run records`);
    }
  }
  for (const [inv, s] of byInvariant) console.log(`  ${inv}: seeds ${[...new Set(s)].join(", ")}`);
  console.log(`first seed ${first}; ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  console.log(`simulation: ${seeds} seeds, ${violations} violations`);
  process.exitCode = violations > 0 ? 1 : 0;
}

await main();
