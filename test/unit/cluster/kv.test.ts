/** The KV port's pure helpers: subject-style key filters and key validity. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { isValidKey, keyMatches } from "../../../src/cluster/kv.ts";

describe("keyMatches", () => {
  const cases: [string, string, boolean][] = [
    ["a.b.c", "a.b.c", true],
    ["a.b.c", "a.b.d", false],
    ["a.*.c", "a.x.c", true],
    ["a.*.c", "a.x.y.c", false],
    ["a.*", "a", false],
    ["a.>", "a.b", true],
    ["a.>", "a.b.c.d", true],
    ["a.>", "a", false],
    [">", "anything.at.all", true],
    ["counter.3.>", "counter.3.x.y", true],
    ["counter.3.>", "counter.33.x", false],
    ["p.*", "p.12", true],
    ["p.*", "p.12.x", false],
    ["a.b", "a.b.c", false],
    ["a.b.c", "a.b", false],
    ["*", "a", true],
    ["*", "a.b", false],
  ];
  for (const [filter, key, want] of cases) {
    it(`${filter} ${want ? "matches" : "does not match"} ${key}`, () =>
      assert.equal(keyMatches(filter, key), want));
  }
});

describe("isValidKey", () => {
  for (const k of ["a", "a.b", "counter.3.id-1_x=/y", "p.0", "A9"])
    it(`accepts ${k}`, () => assert.equal(isValidKey(k), true));
  for (const k of ["", ".a", "a.", "a..b", "a b", "a*b", "a>b", "é", "a\nb"]) {
    it(`rejects ${JSON.stringify(k)}`, () => assert.equal(isValidKey(k), false));
  }
});
