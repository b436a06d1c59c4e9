/**
 * The node's slot broker (src/slots/slot-broker.ts) against the real tenant actor core: acquires
 * and releases decided in one turn ride in one `slots` message; the cap holds across batches;
 * a release cancels a queued acquire; a failed batch drops its acquires (the runs re-ask) and
 * keeps its releases; batches in flight per tenant are bounded. Plus the tenant side of a batch
 * and the bus guard on a batch naming another tenant's job.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { tenantAddressGuard } from "../../../src/server/address-guard.ts";
import {
  IN_FLIGHT_PER_TENANT,
  RELEASE_ATTEMPTS,
  RELEASE_IN_FLIGHT,
  SlotBroker,
  URGENT_IN_FLIGHT,
  retryDelayMs,
} from "../../../src/slots/slot-broker.ts";
import { makeTenantActor } from "../../../src/slots/tenant-actor.ts";
import {
  MAX_SLOT_BATCH,
  type TenantMsg,
  type TenantReply,
  type TenantState,
} from "../../../src/slots/tenant-types.ts";

/** A tenant actor core behind a request function; `hold` keeps replies back until released. */
function tenant(max: number) {
  const actor = makeTenantActor(max);
  let state: TenantState = actor.initialState("t1");
  const seen: TenantMsg[] = [];
  const held: (() => void)[] = [];
  let hold = false;
  let failNext = false;
  let inFlight = 0;
  let peakInFlight = 0;
  const request = async (_to: unknown, msg: TenantMsg): Promise<TenantReply> => {
    seen.push(msg);
    inFlight++;
    peakInFlight = Math.max(peakInFlight, inFlight);
    try {
      if (hold) await new Promise<void>((r) => held.push(r));
      if (failNext) {
        failNext = false;
        throw new Error("timeout");
      }
      const d = actor.receive(state, msg, { id: "t1", nowMs: 1_000 });
      state = d.state;
      return d.reply;
    } finally {
      inFlight--;
    }
  };
  return {
    request,
    seen,
    held,
    get state() {
      return state;
    },
    set hold(v: boolean) {
      hold = v;
    },
    failNext() {
      failNext = true;
    },
    get peakInFlight() {
      return peakInFlight;
    },
  };
}

/** Runs deferred flushes by hand, so a test decides what "one turn" holds. */
function broker(t: ReturnType<typeof tenant>, nowMs?: () => number) {
  const turn: (() => void)[] = [];
  const waits: number[] = [];
  const logs: string[] = [];
  const b = new SlotBroker({
    request: (to, msg) => t.request(to, msg),
    defer: (fn, ms) => (turn.push(fn), waits.push(ms)),
    log: (_l, m) => logs.push(m),
    tenantMaxConcurrent: async () => undefined,
    ...(nowMs ? { nowMs } : {}),
  });
  /** Runs every deferred flush and lets the replies come back, until nothing more is deferred. */
  const flush = async () => {
    do {
      while (turn.length > 0) turn.shift()!();
      for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
    } while (turn.length > 0);
  };
  return { b, flush, logs, turn, waits };
}

