/**
 * Placement: partitionOf and rendezvous ownerOf/assign. Properties: exactly one owner among the
 * live nodes, determinism (independent of node order), minimal movement on join and leave, and an
 * even spread of actors over partitions.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { assign, ownerOf, partitionOf } from "../../../src/cluster/placement.ts";

const nodeId = fc.stringMatching(/^[A-Za-z0-9_-]{1,12}$/);
const nodeSet = (min: number, max: number) =>
  fc.uniqueArray(nodeId, { minLength: min, maxLength: max });

describe("placement: ownerOf / assign", () => {
  it("gives no owner when no node is live", () => {
    assert.equal(ownerOf(0, []), undefined);
    assert.deepEqual(assign(3, []), [undefined, undefined, undefined]);
  });

  it("every partition has exactly one owner, one of the given nodes", () => {
    fc.assert(
      fc.property(nodeSet(1, 8), fc.integer({ min: 1, max: 512 }), (nodes, partitions) => {
        const a = assign(partitions, nodes);
        assert.equal(a.length, partitions);
        for (const o of a) assert.ok(o !== undefined && nodes.includes(o));
      }),
    );
  });

  it("is deterministic and does not depend on the order of the node list", () => {
    fc.assert(
      fc.property(nodeSet(1, 8), fc.integer({ min: 1, max: 256 }), (nodes, partitions) => {
        const reversed = [...nodes].reverse();
        assert.deepEqual(assign(partitions, nodes), assign(partitions, reversed));
        assert.deepEqual(assign(partitions, nodes), assign(partitions, [...nodes]));
      }),
    );
  });

  it("a join moves only partitions that now belong to the new node, about 1/(n+1) of them", () => {
    fc.assert(
      // n ≤ 5 and ≥ 512 partitions keep ±50% beyond 4.5 standard deviations (no flaky runs).
      fc.property(nodeSet(2, 6), fc.integer({ min: 512, max: 2048 }), (all, partitions) => {
        const nodes = all.slice(0, -1);
        const joiner = all[all.length - 1]!;
        const before = assign(partitions, nodes);
        const after = assign(partitions, [...nodes, joiner]);
        let moved = 0;
        for (let p = 0; p < partitions; p++) {
          if (before[p] !== after[p]) {
            assert.equal(
              after[p],
              joiner,
              `partition ${p} moved to ${after[p]}, not to the joiner`,
            );
            moved++;
          }
        }
        const expected = partitions / (nodes.length + 1);
        assert.ok(
          moved >= expected * 0.5 && moved <= expected * 1.5,
          `moved ${moved} of ${partitions} with ${nodes.length}+1 nodes (expected ~${expected.toFixed(1)})`,
        );
      }),
      { numRuns: 60 },
    );
  });

  it("a leave moves only the leaver's partitions", () => {
    fc.assert(
      fc.property(
        nodeSet(2, 9),
        fc.integer({ min: 1, max: 512 }),
        fc.nat(),
        (nodes, partitions, pick) => {
          const leaver = nodes[pick % nodes.length]!;
          const before = assign(partitions, nodes);
          const after = assign(
            partitions,
            nodes.filter((n) => n !== leaver),
          );
          for (let p = 0; p < partitions; p++) {
            if (before[p] !== leaver)
              assert.equal(after[p], before[p], `partition ${p} moved though its owner stayed`);
            else assert.notEqual(after[p], leaver);
          }
        },
      ),
      { numRuns: 60 },
    );
  });

  it("spreads partitions roughly evenly over nodes (3 nodes, 256 partitions: each within ±50%)", () => {
    const nodes = ["node-a", "node-b", "node-c"];
    const counts = new Map<string, number>();
    for (const o of assign(256, nodes)) counts.set(o!, (counts.get(o!) ?? 0) + 1);
    for (const n of nodes) {
      const c = counts.get(n) ?? 0;
      assert.ok(c >= 256 / 3 / 2 && c <= (256 / 3) * 1.5, `${n} owns ${c}`);
    }
  });
});

describe("placement: partitionOf", () => {
  it("is in range [0, partitions) and deterministic", () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1 }),
        fc.string(),
        fc.integer({ min: 1, max: 4096 }),
        (type, id, partitions) => {
          const p = partitionOf({ type, id }, partitions);
          assert.ok(Number.isInteger(p) && p >= 0 && p < partitions);
          assert.equal(partitionOf({ type, id }, partitions), p);
        },
      ),
    );
  });

  it("spreads sequential ids roughly evenly (64 partitions, 64,000 ids, each within ±20%)", () => {
    const partitions = 64;
    const n = 64_000;
    const counts = new Array<number>(partitions).fill(0);
    for (let i = 0; i < n; i++)
      counts[partitionOf({ type: "counter", id: String(i) }, partitions)]!++;
    const mean = n / partitions;
    for (let p = 0; p < partitions; p++) {
      const c = counts[p]!;
      assert.ok(c > mean * 0.8 && c < mean * 1.2, `partition ${p} has ${c} (mean ${mean})`);
    }
  });

  it("separates type and id (counter/1 and job/1 are hashed as different strings)", () => {
    const hits = Array.from(
      { length: 100 },
      (_, i) =>
        partitionOf({ type: "counter", id: String(i) }, 1024) ===
        partitionOf({ type: "job", id: String(i) }, 1024),
    );
    assert.ok(hits.filter(Boolean).length < 10);
  });
});
