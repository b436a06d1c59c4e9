/**
 * The command router's in-memory path (`PartitionResponder.localActors`, router.ts `LocalActors`)
 * against the same partition over a bus that hands requests to the node's NATS responder: the
 * type's guard refuses alike (event, `permission_denied`), an actor's bug is logged alike, and a
 * partition is served in memory only once its `acquire` has resolved.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ActorHost } from "../../../src/actors/host.ts";
import type { ActorDefinition } from "../../../src/actors/actor.ts";
import type { Bus, BusSubscribeOptions } from "../../../src/cluster/bus.ts";
import { EventBus, type NodeEvent } from "../../../src/cluster/events.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { partitionOf } from "../../../src/cluster/placement.ts";
import { encode } from "../../../src/cluster/codec.ts";
import { partitionSubject, type ActorReply } from "../../../src/cluster/router.ts";
import { jobAddressGuard } from "../../../src/server/address-guard.ts";
import { PartitionResponder } from "../../../src/server/partition-responder.ts";
import { testRouter, timerClock } from "../../support/router.ts";

const PARTITIONS = 4;
const addr = { type: "job", id: "tA.j1" };
const P = partitionOf(addr, PARTITIONS);

type Msg = { kind: string; tenant_id?: string; job_id?: string; boom?: boolean };

/** A job actor that records what reaches it; `boom` is a bug (not a `KairosError`). */
function recorder(seen: Msg[]): ActorDefinition<{ n: number }, Msg, string, never> {
  return {
    type: "job",
    initialState: () => ({ n: 0 }),
    loadOnAcquire: true,
    receive(s, m) {
      seen.push(m);
      if (m.boom === true) throw new TypeError("bug in the actor");
      return { state: { n: s.n + 1 }, reply: "ok" };
    },
  };
}

/** A bus that hands each request to the subscriber of its subject (a shared `_INBOX.` reply). */
function loopbackBus(): Bus & { requests: number } {
  const subs = new Map<string, BusSubscribeOptions["callback"]>();
  const bus = {
    requests: 0,
    publish: () => undefined,
    request: (subject: string, data: Uint8Array) => {
      bus.requests++;
      const cb = subs.get(subject);
      if (!cb) return Promise.reject(new Error("503 no responders"));
      return new Promise<{ data: Uint8Array }>((resolve) =>
        cb(null, {
          subject,
          data,
          reply: `_INBOX.test.${bus.requests}`,
          respond: (d: Uint8Array) => resolve({ data: d }),
        }),
      );
    },
    subscribe: (subject: string, o: BusSubscribeOptions) => {
      subs.set(subject, o.callback);
      return { unsubscribe: () => subs.delete(subject) };
    },
    flush: async () => undefined,
    isClosed: () => false,
  };
  return bus;
}

function setup(kv = new MemoryKv("actors")) {
  const seen: Msg[] = [];
  const events: NodeEvent[] = [];
  const logged: { level: string; msg: string; extra?: Record<string, unknown> }[] = [];
  const bus = loopbackBus();
  const eventBus = new EventBus();
  eventBus.on((e) => events.push(e));
  const host = new ActorHost({
    nodeId: "a",
    clock: timerClock,
    events: eventBus,
    kv,
    partitions: PARTITIONS,
    isTrusted: () => true,
    epochOf: () => 3,
    send: async () => undefined,
    mailboxLimit: 16,
    idleMs: 10_000,
    onError: () => undefined,
  });
  host.register({ definition: recorder(seen) });
  const responder = new PartitionResponder({
    clusterName: "c",
    inboxes: "shared",
    bus: () => bus,
    host: () => host,
    events: eventBus,
    log: (level, msg, extra) => logged.push({ level, msg, ...(extra ? { extra } : {}) }),
    clock: timerClock,
  });
  responder.guard("job", jobAddressGuard);
  const local = responder.localActors(host);
  return {
    host,
    responder,
    bus,
    seen,
    events,
    logged,
    /** The node's `router`: always over the bus. */
    wire: testRouter(bus, { partitions: PARTITIONS }),
    /** The node's `commandRouter`: in memory for a served partition. */
    command: testRouter(bus, { partitions: PARTITIONS, local: () => local }),
    /** What the node does on acquiring: activate, then subscribe the responder. */
    acquire: async () => {
      await host.acquire(P);
      responder.subscribe(P);
    },
  };
}

async function refusalOf(
  p: Promise<unknown>,
): Promise<{ code: string | undefined; message: string }> {
  try {
    await p;
  } catch (e) {
    return { code: (e as { code?: string }).code, message: (e as Error).message };
  }
  assert.fail("expected a refusal");
}

