/**
 * The tenant actor's pure core: slot grants up to max_concurrent, waiting requests (earliest start first, then FIFO),
 * grants on release (a send to the job actor), grant expiry, the waiting bound, idempotency.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Decision } from "../../../src/actors/actor.ts";
import { makeTenantActor } from "../../../src/slots/tenant-actor.ts";
import {
  REPORT_LOST_MS,
  SHARE_TTL_MS,
  SHARE_WAIT_MS,
  WAITING_LIMIT,
  type TenantEffect,
  type TenantMsg,
  type TenantReply,
  type TenantState,
} from "../../../src/slots/tenant-types.ts";

class Tenant {
  readonly actor;
  state: TenantState;
  constructor(maxConcurrent = 2) {
    this.actor = makeTenantActor(maxConcurrent);
    this.state = this.actor.initialState("t1");
  }
  now = 1_000;
  send(msg: TenantMsg): Decision<TenantState, TenantReply, TenantEffect> {
    const d = this.actor.receive(this.state, msg, { id: "t1", nowMs: this.now });
    this.state = d.state;
    return d;
  }
  acquire(run: string, ttl = 10_000) {
    return this.send({ kind: "acquire", run_id: run, job: `t1.job-${run}`, ttl_ms: ttl });
  }
  grants(d: Decision<TenantState, TenantReply, TenantEffect>): string[] {
    return (d.effects ?? [])
      .filter((e) => e.kind === "send")
      .map((e) => {
        assert.equal(e.kind === "send" && e.to.type, "job");
        return e.kind === "send" ? `${e.to.id}:${(e.msg as { run_id: string }).run_id}` : "";
      });
  }
}

describe("tenant actor", () => {
  it("grants its waiting runs earliest start first (look-ahead: a run due now does not wait behind runs prepared minutes ahead); ties and asks without a start (due now) in arrival order", () => {
    const t = new Tenant(1);
    const ask = (run: string, startAtMs?: number) =>
      t.send({
        kind: "slots",
        acquire: [
          {
            run_id: run,
            job: `t1.job-${run}`,
            ttl_ms: 10_000,
            ...(startAtMs !== undefined ? { start_at_ms: startAtMs } : {}),
          },
        ],
        release: [],
      });
    assert.deepEqual(ask("held", t.now).reply, { granted: ["held"] });
    ask("in5min", t.now + 300_000);
    ask("in4min", t.now + 240_000);
    ask("nowA"); // no start: due now
    ask("in4minB", t.now + 240_000);
    ask("nowB", t.now);
    const order: string[] = [];
    let holder = "held";
    for (let i = 0; i < 5; i++) {
      const d = t.send({ kind: "slots", acquire: [], release: [holder] });
      const g = t.grants(d);
      assert.equal(g.length, 1, "one slot freed, one granted");
      holder = g[0]!.split(":")[1]!;
      order.push(holder);
    }
    assert.deepEqual(order, ["nowA", "nowB", "in4min", "in4minB", "in5min"]);
    assert.equal(t.state.waiting.size, 0);
  });

  it("earliest start first within one batch too: free slots go to the batch's runs due first, not to its first asks", () => {
    const t = new Tenant(2);
    const d = t.send({
      kind: "slots",
      release: [],
      acquire: [
        { run_id: "far1", job: "t1.j", ttl_ms: 10_000, start_at_ms: t.now + 300_000 },
        { run_id: "far2", job: "t1.j", ttl_ms: 10_000, start_at_ms: t.now + 200_000 },
        { run_id: "now1", job: "t1.j", ttl_ms: 10_000 },
        { run_id: "bad", job: "t1.j", ttl_ms: 10_000, start_at_ms: Number.NaN }, // a start it cannot read: due now, not dropped
      ],
    });
    assert.deepEqual(d.reply, { granted: ["now1", "bad"] });
    assert.deepEqual([...t.state.waiting.keys()].sort(), ["far1", "far2"]);
    const g = t.grants(t.send({ kind: "release", run_id: "now1" }));
    assert.deepEqual(g, ["t1.j:far2"]);
  });

  it("lazy heap entries below the rebuild bound: a released waiter is skipped, one asking again after its release waits under its new start, each granted once", () => {
    const t = new Tenant(1);
    t.acquire("held");
    const ask = (run: string, at: number) =>
      t.send({
        kind: "slots",
        acquire: [{ run_id: run, job: "t1.j", ttl_ms: 10_000, start_at_ms: t.now + at }],
        release: [],
      });
    for (let i = 0; i < 6; i++) ask(`w${i}`, 1_000 * (i + 1));
    t.send({ kind: "release", run_id: "w0" });
    t.send({ kind: "release", run_id: "w2" });
    ask("w2", 10_000); // asks again, now for later than everyone
    ask("w4", 0); // still waiting: keeps its place (no re-key)
    assert.ok(
      (t.state.order?.length ?? 0) > t.state.waiting.size,
      "stale entries are still in the heap (no rebuild)",
    );
    const order: string[] = [];
    let holder = "held";
    while (t.state.waiting.size > 0) {
      const g = t.grants(t.send({ kind: "release", run_id: holder }));
      assert.equal(g.length, 1);
      holder = g[0]!.split(":")[1]!;
      order.push(holder);
    }
    assert.deepEqual(order, ["w1", "w3", "w4", "w5", "w2"]);
    assert.equal(t.state.order?.length, 0, "no garbage kept once nothing waits");
  });

  it("a state whose waiters have no heap (built by hand, as in tests) keeps their places: a new ask due at the same instant goes after them", () => {
    const t = new Tenant(1);
    t.state = {
      ...t.actor.initialState("t1"),
      running: new Map([["held", 1e12]]),
      waiting: new Map([
        ["old1", { job: "t1.j", ttl_ms: 1 }],
        ["old2", { job: "t1.j", ttl_ms: 1 }],
      ]),
    };
    t.acquire("new");
    const order: string[] = [];
    let holder = "held";
    while (t.state.waiting.size > 0) {
      holder = t.grants(t.send({ kind: "release", run_id: holder }))[0]!.split(":")[1]!;
      order.push(holder);
    }
    assert.deepEqual(order, ["old1", "old2", "new"]);
  });

  it("the wait order survives released waiters and waiters asking again (lazy heap entries), and bounds its garbage", () => {
    const t = new Tenant(1);
    t.acquire("held");
    for (let i = 0; i < 3_000; i++)
      t.send({
        kind: "slots",
        acquire: [{ run_id: `w${i}`, job: "t1.j", ttl_ms: 10_000, start_at_ms: t.now + 3_000 - i }],
        release: [],
      });
    // Every waiter but the last ten gives up (its job was deleted, say); one asks again (a re-ask keeps its place).
    for (let i = 0; i < 2_990; i++) t.send({ kind: "release", run_id: `w${i}` });
    t.send({
      kind: "slots",
      acquire: [{ run_id: "w2995", job: "t1.j", ttl_ms: 10_000, start_at_ms: 0 }],
      release: [],
    });
    t.send({
      kind: "slots",
      acquire: [{ run_id: "late", job: "t1.j", ttl_ms: 10_000, start_at_ms: t.now + 5_000 }],
      release: [],
    });
    assert.ok(
      (t.state.order?.length ?? 0) <= 2 * t.state.waiting.size + 1_024 + 1,
      `heap rebuilt past its slack: ${t.state.order?.length} entries for ${t.state.waiting.size} waiting`,
    );
    const order: string[] = [];
    let holder = "held";
    while (t.state.waiting.size > 0) {
      const g = t.grants(t.send({ kind: "release", run_id: holder }));
      holder = g[0]!.split(":")[1]!;
      order.push(holder);
    }
    assert.deepEqual(
      order,
      [
        "w2999",
        "w2998",
        "w2997",
        "w2996",
        "w2995",
        "w2994",
        "w2993",
        "w2992",
        "w2991",
        "w2990",
        "late",
      ],
      "earliest start first; a re-ask kept its first place",
    );
  });

  it("grants up to max_concurrent, then queues (asks without a start: FIFO)", () => {
    const t = new Tenant();
    assert.deepEqual(t.acquire("a").reply, { granted: true });
    assert.deepEqual(t.acquire("b").reply, { granted: true });
    assert.deepEqual(t.acquire("c").reply, { granted: false });
    assert.deepEqual(t.acquire("d").reply, { granted: false });
    assert.deepEqual(t.send({ kind: "status" }).reply, {
      running: 2,
      waiting: 2,
      max_concurrent: 2,
      limit: 2,
    });
    assert.deepEqual([...t.state.waiting.keys()], ["c", "d"]);
  });

  it("release grants the oldest waiter by a send of slot_granted to its job actor", () => {
    const t = new Tenant();
    for (const r of ["a", "b", "c", "d"]) t.acquire(r);
    const d = t.send({ kind: "release", run_id: "a" });
    assert.deepEqual(t.grants(d), ["t1.job-c:c"]);
    const send = d.effects?.find((e) => e.kind === "send");
    assert.deepEqual(send?.kind === "send" && send.msg, { kind: "slot_granted", run_id: "c" });
    assert.deepEqual([...t.state.running.keys()].sort(), ["b", "c"]);
    assert.deepEqual(t.grants(t.send({ kind: "release", run_id: "b" })), ["t1.job-d:d"]);
    assert.deepEqual(t.grants(t.send({ kind: "release", run_id: "c" })), []);
    assert.deepEqual(t.send({ kind: "status" }).reply, {
      running: 1,
      waiting: 0,
      max_concurrent: 2,
      limit: 2,
    });
  });

  it("a new request never jumps the queue, even when a slot is free", () => {
    const t = new Tenant();
    t.acquire("a");
    t.acquire("b");
    t.acquire("c");
    t.send({ kind: "set_quota", max_concurrent: 3 }); // grants c
    assert.deepEqual([...t.state.running.keys()].sort(), ["a", "b", "c"]);
    t.acquire("d");
    t.send({ kind: "release", run_id: "a" });
    assert.deepEqual([...t.state.running.keys()].sort(), ["b", "c", "d"]);
  });

  it("releasing a waiting request removes it from the queue", () => {
    const t = new Tenant();
    for (const r of ["a", "b", "c", "d"]) t.acquire(r);
    t.send({ kind: "release", run_id: "c" });
    assert.deepEqual(t.grants(t.send({ kind: "release", run_id: "a" })), ["t1.job-d:d"]);
  });

  it("grants expire after their ttl, freeing the slot for a waiter; the expire timer tracks the earliest grant", () => {
    const t = new Tenant();
    const first = t.acquire("a", 5_000);
    assert.deepEqual(first.effects, [
      { kind: "timer", name: "expire", atMs: 6_000, msg: { kind: "expire" } },
    ]);
    t.acquire("b", 20_000);
    t.acquire("c", 1_000);
    t.now = 5_999;
    assert.deepEqual(t.grants(t.send({ kind: "expire" })), []);
    t.now = 6_000;
    const d = t.send({ kind: "expire" });
    assert.deepEqual(t.grants(d), ["t1.job-c:c"]);
    assert.deepEqual([...t.state.running.keys()].sort(), ["b", "c"]);
    assert.ok(d.effects?.some((e) => e.kind === "timer" && e.atMs === 7_000));
  });

  it("a duplicate acquire is idempotent: a held grant is refreshed, a waiting one is not queued twice", () => {
    const t = new Tenant();
    t.acquire("a", 5_000);
    t.now = 3_000;
    assert.deepEqual(t.acquire("a", 5_000).reply, { granted: true });
    assert.equal(t.state.running.get("a"), 8_000);
    t.acquire("b");
    t.acquire("c");
    assert.deepEqual(t.acquire("c").reply, { granted: false });
    assert.equal(t.state.waiting.size, 1);
    assert.equal(t.state.running.size, 2);
  });

  it("the waiting queue is bounded: past WAITING_LIMIT an acquire fails overloaded", () => {
    const t = new Tenant();
    t.state = {
      ...t.actor.initialState("t1"),
      max_concurrent: 1,
      running: new Map([["r", 1e12]]),
      waiting: new Map(
        Array.from({ length: WAITING_LIMIT }, (_, i) => [`w${i}`, { job: "t1.j", ttl_ms: 1 }]),
      ),
    };
    const d = t.acquire("one-too-many");
    assert.equal(d.fail?.code, "overloaded");
    assert.equal(t.state.waiting.size, WAITING_LIMIT);
  });

  it("set_quota is clamped to at least 1; status, an idle expire and an unknown release change nothing and write nothing", () => {
    const t = new Tenant();
    t.send({ kind: "set_quota", max_concurrent: 0 });
    assert.equal(t.state.max_concurrent, 1);
    const snap = () =>
      JSON.stringify({ ...t.state, running: [...t.state.running], waiting: [...t.state.waiting] });
    const before = snap();
    for (const m of [
      { kind: "status" },
      { kind: "expire" },
      { kind: "release", run_id: "nobody" },
    ] as TenantMsg[]) {
      assert.deepEqual(t.send(m).pre ?? [], [], m.kind);
    }
    assert.equal(snap(), before);
  });

  it("a long queue: 20,000 waiting requests are granted once each, oldest first, as 21,000 releases come", () => {
    const t = new Tenant();
    t.send({ kind: "set_quota", max_concurrent: 1_000 });
    for (let i = 0; i < 21_000; i++) t.acquire(`r${i}`);
    assert.equal(t.state.running.size, 1_000);
    assert.equal(t.state.waiting.size, 20_000);
    let granted = 0;
    for (let i = 0; i < 21_000; i++) {
      const g = t.grants(t.send({ kind: "release", run_id: `r${i}` }));
      if (i + 1_000 < 21_000) assert.deepEqual(g, [`t1.job-r${i + 1_000}:r${i + 1_000}`]);
      granted += g.length;
    }
    assert.equal(granted, 20_000, "every waiter granted once, in order");
    assert.equal(t.state.running.size, 0);
  });
});

describe("tenant actor: quota from the tenant record", () => {
  it("an acquire carrying max_concurrent sets the tenant's maximum", () => {
    const t = new Tenant();
    assert.deepEqual(
      t.send({ kind: "acquire", run_id: "a", job: "t1.j", ttl_ms: 10_000, max_concurrent: 1 })
        .reply,
      { granted: true },
    );
    assert.deepEqual(
      t.send({ kind: "acquire", run_id: "b", job: "t1.j", ttl_ms: 10_000, max_concurrent: 1 })
        .reply,
      { granted: false },
    );
    assert.equal(t.state.max_concurrent, 1);
    const d = t.send({ kind: "release", run_id: "a" });
    assert.deepEqual(t.grants(d), ["t1.j:b"]);
  });
});

describe("tenant actor: durable grants", () => {
  it("every grant, refresh, release and expiry becomes a grant write before the reply", () => {
    const t = new Tenant();
    const a = t.acquire("r1");
    assert.deepEqual(a.pre, [{ kind: "put_grant", run_id: "r1", expires_at_ms: 11_000 }]);
    const again = t.acquire("r1");
    assert.deepEqual(
      again.pre,
      [{ kind: "sync_grant", run_id: "r1" }],
      "same expiry: nothing to write, the reply waits for the grant's batch",
    );
    t.now = 2_000;
    assert.deepEqual(
      t.acquire("r1").pre,
      [{ kind: "put_grant", run_id: "r1", expires_at_ms: 12_000 }],
      "a refresh extends the stored grant",
    );
    assert.deepEqual(t.send({ kind: "release", run_id: "r1" }).pre, [
      { kind: "del_grant", run_id: "r1" },
    ]);
    t.acquire("r2", 500);
    t.now = 3_000;
    assert.deepEqual(t.send({ kind: "expire" }).pre, [{ kind: "del_grant", run_id: "r2" }]);
  });

  it("a tenant actor reloaded from its grants keeps the cap (before the fix it started empty)", async () => {
    const { MemoryKv } = await import("../../../src/cluster/kv-memory.ts");
    const { tenantRegistration } = await import("../../../src/slots/tenant-shell.ts");
    const kv = new MemoryKv("actors");
    const reg = tenantRegistration(kv, 2);
    const ctx = {
      address: { type: "tenant", id: "t1" },
      partition: 3,
      epoch: 1,
      nodeId: "n",
      stillOwner: () => true,
      tell: () => undefined,
    };
    const t = new Tenant();
    await reg.loadSoft!("t1", 3); // the host loads before the first decision
    for (const run of ["r1", "r2"]) await reg.perform!(t.acquire(run).pre!, ctx);
    // The actor moves: a new activation loads the two running grants and refuses a third run.
    const reloaded = (await reg.loadSoft!("t1", 3)) as TenantState;
    assert.deepEqual([...reloaded.running.keys()].sort(), ["r1", "r2"]);
    const moved = new Tenant();
    moved.state = reloaded;
    assert.deepEqual(moved.acquire("r3").reply, { granted: false });
  });
});

describe("tenant shell: a batch of grants for runs that start well ahead gathers (GRANT_GATHER_MS)", () => {
  const ctxOf = (stillOwner = () => true) => ({
    address: { type: "tenant", id: "t1" },
    partition: 3,
    epoch: 1,
    nodeId: "n",
    stillOwner,
    tell: () => undefined,
  });
  const T0 = 1_000_000;
  const grant = (id: string, startAtMs?: number): TenantEffect[] => [
    startAtMs === undefined
      ? { kind: "put_grant", run_id: id, expires_at_ms: T0 + 600_000 }
      : { kind: "put_grant", run_id: id, expires_at_ms: T0 + 600_000, start_at_ms: startAtMs },
  ];
  const setup = async () => {
    const { MemoryKv } = await import("../../../src/cluster/kv-memory.ts");
    const { GrantTable } = await import("../../../src/slots/tenant-shell.ts");
    const { SimClock } = await import("../../sim/sim-clock.ts");
    const sim = new SimClock(T0);
    const kv = new MemoryKv("actors");
    const table = new GrantTable(kv, 3, "t1", sim);
    await table.load(new Map());
    const done = new Map<string, number>();
    const apply = (id: string, startAtMs?: number, ctx = ctxOf()) =>
      table.apply(grant(id, startAtMs), ctx).then(() => done.set(id, sim.now()));
    return { sim, kv, table, done, apply };
  };

  it("grants for runs 5 min ahead, decided one every 100 ms, go in one write a second (they were one write each); each reply after its batch", async () => {
    const { GRANT_GATHER_MS } = await import("../../../src/slots/tenant-shell.ts");
    const { sim, table, done, apply } = await setup();
    for (let i = 0; i < 20; i++) {
      void apply(`r${i}`, sim.now() + 300_000);
      await sim.runUntil(sim.now() + 100);
    }
    await sim.runUntil(sim.now() + 2 * GRANT_GATHER_MS);
    assert.equal(done.size, 20, "every grant answered");
    assert.ok(table.puts <= 3, `${table.puts} writes for 20 grants over 2 s`);
    const first = done.get("r0")!;
    assert.ok(
      first >= T0 + GRANT_GATHER_MS && first <= T0 + GRANT_GATHER_MS + 100,
      `the first reply waits out the gathering, no longer (${first - T0} ms)`,
    );
    assert.equal(done.get("r9"), first, "grants decided while it gathers share its write");
  });

  it("a grant for a run due sooner than GRANT_GATHER_LEAD_MS, or of unknown start, ends the gathering at once: it and the gathered ones go in one write now", async () => {
    const { GRANT_GATHER_LEAD_MS } = await import("../../../src/slots/tenant-types.ts");
    const { sim, table, done, apply } = await setup();
    void apply("later", T0 + 300_000);
    await sim.runUntil(T0 + 200);
    assert.equal(done.size, 0, "gathering");
    void apply("soon", sim.now() + GRANT_GATHER_LEAD_MS - 1);
    await sim.runUntil(T0 + 200);
    assert.deepEqual([...done.entries()].sort(), [
      ["later", T0 + 200],
      ["soon", T0 + 200],
    ]);
    assert.equal(table.puts, 1, "one write for both");
    void apply("unknown");
    await sim.runUntil(T0 + 200);
    assert.equal(done.get("unknown"), T0 + 200, "no start named: due now, not gathered");
    void apply("beyond-lead", sim.now() + GRANT_GATHER_LEAD_MS + 500);
    await sim.runUntil(T0 + 300);
    assert.equal(done.has("beyond-lead"), false, "a run beyond the lead gathers");
  });

  it("ownership lost while a batch gathers: the batch fails (every reply waiting for it) and writes nothing", async () => {
    const { GRANT_GATHER_MS } = await import("../../../src/slots/tenant-shell.ts");
    const { sim, kv, table } = await setup();
    let owner = true;
    const ctx = ctxOf(() => owner);
    const failed: string[] = [];
    for (const id of ["a", "b"])
      void table
        .apply(grant(id, T0 + 300_000), ctx)
        .catch((e: unknown) => failed.push(`${id}: ${String(e)}`));
    await sim.runUntil(T0 + 100);
    owner = false;
    await sim.runUntil(T0 + 2 * GRANT_GATHER_MS);
    assert.equal(failed.length, 2, failed.join("; "));
    assert.match(failed[0]!, /no longer the owner/);
    assert.equal(table.puts, 0);
    assert.deepEqual(await kv.list("grants.3.t1.*"), []);
  });

  it("a release, or a confirmed grant already written, does not wait for a gathering batch; a confirmed grant still pending waits for it, and ends it if its run is due soon", async () => {
    const { GRANT_GATHER_MS } = await import("../../../src/slots/tenant-shell.ts");
    const { sim, table, done, apply } = await setup();
    const { drainMicrotasks } = await import("../../sim/sim-clock.ts");
    void apply("written"); // urgent: written at once
    await sim.runUntil(T0 + 10);
    assert.ok(done.has("written"));
    const ctx = ctxOf();
    void apply("far", T0 + 300_000); // gathers
    const at = (p: Promise<void>, id: string) => void p.then(() => done.set(id, sim.now()));
    at(table.apply([{ kind: "sync_grant", run_id: "written" }], ctx), "sync-written");
    at(table.apply([{ kind: "del_grant", run_id: "written" }], ctx), "release");
    await drainMicrotasks();
    assert.equal(done.get("release"), T0 + 10, "a release answers at once");
    assert.equal(done.get("sync-written"), T0 + 10, "a grant already on disk is confirmed at once");
    at(
      table.apply([{ kind: "sync_grant", run_id: "far", start_at_ms: T0 + 300_000 }], ctx),
      "sync-far",
    );
    await sim.runUntil(T0 + 200);
    assert.equal(
      done.has("sync-far"),
      false,
      "a confirmed grant not yet written waits for its batch",
    );
    at(
      table.apply([{ kind: "sync_grant", run_id: "far", start_at_ms: T0 + 5_000 }], ctx),
      "sync-soon",
    );
    await sim.runUntil(T0 + 300);
    assert.equal(done.get("sync-soon"), T0 + 300, "its run now due soon: the gathering ends");
    assert.equal(done.get("far"), T0 + 300);
    assert.ok(T0 + 300 < T0 + GRANT_GATHER_MS);
  });

  it("a batch that waited behind a slow one gathers no longer once its earliest run is within GRANT_GATHER_LEAD_MS", async () => {
    const { GRANT_GATHER_LEAD_MS } = await import("../../../src/slots/tenant-types.ts");
    const { sim, kv, table, done, apply } = await setup();
    // The first batch's write hangs 5 s (a stalled KV).
    const slow = kv as unknown as { create: (...a: unknown[]) => Promise<unknown> };
    const create = slow.create.bind(kv);
    let stalled = true;
    slow.create = (...a: unknown[]) =>
      stalled ? new Promise((r) => sim.setTimer(5_000, () => r(create(...a)))) : create(...a);
    void apply("first");
    await sim.runUntil(T0 + 10);
    stalled = false;
    void apply("next", T0 + GRANT_GATHER_LEAD_MS + 2_000); // not urgent now; 3 s short of the lead once the first batch is written
    await sim.runUntil(T0 + 5_100);
    const first = done.get("first")!;
    assert.ok(first >= T0 + 5_000, `the first batch took its 5 s (${first - T0} ms)`);
    assert.equal(
      done.get("next"),
      first,
      "written right after the slow batch, not a gathering later",
    );
    assert.equal(table.puts, 2);
  });

  it("the tenant actor names each grant's start: an acquire's own, a waiting run's when a slot frees — but none in a decision on releases only (its grant is written at once: a release never waits for a gathering batch)", () => {
    const t = new Tenant(1);
    const ask = (run: string, startAtMs?: number, release: string[] = []) =>
      t.send({
        kind: "slots",
        acquire: [
          {
            run_id: run,
            job: `t1.job-${run}`,
            ttl_ms: 10_000,
            ...(startAtMs !== undefined ? { start_at_ms: startAtMs } : {}),
          },
        ],
        release,
      });
    assert.deepEqual(ask("a", t.now + 300_000).pre, [
      {
        kind: "put_grant",
        run_id: "a",
        expires_at_ms: t.now + 10_000,
        start_at_ms: t.now + 300_000,
      },
    ]);
    ask("b", t.now + 200_000); // waits: the cap is 1
    ask("x", t.now + 250_000); // waits too
    const freedWithAsks = ask("y", t.now + 260_000, ["a"]); // a release with an ask: b (earliest) is granted, named with its start
    assert.deepEqual(freedWithAsks.pre, [
      { kind: "del_grant", run_id: "a" },
      {
        kind: "put_grant",
        run_id: "b",
        expires_at_ms: t.now + 10_000,
        start_at_ms: t.now + 200_000,
      },
    ]);
    const freed = t.send({ kind: "slots", acquire: [], release: ["b"] });
    assert.deepEqual(
      freed.pre,
      [
        { kind: "del_grant", run_id: "b" },
        { kind: "put_grant", run_id: "x", expires_at_ms: t.now + 10_000 },
      ],
      "releases only: x granted without its start",
    );
    assert.deepEqual(t.acquire("c").pre, [], "the cap: c waits");
    assert.deepEqual(
      t.send({ kind: "release", run_id: "x" }).pre,
      [
        { kind: "del_grant", run_id: "x" },
        { kind: "put_grant", run_id: "c", expires_at_ms: t.now + 10_000 },
      ],
      "c (asked with no start: due now) before y; no start named",
    );
  });
});

describe("tenant shell: grants in append-only segments, group-committed", () => {
  const ctxOf = (stillOwner = () => true) => ({
    address: { type: "tenant", id: "t1" },
    partition: 3,
    epoch: 1,
    nodeId: "n",
    stillOwner,
    tell: () => undefined,
  });
  const puts = (ids: Iterable<string>, exp = 1): TenantEffect[] =>
    [...ids].map((id) => ({ kind: "put_grant", run_id: id, expires_at_ms: exp }));
  const dels = (ids: Iterable<string>): TenantEffect[] =>
    [...ids].map((id) => ({ kind: "del_grant", run_id: id }));
  const range = (p: string, from: number, n: number) =>
    Array.from({ length: n }, (_, i) => `${p}${from + i}`);
  /** The tenant's segment keys on disk, seq → grants in it. */
  const disk = async (kv: import("../../../src/cluster/kv-memory.ts").MemoryKv) => {
    const { decode } = await import("../../../src/cluster/codec.ts");
    const out = new Map<number, Record<string, number>>();
    for (const e of await kv.list("grants.3.t1.*"))
      out.set(Number(e.key.split(".").pop()!.slice(1)), decode<Record<string, number>>(e.value));
    return out;
  };
  const reload = async (kv: import("../../../src/cluster/kv-memory.ts").MemoryKv) => {
    const { GrantTable } = await import("../../../src/slots/tenant-shell.ts");
    const running = new Map<string, number>();
    await new GrantTable(kv, 3, "t1").load(running);
    return running;
  };

  it("a burst of grants and releases decided while a batch is in flight goes out in the next batch: one write for hundreds of changes, each reply after its batch", async () => {
    const { MemoryKv } = await import("../../../src/cluster/kv-memory.ts");
    const { tenantRegistration } = await import("../../../src/slots/tenant-shell.ts");
    const kv = new MemoryKv("actors");
    const reg = tenantRegistration(kv, 1_000);
    await reg.loadSoft!("t1", 3);
    const table = reg.tables.get("3.t1")!;
    const t = new Tenant(1_000);
    const ctx = ctxOf();
    const order: string[] = [];
    const first = reg.perform!(t.acquire("r0").pre!, ctx).then(() => order.push("r0"));
    const rest = Array.from({ length: 500 }, (_, i) =>
      reg.perform!(t.acquire(`r${i + 1}`).pre!, ctx).then(() => order.push(`r${i + 1}`)),
    );
    const releases = Array.from({ length: 200 }, (_, i) =>
      reg.perform!(t.send({ kind: "release", run_id: `r${i + 1}` }).pre!, ctx),
    );
    await Promise.all([first, ...rest, ...releases]);
    assert.ok(table.batches <= 2, `${table.batches} batches for 701 changes`);
    assert.equal(table.puts, table.batches, `${table.puts} writes for 701 changes`);
    assert.equal(order[0], "r0");
    const reloaded = (await reg.loadSoft!("t1", 3)) as TenantState;
    // A later batch appends to the (small) tail: its live grants plus the new ones.
    assert.deepEqual([...reloaded.running.keys()].sort(), ["r0", ...range("r", 201, 300)].sort());
  });

  it("a release alone writes nothing; it leaves KV with a later batch; a lost release over-counts after a reload (never under)", async () => {
    const { MemoryKv } = await import("../../../src/cluster/kv-memory.ts");
    const { GrantTable } = await import("../../../src/slots/tenant-shell.ts");
    const kv = new MemoryKv("actors");
    const table = new GrantTable(kv, 3, "t1");
    await table.load(new Map());
    await table.apply(puts(["a"]), ctxOf());
    const before = table.puts;
    await table.apply(dels(["a"]), ctxOf());
    assert.equal(table.puts, before, "no write for a release");
    assert.ok(
      (await reload(kv)).has("a"),
      "reloaded now, the released grant still counts (the audit frees it)",
    );
    await table.apply(puts(["b"]), ctxOf());
    assert.deepEqual(
      [...(await reload(kv)).keys()],
      ["b"],
      "the next batch rewrote the small tail without a",
    );
    assert.equal(table.puts, before + 1, "an idle grant: one write, its release none");
  });

  it("a batch writes only its own grants: with 20,000 held, a batch of 10 writes one segment of 10", async () => {
    const { MemoryKv } = await import("../../../src/cluster/kv-memory.ts");
    const { GrantTable } = await import("../../../src/slots/tenant-shell.ts");
    const { decode } = await import("../../../src/cluster/codec.ts");
    const kv = new MemoryKv("actors");
    const table = new GrantTable(kv, 3, "t1");
    await table.load(new Map());
    for (let b = 0; b < 20; b++) await table.apply(puts(range(`b${b}-`, 0, 1_000)), ctxOf());
    const written: number[] = [];
    const create = kv.create.bind(kv);
    const update = kv.update.bind(kv);
    kv.create = async (k, v) => (written.push(Object.keys(decode<object>(v)).length), create(k, v));
    kv.update = async (k, v, r) => (
      written.push(Object.keys(decode<object>(v)).length),
      update(k, v, r)
    );
    const before = table.puts;
    await table.apply(puts(range("new", 0, 10)), ctxOf());
    assert.deepEqual(written, [10]);
    assert.equal(table.puts, before + 1);
    assert.equal((await reload(kv)).size, 20_010);
  });

  it("a segment with no live grant left is deleted by a later batch (never the tail); one mostly released is compacted", async () => {
    const { MemoryKv } = await import("../../../src/cluster/kv-memory.ts");
    const { GrantTable, APPEND_MAX } = await import("../../../src/slots/tenant-shell.ts");
    const kv = new MemoryKv("actors");
    const table = new GrantTable(kv, 3, "t1");
    await table.load(new Map());
    const n = APPEND_MAX + 44; // each batch of n fills its segment: the next batch creates one
    await table.apply(puts(range("a", 0, n)), ctxOf()); // s1
    await table.apply(puts(range("b", 0, n)), ctxOf()); // s2
    await table.apply(dels(range("a", 0, n)), ctxOf());
    await table.apply(dels(range("b", 0, n)), ctxOf());
    assert.deepEqual([...(await disk(kv)).keys()], [1, 2], "releases alone write nothing");
    await table.apply(puts(["c0"]), ctxOf()); // s3; s1 deleted, s2 (the tail until now) kept
    assert.deepEqual([...(await disk(kv)).keys()].sort(), [2, 3]);
    await table.apply(puts(["c1"]), ctxOf()); // appended to s3; s2 deleted
    assert.deepEqual([...(await disk(kv)).keys()], [3]);
    assert.deepEqual([...(await reload(kv)).keys()].sort(), ["c0", "c1"]);
    // Compaction: s3 gets the 1,000 d (appended: it held 2), s4 the 1,000 e; 700 d released →
    // s3 rewritten with its 302 by the next batch (which creates s5: s4 is full).
    await table.apply(puts(range("d", 0, 1_000)), ctxOf());
    await table.apply(puts(range("e", 0, 1_000)), ctxOf());
    await table.apply(dels(range("d", 0, 700)), ctxOf());
    await table.apply(puts(["f0"]), ctxOf());
    const sizes = [...(await disk(kv))].map(([seq, g]) => [seq, Object.keys(g).length]);
    assert.deepEqual(
      sizes.sort((a, b) => a[0]! - b[0]!),
      [
        [3, 302],
        [4, 1_000],
        [5, 1],
      ],
      "s3 compacted to its live grants",
    );
    assert.equal((await reload(kv)).size, 302 + 1_000 + 1);
  });

  it("a reload after many batches (grants, refreshes, releases) holds every live grant at its latest expiry, over-counting by at most a quarter plus slack", async () => {
    const { MemoryKv } = await import("../../../src/cluster/kv-memory.ts");
    const { GrantTable, COMPACT_SLACK, MAX_SEGMENTS } =
      await import("../../../src/slots/tenant-shell.ts");
    const kv = new MemoryKv("actors");
    const table = new GrantTable(kv, 3, "t1");
    await table.load(new Map());
    const live = new Map<string, number>();
    let seed = 7;
    const rnd = (n: number) => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31), seed % n);
    let next = 0;
    for (let b = 0; b < 300; b++) {
      const fx: TenantEffect[] = [];
      const ids = [...live.keys()];
      for (let i = rnd(400); i > 0; i--) {
        const id = `g${next++}`;
        live.set(id, b);
        fx.push({ kind: "put_grant", run_id: id, expires_at_ms: b });
      }
      for (let i = rnd(40); i > 0 && ids.length > 0; i--) {
        const id = ids[rnd(ids.length)]!;
        if (!live.has(id)) continue;
        live.set(id, 1_000 + b);
        fx.push({ kind: "put_grant", run_id: id, expires_at_ms: 1_000 + b });
      }
      for (let i = rnd(450); i > 0 && ids.length > 0; i--) {
        const id = ids[rnd(ids.length)]!;
        if (live.delete(id)) fx.push({ kind: "del_grant", run_id: id });
      }
      await table.apply(fx, ctxOf());
      assert.ok(table.segments <= MAX_SEGMENTS + 1, `${table.segments} segments`);
    }
    const back = await reload(kv);
    for (const [id, exp] of live) assert.equal(back.get(id), exp, id);
    const extra = back.size - live.size;
    assert.ok(
      extra <= live.size / 4 + COMPACT_SLACK + 450,
      `${extra} released grants still on disk, ${live.size} live`,
    );
    assert.ok((await disk(kv)).size <= MAX_SEGMENTS + 1);
  });

  it("live segments stay bounded: a batch that would exceed MAX_SEGMENTS folds the smallest into its new segment", async () => {
    const { MemoryKv } = await import("../../../src/cluster/kv-memory.ts");
    const { GrantTable, APPEND_MAX, MAX_SEGMENTS } =
      await import("../../../src/slots/tenant-shell.ts");
    const kv = new MemoryKv("actors");
    const table = new GrantTable(kv, 3, "t1");
    await table.load(new Map());
    let n = 0;
    for (let b = 0; b < MAX_SEGMENTS * 2; b++) {
      await table.apply(puts(range("g", n, APPEND_MAX + b)), ctxOf()); // nothing released
      n += APPEND_MAX + b;
      assert.ok(
        (await disk(kv)).size <= MAX_SEGMENTS,
        `batch ${b}: ${(await disk(kv)).size} segments`,
      );
    }
    assert.equal((await reload(kv)).size, n, "no grant lost by a fold");
  });

  it("a refreshed grant keeps its older copy until its new one is written: a failed batch loses no grant", async () => {
    const { MemoryKv } = await import("../../../src/cluster/kv-memory.ts");
    const { GrantTable, APPEND_MAX } = await import("../../../src/slots/tenant-shell.ts");
    const kv = new MemoryKv("actors");
    const table = new GrantTable(kv, 3, "t1");
    await table.load(new Map());
    const n = APPEND_MAX + 44;
    await table.apply(puts(["g", ...range("a", 1, n - 1)]), ctxOf()); // s1
    await table.apply(puts(range("b", 0, n)), ctxOf()); // s2
    await table.apply(dels(range("a", 1, n - 1)), ctxOf()); // s1: only g left
    kv.create = async () => ({ ok: false, conflict: "exists" });
    await assert.rejects(table.apply(puts(["g"], 5), ctxOf()), /another incarnation/);
    assert.equal((await reload(kv)).get("g"), 1, "g's old copy is still on disk");
    await assert.rejects(
      table.apply(puts(["h"]), ctxOf()),
      /earlier grant batch failed/,
      "the dropped table writes no more",
    );
  });

  it("two incarnations that loaded the same tail race on it: the one that writes second fails (create of the next segment, or update of the tail)", async () => {
    const { MemoryKv } = await import("../../../src/cluster/kv-memory.ts");
    const { GrantTable, APPEND_MAX } = await import("../../../src/slots/tenant-shell.ts");
    const kv = new MemoryKv("actors");
    const first = new GrantTable(kv, 3, "t1");
    await first.load(new Map());
    await first.apply(puts(range("a", 0, APPEND_MAX)), ctxOf()); // a full tail: the next batch creates s2
    const old = new GrantTable(kv, 3, "t1");
    await old.load(new Map());
    const later = new GrantTable(kv, 3, "t1");
    await later.load(new Map());
    await old.apply(puts(["x"]), ctxOf()); // the old incarnation's stray batch lands first
    await assert.rejects(
      later.apply(puts(["y"]), ctxOf()),
      /another incarnation/,
      "the later one's create of s2 fails: it reloads",
    );
    const back = await reload(kv);
    assert.ok(back.has("x") && !back.has("y"));
  });

  it("a duplicate acquire of a held grant is answered only after the batch writing it (closed known gap: a failed batch fails the duplicate's reply too)", async () => {
    const { GrantTable } = await import("../../../src/slots/tenant-shell.ts");
    const { MemoryKv } = await import("../../../src/cluster/kv-memory.ts");
    const kv = new MemoryKv("actors");
    const t = new Tenant(10);
    const table = new GrantTable(kv, 3, "t1");
    await table.load(new Map());
    // A KV whose first write hangs until released, then fails: the batch writing "a" fails.
    let failWrite!: () => void;
    const hung = new Promise<void>(
      (_, reject) => (failWrite = () => reject(new Error("write lost"))),
    );
    const create = kv.create.bind(kv);
    kv.create = async (...a: Parameters<typeof kv.create>) => {
      await hung;
      return create(...a);
    };
    const first = table.apply(t.acquire("a").pre!, ctxOf());
    const dup = t.acquire("a"); // the same millisecond: nothing to write
    assert.deepEqual(dup.reply, { granted: true });
    assert.deepEqual(dup.pre, [{ kind: "sync_grant", run_id: "a" }]);
    let dupSettled: "ok" | "failed" | undefined;
    const second = table.apply(dup.pre, ctxOf()).then(
      () => (dupSettled = "ok"),
      () => (dupSettled = "failed"),
    );
    await new Promise((r) => setImmediate(r));
    assert.equal(dupSettled, undefined, "the duplicate's reply waits for the batch");
    failWrite();
    await assert.rejects(first, /write lost/);
    await second;
    assert.equal(
      dupSettled,
      "failed",
      "and fails with it (the host drops and reloads the tenant; the job re-asks)",
    );
  });

  it("a batch of an earlier incarnation cannot undo the grants a later one wrote (CAS on the tail); a batch is not started by a node that no longer owns the tenant", async () => {
    const { MemoryKv } = await import("../../../src/cluster/kv-memory.ts");
    const { GrantTable } = await import("../../../src/slots/tenant-shell.ts");
    const kv = new MemoryKv("actors");
    const old = new GrantTable(kv, 3, "t1");
    await old.load(new Map());
    await old.apply([{ kind: "put_grant", run_id: "a", expires_at_ms: 1 }], ctxOf());
    // A later incarnation loads and grants "b" (and refreshes "a"): it rewrites the small tail.
    const later = new GrantTable(kv, 3, "t1");
    const running = new Map<string, number>();
    await later.load(running);
    assert.deepEqual([...running.keys()], ["a"]);
    await later.apply(
      [
        { kind: "put_grant", run_id: "b", expires_at_ms: 1 },
        { kind: "put_grant", run_id: "a", expires_at_ms: 2 },
      ],
      ctxOf(),
    );
    // The earlier incarnation's late batch (its tail revision is stale) is refused.
    await assert.rejects(
      old.apply(
        [
          { kind: "put_grant", run_id: "a", expires_at_ms: 9 },
          { kind: "put_grant", run_id: "c", expires_at_ms: 1 },
        ],
        ctxOf(),
      ),
      /another incarnation/,
    );
    const after = new Map<string, number>();
    await new GrantTable(kv, 3, "t1").load(after);
    // What the later incarnation wrote stands, and nothing of the earlier one's refused batch.
    assert.ok(after.has("a") && after.has("b"), `kept: ${[...after.keys()].join(",")}`);
    assert.equal(after.get("a"), 2, "the later incarnation's expiry of a, not the earlier one's");
    assert.ok(!after.has("c"));
    const gone = new GrantTable(kv, 3, "t1");
    await gone.load(new Map());
    await assert.rejects(
      gone.apply(
        [{ kind: "put_grant", run_id: "d", expires_at_ms: 1 }],
        ctxOf(() => false),
      ),
      /no longer the owner/,
    );
  });
});

