/**
 * The tenant actor's bound on its waiting runs (`max_waiting`, from the tenant record with each
 * `slots` batch): an ask that allows it (`throttle`) is refused once that many runs wait; an ask
 * already waiting keeps its place; asks that do not allow it wait up to WAITING_LIMIT; a release
 * of a waiting ask frees its place. And the node's slot broker hands each answer to its asker.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { makeTenantActor, maxWaiting } from "../../../src/slots/tenant-actor.ts";
import {
  type SlotAsk,
  type TenantMsg,
  type TenantReply,
  type TenantState,
} from "../../../src/slots/tenant-types.ts";
import { SlotBroker } from "../../../src/slots/slot-broker.ts";
import { DEFAULT_MAX_WAITING_RUNS } from "../../../src/protocol/service.ts";

class Tenant {
  readonly actor = makeTenantActor(1);
  state: TenantState = this.actor.initialState("t1");
  now = 1_000;
  send(msg: TenantMsg): TenantReply {
    const d = this.actor.receive(this.state, msg, { id: "t1", nowMs: this.now });
    this.state = d.state;
    return d.reply;
  }
  batch(asks: SlotAsk[], release: string[] = [], max_waiting?: number) {
    return this.send({
      kind: "slots",
      acquire: asks,
      release,
      ...(max_waiting !== undefined ? { max_waiting } : {}),
    }) as { granted: string[]; throttled?: string[]; waiting?: number; max_waiting?: number };
  }
}

const ask = (id: string, throttle = true): SlotAsk => ({
  run_id: id,
  job: `t1.job-${id}`,
  ttl_ms: 60_000,
  ...(throttle ? { throttle: true } : {}),
});

describe("tenant actor: the bound on waiting runs", () => {
  it("defaults to DEFAULT_MAX_WAITING_RUNS and takes the record's bound from a batch (a bad one ignored)", () => {
    const t = new Tenant();
    assert.equal(maxWaiting(t.state), DEFAULT_MAX_WAITING_RUNS);
    t.batch([], [], 5);
    assert.equal(maxWaiting(t.state), 5);
    t.send({ kind: "slots", acquire: [], release: [], max_waiting: Number.NaN });
    assert.equal(maxWaiting(t.state), 5);
  });

  it("refuses a throttle-able ask only once max_waiting runs wait; the reply names the count and the bound; a waiting ask re-asked keeps its place", () => {
    const t = new Tenant();
    const r1 = t.batch([ask("a"), ask("b"), ask("c")], [], 2);
    assert.deepEqual(r1.granted, ["a"], "cap 1: a runs");
    assert.equal(
      r1.throttled,
      undefined,
      "b and c wait: 2 waiting, under or at the bound when asked",
    );
    const r2 = t.batch([ask("c"), ask("d"), ask("e", false)], [], 2);
    assert.deepEqual(r2.granted, []);
    assert.deepEqual(
      r2.throttled,
      ["d"],
      "c already waits; d is beyond the bound; e may not be refused",
    );
    assert.equal(r2.waiting, 3);
    assert.equal(r2.max_waiting, 2);
    assert.ok(t.state.waiting.has("c") && t.state.waiting.has("e") && !t.state.waiting.has("d"));
  });

  it("a release of a waiting ask frees its place: the next ask waits instead of being refused", () => {
    const t = new Tenant();
    t.batch([ask("a"), ask("b"), ask("c")], [], 2);
    assert.deepEqual(t.batch([ask("d")], [], 2).throttled, ["d"]);
    t.batch([], ["c"], 2); // c's run ended while waiting (missed, cancelled)
    const r = t.batch([ask("d")], [], 2);
    assert.equal(r.throttled, undefined);
    assert.ok(t.state.waiting.has("d"));
  });

  it("never refuses while fewer than the bound wait (the control)", () => {
    const t = new Tenant();
    const asks = Array.from({ length: 50 }, (_, i) => ask(`r${i}`));
    const r = t.batch(asks, [], 50);
    assert.equal(r.throttled, undefined);
    assert.equal(t.state.waiting.size, 49);
  });

  it("status shows the bound", () => {
    const t = new Tenant();
    t.batch([], [], 7);
    const s = t.send({ kind: "status" }) as { max_waiting: number };
    assert.equal(s.max_waiting, 7);
  });
});

describe("slot broker: a throttled answer reaches its asker", () => {
  it("calls `throttled` with the tenant's count and bound for a refused ask, `granted` for a granted one; an ask without throttle is never refused", async () => {
    const tenant = new Tenant();
    const pending: (() => void)[] = [];
    const broker = new SlotBroker({
      request: (_to, msg) => Promise.resolve(tenant.send(msg)),
      defer: (fn) => pending.push(fn),
      tenantMaxWaiting: () => Promise.resolve(1),
      log: () => undefined,
    });
    const heard: string[] = [];
    const answers = (id: string) => ({
      granted: () => heard.push(`${id}:granted`),
      throttled: (w: number, m: number) => heard.push(`${id}:throttled ${w}/${m}`),
    });
    for (const id of ["a", "b", "c"])
      broker.acquire(
        "t1",
        { grant: id, job: `t1.job-${id}`, ttl_ms: 60_000, throttle: true },
        answers(id),
      );
    broker.acquire("t1", { grant: "d", job: "t1.job-d", ttl_ms: 60_000 }, answers("d"));
    while (pending.length > 0) pending.shift()!();
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(heard.sort(), ["a:granted", "c:throttled 2/1"]);
    assert.ok(tenant.state.waiting.has("b") && tenant.state.waiting.has("d"));
  });
});