describe("slot broker", () => {
  it("carries a turn's acquires in one message and grants up to the cap", async () => {
    const t = tenant(300);
    const { b, flush } = broker(t);
    const granted: string[] = [];
    for (let i = 0; i < 500; i++)
      b.acquire("t1", { grant: `r${i}_0`, job: "t1.j", ttl_ms: 60_000 }, () =>
        granted.push(`r${i}_0`),
      );
    await flush();
    assert.equal(t.seen.length, 1, "one slots message for 500 acquires");
    assert.equal(b.batches, 1);
    assert.equal(granted.length, 300, "the cap holds");
    assert.deepEqual(
      granted,
      Array.from({ length: 300 }, (_, i) => `r${i}_0`),
      "granted in the order asked",
    );
    assert.equal(t.state.running.size, 300);
    assert.equal(t.state.waiting.size, 200);
  });

  it("carries each ask's start to the tenant, which grants its waiters earliest start first", async () => {
    const t = tenant(1);
    const { b, flush } = broker(t);
    const granted: string[] = [];
    b.acquire("t1", { grant: "held_0", job: "t1.j", ttl_ms: 60_000, start_at_ms: 1_000 }, () =>
      granted.push("held_0"),
    );
    b.acquire("t1", { grant: "later_0", job: "t1.j", ttl_ms: 60_000, start_at_ms: 300_000 }, () =>
      granted.push("later_0"),
    );
    b.acquire("t1", { grant: "sooner_0", job: "t1.j", ttl_ms: 60_000, start_at_ms: 2_000 }, () =>
      granted.push("sooner_0"),
    );
    await flush();
    const sent = t.seen[0] as Extract<TenantMsg, { kind: "slots" }>;
    assert.deepEqual(
      sent.acquire.map((a) => a.start_at_ms),
      [1_000, 300_000, 2_000],
    );
    assert.deepEqual(granted, ["held_0"]);
    b.release("t1", "held_0");
    await flush();
    assert.deepEqual(
      [...t.state.running.keys()],
      ["sooner_0"],
      "the waiter that starts first got the freed slot",
    );
  });

  it("an ask of a run due within GRANT_GATHER_LEAD_MS goes in a batch of its own while the tenant holds every ordinary batch (gathering grants of runs prepared ahead); at most URGENT_IN_FLIGHT such", async () => {
    const t = tenant(100_000);
    const { b, flush } = broker(t, () => 1_000);
    t.hold = true; // the tenant answers nothing yet: its batches gather
    const granted: string[] = [];
    const n = MAX_SLOT_BATCH * (IN_FLIGHT_PER_TENANT + 1);
    for (let i = 0; i < n; i++)
      b.acquire(
        "t1",
        { grant: `far${i}_0`, job: "t1.j", ttl_ms: 60_000, start_at_ms: 301_000 },
        () => granted.push(`far${i}_0`),
      );
    await flush();
    assert.equal(t.seen.length, IN_FLIGHT_PER_TENANT, "the ordinary lane is full");
    for (let k = 0; k < URGENT_IN_FLIGHT + 1; k++) {
      b.acquire(
        "t1",
        { grant: `now${k}_0`, job: "t1.j", ttl_ms: 60_000, start_at_ms: 1_000 + k },
        () => granted.push(`now${k}_0`),
      );
      await flush();
    }
    const urgent = t.seen.slice(IN_FLIGHT_PER_TENANT) as Extract<TenantMsg, { kind: "slots" }>[];
    assert.equal(
      urgent.length,
      URGENT_IN_FLIGHT,
      "urgent batches sent past the full lane, at most URGENT_IN_FLIGHT",
    );
    assert.deepEqual(
      urgent.map((m) => m.acquire.map((a) => a.run_id)),
      Array.from({ length: URGENT_IN_FLIGHT }, (_, k) => [`now${k}_0`]),
      "each carries the urgent asks only",
    );
    assert.equal(
      b.queued("t1"),
      MAX_SLOT_BATCH + 1,
      "the rest of the far asks and the third urgent one wait",
    );
    t.hold = false;
    while (t.held.length > 0 || b.queued("t1") > 0) {
      t.held.splice(0).forEach((r) => r());
      await flush();
    }
    assert.equal(granted.length, n + URGENT_IN_FLIGHT + 1, "every ask granted once");
    assert.equal(new Set(granted).size, granted.length);
  });

  it("splits more than a batch holds, and bounds the batches in flight per tenant", async () => {
    const t = tenant(100_000);
    const { b, flush } = broker(t);
    t.hold = true;
    let granted = 0;
    const n = MAX_SLOT_BATCH * (IN_FLIGHT_PER_TENANT + 2);
    for (let i = 0; i < n; i++)
      b.acquire("t1", { grant: `r${i}_0`, job: "t1.j", ttl_ms: 60_000 }, () => granted++);
    await flush();
    assert.equal(t.seen.length, IN_FLIGHT_PER_TENANT, "no more in flight than the bound");
    assert.equal(b.queued("t1"), n - IN_FLIGHT_PER_TENANT * MAX_SLOT_BATCH);
    t.hold = false;
    while (t.held.length > 0 || b.queued("t1") > 0) {
      t.held.splice(0).forEach((r) => r());
      await flush();
    }
    assert.equal(granted, n);
    assert.equal(t.seen.length, IN_FLIGHT_PER_TENANT + 2);
    assert.ok(t.seen.every((m) => m.kind === "slots" && m.acquire.length <= MAX_SLOT_BATCH));
    assert.equal(t.peakInFlight, IN_FLIGHT_PER_TENANT);
  });

  it("a release does not wait behind a backlog's acquires: with every acquire batch in flight it goes out alone", async () => {
    const t = tenant(1);
    const { b, flush } = broker(t);
    b.acquire("t1", { grant: "a_0", job: "t1.j", ttl_ms: 60_000 }, () => undefined);
    await flush();
    assert.deepEqual([...t.state.running.keys()], ["a_0"]);
    t.hold = true; // a backlog's re-asks: every acquire batch in flight, more queued
    const n = MAX_SLOT_BATCH * (IN_FLIGHT_PER_TENANT + 1);
    for (let i = 0; i < n; i++)
      b.acquire("t1", { grant: `w${i}_0`, job: "t1.j", ttl_ms: 60_000 }, () => undefined);
    await flush();
    assert.equal(t.seen.length, 1 + IN_FLIGHT_PER_TENANT);
    t.hold = false;
    b.release("t1", "a_0");
    await flush();
    assert.equal(
      t.seen.length,
      2 + IN_FLIGHT_PER_TENANT,
      "sent now (before: only once an acquire batch had come back)",
    );
    const last = t.seen.at(-1)!;
    assert.ok(last.kind === "slots");
    assert.deepEqual(
      [last.release, last.acquire],
      [["a_0"], []],
      "releases only: the acquires keep their order in the lane",
    );
    assert.deepEqual(
      [...t.state.running.keys()],
      [],
      "the slot is back at the tenant while the backlog's batches are still in flight",
    );
    assert.equal(b.queued("t1"), MAX_SLOT_BATCH);
    assert.equal(t.peakInFlight, IN_FLIGHT_PER_TENANT + RELEASE_IN_FLIGHT);
    t.held.splice(0).forEach((r) => r());
    await flush();
    assert.equal(b.queued("t1"), 0);
    assert.equal(t.state.running.size, 1);
  });

  it("a release cancels an acquire of the same grant still queued, and goes first in its batch", async () => {
    const t = tenant(1);
    const { b, flush } = broker(t);
    const granted: string[] = [];
    b.acquire("t1", { grant: "a_0", job: "t1.j", ttl_ms: 60_000 }, () => granted.push("a_0"));
    await flush();
    assert.deepEqual(granted, ["a_0"]);
    b.acquire("t1", { grant: "b_0", job: "t1.j", ttl_ms: 60_000 }, () => granted.push("b_0"));
    b.acquire("t1", { grant: "c_0", job: "t1.j", ttl_ms: 60_000 }, () => granted.push("c_0"));
    b.release("t1", "c_0");
    b.release("t1", "a_0");
    await flush();
    const last = t.seen.at(-1)!;
    assert.ok(last.kind === "slots");
    assert.deepEqual(last.release, ["c_0", "a_0"]);
    assert.deepEqual(
      last.acquire.map((a) => a.run_id),
      ["b_0"],
      "c_0 was cancelled before it went out",
    );
    assert.deepEqual(granted, ["a_0", "b_0"], "a_0's release made room for b_0 in the same batch");
    assert.deepEqual([...t.state.running.keys()], ["b_0"]);
  });

  it("a failed batch drops its acquires and sends its releases again", async () => {
    const t = tenant(5);
    const { b, flush, logs, waits } = broker(t);
    b.acquire("t1", { grant: "a_0", job: "t1.j", ttl_ms: 60_000 }, () =>
      assert.fail("not granted"),
    );
    await flush();
    assert.equal(t.state.running.size, 1);
    t.failNext();
    let got = false;
    b.acquire("t1", { grant: "b_0", job: "t1.j", ttl_ms: 60_000 }, () => (got = true));
    b.release("t1", "a_0");
    await flush();
    assert.equal(got, false);
    assert.match(logs.join("\n"), /slot batch failed/);
    assert.equal(t.state.running.size, 0, "the release went out again in the next batch");
    assert.equal(b.queued("t1"), 0);
    const last = t.seen.at(-1)!;
    assert.ok(last.kind === "slots");
    assert.deepEqual(last.release, ["a_0"]);
    assert.deepEqual(
      last.acquire,
      [],
      "the failed acquire is not resent (its run's slot check asks again)",
    );
    assert.deepEqual(
      waits.slice(-2),
      [0, retryDelayMs(1)],
      "the failed batch went at once, its resend after a backoff",
    );
    assert.ok(retryDelayMs(1) > 0);
  });

  it("a release whose batches keep failing is given up after RELEASE_ATTEMPTS (the tenant's audit frees it), with backoff growing to its cap", async () => {
    const t = tenant(5);
    const { b, flush, waits, logs } = broker(t);
    let fails = 0;
    t.request = async () => {
      fails++;
      throw new Error("closed connection");
    };
    b.release("t1", "a_0");
    await flush();
    assert.equal(fails, RELEASE_ATTEMPTS);
    assert.equal(b.queued("t1"), 0);
    assert.deepEqual(waits, [
      0,
      ...Array.from({ length: RELEASE_ATTEMPTS - 1 }, (_, i) => retryDelayMs(i + 1)),
    ]);
    assert.equal(logs.length, 1, "logged once, not per failure");
    assert.equal(retryDelayMs(50), 5_000);
  });

  it("keeps one queue per tenant", async () => {
    const t = tenant(10);
    const { b, flush } = broker(t);
    b.acquire("t1", { grant: "a_0", job: "t1.j", ttl_ms: 60_000 }, () => undefined);
    b.acquire("t2", { grant: "b_0", job: "t2.j", ttl_ms: 60_000 }, () => undefined);
    await flush();
    assert.equal(t.seen.length, 2);
  });
});

