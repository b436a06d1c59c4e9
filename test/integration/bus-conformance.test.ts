/**
 * The bus port's conformance suite: the same cases run against a real nats-server and against
 * the simulation's in-process bus (test/sim/sim-bus.ts) with its faults off. The simulation may
 * stand in for NATS only because it passes this suite.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Bus, BusMsg } from "../../src/cluster/bus.ts";
import type { Clock } from "../../src/lib/clock.ts";
import { seededRandom } from "../../src/lib/random.ts";
import { muxedBus } from "../../src/cluster/request-mux.ts";
import { SimBus } from "../sim/sim-bus.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);
let unique = 0;
const subj = (base: string) => `conf.${base}.${++unique}`;

/** Collects deliveries; `waitFor(n)` resolves once n arrived (fails after 2 s). */
function collector() {
  const got: { sub: string; subject: string; data: string }[] = [];
  let wake: (() => void) | undefined;
  return {
    got,
    cb: (sub: string) => (_e: Error | null, m: BusMsg) => {
      got.push({ sub, subject: m.subject, data: dec(m.data) });
      wake?.();
    },
    async waitFor(n: number): Promise<void> {
      const deadline = Date.now() + 2000;
      while (got.length < n) {
        if (Date.now() > deadline) assert.fail(`expected ${n} deliveries, got ${got.length}`);
        await new Promise<void>((r) => {
          wake = r;
          setTimeout(r, 20);
        });
      }
    },
    /** Lets stray deliveries arrive before counting. */
    settle: () => new Promise<void>((r) => setTimeout(r, 100)),
  };
}

/** Two connections to the same bus (publisher and subscriber side). */
interface Pair {
  a: Bus;
  b: Bus;
}

function conformance(name: string, getPair: () => Pair): void {
  describe(`Bus conformance: ${name}`, () => {
    it("publish reaches every plain subscriber", async () => {
      const { a, b } = getPair();
      const s = subj("pub");
      const c = collector();
      const s1 = b.subscribe(s, { callback: c.cb("1") });
      const s2 = a.subscribe(s, { callback: c.cb("2") });
      await b.flush();
      a.publish(s, enc("hello"));
      await a.flush();
      await c.waitFor(2);
      await c.settle();
      assert.deepEqual(c.got.map((g) => g.sub).sort(), ["1", "2"]);
      assert.ok(c.got.every((g) => g.data === "hello" && g.subject === s));
      s1.unsubscribe();
      s2.unsubscribe();
    });

    it("wildcards: * matches one token, > the rest", async () => {
      const { a, b } = getPair();
      const base = subj("wc");
      const c = collector();
      const s1 = b.subscribe(`${base}.*`, { callback: c.cb("star") });
      const s2 = b.subscribe(`${base}.>`, { callback: c.cb("gt") });
      await b.flush();
      a.publish(`${base}.x`, enc("1"));
      a.publish(`${base}.x.y`, enc("2"));
      a.publish(`${base}`, enc("3"));
      await a.flush();
      await c.waitFor(3);
      await c.settle();
      assert.deepEqual(c.got.map((g) => `${g.sub}:${g.data}`).sort(), ["gt:1", "gt:2", "star:1"]);
      s1.unsubscribe();
      s2.unsubscribe();
    });

    it("a queue group delivers each message to exactly one member", async () => {
      const { a, b } = getPair();
      const s = subj("q");
      const c = collector();
      const subs = [
        b.subscribe(s, { queue: "g", callback: c.cb("m1") }),
        b.subscribe(s, { queue: "g", callback: c.cb("m2") }),
        a.subscribe(s, { queue: "g", callback: c.cb("m3") }),
      ];
      const plain = collector();
      const p = b.subscribe(s, { callback: plain.cb("plain") });
      await b.flush();
      await a.flush();
      for (let i = 0; i < 20; i++) a.publish(s, enc(String(i)));
      await a.flush();
      await c.waitFor(20);
      await plain.waitFor(20);
      await c.settle();
      assert.equal(c.got.length, 20);
      assert.deepEqual(new Set(c.got.map((g) => g.data)).size, 20);
      for (const x of [...subs, p]) x.unsubscribe();
    });

    it("request/reply resolves with the responder's reply", async () => {
      const { a, b } = getPair();
      const s = subj("rr");
      const sub = b.subscribe(s, { callback: (_e, m) => m.respond(enc(`re:${dec(m.data)}`)) });
      await b.flush();
      const r = await a.request(s, enc("ping"), { timeout: 2000 });
      assert.equal(dec(r.data), "re:ping");
      sub.unsubscribe();
    });

    it("a request nobody answers rejects after its timeout", async () => {
      const { a, b } = getPair();
      const s = subj("silent");
      const sub = b.subscribe(s, { callback: () => undefined });
      await b.flush();
      const t0 = Date.now();
      await assert.rejects(a.request(s, enc("x"), { timeout: 200 }));
      assert.ok(Date.now() - t0 >= 150, "rejected before the timeout");
      sub.unsubscribe();
    });

    it("a request with no subscriber rejects at once (no responders)", async () => {
      const { a } = getPair();
      const t0 = Date.now();
      await assert.rejects(a.request(subj("nobody"), enc("x"), { timeout: 5000 }));
      assert.ok(Date.now() - t0 < 2000, "no responders should not wait for the timeout");
    });

    it("unsubscribe stops delivery", async () => {
      const { a, b } = getPair();
      const s = subj("unsub");
      const c = collector();
      const sub = b.subscribe(s, { callback: c.cb("1") });
      await b.flush();
      a.publish(s, enc("before"));
      await a.flush();
      await c.waitFor(1);
      sub.unsubscribe();
      await b.flush();
      a.publish(s, enc("after"));
      await a.flush();
      await c.settle();
      assert.deepEqual(
        c.got.map((g) => g.data),
        ["before"],
      );
    });
  });
}

{
  // Real time (like the NATS case), with timers that keep the test process alive.
  const clock: Clock = {
    now: () => Date.now(),
    monoMs: () => performance.now(),
    setTimer: (ms, fn) => {
      const t = setTimeout(fn, ms);
      return () => clearTimeout(t);
    },
  };
  const bus = new SimBus({ clock, random: seededRandom(1) });
  const pair = { a: bus.endpoint("a"), b: bus.endpoint("b") };
  conformance("SimBus (faults off)", () => pair);
}

describe("nats-server", () => {
  let fx: NatsFixture;
  let a: NatsConnection;
  let b: NatsConnection;
  before(async () => {
    fx = await startNats();
    a = await fx.connect("bus-conf-a");
    b = await fx.connect("bus-conf-b");
  });
  after(async () => {
    await a?.close();
    await b?.close();
    await fx?.stop();
  });
  conformance("NATS", () => ({ a, b }));
  // What Kairos nodes use: the same connections, requests through src/cluster/request-mux.ts.
  conformance("NATS with the request mux", () => ({ a: muxedBus(a), b: muxedBus(b) }));
});
