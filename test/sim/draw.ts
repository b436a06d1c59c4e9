/** Seeded draws shared by the simulation's modules: independent streams per purpose, ranges, picks. */
import { seededRandom, type Random } from "../../src/lib/random.ts";

/** An independent random stream per purpose, so one consumer's draws never shift another's. */
export function stream(seed: number, k: number): Random {
  let h = (seed ^ 0x9e3779b9) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0;
  h = (h + Math.imul(k + 1, 0xc2b2ae35)) >>> 0;
  return seededRandom(h ^ (h >>> 13));
}

/** A whole number in [lo, hi]. */
export const between = (r: Random, lo: number, hi: number): number =>
  lo + Math.floor(r.next() * (hi - lo + 1));

export const pick = <T>(r: Random, xs: readonly T[]): T => xs[Math.floor(r.next() * xs.length)]!;
