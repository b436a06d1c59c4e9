/** The FIFO queue: order kept across its compactions; size and empty shift. */
import { it } from "node:test";
import assert from "node:assert/strict";
import { Fifo } from "../../../src/lib/fifo.ts";

it("keeps first-in first-out order across compactions, interleaved with pushes", () => {
  const q = new Fifo<number>();
  assert.equal(q.shift(), undefined);
  let next = 0;
  let expect = 0;
  for (let round = 0; round < 5; round++) {
    for (let i = 0; i < 3_000; i++) q.push(next++);
    for (let i = 0; i < 2_500; i++) assert.equal(q.shift(), expect++);
    assert.equal(q.size, next - expect);
  }
  while (q.size > 0) assert.equal(q.shift(), expect++);
  assert.equal(expect, next);
  assert.equal(q.shift(), undefined);
});
