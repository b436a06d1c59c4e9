/** The benchmarks' timed pool: every index once, in order, never more than `inFlight` at a time. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { performance } from "node:perf_hooks";
import { timedPool } from "../../../bench/pool.ts";

/** An operation that records its index and the pool's concurrency, resolving a turn later. */
function recorder() {
  const started: number[] = [];
  let active = 0;
  let peak = 0;
  const op = async (i: number) => {
    started.push(i);
    active++;
    peak = Math.max(peak, active);
    await new Promise<void>((r) => setImmediate(r));
    active--;
  };
  return { op, started, peak: () => peak, active: () => active };
}

describe("timedPool", () => {
  it("calls each index once, in order, `inFlight` at a time", async () => {
    const r = recorder();
    await timedPool(10, 3, r.op);
    assert.deepEqual(
      r.started,
      Array.from({ length: 10 }, (_, i) => i),
    );
    assert.equal(r.peak(), 3);
    assert.equal(r.active(), 0, "all resolved before the pool does");
  });

  it("with more room than operations, calls each once", async () => {
    const r = recorder();
    await timedPool(2, 64, r.op);
    assert.deepEqual(r.started, [0, 1]);
    assert.equal(r.peak(), 2);
  });

  it("returns the milliseconds the operations took, within the caller's own timing", async () => {
    const t0 = performance.now();
    const ms = await timedPool(5, 2, recorder().op);
    const outer = performance.now() - t0;
    assert.ok(ms >= 0 && ms <= outer, `${ms} ms within ${outer} ms`);
  });

  it("rejects with an operation's error", async () => {
    await assert.rejects(
      timedPool(4, 2, async (i) => {
        if (i === 2) throw new Error("no value");
      }),
      /no value/,
    );
  });
});
