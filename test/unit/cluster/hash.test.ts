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

  it("the ASCII fast path equals the UTF-8 encoder's hash (mixed and long inputs)", () => {
    const viaBytes = (text: string) => {
      let h = 0x811c9dc5;
      for (const b of new TextEncoder().encode(text)) h = Math.imul(h ^ b, 0x01000193);
      h ^= h >>> 16;
      h = Math.imul(h, 0x85ebca6b);
      h ^= h >>> 13;
      h = Math.imul(h, 0xc2b2ae35);
      h ^= h >>> 16;
      return h >>> 0;
    };
    for (const s of [
      "job/t1.jabc",
      "ascii then é",
      "é first",
      "\u007f\u0080",
      "z".repeat(500),
      "tenant/t_x✓",
    ])
      assert.equal(hash32(s), viaBytes(s), s);
  });

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
