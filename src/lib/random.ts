/**
 * Randomness is injected and seedable, so that a simulation or a failing property test can be
 * replayed from its seed. `Random.next()` returns a float in [0, 1).
 */
export interface Random {
  next(): number;
}

/** Mulberry32: small, fast, good enough for jitter and simulation; not for secrets. */
export function seededRandom(seed: number): Random {
  let a = seed >>> 0;
  return {
    next() {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    },
  };
}

/** Process randomness for production entry points. */
export const systemRandom: Random = { next: () => Math.random() };
