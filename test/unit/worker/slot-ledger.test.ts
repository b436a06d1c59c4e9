/**
 * The worker's slots and prefetch queue (src/worker/slot-ledger.ts), pure: admission, promotion
 * of the oldest queued attempt into a freed slot, the bounds, the default prefetch, and the slot
 * turnaround matching.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { defaultPrefetch, SlotLedger, Turnaround } from "../../../src/worker/slot-ledger.ts";

describe("slot ledger", () => {
  it("takes slots first, then due attempts into the queue, then refuses", () => {
    const l = new SlotLedger<string>(2, 2);
    assert.equal(l.room, 4);
    assert.equal(l.admit("a", false), "slot", "a slot needs no due start");
    assert.equal(l.admit("b", true), "slot");
    assert.equal(l.admit("c", false), "full", "an attempt not due yet never queues");
    assert.equal(l.admit("c", true), "queued");
    assert.equal(l.admit("d", true), "queued");
    assert.equal(l.admit("e", true), "full", "the queue is bounded by the prefetch");
    assert.deepEqual([l.room, l.held, l.queued], [0, 2, 2]);
    assert.equal(l.admit("c", true), "queued", "admitting again changes nothing");
    assert.equal(l.queued, 2);
  });

  it("a freed slot goes to the oldest queued attempt at once; a queued one that goes frees its place", () => {
    const l = new SlotLedger<string>(1, 2);
    l.admit("a", true);
    l.admit("b", true);
    l.admit("c", true);
    assert.deepEqual(l.release("c"), [], "a queued attempt leaves: nobody promoted");
    assert.equal(l.room, 1);
    assert.deepEqual(l.release("a"), ["b"], "the slot passes to b");
    assert.ok(l.holds("b"));
    assert.deepEqual([l.room, l.held, l.queued], [2, 1, 0]);
    assert.equal(l.release("a"), undefined, "released twice: nothing");
    assert.equal(l.release("zz"), undefined, "never admitted: nothing");
  });

  it("never holds more than its slots nor queues more than its prefetch (random operations)", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 5 }),
        fc.integer({ min: 0, max: 5 }),
        fc.array(fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 15 }), fc.boolean()), {
          maxLength: 80,
        }),
        (slots, prefetch, ops) => {
          const l = new SlotLedger<number>(slots, prefetch);
          const queue: number[] = []; // reference model of the queue, oldest first
          const holding = new Set<number>();
          for (const [admit, x, due] of ops) {
            if (admit) {
              const got = l.admit(x, due);
              let want: string = "full";
              if (holding.has(x)) want = "slot";
              else if (queue.includes(x)) want = "queued";
              else if (holding.size < slots) {
                want = "slot";
                holding.add(x);
              } else if (due && queue.length < prefetch) {
                want = "queued";
                queue.push(x);
              }
              assert.equal(got, want);
            } else {
              const got = l.release(x);
              if (holding.delete(x)) {
                const moved = queue.splice(0, Math.max(0, slots - holding.size));
                for (const m of moved) holding.add(m);
                assert.deepEqual(got, moved, "the oldest queued take the freed slot");
              } else if (queue.includes(x)) {
                queue.splice(queue.indexOf(x), 1);
                assert.deepEqual(got, []);
              } else assert.equal(got, undefined);
            }
            assert.ok(l.held <= slots && l.queued <= prefetch);
            assert.equal(l.room, slots + prefetch - holding.size - queue.length);
            // A queued attempt waits only while every slot is held.
            if (l.queued > 0) assert.equal(l.held, slots);
          }
        },
      ),
    );
  });

  it("rejects a negative or fractional size", () => {
    assert.throws(() => new SlotLedger(-1, 0), RangeError);
    assert.throws(() => new SlotLedger(1, 0.5), RangeError);
  });

  it("the default prefetch: an eighth of the slots, at least 2, at most 256, never more than the slots", () => {
    assert.deepEqual(
      [0, 1, 2, 8, 16, 17, 100, 4_000].map(defaultPrefetch),
      [0, 1, 2, 2, 2, 3, 13, 256],
    );
  });
});

describe("slot turnaround", () => {
  it("matches each start to the earliest unmatched free; a start with no free before it is none", () => {
    const t = new Turnaround(2);
    assert.equal(t.started(5), undefined, "a slot never used yet");
    t.freed(100);
    t.freed(110);
    assert.equal(t.started(100), 0);
    assert.equal(t.started(150), 40);
    assert.equal(t.started(160), undefined);
  });

  it("remembers at most one free per slot", () => {
    const t = new Turnaround(1);
    t.freed(100);
    t.freed(200);
    assert.equal(t.started(250), 50, "the older free is forgotten");
    assert.equal(t.started(260), undefined);
  });
});
