/**
 * The fleet actor's pure core: warm-up, shares answered by a send to the reporting tenant actor,
 * recomputation as demand, weight and capacity change, stale tenants, capacity 0, parsing, and
 * the shell's capacity injection.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Decision } from "../../../src/actors/actor.ts";
import {
  FLEET_RECOMPUTE_MS,
  FLEET_ROTATE_MS,
  FLEET_STALE_MS,
  FLEET_WARMUP_MS,
  OWED_LIMIT_MS,
  makeFleetActor,
  type FleetMsg,
  type FleetReply,
  type FleetState,
  type FleetStatus,
} from "../../../src/slots/fleet-actor.ts";
import { fleetRegistration } from "../../../src/slots/fleet-shell.ts";
import { isKairosError } from "../../../src/lib/errors.ts";

class Fleet {
  readonly actor = makeFleetActor();
  state: FleetState = this.actor.initialState("fleet");
  now = 1_000;
  capacity = 40;
  /** What the workers advertise executing, by tenant (undefined: not known). */
  executing: Map<string, number> | undefined;
  send(
    msg: Omit<Extract<FleetMsg, { kind: "demand" }>, "capacity" | "kind" | "executing"> | "status",
  ): Decision<FleetState, FleetReply, never> {
    const m: FleetMsg =
      msg === "status"
        ? { kind: "status", capacity: this.capacity }
        : { kind: "demand", ...msg, capacity: this.capacity, executing: this.executing };
    const d = this.actor.receive(this.state, m, { id: "fleet", nowMs: this.now });
    this.state = d.state;
    return d;
  }
  report(tenant: string, demand: number, weight = 1, held = false) {
    return this.send({ tenant, demand, weight, ...(held ? { held } : {}) });
  }
  /** Every tenant reports (holding shares of a predecessor), past the warm-up; returns each one's share as sent to it. */
  warm(reports: [string, number, number][]): Record<string, number | null> {
    for (const [t, dmd, w] of reports) this.report(t, dmd, w, true);
    this.now += FLEET_WARMUP_MS;
    return this.round(reports);
  }
  round(reports: [string, number, number][]): Record<string, number | null> {
    const out: Record<string, number | null> = {};
    for (const [t, dmd, w] of reports) {
      const d = this.report(t, dmd, w);
      // Its own answer; any other send tells another tenant of a smaller share (see below).
      const sends = (d.effects ?? []).filter((e) => e.kind === "send" && e.to.id === t);
      assert.equal(sends.length, 1);
      const s = sends[0]!;
      assert.ok(s.kind === "send");
      assert.deepEqual(s.to, { type: "tenant", id: t });
      const msg = s.msg as { kind: string; share: number | null };
      assert.equal(msg.kind, "share");
      assert.deepEqual(d.reply, { share: msg.share });
      out[t] = msg.share;
    }
    return out;
  }
}

