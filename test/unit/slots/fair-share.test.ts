/**
 * maxMinShares: worked examples, input validation, and property checks on random inputs against
 * the definition of weighted max-min fairness (a continuous reference water-filling, rounding to
 * whole slots allowed within one slot).
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { fairShares, maxMinShares, type TenantDemand } from "../../../src/slots/fair-share.ts";
import { isKairosError } from "../../../src/lib/errors.ts";

const obj = (m: Map<string, number>) =>
  Object.fromEntries([...m].sort(([a], [b]) => (a < b ? -1 : 1)));
const d = (tenant: string, demand: number, weight = 1): TenantDemand => ({
  tenant,
  demand,
  weight,
});

/** The textbook continuous water-filling, by repeated rounds (a second, independent algorithm). */
function reference(capacity: number, demands: readonly TenantDemand[]): Map<string, number> {
  const out = new Map(demands.map((x) => [x.tenant, 0]));
  let active = demands.filter((x) => x.demand > 0);
  let left = capacity;
  for (;;) {
    const w = active.reduce((n, x) => n + x.weight, 0);
    if (active.length === 0 || left <= 1e-9) return out;
    const level = left / w;
    const sated = active.filter((x) => x.demand <= level * x.weight);
    if (sated.length === 0) {
      for (const x of active) out.set(x.tenant, level * x.weight);
      return out;
    }
    for (const x of sated) {
      out.set(x.tenant, x.demand);
      left -= x.demand;
    }
    active = active.filter((x) => !sated.includes(x));
  }
}