describe("tenant actor: a slots batch", () => {
  const send = (max: number, msgs: TenantMsg[]) => {
    const actor = makeTenantActor(max);
    let state = actor.initialState("t1");
    return msgs.map((m) => {
      const d = actor.receive(state, m, { id: "t1", nowMs: 1_000 });
      state = d.state;
      return { d, state };
    });
  };

  it("decides releases, then acquires, in one decision with one put per grant", () => {
    const [first, second] = send(2, [
      {
        kind: "slots",
        acquire: ["a", "b", "c"].map((r) => ({ run_id: r, job: "t1.j", ttl_ms: 10_000 })),
        release: [],
      },
      { kind: "slots", acquire: [{ run_id: "d", job: "t1.j", ttl_ms: 10_000 }], release: ["a"] },
    ]);
    assert.deepEqual(first!.d.reply, { granted: ["a", "b"] });
    assert.deepEqual(
      first!.d.pre?.map((p) => p.run_id),
      ["a", "b"],
    );
    // a's release grants the oldest waiter c (a send to its job actor); d waits behind nobody else.
    assert.deepEqual(second!.d.reply, { granted: [] });
    assert.deepEqual(
      second!.d.effects
        ?.filter((e) => e.kind === "send")
        .map((e) => e.kind === "send" && (e.msg as { run_id: string }).run_id),
      ["c"],
    );
    assert.deepEqual([...second!.state.running.keys()].sort(), ["b", "c"]);
    assert.deepEqual([...second!.state.waiting.keys()], ["d"]);
  });

  it("without a share, grants stop at the fleet's slots the asking node sees (0: unknown, the cap alone)", () => {
    const asks = (from: number, n: number) =>
      Array.from({ length: n }, (_, i) => ({
        run_id: `r${from + i}`,
        job: "t1.j",
        ttl_ms: 10_000,
      }));
    const actor = makeTenantActor(1_000);
    const state = actor.initialState("t1");
    const slots = (m: Omit<Extract<TenantMsg, { kind: "slots" }>, "kind">) => {
      const d = actor.receive(state, { kind: "slots", ...m }, { id: "t1", nowMs: 1_000 });
      const sent = (d.effects ?? []).filter((e) => e.kind === "send").length;
      return {
        granted: (d.reply as { granted: string[] }).granted.length + sent,
        running: d.state.running.size,
        waiting: d.state.waiting.size,
      };
    };
    assert.deepEqual(
      slots({ acquire: asks(0, 10), release: [], fleet_slots: 4 }),
      { granted: 4, running: 4, waiting: 6 },
      "4 worker slots in the fleet: 4 grants, the rest wait",
    );
    // Fleet unknown (no worker heard): the cap applies alone — the 6 waiting first, then the 10 new.
    assert.deepEqual(slots({ acquire: asks(10, 10), release: [], fleet_slots: 0 }), {
      granted: 16,
      running: 20,
      waiting: 0,
    });
    assert.deepEqual(
      slots({ acquire: asks(20, 1), release: ["r0", "r1"], fleet_slots: 6 }),
      { granted: 0, running: 18, waiting: 1 },
      "6 slots again: nothing more while 18 are held",
    );
  });

  it("skips malformed items and bounds a batch", () => {
    const bad = [
      null,
      7,
      { run_id: "x" },
      { run_id: "y", job: "t1.j", ttl_ms: -1 },
      { run_id: "z", job: "t1.j", ttl_ms: Number.NaN },
    ];
    const ok = Array.from({ length: MAX_SLOT_BATCH + 10 }, (_, i) => ({
      run_id: `r${i}`,
      job: "t1.j",
      ttl_ms: 10_000,
    }));
    const [d] = send(100_000, [
      { kind: "slots", acquire: [...bad, ...ok] as never, release: [5, null] as never },
    ]);
    const granted = (d!.d.reply as { granted: string[] }).granted;
    assert.equal(
      granted.length,
      MAX_SLOT_BATCH - bad.length,
      "at most MAX_SLOT_BATCH items are read",
    );
    assert.ok(granted.every((g) => /^r\d+$/.test(g)));
  });

  it("is guarded on the bus: every acquire must name a job of the addressed tenant", () => {
    assert.equal(
      tenantAddressGuard("t1", {
        kind: "slots",
        acquire: [{ run_id: "a", job: "t1.j", ttl_ms: 1 }],
        release: [],
      }),
      undefined,
    );
    assert.match(
      tenantAddressGuard("t1", {
        kind: "slots",
        acquire: [
          { run_id: "a", job: "t1.j", ttl_ms: 1 },
          { run_id: "b", job: "t2.j", ttl_ms: 1 },
        ],
        release: [],
      }) ?? "",
      /job "t2\.j" addressed to tenant t1/,
    );
    assert.match(
      tenantAddressGuard("t1", { kind: "slots", acquire: [{ run_id: "a" }], release: [] }) ?? "",
      /job null addressed to tenant t1/,
    );
    assert.match(
      tenantAddressGuard("t1", { kind: "slots", acquire: "x", release: [] }) ?? "",
      /not a list/,
    );
  });
});
