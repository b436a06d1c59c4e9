/**
 * Membership on a hand-driven clock: a node whose own event loop stalled (its heartbeat timer
 * ran late, nobody's heartbeat processed meanwhile) keeps itself and its peers live; a peer that
 * stays silent while this node listens is still dropped after the failure timeout.
 */
import { it } from "node:test";
import assert from "node:assert/strict";
import type { BusSubscribeOptions } from "../../../src/cluster/bus.ts";
import { encode } from "../../../src/cluster/codec.ts";
import { EventBus } from "../../../src/cluster/events.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { Membership } from "../../../src/cluster/membership.ts";
import { StallClock, stubBus } from "../../support/stall.ts";

function setup() {
  const clock = new StallClock();
  const subs = new Map<string, BusSubscribeOptions>();
  const bus = stubBus(subs);
  const left: string[] = [];
  const events = new EventBus();
  events.on((e) => {
    if (e.type === "member_left") left.push(e.nodeId);
  });
  const m = new Membership({
    nc: bus,
    clusterName: "kairos",
    clock,
    events,
    nodesKv: new MemoryKv("nodes"),
    self: { nodeId: "n1", incarnation: "i1", roles: ["scheduler"], startedAtMs: 0 },
    heartbeatIntervalMs: 500,
    failureTimeoutMs: 3000,
    onChange: () => undefined,
  });
  m.start();
  const beatFrom = (nodeId: string) => {
    const cb = subs.get("kairos.kairos.node.hb.*")!.callback;
    cb(null, {
      subject: "kairos.kairos.node.hb.s",
      data: encode({ nodeId, incarnation: `${nodeId}-i`, roles: ["scheduler"], startedAtMs: 0 }),
      respond: () => undefined,
    });
  };
  return { clock, m, left, beatFrom };
}

it("a node whose event loop stalled past the failure timeout keeps itself and its peers live", () => {
  const { clock, m, left, beatFrom } = setup();
  beatFrom("n2");
  assert.deepEqual(m.live("scheduler"), ["n1", "n2"]);
  clock.t = 4700; // 4.7 s without a turn: no tick, no heartbeat processed
  assert.deepEqual(
    m.live("scheduler"),
    ["n1", "n2"],
    "before the fix: [] — the node released every partition",
  );
  assert.ok(m.isLive("n2"));
  clock.runTimers(); // the late heartbeat tick
  assert.deepEqual(left, [], "a peer dropped for time this node could not listen");
  assert.deepEqual(m.live("scheduler"), ["n1", "n2"]);
});

it("a peer silent while this node listens is dropped after the failure timeout", () => {
  const { clock, m, left, beatFrom } = setup();
  beatFrom("n2");
  for (let t = 500; t <= 3500; t += 500) {
    clock.t = t;
    clock.runTimers();
  }
  assert.deepEqual(left, ["n2"]);
  assert.deepEqual(m.live("scheduler"), ["n1"]);
});

it("one stall of any length drops nobody: each peer gets a failure timeout of listening after it", () => {
  const { clock, m, left, beatFrom } = setup();
  beatFrom("n2");
  clock.t = 10_000; // longer than two failure timeouts: the earlier credit (≤ heard + 3 s) dropped n2 here
  clock.runTimers();
  assert.deepEqual(left, []);
  assert.deepEqual(m.live("scheduler"), ["n1", "n2"]);
  clock.t = 10_500;
  clock.runTimers();
  beatFrom("n2"); // its heartbeat, read once the loop turns again
  clock.t = 13_000;
  clock.runTimers();
  assert.deepEqual(left, []);
});

it("a stall followed by a shorter late tick drops nobody: the cap keeps the longest stretch since the peer was heard", () => {
  const { clock, left, beatFrom } = setup();
  clock.t = 400;
  beatFrom("n2");
  clock.t = 500;
  clock.runTimers();
  clock.t = 10_000; // deaf 9,000: n2 credited to 9,400
  clock.runTimers();
  clock.t = 11_200; // deaf 700: capped by this stretch alone, n2 fell back to 4,100 and was dropped
  clock.runTimers();
  assert.deepEqual(left, [], "dropped after ~1,100 ms of listening since the stall");
});

it("a dead peer is still dropped when this node's own ticks keep running late (two timeouts and two deaf stretches)", () => {
  const { clock, left, beatFrom } = setup();
  beatFrom("n2"); // heard at 0, never again
  for (let t = 2000; t <= 8000; t += 2000) {
    // every tick 1.5 s late: "deaf" credit each time
    clock.t = t;
    clock.runTimers();
  }
  assert.deepEqual(
    left,
    ["n2"],
    "credited without bound, it stayed live (7 ticks at 600 ms late; minutes at 20 s)",
  );
});

it("only the exact voice subjects count: a JetStream delivery under a `$KV.….s` subject is no scheduler's heartbeat", () => {
  const subs = new Map<string, BusSubscribeOptions>();
  const clock = new StallClock();
  const m = new Membership({
    nc: stubBus(subs),
    clusterName: "kairos",
    clock,
    events: new EventBus(),
    nodesKv: new MemoryKv("nodes"),
    self: { nodeId: "n1", incarnation: "i1", roles: ["scheduler"], startedAtMs: 0 },
    heartbeatIntervalMs: 500,
    failureTimeoutMs: 3000,
    onChange: () => undefined,
  });
  m.start();
  const ghost = encode({ nodeId: "ghost", incarnation: "g", roles: ["scheduler"], startedAtMs: 0 });
  // A push consumer delivers a stored message under its own subject to whatever subject its creator chose.
  subs
    .get("kairos.kairos.node.hb.*")!
    .callback(null, { subject: "$KV.kairos_idem.x.s", data: ghost, respond: () => undefined });
  subs.get("kairos.kairos.node.hb.*")!.callback(null, {
    subject: "kairos.kairos.node.hb.x.s",
    data: ghost,
    respond: () => undefined,
  });
  assert.deepEqual(m.live(), ["n1"], "nobody joined");
  subs
    .get("kairos.kairos.node.hb.*")!
    .callback(null, { subject: "kairos.kairos.node.hb.s", data: ghost, respond: () => undefined });
  assert.deepEqual(
    m.live("scheduler"),
    ["ghost", "n1"],
    "the same heartbeat on the scheduler subject is believed",
  );
  subs.get("kairos.kairos.node.leave.*")!.callback(null, {
    subject: "$KV.kairos_idem.y.s",
    data: encode({ nodeId: "ghost", incarnation: "g" }),
    respond: () => undefined,
  });
  assert.deepEqual(
    m.live("scheduler"),
    ["ghost", "n1"],
    "nor does such a delivery make a scheduler leave",
  );
  void m.stop();
});
