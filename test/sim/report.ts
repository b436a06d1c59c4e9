/** Text report of one simulated seed (shared by `npm run sim` and the test). */
import type { SimResult } from "./cluster.ts";

/** Prints a seed's violations: each invariant's first one with its trace, the others briefly. */
export function report(r: SimResult, out: (s: string) => void = console.log): void {
  if (r.violations.length === 0) return;
  out(
    `seed ${r.seed} (${r.profile}): ${r.violations.length} violation(s); faults: ${r.stats.faults.join("; ") || "none"}`,
  );
  const shown = new Set<string>();
  for (const v of r.violations) {
    const first = !shown.has(v.invariant);
    shown.add(v.invariant);
    out(
      `seed ${r.seed}: VIOLATION ${v.invariant} at t+${(v.atMs / 1000).toFixed(3)}s: ${v.detail}`,
    );
    if (first) for (const line of v.trace) out(`    ${line}`);
  }
}
