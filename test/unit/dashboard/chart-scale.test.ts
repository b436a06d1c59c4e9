/** The dashboard's chart arithmetic (src/dashboard/chart-scale.js: pure, shared with the browser). */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  bars,
  formatCount,
  formatSeconds,
  lineSegments,
  niceCeil,
  peak,
  plotBox,
  valueY,
} from "../../../src/dashboard/chart-scale.js";

describe("chart arithmetic", () => {
  it("rounds an axis's top up to 1, 2 or 5 × 10^k", () => {
    assert.deepEqual(
      [0, -3, NaN, 0.003, 0.7, 1, 1.2, 3, 7, 10, 11, 4500].map(niceCeil),
      [1, 1, 1, 0.005, 1, 1, 2, 5, 10, 10, 20, 5000],
    );
  });

  it("draws a line broken where a value is missing, inside the plot box", () => {
    const box = plotBox(640, 180);
    const segs = lineSegments([1, 2, null, 4, null, null], box, 4);
    assert.equal(segs.length, 2);
    assert.equal(segs[0]!.split(" ").length, 2);
    assert.equal(segs[1]!.split(" ").length, 1);
    for (const seg of segs)
      for (const p of seg.split(" ")) {
        const [x, y] = p.split(",").map(Number);
        assert.ok(x! >= box.left && x! <= box.right && y! >= box.top && y! <= box.bottom, p);
      }
    assert.equal(valueY(box, 4, 4), box.top);
    assert.equal(valueY(box, 0, 4), box.bottom);
    assert.equal(valueY(box, 99, 4), box.top, "clamped to the axis");
  });

  it("draws a bar for each value above 0, as tall as its share of the axis", () => {
    const box = plotBox(640, 180);
    const b = bars([0, 2, null, 4], box, 4);
    assert.deepEqual(
      b.map((x) => x.i),
      [1, 3],
    );
    assert.ok(Math.abs(b[1]!.height - 2 * b[0]!.height) <= 0.2);
    assert.ok(Math.abs(b[1]!.y - box.top) <= 0.1);
  });

  it("words for people, and the peak of a series", () => {
    assert.deepEqual([null, 0.0123, 0.85, 1.25, 59.5, 125].map(formatSeconds), [
      "—",
      "12 ms",
      "850 ms",
      "1.25 s",
      "59.5 s",
      "2 min 5 s",
    ]);
    assert.deepEqual([null, 3, 0.333333].map(formatCount), ["—", "3", "0.33"]);
    assert.deepEqual(peak([null, 2, 5, 5, 0]), { i: 2, value: 5 });
    assert.equal(peak([0, null]), undefined);
  });
});