describe("command router, in memory: what the partition's responder checks", () => {
  it("refuses a create naming another tenant than its address, as over NATS", async () => {
    const f = setup();
    await f.acquire();
    const forged = { kind: "create", tenant_id: "tB", job_id: "j1" };
    const why = jobAddressGuard(addr.id, forged);
    assert.ok(why !== undefined, "the guard refuses it");

    const before = f.bus.requests;
    const local = await refusalOf(f.command.request(addr, forged));
    assert.equal(f.bus.requests, before, "answered in memory");
    const wire = await refusalOf(f.wire.request(addr, forged));
    assert.equal(f.bus.requests, before + 1, "answered over the bus");

    assert.equal(local.code, "permission_denied");
    assert.deepEqual(local, wire, "the same answer both ways");
    assert.deepEqual(f.seen, [], "the actor never saw it");
    const refused = f.events.filter((e) => e.type === "message_refused");
    assert.deepEqual(refused, [
      { type: "message_refused", actor: "job/tA.j1", reason: why },
      { type: "message_refused", actor: "job/tA.j1", reason: why },
    ]);
    // An honest create still goes through in memory.
    assert.equal(
      await f.command.request(addr, { kind: "create", tenant_id: "tA", job_id: "j1" }),
      "ok",
    );
    assert.equal(f.bus.requests, before + 1);
  });

  it("logs an actor's bug as over NATS and answers `internal`", async () => {
    const f = setup();
    await f.acquire();
    const local = await refusalOf(f.command.request(addr, { kind: "x", boom: true }));
    const wire = await refusalOf(f.wire.request(addr, { kind: "x", boom: true }));
    assert.equal(local.code, "internal");
    assert.deepEqual(local, wire);
    assert.deepEqual(
      f.logged.map((l) => [l.level, l.msg, l.extra?.["err"]]),
      [
        ["error", "actor job/tA.j1 failed", "TypeError: bug in the actor"],
        ["error", "actor job/tA.j1 failed", "TypeError: bug in the actor"],
      ],
    );
  });
});

describe("command router, in memory: only a partition whose acquire resolved", () => {
  it("asks over NATS while the partition's actors are still loading", async () => {
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    let listing!: () => void;
    const listed = new Promise<void>((r) => (listing = r));
    class SlowList extends MemoryKv {
      override async list(prefix: string) {
        listing();
        await gate;
        return super.list(prefix);
      }
    }
    const f = setup(new SlowList("actors"));
    // The previous owner still answers on the bus while this node loads (here: a stand-in).
    let previous = 0;
    f.bus.subscribe(partitionSubject("c", P), {
      callback: (_e, m) => {
        previous++;
        m.respond(encode({ ok: true, v: "previous owner" } satisfies ActorReply));
      },
    });
    const acquiring = f.acquire();
    await listed;
    assert.equal(f.host.serves(P), false, "not served while loading");
    assert.equal(await f.command.request(addr, { kind: "get" }), "previous owner");
    assert.equal(previous, 1, "asked over the bus");
    assert.deepEqual(f.seen, [], "not delivered to the half-loaded partition");

    open();
    await acquiring;
    assert.equal(f.host.serves(P), true);
    const before = f.bus.requests;
    assert.equal(await f.command.request(addr, { kind: "get" }), "ok");
    assert.equal(f.bus.requests, before, "in memory once activated");

    f.host.lose(P);
    assert.equal(f.host.serves(P), false, "not after a loss");
    await f.host.acquire(P);
    assert.equal(f.host.serves(P), true, "again after a new acquire");
    await f.host.release(P);
    assert.equal(f.host.serves(P), false, "not after a release");
  });

  it("an older acquire resolving after a loss and a new acquire does not mark it ready", async () => {
    const gates: (() => void)[] = [];
    class GatedList extends MemoryKv {
      override async list(prefix: string) {
        await new Promise<void>((r) => gates.push(r));
        return super.list(prefix);
      }
    }
    const f = setup(new GatedList("actors"));
    const first = f.host.acquire(P);
    while (gates.length < 1) await new Promise((r) => setImmediate(r));
    f.host.lose(P);
    const second = f.host.acquire(P);
    while (gates.length < 2) await new Promise((r) => setImmediate(r));
    gates[0]!();
    await first;
    assert.equal(f.host.serves(P), false, "the second acquire is still loading");
    gates[1]!();
    await second;
    assert.equal(f.host.serves(P), true);
  });
});
