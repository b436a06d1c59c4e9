/**
 * Golden values of the frozen placement hash (PLACEMENT_VERSION 1). They were computed once and
 * cross-checked against an independent FNV-1a + murmur3-fmix32 implementation. Changing any of
 * them means every actor moves to another partition: that is a placement migration, not a fix —
 * bump PLACEMENT_VERSION and plan the migration instead of editing these numbers.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { hash32, PLACEMENT_VERSION } from "../../../src/cluster/hash.ts";
import { partitionOf } from "../../../src/cluster/placement.ts";

const GOLDEN: readonly (readonly [string, number])[] = [
  ["", 0xab3e7c0b],
  ["a", 0x1a80b1b3],
  ["counter/1", 0x20aff738],
  ["counter/abc", 0x150c54ff],
  ["job/tenant-a/42", 0x2b98f249],
  ["node-1#0", 0x98b960ff],
  ["é✓", 0x0a399625], // UTF-8 bytes, not UTF-16 code units
];

describe("hash32 (frozen, placement version 1)", () => {
  it("is placement version 1", () => {
    assert.equal(PLACEMENT_VERSION, 1);
  });

  for (const [input, want] of GOLDEN) {
    it(`hash32(${JSON.stringify(input)}) = 0x${want.toString(16).padStart(8, "0")}`, () => {
      assert.equal(hash32(input), want);
    });
  }

  it("returns an unsigned 32-bit integer", () => {
    for (const s of ["x", "counter/999999", "a".repeat(1000)]) {
      const h = hash32(s);
      assert.ok(Number.isInteger(h) && h >= 0 && h <= 0xffffffff, `${s}: ${h}`);
    }
  });

  it("pins the partition of a few actors (64 and 256 partitions)", () => {
    assert.equal(partitionOf({ type: "counter", id: "1" }, 64), 56);
    assert.equal(partitionOf({ type: "job", id: "t1/j1" }, 256), 184);
  });
});
