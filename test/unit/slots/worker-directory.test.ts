/** The worker directory on a FakeClock and a seeded Random: pick, reservations, markFull, expiry. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { BusSubscribeOptions } from "../../../src/cluster/bus.ts";
import { encode } from "../../../src/cluster/codec.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import {
  EXECUTING_SUM_MS,
  ROOM_WAITERS_LIMIT,
  WorkerDirectory,
} from "../../../src/slots/worker-directory.ts";
import { workerSubject } from "../../../src/protocol/worker.ts";
import { StallClock, stubBus } from "../../support/stall.ts";

const advert = (worker_id: string, free: number, slots = 4) => ({
  worker_id,
  slots,
  free,
  executor: "process",
});

/** A started directory (expiry 1,500 ms: a 500 ms tick) on a stall clock; `advertise` delivers an advert. */
function started() {
  const clock = new StallClock();
  const subs = new Map<string, BusSubscribeOptions>();
  const bus = stubBus(subs);
  const dir = new WorkerDirectory(clock, seededRandom(9), 1_500, { optimistic: true });
  dir.start(bus, "c");
  const advertise = (worker_id: string, free: number) =>
    subs.get("kairos.c.adverts.*")!.callback(null, {
      subject: `kairos.c.adverts.${worker_id}`,
      data: encode(advert(worker_id, free)),
      respond: () => undefined,
    });
  return { clock, dir, subs, advertise };
}