describe("tenant actor: grant audit (lost releases)", () => {
  it("while runs wait, audits every grant with its job actor every SLOT_AUDIT_MS", async () => {
    const { SLOT_AUDIT_MS } = await import("../../../src/slots/tenant-types.ts");
    const t = new Tenant();
    t.acquire("jaaaaaaaaaaaaaaaa-1");
    t.acquire("jbbbbbbbbbbbbbbbb-2");
    const d = t.acquire("jcccccccccccccccc-3"); // over the cap of 2: waits, arms the audit
    const timer = (d.effects ?? []).find((e) => e.kind === "timer" && e.name === "audit");
    assert.ok(timer && timer.kind === "timer" && timer.atMs === t.now + SLOT_AUDIT_MS);
    const audit = t.send({ kind: "audit" });
    const asked = (audit.effects ?? []).flatMap((e) =>
      e.kind === "send" ? [`${e.to.id}:${(e.msg as { kind: string }).kind}`] : [],
    );
    assert.deepEqual(asked.sort(), [
      "t1.jaaaaaaaaaaaaaaaa:slot_audit",
      "t1.jbbbbbbbbbbbbbbbb:slot_audit",
    ]);
  });
});

describe("tenant actor: expiry turns are batched", () => {
  it("grants expiring a millisecond apart are handled by one expire turn a second, not one turn each (each is O(grants))", async () => {
    const { EXPIRE_BATCH_MS } = await import("../../../src/slots/tenant-types.ts");
    const t = new Tenant();
    t.send({ kind: "set_quota", max_concurrent: 1_000 });
    for (let i = 0; i < 500; i++) {
      t.acquire(`j${String(i).padStart(16, "a")}-1_0`, 10_000);
      t.now += 1; // one grant a millisecond: 500 distinct expiries
    }
    let turns = 0;
    let at = [...t.state.running.values()].reduce((a, b) => Math.min(a, b));
    const lastExpiry = [...t.state.running.values()].reduce((a, b) => Math.max(a, b));
    while ([...t.state.running.values()].some((exp) => exp <= lastExpiry)) {
      t.now = at;
      const d = t.send({ kind: "expire" });
      turns++;
      const next = (d.effects ?? []).find((e) => e.kind === "timer" && e.name === "expire");
      assert.ok(next && next.kind === "timer", "re-armed while grants are held");
      assert.ok(
        next.atMs >= t.now + EXPIRE_BATCH_MS,
        `next expire turn ${next.atMs - t.now} ms later`,
      );
      at = next.atMs;
    }
    assert.equal(turns, 2, "the first expiry, then the other 499 in one turn (not 500 turns)");
    assert.ok(
      [...t.state.running.values()].every((exp) => exp > lastExpiry),
      "every expired grant was extended (and audited)",
    );
  });
});

