/**
 * The reference a benchmark judges shares by: continuous weighted max-min (water-filling). Kept
 * apart from src/slots on purpose — the measure must not share code with what it measures.
 */
/** Continuous weighted max-min of `capacity` between demands, by weight. */
export function waterFill(capacity: number, ds: { demand: number; weight: number }[]): number[] {
  const out = ds.map(() => 0);
  let active = ds.map((_, i) => i).filter((i) => ds[i]!.demand > 0);
  let left = capacity;
  while (active.length > 0 && left > 1e-9) {
    const level = left / active.reduce((n, i) => n + ds[i]!.weight, 0);
    const sated = active.filter((i) => ds[i]!.demand <= level * ds[i]!.weight);
    if (sated.length === 0) {
      for (const i of active) out[i] = level * ds[i]!.weight;
      break;
    }
    for (const i of sated) {
      out[i] = ds[i]!.demand;
      left -= ds[i]!.demand;
    }
    active = active.filter((i) => !sated.includes(i));
  }
  return out;
}
