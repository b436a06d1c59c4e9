/** How a node answers a batch: item budgets for ordinary batches, all at once for patient ones. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { answerItems } from "../../../src/server/batch-answer.ts";
import { KairosError } from "../../../src/lib/errors.ts";
import type { ActorRequest, ItemResult } from "../../../src/cluster/router.ts";
import { StallClock } from "../../support/stall.ts";

/** Two items: `fast` answers at once; `slow` answers only when `release` is called. */
function items() {
  let release!: (v: unknown) => void;
  const slowReply = new Promise((r) => (release = r));
  const deliver = (it: ActorRequest): Promise<unknown> =>
    it.i === "fast" ? Promise.resolve("ok-fast") : it.i === "bad" ? Promise.reject(new KairosError("stale_fence", "stale")) : slowReply;
  const batch: ActorRequest[] = [{ t: "job", i: "fast", m: {} }, { t: "job", i: "slow", m: {} }, { t: "job", i: "bad", m: {} }];
  return { batch, deliver, release };
}

describe("batch answers", () => {
  it("an ordinary batch answers an item still queued past its budget as pending, without holding back the others", async () => {
    const clock = new StallClock();
    const { batch, deliver } = items();
    const answer = answerItems(batch, deliver, clock, false);
    await new Promise((r) => setImmediate(r)); // the answered items settle first
    assert.equal(clock.timers.size, 1, "one budget left running: the slow item's");
    clock.t += 500;
    clock.runTimers(); // the slow item's budget runs out
    const v = await answer;
    assert.deepEqual(v, [
      { ok: true, v: "ok-fast" },
      { ok: false, e: { code: "unavailable", message: "pending: still queued at the actor" } },
      { ok: false, e: { code: "stale_fence", message: "stale" } },
    ] satisfies ItemResult[]);
  });

  it("a patient batch arms no budget and answers once every item is answered, with each item's own answer", async () => {
    const clock = new StallClock();
    const { batch, deliver, release } = items();
    let answered: ItemResult[] | undefined;
    const answer = answerItems(batch, deliver, clock, true).then((v) => (answered = v));
    assert.equal(clock.timers.size, 0, "no budget timer");
    await new Promise((r) => setImmediate(r));
    assert.equal(answered, undefined, "not answered while an item is still queued");
    release("ok-slow");
    await answer;
    assert.deepEqual(answered, [
      { ok: true, v: "ok-fast" },
      { ok: true, v: "ok-slow" },
      { ok: false, e: { code: "stale_fence", message: "stale" } },
    ] satisfies ItemResult[]);
  });
});
