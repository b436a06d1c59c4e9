/**
 * InFlightLimiter (src/cluster/in-flight.ts): never more than `limit` operations running, waiters
 * served first in, first out — also across the queue's compaction (thousands waiting) — urgent
 * waiters ahead of the rest, and a failed operation passes its turn on.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { InFlightLimiter } from "../../../src/cluster/in-flight.ts";

describe("InFlightLimiter", () => {
  it("bounds concurrency and serves 10,000 waiters in FIFO order through compaction", async () => {
    const lim = new InFlightLimiter(4);
    let running = 0;
    let peak = 0;
    const order: number[] = [];
    const ops = Array.from({ length: 10_000 }, (_, i) =>
      lim
        .run(async () => {
          running++;
          peak = Math.max(peak, running);
          order.push(i);
          await new Promise((r) => setImmediate(r));
          running--;
          if (i % 997 === 0) throw new Error(`op ${i} fails`);
          return i;
        })
        .catch((e: unknown) => (e as Error).message),
    );
    assert.equal(lim.waiting, 10_000 - 4);
    const results = await Promise.all(ops);
    assert.equal(peak, 4);
    assert.deepEqual(
      order,
      Array.from({ length: 10_000 }, (_, i) => i),
    );
    assert.equal(results[997], "op 997 fails");
    assert.equal(results[998], 998);
    assert.equal(lim.active, 0);
    assert.equal(lim.waiting, 0);
  });

  it("serves urgent waiters ahead of every waiting non-urgent one, each lane first in, first out", async () => {
    const lim = new InFlightLimiter(1);
    const order: string[] = [];
    let release!: () => void;
    const first = lim.run(() => new Promise<void>((r) => (release = r)));
    const ops = [
      lim.run(async () => void order.push("a")),
      lim.run(async () => void order.push("U1"), true),
      lim.run(async () => void order.push("b")),
      lim.run(async () => void order.push("U2"), true),
    ];
    assert.equal(lim.waiting, 4);
    release();
    await Promise.all([first, ...ops]);
    assert.deepEqual(order, ["U1", "U2", "a", "b"]);
    assert.equal(lim.active, 0);
  });

  it("rejects a limit that is not a positive integer", () => {
    assert.throws(() => new InFlightLimiter(0), /positive integer/);
  });
});