describe("worker directory", () => {
  it("picks the worker with the most free slots, counting its own reservations", () => {
    const clock = new FakeClock(1_000);
    const dir = new WorkerDirectory(clock, seededRandom(1), 5_000);
    dir.observe(advert("a", 1));
    dir.observe(advert("b", 3));
    const picks = Array.from({ length: 4 }, () => dir.pick());
    // b:3 → b (2 left) → b or a tie (2 vs 1: b) → then a/b tie at 1 → ...; 4 slots in all
    assert.equal(picks[0], "b");
    assert.equal(picks[1], "b");
    assert.deepEqual([...picks].sort(), ["a", "b", "b", "b"]);
    assert.equal(dir.pick(), undefined, "all reserved");
  });

  it("a heartbeat resets the reservations; a worker with no free slot is never picked", () => {
    const clock = new FakeClock(0);
    const dir = new WorkerDirectory(clock, seededRandom(2), 5_000);
    dir.observe(advert("a", 0));
    assert.equal(dir.pick(), undefined);
    dir.observe(advert("a", 1));
    assert.equal(dir.pick(), "a");
    assert.equal(dir.pick(), undefined);
    dir.observe(advert("a", 1));
    assert.equal(dir.pick(), "a");
  });

  it("exclude skips workers that just refused", () => {
    const dir = new WorkerDirectory(new FakeClock(0), seededRandom(3), 5_000);
    dir.observe(advert("a", 4));
    dir.observe(advert("b", 1));
    assert.equal(dir.pick(new Set(["a"])), "b");
    assert.equal(dir.pick(new Set(["a", "b"])), undefined);
  });

  it("markFull stops offering a worker until its next heartbeat", () => {
    const dir = new WorkerDirectory(new FakeClock(0), seededRandom(4), 5_000);
    dir.observe(advert("a", 4));
    dir.observe(advert("b", 1));
    dir.markFull("a");
    assert.equal(dir.pick(), "b");
    assert.equal(dir.pick(), undefined);
    dir.markFull("nobody");
    dir.observe(advert("a", 4));
    assert.equal(dir.pick(), "a");
  });

  it("forgets a worker after expireAfterMs without a heartbeat", () => {
    const clock = new FakeClock(0);
    const dir = new WorkerDirectory(clock, seededRandom(5), 5_000);
    dir.observe(advert("a", 2));
    clock.advance(5_000);
    assert.equal(dir.size, 1);
    assert.equal(dir.pick(), "a", "exactly at the limit it is still alive");
    clock.advance(1);
    assert.equal(dir.pick(), undefined);
    assert.equal(dir.size, 0);
  });

  it("ties are broken by the seeded random, so both equal workers get picked over many rounds", () => {
    const dir = new WorkerDirectory(new FakeClock(0), seededRandom(6), 5_000);
    const seen = new Set<string>();
    for (let i = 0; i < 20; i++) {
      dir.observe(advert("a", 1));
      dir.observe(advert("b", 1));
      seen.add(dir.pick()!);
    }
    assert.deepEqual([...seen].sort(), ["a", "b"]);
  });

  it("capacity: the slots of workers heard from within expireAfterMs, busy or not", () => {
    const clock = new FakeClock(0);
    const dir = new WorkerDirectory(clock, seededRandom(7), 5_000);
    assert.equal(dir.capacity(), 0);
    dir.observe(advert("a", 0, 8));
    clock.advance(3_000);
    dir.observe(advert("b", 2, 4));
    assert.equal(dir.capacity(), 12);
    clock.advance(2_001);
    assert.equal(dir.capacity(), 4, "a is silent for too long");
  });

  it("optimistic: with every advertised slot reserved, offers still go to a worker that has not refused (≤ its slots per heartbeat)", () => {
    const clock = new FakeClock(0);
    const dir = new WorkerDirectory(clock, seededRandom(8), 5_000, { optimistic: true });
    dir.observe(advert("a", 1, 3));
    dir.observe(advert("b", 0, 2));
    assert.equal(dir.pick(), "a", "an advertised free slot first");
    const hopeful = [dir.pick(), dir.pick(), dir.pick(), dir.pick()];
    assert.deepEqual(
      [...hopeful].sort(),
      ["a", "a", "b", "b"],
      "then the least over-reserved, up to each worker's slots",
    );
    assert.equal(dir.pick(), undefined);
    dir.observe(advert("a", 0, 3));
    dir.markFull("a");
    assert.equal(dir.pick(), undefined, "a refused since its heartbeat; b is at its slots");
    dir.observe(advert("a", 0, 3));
    assert.equal(dir.pick(), "a", "a new heartbeat clears the refusal");
  });

  it("busy is not dead: a loop stalled past the expiry still sees the workers it could not hear", () => {
    const { clock, dir, advertise } = started();
    advertise("a", 2);
    clock.t = 10_000; // 10 s without a turn: no tick ran, no advert was processed
    assert.equal(dir.capacity(), 4, "before the fix: 0 — the fleet actor shared no slots");
    assert.equal(dir.pick(), "a", "before the fix: no worker to pick");
    clock.runTimers(); // the late tick credits the deaf time
    assert.equal(dir.capacity(), 4);
    assert.equal(dir.size, 1);
  });

  it("a worker silent while the directory listens is forgotten after the expiry", () => {
    const { clock, dir, advertise } = started();
    advertise("a", 2);
    advertise("b", 2);
    for (let t = 500; t <= 1_500; t += 500) {
      clock.t = t;
      clock.runTimers();
      advertise("b", 2);
    }
    assert.equal(dir.capacity(), 8, "exactly at the expiry a is still counted");
    clock.t = 1_501;
    assert.equal(dir.capacity(), 4, "a silent for longer than the expiry while ticks ran on time");
    assert.equal(dir.pick(), "b");
  });

  it("a dead worker is still forgotten when the ticks keep running late: the credit is capped", () => {
    const { clock, dir, advertise } = started();
    advertise("a", 2); // heard at 0, never again
    clock.t = 5_000; // a tick 4,500 ms late: credited, seen 4,500
    clock.runTimers();
    assert.equal(dir.capacity(), 4, "a stall drops nobody");
    clock.t = 10_000; // another 4,500 ms late: capped at heard + expiry + the longest stretch (6,000)
    clock.runTimers();
    assert.equal(
      dir.capacity(),
      0,
      "credited without a cap it stays (seen 9,000): a dead worker kept for as long as the ticks run late",
    );
  });

  it("a stall followed by shorter late ticks still gives each worker an expiry of listening", () => {
    const { clock, dir, advertise } = started();
    clock.t = 400;
    advertise("a", 2);
    clock.t = 500;
    clock.runTimers();
    clock.t = 10_000; // deaf 9,000
    clock.runTimers();
    clock.t = 11_200; // deaf 700: capped by this stretch alone, seen fell back to 400 + 1,500 + 700
    clock.runTimers();
    assert.equal(dir.capacity(), 4, "listened ~1,100 ms since the stall: too soon to judge");
  });

  it("stop unsubscribes and cancels the tick", () => {
    const { clock, dir, subs } = started();
    assert.equal(clock.timers.size, 1);
    dir.stop();
    assert.equal(clock.timers.size, 0);
    assert.equal(subs.size, 0);
    dir.observe(advert("a", 2));
    clock.t += 1_501;
    assert.equal(
      dir.capacity(),
      0,
      "stopped, it judges by the clock (its last tick would freeze it)",
    );
  });

  it("worker subjects are per cluster and worker", () => {
    assert.equal(workerSubject("c1", "w7", "start"), "kairos.c1.worker.w7.start");
  });
});

