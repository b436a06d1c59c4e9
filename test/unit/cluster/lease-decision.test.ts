/**
 * decideLeases is the pure heart of partition ownership: these cases pin when a node acquires,
 * steals and releases, and that it never steals from a live owner or before the TTL has passed
 * unchanged. Safety itself rests on the CAS writes; these rules keep a node from even trying.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import {
  decideLeases,
  trustedUntil,
  type LeaseInputs,
  type LeaseView,
} from "../../../src/cluster/lease-decision.ts";

const TTL = 4000;

function inputs(o: Partial<LeaseInputs> = {}): LeaseInputs {
  return {
    me: "me",
    incarnation: "inc-2",
    partitions: 1,
    desired: ["me"],
    leases: new Map(),
    held: new Set(),
    busy: new Set(),
    nowMs: 10_000,
    leaseTtlMs: TTL,
    ...o,
  };
}

const lease = (
  owner: string,
  incarnation: string,
  revision: number,
  changedAtMs: number,
): LeaseView => ({ owner, incarnation, revision, changedAtMs });

describe("decideLeases", () => {
  it("acquires a partition that is unleased and desired", () => {
    assert.deepEqual(decideLeases(inputs()), { acquire: [0], steal: [], release: [] });
  });

  it("does not acquire an unleased partition placement gives to another node", () => {
    assert.deepEqual(decideLeases(inputs({ desired: ["other"] })), {
      acquire: [],
      steal: [],
      release: [],
    });
  });

  it("does not acquire when no node is desired (no live scheduler)", () => {
    assert.deepEqual(decideLeases(inputs({ desired: [undefined] })), {
      acquire: [],
      steal: [],
      release: [],
    });
  });

  it("does not steal from an owner that renews (its lease changed less than a TTL ago)", () => {
    const leases = new Map([[0, lease("other", "i1", 7, 10_000 - TTL + 1)]]);
    assert.deepEqual(decideLeases(inputs({ leases })), { acquire: [], steal: [], release: [] });
  });

  it("orphaned partitions: steals from a LIVE owner that stopped renewing for a TTL", () => {
    // The owner lost trust in a NATS blip (so it stopped renewing) and placement moved the
    // partition here. Before the fix, a live owner was never stolen from: nobody owned it.
    const leases = new Map([[0, lease("other", "i1", 7, 10_000 - TTL)]]);
    assert.deepEqual(decideLeases(inputs({ leases })).steal, [
      { partition: 0, expectedRevision: 7 },
    ]);
  });

  it("does not steal from a dead owner before leaseTtlMs has passed unchanged", () => {
    const leases = new Map([[0, lease("other", "i1", 7, 10_000 - TTL + 1)]]);
    assert.deepEqual(decideLeases(inputs({ leases })).steal, []);
  });

  it("steals from a dead owner once unchanged for leaseTtlMs, expecting the lease's revision", () => {
    const leases = new Map([[0, lease("other", "i1", 7, 10_000 - TTL)]]);
    assert.deepEqual(decideLeases(inputs({ leases })), {
      acquire: [],
      steal: [{ partition: 0, expectedRevision: 7 }],
      release: [],
    });
  });

  it("does not steal an expired dead lease that placement gives to someone else", () => {
    const leases = new Map([[0, lease("other", "i1", 7, 0)]]);
    assert.deepEqual(decideLeases(inputs({ leases, desired: ["third"] })).steal, []);
  });

  it("an old incarnation of self counts as another owner (stolen after the TTL, not adopted)", () => {
    const fresh = new Map([[0, lease("me", "inc-1", 5, 9_000)]]);
    assert.deepEqual(decideLeases(inputs({ leases: fresh })), {
      acquire: [],
      steal: [],
      release: [],
    });
    const expired = new Map([[0, lease("me", "inc-1", 5, 10_000 - TTL)]]);
    assert.deepEqual(decideLeases(inputs({ leases: expired })).steal, [
      { partition: 0, expectedRevision: 5 },
    ]);
  });

  it("re-takes with CAS a lease of this very incarnation it no longer holds (trust window ran out)", () => {
    const leases = new Map([[0, lease("me", "inc-2", 5, 0)]]);
    assert.deepEqual(decideLeases(inputs({ leases })), {
      acquire: [],
      steal: [{ partition: 0, expectedRevision: 5 }],
      release: [],
    });
  });

  it("releases a held partition placement no longer gives to it", () => {
    const r = decideLeases(
      inputs({
        held: new Set([0]),
        desired: ["other"],
        leases: new Map([[0, lease("me", "inc-2", 9, 9_999)]]),
      }),
    );
    assert.deepEqual(r, { acquire: [], steal: [], release: [0] });
  });

  it("keeps a held partition that is still desired (no action)", () => {
    const r = decideLeases(
      inputs({ held: new Set([0]), leases: new Map([[0, lease("me", "inc-2", 9, 0)]]) }),
    );
    assert.deepEqual(r, { acquire: [], steal: [], release: [] });
  });

  it("leaves busy partitions untouched (no acquire, steal or release)", () => {
    const r = decideLeases(
      inputs({
        partitions: 3,
        desired: ["me", "me", "other"],
        leases: new Map([[1, lease("dead", "x", 4, 0)]]),
        held: new Set([2]),
        busy: new Set([0, 1, 2]),
      }),
    );
    assert.deepEqual(r, { acquire: [], steal: [], release: [] });
  });

  it("property: never steals a lease renewed within the TTL (other than its own unheld lease), never acts on busy partitions, every action is consistent", () => {
    const arb = fc.record({
      partitions: fc.integer({ min: 1, max: 24 }),
      seedDesired: fc.array(fc.constantFrom("me", "a", "b", undefined), {
        minLength: 24,
        maxLength: 24,
      }),
      leaseArr: fc.array(
        fc.option(
          fc.record({
            owner: fc.constantFrom("me", "a", "b"),
            incarnation: fc.constantFrom("inc-1", "inc-2"),
            revision: fc.integer({ min: 1, max: 1000 }),
            changedAtMs: fc.integer({ min: 0, max: 20_000 }),
          }),
        ),
        { minLength: 24, maxLength: 24 },
      ),
      heldArr: fc.array(fc.boolean(), { minLength: 24, maxLength: 24 }),
      busyArr: fc.array(fc.boolean(), { minLength: 24, maxLength: 24 }),
      nowMs: fc.integer({ min: 0, max: 30_000 }),
    });
    fc.assert(
      fc.property(arb, (g) => {
        const leases = new Map<number, LeaseView>();
        g.leaseArr.forEach((l, p) => l && leases.set(p, l));
        const held = new Set(g.heldArr.flatMap((h, p) => (h ? [p] : [])));
        const busy = new Set(g.busyArr.flatMap((b, p) => (b ? [p] : [])));
        const i = inputs({
          partitions: g.partitions,
          desired: g.seedDesired.slice(0, g.partitions),
          leases,
          held,
          busy,
          nowMs: g.nowMs,
        });
        const r = decideLeases(i);
        const all = [...r.acquire, ...r.release, ...r.steal.map((s) => s.partition)];
        assert.equal(new Set(all).size, all.length, "one action per partition at most");
        for (const p of all) assert.ok(p >= 0 && p < g.partitions && !busy.has(p));
        for (const p of r.acquire)
          assert.ok(!held.has(p) && !leases.has(p) && i.desired[p] === "me");
        for (const p of r.release) assert.ok(held.has(p) && i.desired[p] !== "me");
        for (const s of r.steal) {
          const l = leases.get(s.partition)!;
          const own = l.owner === "me" && l.incarnation === "inc-2";
          if (!own) assert.ok(g.nowMs - l.changedAtMs >= TTL, "stole before the TTL");
          assert.equal(s.expectedRevision, l.revision);
          assert.ok(!held.has(s.partition) && i.desired[s.partition] === "me");
        }
      }),
    );
  });
});

describe("trustedUntil", () => {
  it("is renewal start + ttl − safety margin", () => {
    assert.equal(trustedUntil(1_000, 4_000, 1_000), 4_000);
    assert.equal(trustedUntil(0, 4_000, 0), 4_000);
  });

  it("counts from when the renewal started, not when it returned (a slow write shortens trust)", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 1e12 }),
        fc.integer({ min: 1, max: 1e6 }),
        fc.integer({ min: 0, max: 1e6 }),
        (start, ttl, margin) => {
          assert.equal(trustedUntil(start, ttl, margin), start + ttl - margin);
          assert.ok(trustedUntil(start, ttl, margin) <= start + ttl);
        },
      ),
    );
  });
});
