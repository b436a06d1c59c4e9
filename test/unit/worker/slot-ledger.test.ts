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
  nextHolder,
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

  describe("a slot kept for a run prepared ahead whose start is near (`Hold`)", () => {
    // `soon`: names in the set start within SLOT_HOLD_MS; `idle`: names in `started` execute.
    const holdOf = (soon: Set<string>, started: Set<string>) => ({
      soon: (x: string) => soon.has(x),
      idle: (x: string) => !started.has(x),
    });

    it("no ready attempt on time: the freed slot is kept for the on-time one starting soon, not given to a late one", () => {
      const l = new SlotLedger<string>(2, 4);
      l.admit("run-1", false);
      l.admit("run-2", false);
      l.admit("late-1", false);
      l.admit("light", true); // prepared ahead, its start near
      l.admit("late-2", false);
      const soon = new Set(["light"]);
      const started = new Set(["run-1", "run-2"]);
      const ready = (q: string) => q !== "light";
      assert.deepEqual(
        l.release("run-1", ready, holdOf(soon, started)),
        ["light"],
        "kept for light: a late run would hold the slot through light's start",
      );
      assert.ok(l.holds("light"));
      assert.deepEqual(
        l.release("run-2", ready, holdOf(soon, started)),
        ["late-1"],
        "one slot kept at a time: the next freed slot goes to the late one",
      );
    });

    it("an attempt whose start is not near keeps nothing; without `hold`, nothing is kept", () => {
      const l = new SlotLedger<string>(1, 4);
      l.admit("run", false);
      l.admit("late", false);
      l.admit("light", true);
      const ready = (q: string) => q !== "light";
      assert.deepEqual(
        l.release("run", ready, holdOf(new Set(), new Set(["run"]))),
        ["late"],
        "light's start is far: the late run takes the slot",
      );
      const m = new SlotLedger<string>(1, 4);
      m.admit("run", false);
      m.admit("late", false);
      m.admit("light", true);
      assert.deepEqual(m.release("run", ready), ["late"], "no hold given: as before");
    });

    it("a ready on-time attempt goes before the one kept for; the kept slot frees the keep once it executes or goes", () => {
      const l = new SlotLedger<string>(2, 4);
      l.admit("run-1", false);
      l.admit("run-2", false);
      l.admit("light-1", true);
      l.admit("light-2", true);
      l.admit("late", false);
      const soon = new Set(["light-1", "light-2"]);
      const started = new Set(["run-1", "run-2"]);
      const notReady = new Set(["light-1", "light-2"]);
      const ready = (q: string) => !notReady.has(q);
      assert.deepEqual(l.release("run-1", ready, holdOf(soon, started)), ["light-1"]);
      notReady.delete("light-2");
      assert.deepEqual(
        l.release("run-2", ready, holdOf(soon, started)),
        ["light-2"],
        "ready and on time: first, as always",
      );
      l.admit("light-3", true);
      soon.add("light-3");
      notReady.add("light-3");
      started.add("light-2");
      assert.deepEqual(
        l.release("light-2", ready, holdOf(soon, started)),
        ["late"],
        "light-1 still idle in its kept slot: no second one kept",
      );
      started.add("light-1"); // light-1 started: its slot executes, the keep is over
      started.add("late");
      assert.deepEqual(l.release("late", ready, holdOf(soon, started)), ["light-3"]);
      assert.deepEqual(
        l.release("light-3", ready, holdOf(soon, started)),
        [],
        "the kept one went before its start: nothing queued to take the slot",
      );
    });

    it("keeping a slot passes over the ready late attempts (MAX_PASSED bounds it)", () => {
      const l = new SlotLedger<string>(1, 2);
      l.admit("run", false);
      l.admit("late", false);
      let holder = "run";
      const ready = (q: string) => !q.startsWith("soon");
      for (let i = 0; i < MAX_PASSED; i++) {
        l.admit(`soon-${i}`, true);
        assert.deepEqual(
          l.release(holder, ready, holdOf(new Set([`soon-${i}`]), new Set())),
          [`soon-${i}`],
          `pass ${i + 1}`,
        );
        holder = `soon-${i}`;
      }
      l.admit("soon-last", true);
      assert.deepEqual(
        l.release(holder, ready, holdOf(new Set(["soon-last"]), new Set())),
        ["late"],
        "passed over enough: its turn",
      );
    });
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

  describe("whose run a freed slot goes to: the tenant holding fewest slots here per weight", () => {
    /** Attempts named `<tenant>-<n>`; weights by tenant (1 unless named). */
    const tenants = (weights: Record<string, number> = {}) => ({
      tenantOf: (x: string) => x.split("-")[0]!,
      weightOf: (x: string) => weights[x.split("-")[0]!] ?? 1,
    });

    it("a light tenant's run on time goes before the heavy tenants' runs on time prefetched before it", () => {
      // 4 slots: heavy holds 3, other 1; heavy's two runs on time came first, then light's.
      const l = new SlotLedger<string>(4, 3, tenants());
      for (const x of ["heavy-1", "heavy-2", "heavy-3", "other-1"]) l.admit(x, false);
      assert.equal(l.admit("heavy-4", true), "queued");
      assert.equal(l.admit("heavy-5", true), "queued");
      assert.equal(l.admit("light-1", false), "queued", "a late place");
      assert.equal(l.admit("light-2", true), "queued");
      l.admit("light-3", true);
      assert.equal(l.admit("light-4", true), "full", "on-time places: 3");
      assert.deepEqual(
        l.release("heavy-1", all),
        ["light-2"],
        "light holds none here: its run first",
      );
      assert.deepEqual(
        l.release("heavy-2", all),
        ["heavy-4"],
        "then heavy (1 held) before light's late run (on time first)",
      );
    });

    it("among backlogs, the tenant furthest under its weighted part of the worker, not the oldest", () => {
      const w = tenants({ c: 2 });
      const l = new SlotLedger<string>(4, 4, w);
      for (const x of ["c-1", "c-2", "c-3", "a-1"]) l.admit(x, false); // c: 3/2 = 1.5, a: 1
      for (const x of ["c-4", "b-1", "a-2"]) l.admit(x, false);
      assert.deepEqual(l.release("c-1", all), ["b-1"], "b holds none: first, before c's older run");
      // c 2/2 = 1, a 1, b 1: a tie, the oldest (c-4).
      assert.deepEqual(l.release("c-2", all), ["c-4"]);
      // c 2/2 = 1, a 1, b 1 → a-2 is the only one left.
      assert.deepEqual(l.release("a-1", all), ["a-2"]);
    });

    it("a run passed over MAX_PASSED times goes first, whatever its tenant holds", () => {
      const l = new SlotLedger<string>(2, 2, tenants());
      l.admit("heavy-1", false);
      l.admit("heavy-2", false);
      l.admit("heavy-3", false);
      let holder = "heavy-1";
      for (let i = 0; i < MAX_PASSED; i++) {
        l.admit(`light-${i}`, false);
        assert.deepEqual(l.release(holder, all), [`light-${i}`], `pass ${i + 1}`);
        holder = `light-${i}`;
      }
      l.admit("light-last", false);
      assert.deepEqual(l.release(holder, all), ["heavy-3"], "passed over enough: its turn");
    });

    it("nextHolder: starved first, then on time, then by load, then oldest; only the ready count", () => {
      const q = (onTime: boolean, passed = 0) => ({ onTime, passed });
      const pick = (
        queue: ReturnType<typeof q>[],
        loads: number[],
        ready: (i: number) => boolean = () => true,
      ) => nextHolder(queue, ready, (i) => loads[i]!);
      assert.deepEqual(pick([], []), { next: -1, passed: [] });
      assert.deepEqual(pick([q(false), q(false)], [2, 1]), { next: 1, passed: [0] });
      assert.deepEqual(pick([q(false), q(true)], [0, 5]), { next: 1, passed: [0] });
      assert.deepEqual(pick([q(true), q(true)], [1, 1]), { next: 0, passed: [] });
      assert.deepEqual(pick([q(true), q(false, MAX_PASSED)], [0, 9]), { next: 1, passed: [0] });
      assert.deepEqual(
        pick([q(false), q(false), q(false)], [0, 3, 1], (i) => i !== 0),
        { next: 2, passed: [1] },
        "not ready: neither chosen nor passed over",
      );
    });

    it("a weight that is not a number above 0 counts as 1", () => {
      const l = new SlotLedger<string>(2, 2, {
        tenantOf: (x) => x.split("-")[0]!,
        weightOf: (x) => (x.startsWith("z") ? Number.NaN : x.startsWith("y") ? -1 : 1),
      });
      l.admit("z-1", false);
      l.admit("y-1", false);
      l.admit("z-2", false);
      l.admit("y-2", false);
      assert.deepEqual(l.release("y-1", all), ["y-2"], "y holds 0, z 1/1");
    });
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
            const ready_ = queue.filter((q) => ready(q.x));
            const best =
              ready_.find((q) => q.passed >= MAX_PASSED) ??
              ready_.find((q) => q.onTime) ??
              ready_[0];
            if (best) for (const q of ready_) if (queued(q.x) < queued(best.x)) q.passed++;
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
