/**
 * A timed pool of operations (not a benchmark itself: it exports no `run`): `n` calls of an
 * operation, at most `inFlight` awaited at a time, each given its index. Pitfall: the index is
 * taken and the operation called in the same turn, so what an operation does before its first
 * `await` (a seeded random draw) happens in index order, as in a plain loop.
 */
import { performance } from "node:perf_hooks";

/** Calls `op(0)` … `op(n - 1)`, `inFlight` at a time; the milliseconds until all have resolved. */
export async function timedPool(
  n: number,
  inFlight: number,
  op: (i: number) => Promise<void>,
): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(inFlight, n) }, async () => {
      while (next < n) await op(next++);
    }),
  );
  return performance.now() - t0;
}