describe("worker directory: who may advertise", () => {
  it("takes an advert only on its own worker's subject", () => {
    const subs = new Map<string, BusSubscribeOptions>();
    const dir = new WorkerDirectory(new StallClock(), seededRandom(3), 1_500);
    const refused: string[] = [];
    const d2 = new WorkerDirectory(new StallClock(), seededRandom(3), 1_500, {
      onRefused: (subject, reason) => refused.push(`${subject}: ${reason}`),
    });
    dir.start(stubBus(subs), "c");
    const cb = subs.get("kairos.c.adverts.*")!.callback;
    const send = (subject: string, a: unknown) =>
      cb(null, { subject, data: encode(a), respond: () => undefined });
    send("kairos.c.adverts.w1", advert("w2", 4)); // w1 speaking for w2
    send("$KV.c_idem.w2", advert("w2", 4)); // a JetStream push delivery under its own subject
    send("kairos.c.adverts.w3", { worker_id: "w3" }); // malformed
    assert.equal(dir.size, 0);
    send("kairos.c.adverts.w2", advert("w2", 4));
    assert.equal(dir.pick(), "w2");
    const subs2 = new Map<string, BusSubscribeOptions>();
    d2.start(stubBus(subs2), "c");
    subs2.get("kairos.c.adverts.*")!.callback(null, {
      subject: "kairos.c.adverts.w1",
      data: encode(advert("w2", 4)),
      respond: () => undefined,
    });
    assert.deepEqual(refused, ['kairos.c.adverts.w1: advert names worker "w2"']);
    dir.stop();
    d2.stop();
  });
});

