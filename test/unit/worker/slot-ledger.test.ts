/**
 * The worker's slots and prefetch queue (src/worker/slot-ledger.ts), pure: admission, promotion
 * of a ready queued attempt into a freed slot (on time before late, each oldest first), the
 * bounds, the default prefetch, and the slot turnaround matching.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import {
  defaultPrefetch,
  MAX_PASSED,
  SlotLedger,
  Turnaround,
} from "../../../src/worker/slot-ledger.ts";

describe("slot ledger", () => {
  const all = () => true;
  it("takes slots first, then the queue (up to `prefetch` late and as many on time), then refuses", () => {
    const l = new SlotLedger<string>(2, 2);
    assert.equal(l.room, 4, "2 slots and the 2 places of late offers");
    assert.equal(l.admit("a", true), "slot", "a slot whether on time or late");
    assert.equal(l.admit("b", false), "slot");
    assert.equal(l.admit("c", true), "queued", "an attempt on time (not due yet) queues too");
    assert.equal(l.admit("d", false), "queued");
    assert.equal(l.admit("e", false), "queued");
    assert.equal(l.admit("f", false), "full", "late offers: bounded by the prefetch");
    assert.deepEqual([l.room, l.held, l.queued], [0, 2, 3]);
    assert.equal(l.admit("g", true), "queued", "on time: places of their own");
    assert.equal(l.admit("h", true), "full", "bounded by the prefetch too");
    assert.equal(l.admit("c", false), "queued", "admitting again changes nothing");
    assert.equal(l.queued, 4);
  });

  it("a freed slot goes to a READY queued attempt at once; a queued one that goes frees its place", () => {
    const l = new SlotLedger<string>(1, 3);
    l.admit("a", false);
    l.admit("b", true);
    l.admit("c", false);
    l.admit("d", false);
    assert.deepEqual(l.release("d", all), [], "a queued attempt leaves: nobody promoted");
    assert.equal(l.room, 2, "of 3 late places, c holds one");
    assert.deepEqual(
      l.release("a", (q) => q === "c"),
      ["c"],
      "b is not ready (its start is ahead): c, ready, takes the slot",
    );
    assert.ok(l.holds("c"));
    assert.deepEqual(
      l.release("c", () => false),
      [],
      "nobody ready: the slot stays free",
    );
    assert.deepEqual([l.room, l.held, l.queued], [4, 0, 1]);
    assert.equal(l.take("b"), true, "b, ready now, takes the free slot");
    assert.equal(l.take("b"), true, "taken already");
    assert.equal(l.take("zz"), false, "not queued: nothing");
    assert.equal(l.release("a", all), undefined, "released twice: nothing");
    assert.equal(l.release("zz", all), undefined, "never admitted: nothing");
  });

  it("a ready attempt finds no free slot to take while every slot is held", () => {
    const l = new SlotLedger<string>(1, 1);
    l.admit("a", false);
    l.admit("b", false);
    assert.equal(l.take("b"), false);
    assert.deepEqual(l.release("a", all), ["b"]);
  });

  it("a freed slot goes to a ready attempt that came on time before the late ones that came earlier", () => {
    const l = new SlotLedger<string>(2, 4);
    l.admit("run-1", false);
    l.admit("run-2", false);
    l.admit("late-1", false);
    l.admit("late-2", false);
    l.admit("light", true); // offered before its start: on time
    l.admit("late-3", false);
    assert.deepEqual(l.release("run-1", all), ["light"], "the on-time run first");
    assert.deepEqual(l.release("run-2", all), ["late-1"], "then the late ones, oldest first");
    l.admit("light-2", true);
    assert.deepEqual(
      l.release("light", (q) => q !== "light-2"),
      ["late-2"],
      "an on-time run before its start takes nothing",
    );
    assert.deepEqual(l.release("late-1", all), ["light-2"]);
  });

  it("late offers fill at most the prefetch: offers on time have places of their own", () => {
    const l = new SlotLedger<string>(1, 2);
    l.admit("run", false);
    assert.equal(l.admit("late-1", false), "queued");
    assert.equal(l.admit("late-2", false), "queued");
    assert.equal(l.room, 0, "advertised: no room for a late offer");
    assert.equal(l.admit("late-3", false), "full");
    assert.equal(l.admit("light", true), "queued", "an offer on time still finds a place");
    assert.equal(l.admit("light-2", true), "queued");
    assert.equal(l.admit("light-3", true), "full");
    assert.equal(l.room, 0, "its places are not advertised");
    assert.deepEqual(
      l.release("late-1", () => false),
      [],
    );
    assert.equal(l.room, 1, "a late offer's place again");
    assert.equal(l.admit("late-3", false), "queued");
  });

  it("a late attempt is passed over by at most MAX_PASSED on-time ones", () => {
    const l = new SlotLedger<string>(1, 2);
    l.admit("run", false);
    l.admit("late", false);
    let holder = "run";
    for (let i = 0; i < MAX_PASSED; i++) {
      l.admit(`on-time-${i}`, true);
      assert.deepEqual(l.release(holder, all), [`on-time-${i}`], `pass ${i + 1}`);
      holder = `on-time-${i}`;
    }
    l.admit("on-time-last", true);
    assert.deepEqual(l.release(holder, all), ["late"], "passed over enough: its turn");
    assert.deepEqual(l.release("late", all), ["on-time-last"]);
  });

  it("an attempt not ready is not passed over (its count waits for its start)", () => {
    const l = new SlotLedger<string>(1, 2);
    l.admit("run", false);
    l.admit("late", false);
    let holder = "run";
    for (let i = 0; i < MAX_PASSED + 2; i++) {
      l.admit(`on-time-${i}`, true);
      assert.deepEqual(
        l.release(holder, (q) => q !== "late"),
        [`on-time-${i}`],
      );
      holder = `on-time-${i}`;
    }
    l.admit("on-time-last", true);
    assert.deepEqual(l.release(holder, all), ["on-time-last"], "never passed while not ready");
  });

  it("never holds more than its slots nor queues more than its prefetch (random operations)", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 5 }),
        fc.integer({ min: 0, max: 5 }),
        fc.array(
          fc.tuple(
            fc.constantFrom("admit", "release", "take"),
            fc.integer({ min: 0, max: 15 }),
            fc.boolean(),
          ),
          { maxLength: 80 },
        ),
        fc.func(fc.boolean()),
        (slots, prefetch, ops, readyOf) => {
          const l = new SlotLedger<number>(slots, prefetch);
          const ready = (x: number) => readyOf(x);
          // Reference model of the queue, in arrival order: each entry's `onTime` and how often
          // a ready late entry was passed over by an on-time (or long-passed) one.
          const queue: { x: number; onTime: boolean; passed: number }[] = [];
          const queued = (x: number) => queue.findIndex((q) => q.x === x);
          const holding = new Set<number>();
          /** The entry a freed slot goes to: least (not first-class, arrival) among the ready. */
          const nextOf = () => {
            const firstClass = (q: (typeof queue)[number]) => q.onTime || q.passed >= MAX_PASSED;
            const ready_ = queue.filter((q) => ready(q.x));
            const best = ready_.find(firstClass) ?? ready_[0];
            if (best && firstClass(best))
              for (const q of ready_)
                if (!firstClass(q) && queued(q.x) < queued(best.x)) q.passed++;
            return best;
          };
          for (const [op, x, onTime] of ops) {
            if (op === "admit") {
              const got = l.admit(x, onTime);
              let want: string = "full";
              if (holding.has(x)) want = "slot";
              else if (queued(x) >= 0) want = "queued";
              else if (holding.size < slots) {
                want = "slot";
                holding.add(x);
              } else if (queue.filter((q) => q.onTime === onTime).length < prefetch) {
                want = "queued";
                queue.push({ x, onTime, passed: 0 });
              }
              assert.equal(got, want);
            } else if (op === "take") {
              const got = l.take(x);
              let want = holding.has(x);
              if (!want && queued(x) >= 0 && holding.size < slots) {
                queue.splice(queued(x), 1);
                holding.add(x);
                want = true;
              }
              assert.equal(got, want);
            } else {
              const got = l.release(x, ready);
              if (holding.delete(x)) {
                const moved: number[] = [];
                while (holding.size < slots) {
                  const q = nextOf();
                  if (!q) break;
                  queue.splice(queued(q.x), 1);
                  holding.add(q.x);
                  moved.push(q.x);
                }
                assert.deepEqual(got, moved, "ready ones take the freed slot, on time first");
              } else if (queued(x) >= 0) {
                queue.splice(queued(x), 1);
                assert.deepEqual(got, []);
              } else assert.equal(got, undefined);
            }
            assert.ok(l.held <= slots && l.queued <= 2 * prefetch);
            const late = queue.filter((q) => !q.onTime).length;
            assert.ok(late <= prefetch && queue.length - late <= prefetch);
            assert.equal(l.room, slots - holding.size + prefetch - late);
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
