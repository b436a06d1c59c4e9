import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { SKEW_WARN_MS, clockOffsets, skewWarnings } from "../../../src/cluster/clock-skew.ts";

describe("clock skew from membership heartbeats", () => {
  it("offsets are taken from the median, so the observer's own clock does not matter", () => {
    // The observer's clock is 10 s behind everyone; node c is 3 s ahead of a and b.
    const o = clockOffsets([
      { nodeId: "a", sentMs: 100_000, heardMs: 90_000 },
      { nodeId: "b", sentMs: 100_010, heardMs: 90_000 },
      { nodeId: "c", sentMs: 103_000, heardMs: 90_000 },
    ]);
    assert.deepEqual(
      [...o],
      [
        ["a", -10],
        ["b", 0],
        ["c", 2_990],
      ],
    );
    const w = skewWarnings(o);
    assert.equal(w.length, 1);
    assert.match(w[0]!, /^node c: clock ahead of the cluster's median by 2990 ms/);
  });

  it("the latest sample of a node counts; non-finite samples are ignored; none heard: no offsets", () => {
    const o = clockOffsets([
      { nodeId: "a", sentMs: 5_000, heardMs: 0 },
      { nodeId: "a", sentMs: 0, heardMs: 0 },
      { nodeId: "b", sentMs: Number.NaN, heardMs: 0 },
    ]);
    assert.deepEqual([...o], [["a", 0]]);
    assert.deepEqual([...clockOffsets([])], []);
  });

  it("warns only beyond SKEW_WARN_MS, either way", () => {
    assert.deepEqual(
      skewWarnings(
        new Map([
          ["a", SKEW_WARN_MS],
          ["b", -SKEW_WARN_MS],
        ]),
      ),
      [],
    );
    assert.match(skewWarnings(new Map([["b", -SKEW_WARN_MS - 1]]))[0]!, /behind/);
  });
});