describe("worker directory: room", () => {
  it("dispatches waiting for room are woken by an advert with room, longest waiting first, as many as it has room; one per run; bounded", () => {
    const clock = new FakeClock(0);
    const dir = new WorkerDirectory(clock, seededRandom(3), 5_000);
    const woken: string[] = [];
    for (const r of ["r0", "r1", "r2", "r3"])
      assert.ok(dir.waitForRoom(r, () => woken.push(`${r}@1`)));
    assert.ok(
      dir.waitForRoom("r0", () => woken.push("r0@2")),
      "asked again: its place kept",
    );
    dir.stopWaiting("r3");
    dir.observe(advert("a", 0));
    assert.deepEqual(woken, [], "no room: nobody woken");
    dir.observe(advert("a", 2));
    assert.deepEqual(woken, ["r0@2", "r1@1"], "two places: the two that waited longest");
    dir.observe(advert("b", 5));
    assert.deepEqual(woken, ["r0@2", "r1@1", "r2@1"], "r3 stopped waiting");
    assert.equal(dir.roomWaiters, 0);
    for (let i = 0; i < ROOM_WAITERS_LIMIT; i++) dir.waitForRoom(`x${i}`, () => undefined);
    assert.equal(
      dir.waitForRoom("y", () => undefined),
      false,
      "beyond the bound: not kept",
    );
    assert.equal(
      dir.waitForRoom("x0", () => undefined),
      true,
      "one already waiting is kept",
    );
  });

  it("the fleet's capacity counts each worker's slots and both its prefetch queues (runs offered late, runs on time)", () => {
    const clock = new FakeClock(0);
    const dir = new WorkerDirectory(clock, seededRandom(4), 5_000);
    dir.observe({ ...advert("a", 0, 8), prefetch: 2 });
    dir.observe(advert("b", 0, 4)); // a worker that predates the prefetch
    assert.equal(
      dir.capacity(),
      16,
      "8 + 2 × 2, and 4: before, 14 — a run prepared ahead took a backlog's prefetch place",
    );
  });

  it("the attempts executing on the fleet by tenant: summed over the live workers, only when each advertises them, summed again once an advert came", () => {
    const clock = new FakeClock(0);
    const dir = new WorkerDirectory(clock, seededRandom(4), 3_000);
    dir.observe({ ...advert("a", 0, 8), executing: { t1: 3, t2: 5 } });
    dir.observe({ ...advert("b", 1, 4), executing: { t1: 2 } });
    assert.deepEqual(
      [...dir.executingByTenant()!],
      [
        ["t1", 5],
        ["t2", 5],
      ],
    );
    dir.observe({ ...advert("b", 2, 4), executing: { t1: 1, t3: 1 } });
    assert.deepEqual(
      dir.executingByTenant()!.get("t1"),
      5,
      "within EXECUTING_SUM_MS of the last sum: the same",
    );
    clock.advance(EXECUTING_SUM_MS);
    assert.deepEqual(
      [...dir.executingByTenant()!],
      [
        ["t1", 4],
        ["t2", 5],
        ["t3", 1],
      ],
    );
    // A worker that predates the field: the fleet's executions are not known.
    clock.advance(EXECUTING_SUM_MS);
    dir.observe(advert("c", 4, 4));
    clock.advance(EXECUTING_SUM_MS);
    assert.equal(dir.executingByTenant(), undefined);
    // Once it is forgotten (silent past the expiry), they are known again.
    dir.observe({ ...advert("a", 0, 8), executing: { t1: 1 } });
    clock.advance(2_000);
    dir.observe({ ...advert("a", 0, 8), executing: { t1: 1 } });
    dir.observe({ ...advert("b", 2, 4), executing: {} });
    clock.advance(1_500);
    assert.deepEqual([...dir.executingByTenant()!], [["t1", 1]]);
  });

  it("a worker's forged executing counts move the fleet's sum by its believed slots at most, or make it unknown", () => {
    // An honest worker `a`, and `f` advertising whatever it likes on its own subject: 500 seeded
    // adverts with slots up to 40 (believed up to 16) and counts of up to 6 tenants up to 50, or
    // huge, or not whole.
    const clock = new FakeClock(0);
    const limits = { maxSlots: 16, maxPrefetch: 4 };
    const dir = new WorkerDirectory(clock, seededRandom(4), 3_000, { limits });
    const honest = { t1: 3, t2: 5 };
    const random = seededRandom(77);
    const int = (n: number) => Math.floor(random.next() * n);
    const counts = [0, 1, 2, 3, 16, 17, 50, 1.5, -1, 1e9];
    let believed = 0;
    for (let i = 0; i < 500; i++) {
      const slots = int(41);
      const executing: Record<string, number> = {};
      for (let k = int(7); k > 0; k--) executing[`t${int(6)}`] = counts[int(counts.length)]!;
      dir.observe({ ...advert("a", 0, 8), executing: honest });
      dir.observe({ ...advert("f", 0, slots), executing });
      clock.advance(EXECUTING_SUM_MS);
      const sum = dir.executingByTenant();
      if (sum === undefined) continue; // not believed: the fleet goes by grants held
      believed++;
      let tilt = 0;
      for (const [t, n] of sum) {
        const more = n - (honest[t as keyof typeof honest] ?? 0);
        assert.ok(more >= 0, `${t}: ${n}, below the honest worker's count`);
        tilt += more;
      }
      assert.ok(
        tilt <= Math.min(slots, limits.maxSlots),
        `advert ${i}: slots ${slots}, executing ${JSON.stringify(executing)} added ${tilt}`,
      );
      assert.deepEqual(Object.fromEntries(sum), {
        ...honest,
        ...Object.fromEntries(
          Object.entries(executing).map(([t, n]) => [
            t,
            n + (honest[t as keyof typeof honest] ?? 0),
          ]),
        ),
      });
    }
    assert.ok(believed > 20 && believed < 480, `both kinds drawn: ${believed} believed of 500`);
  });
});

