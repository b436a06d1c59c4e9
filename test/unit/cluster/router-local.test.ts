/**
 * `ActorRouter.request` with `local` (router.ts `LocalActors`): a partition the sender's own node
 * serves is asked in memory, under the wire's rules — the message and the reply copied through the
 * codec, errors as the partition's responder answers them, `not_owner` retried (over NATS once the
 * node no longer serves it), no answer within the attempt timeout a timeout — and any other
 * partition over the bus.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Bus } from "../../../src/cluster/bus.ts";
import { decode, encode } from "../../../src/cluster/codec.ts";
import type { ActorReply, ActorRequest, LocalActors } from "../../../src/cluster/router.ts";
import { partitionOf } from "../../../src/cluster/placement.ts";
import { KairosError, isKairosError } from "../../../src/lib/errors.ts";
import { testRouter } from "../../support/router.ts";

const PARTITIONS = 8;
const addr = { type: "job", id: "t1.j1" };
const P = partitionOf(addr, PARTITIONS);

/** A bus whose every request is answered `v: "wire"`, counted. */
function wireBus(): Bus & { requests: number } {
  const bus = {
    requests: 0,
    publish: () => undefined,
    request: async (_s: string, data: Uint8Array) => {
      bus.requests++;
      const req = decode<ActorRequest>(data);
      return { data: encode({ ok: true, v: { wire: req.m } } satisfies ActorReply) };
    },
    subscribe: () => ({ unsubscribe: () => undefined }),
    flush: async () => undefined,
    isClosed: () => false,
  };
  return bus;
}

function router(bus: Bus, local: LocalActors, o: { attemptTimeoutMs?: number } = {}) {
  return testRouter(bus, { partitions: PARTITIONS, local: () => local, ...o });
}

describe("ActorRouter.request to the node's own host", () => {
  it("asks a served partition in memory: no bus request, message and reply copied", async () => {
    const bus = wireBus();
    const msg = { kind: "create", spec: { name: "a" } };
    const state = { kept: { name: "b" } };
    let got: unknown;
    const r = router(bus, {
      serves: (p) => p === P,
      deliver: async (t, i, m) => {
        assert.equal(t, addr.type);
        assert.equal(i, addr.id);
        got = m;
        return state;
      },
    });
    const reply = await r.request<typeof state>(addr, msg);
    assert.equal(bus.requests, 0);
    assert.deepEqual(got, msg);
    assert.notEqual(got, msg, "the actor gets a copy of the message");
    assert.deepEqual(reply, state);
    assert.notEqual(reply, state, "the caller gets a copy of the reply");
  });

  it("goes over the bus to a partition the node does not serve", async () => {
    const bus = wireBus();
    const r = router(bus, {
      serves: () => false,
      deliver: () => Promise.reject(new Error("not asked")),
    });
    assert.deepEqual(await r.request(addr, { n: 1 }), { wire: { n: 1 } });
    assert.equal(bus.requests, 1);
  });

  it("throws a refusal as the wire would (code and field), not retried", async () => {
    const bus = wireBus();
    let asked = 0;
    const r = router(bus, {
      serves: () => true,
      deliver: () => {
        asked++;
        return Promise.reject(
          new KairosError("invalid_argument", "bad spec", { field: "schedule" }),
        );
      },
    });
    await assert.rejects(
      r.request(addr, {}),
      (e: unknown) => isKairosError(e, "invalid_argument") && e.field === "schedule",
    );
    assert.equal(asked, 1);
  });

  it("an error that is no KairosError is `internal`, as the responder answers it", async () => {
    const r = router(wireBus(), {
      serves: () => true,
      deliver: () => Promise.reject(new TypeError("a bug")),
    });
    await assert.rejects(r.request(addr, {}), (e: unknown) => isKairosError(e, "internal"));
  });

  it("retries `not_owner`, over the bus once the partition is not served", async () => {
    const bus = wireBus();
    let serving = true;
    const r = router(bus, {
      serves: () => serving,
      deliver: () => {
        serving = false; // lost meanwhile
        return Promise.reject(new KairosError("not_owner", "moved"));
      },
    });
    assert.deepEqual(await r.request(addr, { n: 2 }), { wire: { n: 2 } });
    assert.equal(bus.requests, 1);
  });

  it("an unanswered local try times out and is sent again", async () => {
    const bus = wireBus();
    let asked = 0;
    const r = router(
      bus,
      {
        serves: () => true,
        deliver: () => {
          asked++;
          return asked === 1 ? new Promise<never>(() => undefined) : Promise.resolve("second");
        },
      },
      { attemptTimeoutMs: 50 },
    );
    assert.equal(await r.request(addr, {}), "second");
    assert.equal(asked, 2);
  });
});
