/**
 * Weighted max-min fair shares of the fleet's worker slots (pure; see ARCHITECTURE.md "Fairness").
 *
 * Water-filling: tenants are served in order of demand per weight. A tenant asking no more than
 * its weighted part of what is left gets all it asks; what remains is split by weight among the
 * others. Shares are whole slots: the floor of each part, and the slots left by the rounding go
 * one each to the largest carries (`carry`: each computation adds a tenant's fractional part,
 * each slot given takes 1 off — deficit rounding), so a part of 1.5 is 1 and 2 in turn and over
 * successive computations a tenant's slots average its exact part. The shares sum to
 * min(capacity, total demand) and never exceed a tenant's demand.
 *
 * Pitfalls: deterministic only because the input is sorted by tenant id first (floating-point
 * sums included; carry ties: larger weight, then id); a tenant served in full owes nothing.
 */
import { KairosError } from "../lib/errors.ts";

export interface TenantDemand {
  readonly tenant: string;
  /** Slots wanted (running + waiting, at most the tenant's cap); a whole number ≥ 0. */
  readonly demand: number;
  /** Relative weight, > 0. */
  readonly weight: number;
}

/** Most tenants one computation takes (a limit on everything: the fleet actor bounds its table too). */
export const MAX_FAIR_TENANTS = 100_000;

/** Shares by tenant, for every tenant in `demands` (0 for a tenant without demand). */
export function maxMinShares(
  capacity: number,
  demands: readonly TenantDemand[],
): Map<string, number> {
  return fairShares(capacity, demands, new Map()).shares;
}

export interface FairShares {
  shares: Map<string, number>;
  /** Each rounded tenant's carry for the next computation, in (−1, 1]. */
  carry: Map<string, number>;
  /** Some tenant's exact part was not a whole number: the next computation may turn the rounding. */
  fractional: boolean;
  /** Each rounded tenant's exact (fractional) part, before the rounding. */
  parts: Map<string, number>;
}

/** `maxMinShares` with deficit rounding across computations (see the module header). */
export function fairShares(
  capacity: number,
  demands: readonly TenantDemand[],
  carry: ReadonlyMap<string, number>,
): FairShares {
  if (!Number.isInteger(capacity) || capacity < 0)
    throw new KairosError(
      "invalid_argument",
      `capacity must be a whole number ≥ 0, got ${capacity}`,
      { field: "capacity" },
    );
  if (demands.length > MAX_FAIR_TENANTS)
    throw new KairosError(
      "invalid_argument",
      `at most ${MAX_FAIR_TENANTS} tenants, got ${demands.length}`,
      { field: "demands" },
    );
  const shares = new Map<string, number>();
  for (const d of demands) {
    if (shares.has(d.tenant))
      throw new KairosError("invalid_argument", `tenant ${d.tenant} appears twice`, {
        field: "demands",
      });
    if (!Number.isInteger(d.demand) || d.demand < 0)
      throw new KairosError(
        "invalid_argument",
        `demand of ${d.tenant} must be a whole number ≥ 0, got ${d.demand}`,
        { field: "demand" },
      );
    if (!(Number.isFinite(d.weight) && d.weight > 0))
      throw new KairosError(
        "invalid_argument",
        `weight of ${d.tenant} must be > 0, got ${d.weight}`,
        { field: "weight" },
      );
    shares.set(d.tenant, 0);
  }
  const byId = (a: TenantDemand, b: TenantDemand) =>
    a.tenant < b.tenant ? -1 : a.tenant > b.tenant ? 1 : 0;
  // Served in order of demand per weight (ties by id): once one does not fit, none after it does.
  const wanting = demands
    .filter((d) => d.demand > 0)
    .sort((a, b) => a.demand / a.weight - b.demand / b.weight || byId(a, b));
  // Suffix sums of weights, summed in a fixed order (deterministic floating point).
  const weightFrom = new Array<number>(wanting.length + 1).fill(0);
  for (let i = wanting.length - 1; i >= 0; i--)
    weightFrom[i] = weightFrom[i + 1]! + wanting[i]!.weight;
  let left = capacity;
  let i = 0;
  for (; i < wanting.length; i++) {
    const t = wanting[i]!;
    if (t.demand > (left * t.weight) / weightFrom[i]!) break;
    shares.set(t.tenant, t.demand);
    left -= t.demand;
  }
  // The rest want more than their part: floor of the weighted split, then the remainders.
  const rest = wanting.slice(i);
  const level = weightFrom[i]! > 0 ? left / weightFrom[i]! : 0;
  const parts = rest.map((t) => {
    const exact = Math.min(t.demand, level * t.weight);
    const whole = Math.floor(exact);
    return { t, whole, frac: exact - whole };
  });
  let spare = left - parts.reduce((n, p) => n + p.whole, 0);
  const owed = (p: (typeof parts)[number]) =>
    p.frac + Math.max(-1, Math.min(1, carry.get(p.t.tenant) ?? 0));
  parts.sort((a, b) => owed(b) - owed(a) || b.t.weight - a.t.weight || byId(a.t, b.t));
  const nextCarry = new Map<string, number>();
  const exact = new Map<string, number>();
  for (const p of parts) {
    const extra = spare > 0 && p.whole < p.t.demand ? 1 : 0;
    spare -= extra;
    shares.set(p.t.tenant, p.whole + extra);
    if (p.frac > 0) {
      nextCarry.set(p.t.tenant, Math.max(-1, Math.min(1, owed(p) - extra)));
      exact.set(p.t.tenant, p.whole + p.frac);
    }
  }
  return { shares, carry: nextCarry, fractional: parts.some((p) => p.frac > 1e-9), parts: exact };
}
