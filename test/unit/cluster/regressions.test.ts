import { it } from "node:test";
import assert from "node:assert/strict";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { ActorHost } from "../../../src/actors/host.ts";
import { EventBus } from "../../../src/cluster/events.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { encode } from "../../../src/cluster/codec.ts";
import type { KvEntry } from "../../../src/cluster/kv.ts";

it("kv-memory watch misses a write made while the watch is starting", async () => {
  const kv = new MemoryKv();
  const seen: number[] = [];
  const w = kv.watch("k", (c) => seen.push(c.revision));
  const rev = await kv.put("k", new Uint8Array([1]));
  await w;
  assert.deepEqual(seen, [rev]);
});

it("host.acquire: lose() during the loadOnAcquire listing still activates actors and arms timers", async () => {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  class SlowList extends MemoryKv {
    override async list(f: string): Promise<KvEntry[]> {
      const r = await super.list(f);
      await gate;
      return r;
    }
  }
  const kv = new SlowList();
  const clock = new FakeClock(0);
  const host = new ActorHost({
    nodeId: "n",
    clock,
    events: new EventBus(),
    kv,
    partitions: 1,
    isTrusted: () => true,
    epochOf: () => 1,
    send: async () => undefined,
    mailboxLimit: 10,
    idleMs: 1000,
    onError: () => undefined,
  });
  host.register({
    definition: {
      type: "r",
      loadOnAcquire: true,
      initialState: () => ({}),
      receive: (s) => ({ state: s, reply: null }),
      onActivate: () => [{ kind: "timer", name: "t", atMs: 100, msg: {} }],
    },
  });
  await kv.put("r.0.x", encode({ s: {}, e: 1, w: "z" }));
  const acq = host.acquire(0);
  host.lose(0);
  release();
  await acq;
  assert.equal(host.activeCount, 0, "actor activated in a lost partition");
  assert.equal(host.pendingTimers, 0, "timer armed in a lost partition");
});
