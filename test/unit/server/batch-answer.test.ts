/** How a node answers a batch: within its budget, items still queued then answered as pending. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  answerBatch,
  answerItems,
  batchBudgetMs,
  BATCH_ITEM_BUDGET_MS,
  MAX_BATCH_BUDGET_MS,
} from "../../../src/server/batch-answer.ts";
import { MAX_BATCH, type BatchRequest } from "../../../src/cluster/router.ts";
import { KairosError } from "../../../src/lib/errors.ts";
import type { ActorRequest, ItemResult } from "../../../src/cluster/router.ts";
import { StallClock } from "../../support/stall.ts";

/** Three items: `fast` answers at once, `bad` fails at once, `slow` answers only when `release` is called. */
function items() {
  let release!: (v: unknown) => void;
  const slowReply = new Promise((r) => (release = r));
  const deliver = (it: ActorRequest): Promise<unknown> =>
    it.i === "fast"
      ? Promise.resolve("ok-fast")
      : it.i === "bad"
        ? Promise.reject(new KairosError("stale_fence", "stale"))
        : slowReply;
  const batch: ActorRequest[] = [
    { t: "job", i: "fast", m: {} },
    { t: "job", i: "slow", m: {} },
    { t: "job", i: "bad", m: {} },
  ];
  return { batch, deliver, release };
}
const settle = () => new Promise((r) => setImmediate(r));

describe("batch answers", () => {
  it("a batch answers items still queued at its budget as pending, without holding back the others", async () => {
    const clock = new StallClock();
    const { batch, deliver } = items();
    let answered: ItemResult[] | undefined;
    const answer = answerItems(batch, deliver, clock, 500).then((v) => (answered = v));
    await settle();
    assert.equal(answered, undefined, "not answered while an item is queued and the budget runs");
    assert.equal(clock.timers.size, 1, "one timer for the batch");
    clock.t += 500;
    clock.runTimers();
    await answer;
    assert.deepEqual(answered, [
      { ok: true, v: "ok-fast" },
      {
        ok: false,
        e: { code: "unavailable", message: "pending: still queued at the actor", pending: true },
      },
      { ok: false, e: { code: "stale_fence", message: "stale" } },
    ] satisfies ItemResult[]);
  });

  it("a batch whose items are all answered within the budget is answered then, each with its own answer, and its timer cancelled", async () => {
    const clock = new StallClock();
    const { batch, deliver, release } = items();
    let answered: ItemResult[] | undefined;
    const answer = answerItems(batch, deliver, clock, 5_000).then((v) => (answered = v));
    await settle();
    assert.equal(answered, undefined);
    release("ok-slow");
    await answer;
    assert.deepEqual(answered, [
      { ok: true, v: "ok-fast" },
      { ok: true, v: "ok-slow" },
      { ok: false, e: { code: "stale_fence", message: "stale" } },
    ] satisfies ItemResult[]);
    assert.equal(clock.timers.size, 0, "the budget timer is cancelled");
  });

  it("a node answers a batch as it arrived: within the budget it names (w), at most MAX_BATCH items, none for a malformed b", async () => {
    const stall = new StallClock();
    const asked: number[] = []; // the budget timer's duration, per batch
    const clock = {
      now: () => stall.now(),
      monoMs: () => stall.monoMs(),
      setTimer: (ms: number, fn: () => void) => {
        asked.push(ms);
        return stall.setTimer(ms, fn);
      },
    };
    const { batch, deliver, release } = items();
    const named = answerBatch({ b: batch, w: 2_000 }, deliver, clock);
    release("ok-slow");
    assert.deepEqual(
      (await named).map((r) => r.ok),
      [true, true, false],
    );
    const { batch: b2, deliver: d2 } = items();
    const dflt = answerBatch({ b: b2 }, d2, clock); // without w: the heartbeats' case
    await settle();
    stall.runTimers();
    assert.equal((await dflt)[1]!.ok, false, "pending at the default budget");
    assert.deepEqual(
      asked,
      [2_000, BATCH_ITEM_BUDGET_MS],
      "the budget the batch named, then the default",
    );
    const many = Array.from({ length: MAX_BATCH + 10 }, (_, i): ActorRequest => ({
      t: "job",
      i: `x${i}`,
      m: {},
    }));
    assert.equal((await answerBatch({ b: many }, async () => "ok", clock)).length, MAX_BATCH);
    assert.deepEqual(
      await answerBatch({ b: "nope" } as unknown as BatchRequest, async () => "ok", clock),
      [],
    );
  });

  it("the budget a batch names is used, bounded; a missing or malformed one is the default", () => {
    assert.equal(batchBudgetMs({}), BATCH_ITEM_BUDGET_MS);
    assert.equal(batchBudgetMs({ w: 5_000 }), 5_000);
    assert.equal(batchBudgetMs({ w: 10 }), BATCH_ITEM_BUDGET_MS, "never below the default");
    assert.equal(batchBudgetMs({ w: 10 ** 9 }), MAX_BATCH_BUDGET_MS);
    assert.equal(batchBudgetMs({ w: Number.NaN }), BATCH_ITEM_BUDGET_MS);
    assert.equal(batchBudgetMs({ w: "9" as unknown as number }), BATCH_ITEM_BUDGET_MS);
  });
});
