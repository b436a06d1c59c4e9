/**
 * TimerQueue on a FakeClock: due order, ties in insertion order, replace, cancel, cancelPrefix,
 * timers armed from inside a firing callback, and a property test against a naive model (a plain
 * list scanned for the minimum) under random schedule / cancel / cancelPrefix / advance ops.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { FakeClock } from "../../../src/lib/clock.ts";
import { TimerQueue } from "../../../src/cluster/timer-queue.ts";

interface Fired {
  key: string;
  payload: string;
  atMs: number;
}

function setup(startMs = 1_000) {
  const clock = new FakeClock(startMs);
  const fired: Fired[] = [];
  const q = new TimerQueue<string>(clock, (key, payload) =>
    fired.push({ key, payload, atMs: clock.now() }),
  );
  return { clock, fired, q };
}

describe("TimerQueue", () => {
  it("fires in due order, each at its due time", () => {
    const { clock, fired, q } = setup();
    q.schedule("c", 1_300, "C");
    q.schedule("a", 1_100, "A");
    q.schedule("b", 1_200, "B");
    assert.equal(q.size, 3);
    clock.advance(150);
    assert.deepEqual(fired, [{ key: "a", payload: "A", atMs: 1_100 }]);
    clock.advance(1_000);
    assert.deepEqual(
      fired.map((f) => [f.key, f.atMs]),
      [
        ["a", 1_100],
        ["b", 1_200],
        ["c", 1_300],
      ],
    );
    assert.equal(q.size, 0);
  });

  it("admission: while admitWith answers false nothing fires and no host timer spins; resume() fires the rest in due order", () => {
    const clock = new FakeClock(1_000);
    let arms = 0;
    const setTimer = clock.setTimer.bind(clock);
    clock.setTimer = (ms, fn) => {
      arms++;
      return setTimer(ms, fn);
    };
    const fired: string[] = [];
    let room = 2; // two places; each firing takes one until the test gives it back
    const q = new TimerQueue<string>(clock, (key) => {
      fired.push(key);
      room--;
    });
    q.admitWith(() => room > 0);
    for (const [k, at] of [
      ["c", 1_030],
      ["a", 1_010],
      ["b", 1_020],
      ["d", 1_040],
    ] as const)
      q.schedule(k, at, k);
    clock.advance(50);
    assert.deepEqual(fired, ["a", "b"], "two admitted, in due order");
    assert.equal(q.held, true);
    const armsBefore = arms;
    clock.advance(10_000);
    assert.deepEqual(fired, ["a", "b"], "held: nothing fires, however long");
    assert.equal(arms, armsBefore, "no host timer armed while held (no spin)");
    q.schedule("e", clock.now() + 10, "e");
    clock.advance(20);
    assert.deepEqual(fired, ["a", "b"], "a new due timer waits too");
    room = 1;
    q.resume();
    assert.deepEqual(fired, ["a", "b"], "resume() never fires synchronously");
    clock.advance(0);
    assert.deepEqual(fired, ["a", "b", "c"], "one place back: the next in due order");
    room = 10;
    q.resume();
    clock.advance(0);
    assert.deepEqual(fired, ["a", "b", "c", "d", "e"]);
    assert.equal(q.held, false);
    assert.equal(q.size, 0);
    q.resume(); // not held: a no-op
    q.schedule("f", clock.now() + 5, "f");
    clock.advance(5);
    assert.deepEqual(fired.at(-1), "f", "armed again once resumed");
  });

  it("admission: turns settling in microtasks cannot chain slices without the event loop turning", async () => {
    // The host resumes as each admitted turn settles, in a microtask. If resume() fired there, a
    // turn that settles at once would admit the next one, and so on, all inside one run of the
    // microtask queue: the event loop (sockets, lease renewals) would wait until nothing is due.
    const clock = new FakeClock(1_000);
    let inFlight = 0;
    const fired: string[] = [];
    const q: TimerQueue<string> = new TimerQueue<string>(clock, (key) => {
      fired.push(key);
      inFlight++;
      queueMicrotask(() => {
        inFlight--;
        q.resume();
      });
    });
    q.admitWith(() => inFlight < 4);
    for (let i = 0; i < 100; i++) q.schedule(`k${i}`, 1_010, "x");
    clock.advance(10);
    assert.equal(fired.length, 4, "four admitted");
    await new Promise((r) => setImmediate(r)); // every microtask has run
    assert.equal(fired.length, 4, "nothing more until the host timer fires");
    clock.advance(0);
    assert.equal(fired.length, 8, "the next four on the next turn");
  });

  it("fires ties in insertion order", () => {
    const { clock, fired, q } = setup();
    for (const k of ["x", "y", "z", "w"]) q.schedule(k, 1_050, k);
    clock.advance(50);
    assert.deepEqual(
      fired.map((f) => f.key),
      ["x", "y", "z", "w"],
    );
  });

  it("fires a timer due in the past on the next turn of the clock", () => {
    const { clock, fired, q } = setup();
    q.schedule("late", 500, "L");
    assert.equal(fired.length, 0, "never synchronously inside schedule()");
    clock.advance(0);
    assert.deepEqual(fired, [{ key: "late", payload: "L", atMs: 1_000 }]);
  });

  it("scheduling a key again replaces its timer (earlier or later)", () => {
    const { clock, fired, q } = setup();
    q.schedule("k", 1_500, "first");
    q.schedule("k", 1_200, "earlier");
    assert.equal(q.size, 1);
    assert.equal(q.dueOf("k"), 1_200);
    q.schedule("j", 1_300, "J");
    q.schedule("j", 1_900, "later");
    clock.advance(2_000);
    assert.deepEqual(
      fired.map((f) => [f.key, f.payload, f.atMs]),
      [
        ["k", "earlier", 1_200],
        ["j", "later", 1_900],
      ],
    );
  });

  it("a replaced key goes behind others due at the same time (new insertion)", () => {
    const { clock, fired, q } = setup();
    q.schedule("a", 1_100, "a1");
    q.schedule("b", 1_100, "b");
    q.schedule("a", 1_100, "a2");
    clock.advance(100);
    assert.deepEqual(
      fired.map((f) => f.payload),
      ["b", "a2"],
    );
  });

  it("cancel removes a timer and reports whether there was one", () => {
    const { clock, fired, q } = setup();
    q.schedule("a", 1_100, "A");
    q.schedule("b", 1_200, "B");
    assert.equal(q.cancel("a"), true);
    assert.equal(q.cancel("a"), false);
    assert.equal(q.cancel("nope"), false);
    assert.equal(q.dueOf("a"), undefined);
    assert.equal(q.size, 1);
    clock.advance(500);
    assert.deepEqual(
      fired.map((f) => f.key),
      ["b"],
    );
  });

  it("cancelPrefix removes exactly the keys with that prefix", () => {
    const { clock, fired, q } = setup();
    q.schedule("1|counter|a|t", 1_100, "p1a");
    q.schedule("1|counter|b|t", 1_200, "p1b");
    q.schedule("12|counter|c|t", 1_150, "p12");
    q.schedule("2|counter|d|t", 1_300, "p2");
    assert.equal(q.cancelPrefix("1|"), 2);
    assert.equal(q.size, 2);
    clock.advance(1_000);
    assert.deepEqual(
      fired.map((f) => f.payload),
      ["p12", "p2"],
    );
  });

  it("timers scheduled from inside a firing callback fire too (now, later, and replacing)", () => {
    const clock = new FakeClock(0);
    const fired: string[] = [];
    const q: TimerQueue<string> = new TimerQueue<string>(clock, (key, payload) => {
      fired.push(`${key}@${clock.now()}`);
      if (payload === "spawn") {
        q.schedule("now", clock.now(), "x");
        q.schedule("soon", clock.now() + 10, "x");
        q.schedule("replaced", clock.now() + 5, "x"); // was due at 1000
      }
    });
    q.schedule("replaced", 1_000, "x");
    q.schedule("parent", 100, "spawn");
    q.schedule("sibling", 100, "x");
    clock.advance(200);
    assert.deepEqual(fired, ["parent@100", "sibling@100", "now@100", "replaced@105", "soon@110"]);
    clock.advance(2_000);
    assert.equal(fired.length, 5, "the replaced timer must not fire again at 1000");
  });

  it("stop() disarms the host timer; fireDue() still fires what is due when called", () => {
    const { clock, fired, q } = setup();
    q.schedule("a", 1_100, "A");
    q.stop();
    clock.advance(500);
    assert.equal(fired.length, 0);
    assert.equal(q.fireDue(), 1);
    assert.deepEqual(
      fired.map((f) => f.key),
      ["a"],
    );
  });

  it("holds far-future timers (beyond the 32-bit host timer range) without firing early", () => {
    const { clock, fired, q } = setup(0);
    const far = 3 * TimerQueue.MAX_WAIT_MS + 7;
    q.schedule("far", far, "F");
    clock.advance(far - 1);
    assert.equal(fired.length, 0);
    clock.advance(1);
    assert.deepEqual(fired, [{ key: "far", payload: "F", atMs: far }]);
  });

  it("many cancellations then firing compacts without losing live timers", () => {
    const { clock, fired, q } = setup(0);
    for (let i = 0; i < 5_000; i++) q.schedule(`k${i}`, 10 + (i % 100), String(i));
    for (let i = 0; i < 5_000; i++) if (i % 5 !== 0) q.cancel(`k${i}`);
    assert.equal(q.size, 1_000);
    clock.advance(1_000);
    assert.equal(fired.length, 1_000);
    assert.ok(fired.every((f) => Number(f.payload) % 5 === 0));
  });
});

type Op =
  | { op: "schedule"; key: string; delay: number }
  | { op: "cancel"; key: string }
  | { op: "cancelPrefix"; prefix: string }
  | { op: "advance"; ms: number };

// Keys with and without a group (`<group>|…`, the host's partition prefix, indexed for cancelPrefix).
const keyArb = fc
  .tuple(fc.constantFrom("a", "b", "c", "a|", "b|", "a1|"), fc.integer({ min: 0, max: 5 }))
  .map(([p, i]) => `${p}${i}`);
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      op: fc.constant("schedule" as const),
      key: keyArb,
      delay: fc.integer({ min: -20, max: 200 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant("cancel" as const), key: keyArb }) },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant("cancelPrefix" as const),
      prefix: fc.constantFrom("a", "b", "c", "a1", "a|", "b|", "a1|", "a|1"),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      op: fc.constant("advance" as const),
      ms: fc.integer({ min: 0, max: 150 }),
    }),
  },
);

/** The model: a plain list; fire the minimum (due, seq) while due ≤ target; fire time = max(due, armed at). */
class NaiveTimers {
  now: number;
  seq = 0;
  entries: { key: string; due: number; seq: number; armedAt: number; payload: string }[] = [];
  fired: Fired[] = [];
  constructor(now: number) {
    this.now = now;
  }
  schedule(key: string, due: number, payload: string): void {
    this.cancel(key);
    this.entries.push({ key, due, seq: this.seq++, armedAt: this.now, payload });
  }
  cancel(key: string): void {
    this.entries = this.entries.filter((e) => e.key !== key);
  }
  cancelPrefix(prefix: string): void {
    this.entries = this.entries.filter((e) => !e.key.startsWith(prefix));
  }
  advance(ms: number): void {
    const target = this.now + ms;
    for (;;) {
      const next = [...this.entries].sort((a, b) => a.due - b.due || a.seq - b.seq)[0];
      if (!next || Math.max(next.due, next.armedAt) > target) break;
      this.entries = this.entries.filter((e) => e !== next);
      this.now = Math.max(this.now, next.due);
      this.fired.push({ key: next.key, payload: next.payload, atMs: this.now });
    }
    this.now = target;
  }
}

describe("TimerQueue vs a naive model (property)", () => {
  it("fires the same timers, in the same order, at the same times", () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 80 }), (ops) => {
        const { clock, fired, q } = setup(1_000);
        const model = new NaiveTimers(1_000);
        let n = 0;
        for (const o of ops) {
          switch (o.op) {
            case "schedule": {
              const payload = `p${n++}`;
              q.schedule(o.key, clock.now() + o.delay, payload);
              model.schedule(o.key, model.now + o.delay, payload);
              break;
            }
            case "cancel":
              q.cancel(o.key);
              model.cancel(o.key);
              break;
            case "cancelPrefix":
              q.cancelPrefix(o.prefix);
              model.cancelPrefix(o.prefix);
              break;
            case "advance":
              clock.advance(o.ms);
              model.advance(o.ms);
              break;
          }
          assert.equal(q.size, model.entries.length);
        }
        clock.advance(1_000);
        model.advance(1_000);
        assert.deepEqual(fired, model.fired);
        assert.equal(q.size, 0);
      }),
      { numRuns: 300 },
    );
  });
});