describe("maxMinShares", () => {
  it("splits by weight when everyone wants more than the fleet: 1:3 of 40 is 10 and 30", () => {
    assert.deepEqual(obj(maxMinShares(40, [d("a", 100, 1), d("b", 100, 3)])), { a: 10, b: 30 });
  });

  it("a tenant asking less than its weighted share gets all it asks; the rest is split by weight", () => {
    // fair parts of 40 at weights 1,1,2,1: 8,8,16,8; "small" asks 2 → the other 38 split 1:1:2
    assert.deepEqual(
      obj(maxMinShares(40, [d("a", 1000), d("b", 1000), d("c", 1000, 2), d("small", 2)])),
      { a: 10, b: 9, c: 19, small: 2 },
    );
    // a capped tenant (its demand is at most its cap) frees its part for the others
    assert.deepEqual(
      obj(maxMinShares(40, [d("a", 1000), d("b", 1000), d("c", 16, 2), d("small", 2)])),
      { a: 11, b: 11, c: 16, small: 2 },
    );
  });

  it("everyone gets its demand when the fleet is big enough; no demand, no share", () => {
    assert.deepEqual(obj(maxMinShares(100, [d("a", 5), d("b", 7, 9), d("c", 0)])), {
      a: 5,
      b: 7,
      c: 0,
    });
    assert.deepEqual(obj(maxMinShares(0, [d("a", 5)])), { a: 0 });
    assert.deepEqual(obj(maxMinShares(10, [])), {});
  });

  it("rounding: leftover slots go to the largest remainders, then the larger weight, then the smaller id", () => {
    assert.deepEqual(obj(maxMinShares(10, [d("a", 100), d("b", 100), d("c", 100)])), {
      a: 4,
      b: 3,
      c: 3,
    });
    assert.deepEqual(obj(maxMinShares(2, [d("a", 9), d("b", 9), d("c", 9), d("d", 9)])), {
      a: 1,
      b: 1,
      c: 0,
      d: 0,
    });
    assert.deepEqual(obj(maxMinShares(7, [d("a", 9, 1), d("b", 9, 2)])), { a: 2, b: 5 }); // 2.33 / 4.67
  });

  it("is deterministic and independent of input order", () => {
    const xs = [d("x", 13, 1.5), d("y", 40, 0.7), d("z", 3, 2), d("w", 25, 1)];
    const a = obj(maxMinShares(37, xs));
    assert.deepEqual(obj(maxMinShares(37, [...xs].reverse())), a);
    assert.deepEqual(obj(maxMinShares(37, [xs[2]!, xs[0]!, xs[3]!, xs[1]!])), a);
  });

  it("refuses bad input with invalid_argument", () => {
    const bad: [number, TenantDemand[]][] = [
      [-1, []],
      [1.5, []],
      [10, [d("a", -1)]],
      [10, [d("a", 1.5)]],
      [10, [d("a", 1, 0)]],
      [10, [d("a", 1, Number.NaN)]],
      [10, [d("a", 1), d("a", 2)]],
    ];
    for (const [c, xs] of bad)
      assert.throws(
        () => maxMinShares(c, xs),
        (e) => isKairosError(e, "invalid_argument"),
        JSON.stringify([c, xs]),
      );
  });

  const input = fc.record({
    capacity: fc.integer({ min: 0, max: 500 }),
    demands: fc.uniqueArray(
      fc.record({
        tenant: fc.stringMatching(/^[a-z]{1,6}$/),
        demand: fc.integer({ min: 0, max: 300 }),
        weight: fc.oneof(
          fc.integer({ min: 1, max: 10 }),
          fc.double({ min: 0.01, max: 1000, noNaN: true }),
        ),
      }),
      { selector: (x) => x.tenant, maxLength: 30 },
    ),
  });

  it("property: whole shares, each ≤ its demand, summing to min(capacity, total demand)", () => {
    fc.assert(
      fc.property(input, ({ capacity, demands }) => {
        const s = maxMinShares(capacity, demands);
        assert.equal(s.size, demands.length);
        let sum = 0;
        for (const x of demands) {
          const v = s.get(x.tenant)!;
          assert.ok(
            Number.isInteger(v) && v >= 0 && v <= x.demand,
            `${x.tenant}: ${v} of ${x.demand}`,
          );
          sum += v;
        }
        assert.equal(
          sum,
          Math.min(
            capacity,
            demands.reduce((n, x) => n + x.demand, 0),
          ),
        );
      }),
      { numRuns: 500 },
    );
  });

  it("property: within one slot of the continuous weighted max-min allocation", () => {
    fc.assert(
      fc.property(input, ({ capacity, demands }) => {
        const s = maxMinShares(capacity, demands);
        const r = reference(capacity, demands);
        for (const x of demands)
          assert.ok(
            Math.abs(s.get(x.tenant)! - r.get(x.tenant)!) < 1 + 1e-6,
            `${x.tenant}: ${s.get(x.tenant)} vs ${r.get(x.tenant)}`,
          );
      }),
      { numRuns: 500 },
    );
  });

  it("property: no tenant can gain except at the cost of one with no more per weight (max-min, ±1 slot)", () => {
    fc.assert(
      fc.property(input, ({ capacity, demands }) => {
        const s = maxMinShares(capacity, demands);
        for (const i of demands) {
          const si = s.get(i.tenant)!;
          if (si >= i.demand) continue; // satisfied
          for (const j of demands) {
            const sj = s.get(j.tenant)!;
            // j holds more per weight than i (beyond rounding) only if i is satisfied — never here
            assert.ok(
              (sj - 1) / j.weight <= (si + 1) / i.weight + 1e-9,
              `${i.tenant} (${si}/${i.weight}) vs ${j.tenant} (${sj}/${j.weight})`,
            );
          }
        }
      }),
      { numRuns: 500 },
    );
  });

  it("property: the same demands in any order give the same shares", () => {
    fc.assert(
      fc.property(input, fc.integer(), ({ capacity, demands }, seed) => {
        const shuffled = [...demands].sort(
          (a, b) =>
            ((a.tenant.charCodeAt(0) * 31 + seed) % 7) - ((b.tenant.charCodeAt(0) * 31 + seed) % 7),
        );
        assert.deepEqual(
          obj(maxMinShares(capacity, shuffled)),
          obj(maxMinShares(capacity, demands)),
        );
      }),
      { numRuns: 300 },
    );
  });

  it("deficit rounding: a part of 1.5 slots is 1 and 2 in turn, and over many computations each tenant averages its exact part", () => {
    const demands = [
      { tenant: "a", demand: 100, weight: 1 },
      { tenant: "b", demand: 100, weight: 1 },
      { tenant: "c", demand: 100, weight: 2 },
      { tenant: "d", demand: 100, weight: 1 },
    ];
    let carry = new Map<string, number>();
    const total = new Map<string, number>();
    const rounds = 40;
    const seen = new Set<string>();
    for (let i = 0; i < rounds; i++) {
      const r = fairShares(8, demands, carry);
      carry = r.carry;
      assert.equal(
        [...r.shares.values()].reduce((n, x) => n + x, 0),
        8,
        "all slots given",
      );
      assert.ok(r.fractional);
      for (const [t, x] of r.shares) total.set(t, (total.get(t) ?? 0) + x);
      seen.add(`${r.shares.get("a")}${r.shares.get("b")}${r.shares.get("d")}`);
    }
    // Exact parts: 8 × 1/5 = 1.6 for weight 1, 3.2 for weight 2.
    for (const t of ["a", "b", "d"])
      assert.ok(
        Math.abs(total.get(t)! / rounds - 1.6) <= 1 / rounds + 1e-9,
        `${t}: ${total.get(t)! / rounds}`,
      );
    assert.ok(
      Math.abs(total.get("c")! / rounds - 3.2) <= 1 / rounds + 1e-9,
      `c: ${total.get("c")! / rounds}`,
    );
    assert.ok(seen.size > 1, "the extra slots move between tenants");
    // Without the carry the same tenants always win the rounding.
    const fixed = maxMinShares(8, demands);
    assert.deepEqual([fixed.get("a"), fixed.get("b"), fixed.get("d")], [2, 2, 1]);
  });
});