describe("worker directory: runs on time", () => {
  it("a run on time is offered to a full worker that refused only late offers, not to one that refused one on time", () => {
    const clock = new FakeClock(0);
    const dir = new WorkerDirectory(clock, seededRandom(8), 5_000, { optimistic: true });
    dir.observe({ ...advert("a", 0), prefetch: 2 });
    dir.markFull("a"); // a late offer refused: its late places are full
    assert.equal(dir.pick(), undefined, "a late offer waits for room");
    assert.equal(dir.pick(new Set(), true), "a", "its places for runs on time are its own");
    dir.markFull("a", true);
    assert.equal(dir.pick(new Set(), true), undefined, "refused on time: full for those too");
    dir.observe({ ...advert("a", 0), prefetch: 2 });
    assert.equal(dir.pick(new Set(), true), "a", "until its next advert");
  });

  it("runs on time waiting for room are woken first, by any advert, up to its prefetch and then its room", () => {
    const clock = new FakeClock(0);
    const dir = new WorkerDirectory(clock, seededRandom(3), 5_000);
    const woken: string[] = [];
    for (const r of ["late-0", "late-1"]) dir.waitForRoom(r, () => woken.push(r));
    for (const r of ["light-0", "light-1", "light-2"])
      dir.waitForRoom(r, () => woken.push(r), true);
    assert.equal(dir.roomWaiters, 5);
    dir.observe(advert("a", 0));
    assert.deepEqual(woken, [], "no room, no places on time advertised: nobody");
    dir.observe({ ...advert("a", 0), prefetch: 2 });
    assert.deepEqual(woken, ["light-0", "light-1"], "full, but 2 places on time");
    dir.observe({ ...advert("a", 2), prefetch: 0 });
    assert.deepEqual(woken, ["light-0", "light-1", "light-2", "late-0"], "then the room");
    dir.waitForRoom("late-1", () => assert.fail("stopped waiting: never woken"), true);
    dir.stopWaiting("late-1");
    assert.equal(dir.roomWaiters, 0, "moved between the lists, then gone");
  });

  it("after a worker refused a run on time, its next advert wakes runs on time only into its room", () => {
    // A full fleet: each advert waking `prefetch` runs on time into refusals would churn offers.
    const clock = new FakeClock(0);
    const dir = new WorkerDirectory(clock, seededRandom(4), 5_000);
    const woken: string[] = [];
    dir.observe({ ...advert("a", 0), prefetch: 2 });
    dir.markFull("a", true);
    for (const r of ["light-0", "light-1", "light-2"])
      dir.waitForRoom(r, () => woken.push(r), true);
    dir.observe({ ...advert("a", 1), prefetch: 2 });
    assert.deepEqual(woken, ["light-0"], "its room only, not its places on time");
    dir.observe({ ...advert("a", 0), prefetch: 2 });
    assert.deepEqual(
      woken,
      ["light-0", "light-1", "light-2"],
      "no refusal since: its places again",
    );
  });

  it("a run that moves between the lists leaves no wake behind, even when the list it joins is full", () => {
    const clock = new FakeClock(0);
    const dir = new WorkerDirectory(clock, seededRandom(5), 5_000);
    dir.waitForRoom("r", () => undefined, false);
    for (let i = 0; i < ROOM_WAITERS_LIMIT; i++) dir.waitForRoom(`t${i}`, () => undefined, true);
    assert.equal(
      dir.waitForRoom("r", () => undefined, true),
      false,
      "the on-time list is full",
    );
    assert.equal(dir.roomWaiters, ROOM_WAITERS_LIMIT, "r left the late list");
  });
});
