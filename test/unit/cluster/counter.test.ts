/** The counter actor's pure core: request-id dedupe, the bounded window, and message parsing. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import {
  counterActor,
  DEDUPE_WINDOW,
  type CounterMsg,
  type CounterState,
} from "../../../src/actors/counter.ts";
import { isKairosError } from "../../../src/lib/errors.ts";

const ctx = { id: "c1", nowMs: 0 };
const recv = (s: CounterState, m: CounterMsg) => counterActor.receive(s, m, ctx);

describe("counter actor", () => {
  it("starts at zero with no remembered ids", () => {
    assert.deepEqual(counterActor.initialState("x"), { value: 0, recent: [] });
  });

  it("get replies the value and returns the same state object (no write)", () => {
    const s = { value: 5, recent: ["a"] };
    const d = recv(s, { kind: "get" });
    assert.equal(d.state, s);
    assert.deepEqual(d.reply, { value: 5 });
  });

  it("inc applies once per request id; a repeat is acknowledged, not applied, with no write", () => {
    const s0 = counterActor.initialState("c1");
    const d1 = recv(s0, { kind: "inc", by: 3, reqId: "r1" });
    assert.deepEqual(d1.reply, { value: 3, applied: true });
    assert.notEqual(d1.state, s0);
    assert.deepEqual(s0, { value: 0, recent: [] }, "must not mutate its input");
    const d2 = recv(d1.state, { kind: "inc", by: 3, reqId: "r1" });
    assert.deepEqual(d2.reply, { value: 3, applied: false });
    assert.equal(d2.state, d1.state);
  });

  it(`remembers at most ${DEDUPE_WINDOW} ids, forgetting the oldest first`, () => {
    let s = counterActor.initialState("c1");
    for (let i = 0; i < DEDUPE_WINDOW + 10; i++)
      s = recv(s, { kind: "inc", by: 1, reqId: `r${i}` }).state;
    assert.equal(s.recent.length, DEDUPE_WINDOW);
    assert.equal(s.recent[0], "r10");
    assert.equal(s.value, DEDUPE_WINDOW + 10);
    assert.deepEqual(recv(s, { kind: "inc", by: 1, reqId: "r10" }).reply, {
      value: s.value,
      applied: false,
    });
    // r9 fell out of the window: a retry that late is applied again (the window is the bound).
    assert.deepEqual(recv(s, { kind: "inc", by: 1, reqId: "r9" }).reply, {
      value: s.value + 1,
      applied: true,
    });
  });

  it("property: value = sum of distinct ids' increments when repeats stay within the window", () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 0, max: 40 }), fc.integer({ min: -5, max: 5 })), {
          maxLength: 200,
        }),
        (ops) => {
          let s = counterActor.initialState("c1");
          const byId = new Map<string, number>();
          for (const [id, by] of ops) {
            const reqId = `r${id}`;
            // the first increment for an id wins; later ones with the same id are repeats
            const r = recv(s, { kind: "inc", by: byId.get(reqId) ?? by, reqId });
            if (!byId.has(reqId)) byId.set(reqId, by);
            s = r.state;
          }
          assert.equal(
            s.value,
            [...byId.values()].reduce((a, b) => a + b, 0),
          );
          assert.ok(s.recent.length <= DEDUPE_WINDOW);
        },
      ),
    );
  });

  describe("parse", () => {
    const parse = (raw: unknown) => counterActor.parse!(raw);
    it("accepts get and inc", () => {
      assert.deepEqual(parse({ kind: "get" }), { kind: "get" });
      assert.deepEqual(parse({ kind: "inc", by: -2, reqId: "x", extra: 1 }), {
        kind: "inc",
        by: -2,
        reqId: "x",
      });
    });
    const bad: [string, unknown][] = [
      ["null", null],
      ["a string", "inc"],
      ["an unknown kind", { kind: "dec", by: 1, reqId: "x" }],
      ["a fractional by", { kind: "inc", by: 1.5, reqId: "x" }],
      ["a string by", { kind: "inc", by: "1", reqId: "x" }],
      ["a missing reqId", { kind: "inc", by: 1 }],
      ["an empty reqId", { kind: "inc", by: 1, reqId: "" }],
    ];
    for (const [what, raw] of bad) {
      it(`rejects ${what} with invalid_argument`, () => {
        assert.throws(
          () => parse(raw),
          (e: unknown) => isKairosError(e, "invalid_argument"),
        );
      });
    }
  });
});