describe("fleet actor", () => {
  it("a fresh fleet listens FLEET_WARMUP_MS to tenants holding a predecessor's share, then answers each with its share", () => {
    const f = new Fleet();
    const early = f.report("a", 100, 1, true);
    assert.deepEqual(early.reply, { share: null });
    assert.equal(
      (early.effects ?? []).length,
      0,
      "no answer during the warm-up: a keeps its old share",
    );
    assert.deepEqual(
      f.warm([
        ["a", 100, 1],
        ["b", 100, 3],
      ]),
      { a: 10, b: 30 },
    );
  });

  it("a tenant without a share (busy from idle) is answered at once, even during the warm-up", () => {
    const f = new Fleet();
    assert.deepEqual(f.round([["a", 3, 1]]), { a: 40 }, "its demand plus all the headroom");
  });

  it("slots nobody asked for are added to the shares by weight (headroom); under overload there is none", () => {
    const f = new Fleet();
    // max-min: 5 and 10; 25 spare → +6 (25·1/4) and +18 (25·3/4), floors
    assert.deepEqual(
      f.warm([
        ["a", 5, 1],
        ["b", 10, 3],
      ]),
      { a: 11, b: 28 },
    );
    f.now += FLEET_RECOMPUTE_MS;
    f.round([
      ["a", 50, 1],
      ["b", 50, 3],
    ]);
    f.now += FLEET_RECOMPUTE_MS;
    assert.deepEqual(
      f.round([
        ["a", 50, 1],
        ["b", 50, 3],
      ]),
      { a: 10, b: 30 },
    );
  });

  it("weighted max-min: a small tenant gets what it asks; a capped tenant's demand is its cap", () => {
    const f = new Fleet();
    assert.deepEqual(
      f.warm([
        ["a", 500, 1],
        ["b", 500, 1],
        ["c", 16, 2],
        ["small", 2, 1],
      ]),
      { a: 11, b: 11, c: 16, small: 2 },
    );
  });

  it("recomputes at once for a new tenant, a new weight or a new capacity; demand-only changes at most every FLEET_RECOMPUTE_MS", () => {
    const f = new Fleet();
    f.warm([["a", 100, 1]]);
    assert.deepEqual(f.round([["a", 100, 1]]), { a: 40 });
    assert.deepEqual(f.round([["b", 100, 1]]), { b: 20 }, "new tenant: recomputed now");
    assert.deepEqual(f.round([["b", 100, 3]]), { b: 30 }, "new weight: recomputed now");
    f.capacity = 80;
    assert.deepEqual(f.round([["a", 100, 1]]), { a: 20 }, "new capacity: recomputed now");
    assert.deepEqual(
      f.round([["b", 5, 3]]),
      { b: 60 },
      "demand change within FLEET_RECOMPUTE_MS: cached share",
    );
    f.now += FLEET_RECOMPUTE_MS;
    assert.deepEqual(
      f.round([
        ["b", 5, 3],
        ["a", 100, 1],
      ]),
      { b: 5, a: 75 },
    );
    const st = f.send("status").reply as FleetStatus;
    assert.deepEqual(st.tenants, [
      { tenant: "a", demand: 100, weight: 1, share: 75 },
      { tenant: "b", demand: 5, weight: 3, share: 5 },
    ]);
    assert.equal(st.capacity, 80);
  });

  it("a recomputation that shrinks other tenants' shares tells them at once, not at their next reports (the small tenant back from idle)", () => {
    const f = new Fleet();
    assert.deepEqual(
      f.warm([
        ["a", 500, 1],
        ["b", 500, 1],
        ["c", 16, 2],
      ]),
      { a: 12, b: 12, c: 16 },
      "the whole fleet, as in the fairness benchmark",
    );
    const d = f.report("small", 4, 1);
    const sends = (d.effects ?? []).flatMap((e) =>
      e.kind === "send"
        ? [[e.to.id, (e.msg as { kind: string; share: number }).share] as const]
        : [],
    );
    assert.deepEqual(d.reply, { share: 4 });
    assert.deepEqual(
      Object.fromEntries(sends),
      { small: 4, a: 10, b: 10 },
      "c keeps 16: not told; before the fix only small heard (a and b granted on to 12 until their next reports)",
    );
    for (const e of d.effects ?? [])
      assert.ok(e.kind === "send" && (e.msg as { kind: string }).kind === "share");
    // Unchanged shares are not pushed; grown ones are, like shrunk ones.
    f.now += FLEET_RECOMPUTE_MS;
    assert.equal((f.report("a", 500, 1).effects ?? []).length, 1, "no change: only the reporter");
    f.report("small", 0);
    f.now += FLEET_RECOMPUTE_MS;
    const grown = (f.report("b", 500, 1).effects ?? []).flatMap((e) =>
      e.kind === "send"
        ? [[e.to.id, (e.msg as { kind: string; share: number }).share] as const]
        : [],
    );
    assert.deepEqual(
      Object.fromEntries(grown),
      { b: 12, a: 12 },
      "small left: a's share grew back and a hears it at once (before the fix: at its next report, its part of the freed slots idle until then)",
    );
    assert.deepEqual(
      (f.send("status").reply as FleetStatus).tenants.map((t) => [t.tenant, t.share]),
      [
        ["a", 12],
        ["b", 12],
        ["c", 16],
      ],
    );
  });

  it("with demands steady, a rounded share turns every FLEET_ROTATE_MS: equal tenants get 1 and 2 of 3 slots in turn", () => {
    const f = new Fleet();
    f.capacity = 3;
    const seen: string[] = [];
    let first = f.warm([
      ["a", 50, 1],
      ["b", 50, 1],
    ]);
    seen.push(`${first["a"]}${first["b"]}`);
    for (let i = 0; i < 4; i++) {
      f.now += FLEET_ROTATE_MS;
      first = f.round([
        ["a", 50, 1],
        ["b", 50, 1],
      ]);
      seen.push(`${first["a"]}${first["b"]}`);
    }
    assert.ok(seen.includes("21") && seen.includes("12"), seen.join(" "));
  });

  it("recomputes for changed demands between turns keep the rounding's order: shares flip at most every FLEET_ROTATE_MS", () => {
    const f = new Fleet();
    f.capacity = 3;
    f.warm([
      ["a", 50, 1],
      ["b", 50, 1],
    ]);
    const seen: string[] = [];
    for (let i = 0; i < 9; i++) {
      f.now += FLEET_RECOMPUTE_MS; // inside one turn: only a's demand changes (still above its part)
      const r = f.round([
        ["a", 50 - (i % 2), 1],
        ["b", 50, 1],
      ]);
      seen.push(`${r["a"]}${r["b"]}`);
    }
    assert.equal(new Set(seen).size, 1, `one rounding between turns: ${seen.join(" ")}`);
    f.now += FLEET_ROTATE_MS;
    const turned = f.round([
      ["a", 50, 1],
      ["b", 50, 1],
    ]);
    assert.notEqual(`${turned["a"]}${turned["b"]}`, seen[0], "and it turns at the next turn");
  });

  it("the rounding turns by the grants held, not the shares given: a tenant still holding more than its part (its runs not ended) gets the floor until the other has made up", () => {
    const f = new Fleet();
    f.capacity = 3;
    const first = f.warm([
      ["a", 50, 1],
      ["b", 50, 1],
    ]);
    assert.deepEqual(first, { a: 2, b: 1 }, "a tie: the smaller id first");
    const seen: string[] = [];
    for (let i = 0; i < 6; i++) {
      f.now += FLEET_ROTATE_MS;
      // a's three long runs hold 2 slots whatever its share; b holds what it is given.
      const a = f.send({ tenant: "a", demand: 50, weight: 1, used: 2 }).reply as { share: number };
      const b = f.send({ tenant: "b", demand: 50, weight: 1, used: 1 }).reply as { share: number };
      seen.push(`${a.share}${b.share}`);
    }
    // By the shares given, a would be owed after each turn it had 1 and get 2 every other turn.
    assert.deepEqual(seen, ["12", "12", "12", "12", "12", "12"], seen.join(" "));
    // Once each holds what it is given, b keeps the extra slot until a has made up, then the two
    // take turns again.
    const turns: string[] = [];
    let held = { a: 1, b: 2 };
    for (let i = 0; i < 6; i++) {
      f.now += FLEET_ROTATE_MS;
      const a = f.send({ tenant: "a", demand: 50, weight: 1, used: held.a }).reply as {
        share: number;
      };
      const b = f.send({ tenant: "b", demand: 50, weight: 1, used: held.b }).reply as {
        share: number;
      };
      held = { a: a.share, b: b.share };
      turns.push(`${a.share}${b.share}`);
    }
    assert.deepEqual(turns.slice(0, 3), ["12", "12", "12"], turns.join(" "));
    assert.ok(turns.includes("21"), turns.join(" "));
  });

  it("while grants outnumber the places (shrunk shares waiting for runs to end), the holdings are compared with each other: the tenant holding least gets the slot left by the rounding", () => {
    const f = new Fleet();
    f.capacity = 4;
    f.warm([
      ["a", 50, 1],
      ["b", 50, 1],
      ["c", 50, 1],
    ]);
    const turns: string[] = [];
    for (let i = 0; i < 12; i++) {
      f.now += FLEET_ROTATE_MS;
      const shares = (["a", "b", "c"] as const).map(
        (t) =>
          (
            f.send({ tenant: t, demand: 50, weight: 1, used: t === "c" ? 1.5 : 2 }).reply as {
              share: number;
            }
          ).share,
      );
      turns.push(shares.join(""));
    }
    // Each holds more than its part (4/3): compared with the whole, without scaling, all three
    // would owe alike after a few turns and the rounding would go by ties (to a).
    assert.deepEqual(turns.slice(1), Array(11).fill("112"), turns.join(" "));
  });

  it("with the workers' executions known, the rounding turns by the slots executed, not by the grants held", () => {
    const f = new Fleet();
    f.capacity = 3;
    f.executing = new Map();
    f.warm([
      ["a", 50, 1],
      ["b", 50, 1],
    ]);
    const turns: string[] = [];
    for (let i = 0; i < 6; i++) {
      f.now += FLEET_ROTATE_MS;
      // Both report holding 1.5 grants; b's runs execute in 2 slots, a's in 1 (its second grant
      // waits for a worker's place): a is owed, and keeps the slot left by the rounding.
      f.executing = new Map([
        ["a", 1],
        ["b", 2],
      ]);
      const a = f.send({ tenant: "a", demand: 50, weight: 1, used: 1.5 }).reply as {
        share: number;
      };
      const b = f.send({ tenant: "b", demand: 50, weight: 1, used: 1.5 }).reply as {
        share: number;
      };
      turns.push(`${a.share}${b.share}`);
    }
    assert.deepEqual(turns.slice(1), Array(5).fill("21"), turns.join(" "));
    assert.ok((f.state.owed?.get("a") ?? 0) > 0 && (f.state.owed?.get("b") ?? 0) < 0);
    // A tenant with no attempt executing counts as holding none (it is absent from the map).
    f.executing = new Map([["b", 3]]);
    for (let i = 0; i < 3; i++) {
      f.now += FLEET_ROTATE_MS;
      f.send({ tenant: "a", demand: 50, weight: 1, used: 3 });
      f.send({ tenant: "b", demand: 50, weight: 1, used: 0 });
    }
    assert.equal(f.state.owed?.get("a"), OWED_LIMIT_MS);
    assert.equal(f.state.owed?.get("b"), -OWED_LIMIT_MS);
  });

  it("what a tenant is owed is bounded: a tenant that held too little for long is owed at most OWED_LIMIT_MS", () => {
    const f = new Fleet();
    f.capacity = 3;
    f.warm([
      ["a", 50, 1],
      ["b", 50, 1],
    ]);
    for (let i = 0; i < 20; i++) {
      f.now += FLEET_ROTATE_MS;
      f.send({ tenant: "a", demand: 50, weight: 1, used: 0 });
      f.send({ tenant: "b", demand: 50, weight: 1, used: 3 });
    }
    assert.equal(f.state.owed?.get("a"), OWED_LIMIT_MS);
    assert.equal(f.state.owed?.get("b"), -OWED_LIMIT_MS);
    // Served in full (its part whole), a tenant owes and is owed nothing.
    f.capacity = 100;
    f.now += FLEET_ROTATE_MS;
    f.send({ tenant: "a", demand: 50, weight: 1, used: 0 });
    assert.equal(f.state.owed?.has("a"), false);
  });

  it("a tenant reporting no demand leaves (no answer); a silent one is dropped after FLEET_STALE_MS", () => {
    const f = new Fleet();
    f.warm([
      ["a", 100, 1],
      ["b", 100, 1],
      ["c", 100, 1],
    ]);
    const gone = f.report("c", 0);
    assert.deepEqual(gone.reply, { share: null });
    assert.equal((gone.effects ?? []).length, 0);
    f.now += FLEET_RECOMPUTE_MS;
    assert.deepEqual(
      f.round([
        ["a", 100, 1],
        ["b", 100, 1],
      ]),
      { a: 20, b: 20 },
    );
    // b falls silent (its actor moved or died): after FLEET_STALE_MS a gets the whole fleet
    f.now += FLEET_STALE_MS + 1;
    assert.deepEqual(f.round([["a", 100, 1]]), { a: 40 });
    assert.deepEqual(
      (f.send("status").reply as FleetStatus).tenants.map((t) => t.tenant),
      ["a"],
    );
  });

  it("with no worker known (capacity 0) the share is null: tenants fall back to their caps", () => {
    const f = new Fleet();
    f.capacity = 0;
    assert.deepEqual(
      f.warm([
        ["a", 100, 1],
        ["b", 10, 1],
      ]),
      { a: null, b: null },
    );
    f.capacity = 10;
    assert.deepEqual(f.round([["a", 100, 1]]), { a: 5 });
  });

  it("parses wire messages and refuses junk with invalid_argument", () => {
    const actor = makeFleetActor();
    const parse = (raw: unknown) => actor.parse!(raw);
    assert.deepEqual(parse({ kind: "demand", tenant: "t1", demand: 3, weight: 1.5, extra: 1 }), {
      kind: "demand",
      tenant: "t1",
      demand: 3,
      weight: 1.5,
    });
    assert.deepEqual(parse({ kind: "demand", tenant: "t1", demand: 3, weight: 1, used: 2.5 }), {
      kind: "demand",
      tenant: "t1",
      demand: 3,
      weight: 1,
      used: 2.5,
    });
    assert.deepEqual(parse({ kind: "status" }), { kind: "status" });
    for (const bad of [
      null,
      {},
      { kind: "demand", tenant: "a.b", demand: 1, weight: 1 },
      { kind: "demand", tenant: "t", demand: -1, weight: 1 },
      { kind: "demand", tenant: "t", demand: 1.5, weight: 1 },
      { kind: "demand", tenant: "t", demand: 1, weight: 0 },
      { kind: "demand", tenant: "t", demand: 1, weight: "2" },
      { kind: "demand", tenant: "t", demand: 1, weight: 1, used: -1 },
      { kind: "demand", tenant: "t", demand: 1, weight: 1, used: "2" },
      { kind: "demand", tenant: "t", demand: 1, weight: 1, used: Number.NaN },
    ]) {
      assert.throws(
        () => parse(bad),
        (e) => isKairosError(e, "invalid_argument"),
        JSON.stringify(bad),
      );
    }
  });

  it("the shell adds the capacity its worker directory sees to every message", () => {
    let capacity = 12;
    const reg = fleetRegistration(() => capacity);
    let state = reg.definition.initialState("fleet");
    const ctx = (nowMs: number) => ({ id: "fleet", nowMs });
    state = reg.definition.receive(
      state,
      { kind: "demand", tenant: "a", demand: 100, weight: 1 },
      ctx(0),
    ).state;
    const d = reg.definition.receive(
      state,
      { kind: "demand", tenant: "a", demand: 100, weight: 1 },
      ctx(FLEET_WARMUP_MS),
    );
    assert.deepEqual(d.reply, { share: 12 });
    capacity = 30;
    assert.equal(
      (
        reg.definition.receive(d.state, { kind: "status" }, ctx(FLEET_WARMUP_MS))
          .reply as FleetStatus
      ).capacity,
      30,
    );
  });
});