describe("tenant actor: an expired grant is audited, not dropped", () => {
  it("past its expiry a grant of a real run is extended and its job actor asked; only a release frees it", async () => {
    const { EXPIRED_GRANT_GRACE_MS } = await import("../../../src/slots/tenant-types.ts");
    const t = new Tenant();
    const id = "jaaaaaaaaaaaaaaaa-1_0";
    t.acquire(id, 500);
    t.now += 1_000;
    const d = t.send({ kind: "expire" });
    assert.deepEqual(d.pre, [
      { kind: "put_grant", run_id: id, expires_at_ms: t.now + EXPIRED_GRANT_GRACE_MS },
    ]);
    assert.ok(
      (d.effects ?? []).some(
        (e) => e.kind === "send" && (e.msg as { kind: string }).kind === "slot_audit",
      ),
    );
    assert.deepEqual(
      t.send({ kind: "status" }).reply,
      { running: 1, waiting: 0, max_concurrent: 2, limit: 2 },
      "a run waiting for its flexible start keeps its slot",
    );
  });
});

describe("tenant actor: fair shares of the fleet (with fair options)", () => {
  const REPORT_MS = 500;
  class FairTenant {
    readonly actor = makeTenantActor(10, { reportMs: REPORT_MS });
    state: TenantState = this.actor.initialState("t1");
    now = 1_000;
    send(msg: TenantMsg): Decision<TenantState, TenantReply, TenantEffect> {
      const d = this.actor.receive(this.state, msg, { id: "t1", nowMs: this.now });
      this.state = d.state;
      return d;
    }
    acquire(run: string, extra: { max_concurrent?: number; weight?: number } = {}) {
      return this.send({
        kind: "acquire",
        run_id: run,
        job: `t1.job-${run}`,
        ttl_ms: 60_000,
        ...extra,
      });
    }
    fairTimer(d: Decision<TenantState, TenantReply, TenantEffect>): number | undefined {
      const t = (d.effects ?? []).find((e) => e.kind === "timer" && e.name === "fair");
      return t?.kind === "timer" ? t.atMs : undefined;
    }
    /** The demand report a `fair_report` sends to the fleet actor. */
    report(): { demand: number; weight: number; next?: number } {
      const d = this.send({ kind: "fair_report" });
      const s = (d.effects ?? []).filter((e) => e.kind === "send");
      assert.equal(s.length, 1);
      assert.ok(s[0]!.kind === "send");
      assert.deepEqual(s[0]!.to, { type: "fleet", id: "fleet" });
      const m = s[0]!.msg as { kind: string; tenant: string; demand: number; weight: number };
      assert.equal(m.kind, "demand");
      assert.equal(m.tenant, "t1");
      const next = this.fairTimer(d);
      return { demand: m.demand, weight: m.weight, ...(next !== undefined ? { next } : {}) };
    }
    granted(d: Decision<TenantState, TenantReply, TenantEffect>): string[] {
      return (d.effects ?? []).flatMap((e) =>
        e.kind === "send" && (e.msg as { kind: string }).kind === "slot_granted"
          ? [(e.msg as { run_id: string }).run_id]
          : [],
      );
    }
  }

  it("the first demand arms a report at once; each report carries demand and weight and re-arms while there is demand", () => {
    const t = new FairTenant();
    const d = t.acquire("a", { weight: 3 });
    assert.equal(t.fairTimer(d), t.now, "first report: now");
    assert.equal(t.fairTimer(t.acquire("b")), undefined, "armed already");
    assert.deepEqual(t.report(), { demand: 2, weight: 3, next: t.now + REPORT_MS });
  });

  it("a report overdue (its timer effect lost) is re-armed by the next message, not left silent for good", () => {
    const t = new FairTenant();
    assert.equal(
      t.fairTimer(t.acquire("a")),
      t.now,
      "first report armed; this turn's timer effect is lost",
    );
    t.now += REPORT_LOST_MS / 2;
    assert.equal(
      t.fairTimer(t.acquire("b")),
      undefined,
      "late, not lost: the timer may still fire (re-arming it would move it behind every overdue timer)",
    );
    t.now += REPORT_LOST_MS;
    assert.equal(
      t.fairTimer(t.acquire("c")),
      t.now,
      "overdue: re-armed at once (before the fix: never again)",
    );
    assert.equal(t.fairTimer(t.acquire("d")), undefined, "armed once");
  });

  it("the wait for a first share and a share's expiry are judged at every grant, not only when the report timer runs (it can lag)", () => {
    const t = new FairTenant();
    t.acquire("a");
    assert.deepEqual(t.granted(t.acquire("b")), [], "awaiting the first share: one run");
    t.now += SHARE_WAIT_MS;
    assert.deepEqual(
      t.granted(t.send({ kind: "release", run_id: "zzz" })),
      ["b"],
      "no answer within SHARE_WAIT_MS: the cap, without a report (before: one run for as long as the timer lagged)",
    );
    t.send({ kind: "share", share: 2 });
    t.acquire("c");
    t.acquire("d");
    assert.equal(
      t.send({ kind: "status" }).reply &&
        (t.send({ kind: "status" }).reply as { running: number }).running,
      2,
      "the share: 2",
    );
    t.now += SHARE_TTL_MS + 1;
    assert.deepEqual(
      t.granted(t.send({ kind: "release", run_id: "zzz" })),
      ["c", "d"],
      "a share not confirmed for SHARE_TTL_MS no longer limits",
    );
  });

  it("each report carries the grants held on average since the previous one (`used`), what the fleet turns its rounding by", () => {
    const t = new FairTenant();
    const usedOf = (d: Decision<TenantState, TenantReply, TenantEffect>) => {
      const s = (d.effects ?? []).find((e) => e.kind === "send");
      assert.ok(s?.kind === "send");
      return (s.msg as { used?: number }).used;
    };
    t.acquire("a");
    assert.equal(usedOf(t.send({ kind: "fair_report" })), 1, "the first: what it holds now");
    t.send({ kind: "share", share: 3 });
    t.now += 250;
    t.acquire("b");
    t.now += 250;
    assert.equal(usedOf(t.send({ kind: "fair_report" })), 1.5, "1 for 250 ms, 2 for 250 ms");
    t.now += 100;
    t.send({ kind: "release", run_id: "a" });
    t.send({ kind: "release", run_id: "b" });
    t.acquire("c");
    t.now += 400;
    assert.equal(usedOf(t.send({ kind: "fair_report" })), 1.2, "2 for 100 ms, 1 for 400 ms");
  });

  it("grants only while running < min(max_concurrent, share); a larger share grants the waiters", () => {
    const t = new FairTenant();
    t.acquire("a");
    t.report();
    t.send({ kind: "share", share: 2 });
    assert.deepEqual(t.acquire("b").reply, { granted: true });
    assert.deepEqual(t.acquire("c").reply, { granted: false }, "share of 2 filled");
    assert.deepEqual(t.acquire("d").reply, { granted: false });
    assert.deepEqual(t.send({ kind: "status" }).reply, {
      running: 2,
      waiting: 2,
      max_concurrent: 10,
      limit: 2,
      share: 2,
    });
    assert.deepEqual(
      t.granted(t.send({ kind: "share", share: 3 })),
      ["c"],
      "FIFO: the oldest waiter",
    );
    assert.deepEqual(t.granted(t.send({ kind: "share", share: 50 })), ["d"]);
    // the cap still holds over a larger share
    for (const r of ["e", "f", "g", "h", "i", "j", "k", "l"]) t.acquire(r);
    assert.equal(t.state.running.size, 10);
    assert.equal(t.state.waiting.size, 2);
  });

  it("a smaller share grants nothing new until releases bring running under it (no preemption)", () => {
    const t = new FairTenant();
    t.acquire("a");
    t.report();
    t.send({ kind: "share", share: 5 });
    for (const r of ["b", "c", "d", "e"]) t.acquire(r);
    t.send({ kind: "share", share: 2 });
    assert.equal(t.state.running.size, 5);
    assert.deepEqual(t.granted(t.send({ kind: "release", run_id: "a" })), []);
    assert.deepEqual(t.acquire("f").reply, { granted: false });
    t.send({ kind: "release", run_id: "b" });
    t.send({ kind: "release", run_id: "c" });
    assert.deepEqual(t.granted(t.send({ kind: "release", run_id: "d" })), ["f"], "running 1 < 2");
  });

  it("busy from idle: one grant at once, the rest when the share arrives; no answer within SHARE_WAIT_MS: the cap", async () => {
    const { SHARE_WAIT_MS } = await import("../../../src/slots/tenant-types.ts");
    const t = new FairTenant();
    assert.deepEqual(t.acquire("a").reply, { granted: true });
    assert.deepEqual(t.acquire("b").reply, { granted: false }, "awaiting the first share");
    assert.deepEqual(t.acquire("c").reply, { granted: false });
    t.report();
    t.now += SHARE_WAIT_MS - 1;
    assert.deepEqual(t.granted(t.send({ kind: "fair_report" })), []);
    t.now += 1;
    assert.deepEqual(
      t.granted(t.send({ kind: "fair_report" })),
      ["b", "c"],
      "the fleet is silent: today's behaviour",
    );
    // a share of null (the fleet knows no worker) also means the cap
    const u = new FairTenant();
    u.acquire("a");
    u.acquire("b");
    assert.deepEqual(u.granted(u.send({ kind: "share", share: null })), ["b"]);
  });

  it("a share of 0 is floored at 1 (no tenant with demand starves on rounding)", () => {
    const t = new FairTenant();
    t.acquire("a");
    t.report();
    t.send({ kind: "share", share: 0 });
    t.send({ kind: "release", run_id: "a" });
    assert.deepEqual(t.acquire("b").reply, { granted: true });
    assert.deepEqual(t.acquire("c").reply, { granted: false });
  });

  it("reports the peak demand of the last DEMAND_WINDOW_REPORTS intervals, capped at max_concurrent", async () => {
    const { DEMAND_WINDOW_REPORTS } = await import("../../../src/slots/tenant-types.ts");
    const t = new FairTenant();
    for (const r of ["a", "b", "c"]) t.acquire(r);
    for (const r of ["a", "b"]) t.send({ kind: "release", run_id: r });
    assert.equal(t.report().demand, 3, "peak since the last report");
    for (let i = 1; i < DEMAND_WINDOW_REPORTS; i++) {
      t.now += REPORT_MS;
      assert.equal(t.report().demand, 3, `and over the window (${i})`);
    }
    t.now += REPORT_MS;
    assert.equal(t.report().demand, 1);
    for (let i = 0; i < 30; i++) t.acquire(`w${i}`);
    assert.equal(t.report().demand, 10, "capped at max_concurrent");
  });

  it("idle: a last report of 0 leaves the fleet and stops reporting; the share is forgotten and a late one ignored", async () => {
    const t = new FairTenant();
    t.acquire("a");
    t.report();
    t.send({ kind: "share", share: 1 });
    t.send({ kind: "release", run_id: "a" });
    const { DEMAND_WINDOW_REPORTS } = await import("../../../src/slots/tenant-types.ts");
    for (let i = 0; i < DEMAND_WINDOW_REPORTS; i++) {
      t.now += REPORT_MS;
      assert.equal(t.report().demand, 1, "the trailing window still holds the run");
    }
    t.now += REPORT_MS;
    const last = t.report();
    assert.deepEqual(last, { demand: 0, weight: 1 }, "no next report armed");
    assert.equal(t.state.share, undefined);
    t.send({ kind: "share", share: 1 });
    assert.equal(t.state.share, undefined, "late answer ignored");
    // a new burst is not held back by a stale share: one run at once, the rest with the answer
    const d = t.acquire("b");
    assert.deepEqual(d.reply, { granted: true });
    assert.equal(t.fairTimer(d), t.now);
    assert.deepEqual(t.acquire("c").reply, { granted: false });
    assert.deepEqual(t.granted(t.send({ kind: "share", share: 4 })), ["c"]);
  });

  it("a share not confirmed for SHARE_TTL_MS is dropped at the next report: the cap applies alone", async () => {
    const { SHARE_TTL_MS } = await import("../../../src/slots/tenant-types.ts");
    const t = new FairTenant();
    t.acquire("a");
    t.report();
    t.send({ kind: "share", share: 3 });
    for (const r of ["b", "c"]) t.acquire(r);
    t.send({ kind: "share", share: 1 });
    t.send({ kind: "release", run_id: "a" });
    assert.equal(t.state.running.size, 2);
    assert.deepEqual(t.acquire("d").reply, { granted: false });
    t.now += SHARE_TTL_MS + 1;
    assert.deepEqual(t.granted(t.send({ kind: "fair_report" })), ["d"]);
    assert.equal(t.state.share, undefined);
    assert.deepEqual(t.acquire("e").reply, { granted: true });
  });

  it("held back by a share it had filled, a tenant whose demand grew reports early (EARLY_REPORT_MS after the last)", async () => {
    const { EARLY_REPORT_MS } = await import("../../../src/slots/tenant-types.ts");
    const t = new FairTenant();
    t.acquire("a");
    const sentAt = t.now;
    assert.equal(t.report().demand, 1);
    t.send({ kind: "share", share: 1 });
    const d = t.acquire("b"); // waits: share 1 filled, demand 2 > reported 1
    assert.deepEqual(d.reply, { granted: false });
    assert.equal(t.fairTimer(d), sentAt + EARLY_REPORT_MS);
    // a tenant already wanting more than its share (unsatisfied) does not report early
    t.now += EARLY_REPORT_MS;
    assert.equal(t.report().demand, 2);
    t.send({ kind: "share", share: 1 });
    assert.equal(t.fairTimer(t.acquire("c")), undefined);
  });

  it("without fair options: no reports, and share messages change nothing", () => {
    const t = new Tenant();
    const d = t.acquire("a");
    assert.ok(!(d.effects ?? []).some((e) => e.kind === "timer" && e.name === "fair"));
    t.send({ kind: "share", share: 0 });
    assert.deepEqual(t.acquire("b").reply, { granted: true });
    assert.deepEqual(t.send({ kind: "fair_report" }).effects, []);
  });
});
