/**
 * How a node answers a batch request (router.ts `BatchRequest`): every item is delivered to its
 * actor at once and the batch is answered with one result per item, in order, once every item is
 * answered or the batch's budget runs out — items still queued behind a busy actor (delivered
 * to it: in its mailbox or its turn) then answer `unavailable` marked `pending`, so a slow item
 * does not hold back the answers of the others. Pending is a promise the sender relies on: the
 * actor holds the item and will take it, unless it is dropped (a heartbeat is sent again; a
 * completion report is handed over, its owner probing the lease should the actor lose it:
 * worker/core.ts `handedOver`). Heartbeats use the default budget, BATCH_ITEM_BUDGET_MS (an
 * acknowledgement is wanted soon); completion reports name a longer one (`w`: 1 s, at most half
 * their wait), since a report is wanted for its effect — yet short enough that a saturated
 * owner's answer arrives within the sender's wait.
 */
import type { Clock } from "../lib/clock.ts";
import { isKairosError } from "../lib/errors.ts";
import {
  MAX_BATCH,
  type ActorRequest,
  type BatchRequest,
  type ItemResult,
} from "../cluster/router.ts";

/** How long a batch's items may take before those still queued are answered as pending (default). */
export const BATCH_ITEM_BUDGET_MS = 500;
/** The longest budget a batch may name (`w`). */
export const MAX_BATCH_BUDGET_MS = 30_000;

const PENDING: ItemResult = {
  ok: false,
  e: { code: "unavailable", message: "pending: still queued at the actor", pending: true },
};

/** The budget a batch asked for (`w`, bounded), or the default. */
export function batchBudgetMs(req: Pick<BatchRequest, "w">): number {
  const w = req.w;
  return typeof w === "number" && Number.isFinite(w) && w >= BATCH_ITEM_BUDGET_MS
    ? Math.min(w, MAX_BATCH_BUDGET_MS)
    : BATCH_ITEM_BUDGET_MS;
}

/** Delivers every item; resolves with each item's answer, or PENDING for those unanswered at `budgetMs`. */
export function answerItems(
  items: readonly ActorRequest[],
  deliver: (it: ActorRequest) => Promise<unknown>,
  clock: Clock,
  budgetMs: number,
): Promise<ItemResult[]> {
  if (items.length === 0) return Promise.resolve([]);
  return new Promise((resolve) => {
    const out: (ItemResult | undefined)[] = new Array<ItemResult | undefined>(items.length).fill(
      undefined,
    ); // no holes: map skips them
    let left = items.length;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      cancel();
      resolve(out.map((r) => r ?? PENDING));
    };
    // One timer for the batch (all its items share the budget).
    const cancel = clock.setTimer(budgetMs, finish);
    items.forEach((it, i) => {
      // A deliver that throws is an item's error, never the batch's (it would go unanswered and unhandled).
      let delivered: Promise<unknown>;
      try {
        delivered = deliver(it);
      } catch (e) {
        delivered = Promise.reject(e instanceof Error ? e : new Error(String(e)));
      }
      void delivered
        .then(
          (v): ItemResult => ({ ok: true, v }),
          (e: unknown): ItemResult => ({
            ok: false,
            e: isKairosError(e)
              ? { code: e.code, message: e.message }
              : { code: "internal", message: "internal error" },
          }),
        )
        .then((r) => {
          if (done) return;
          out[i] = r;
          if (--left === 0) finish();
        });
    });
  });
}

/**
 * A node's answer to a batch request as it arrived (untrusted): at most MAX_BATCH items (a
 * malformed `b` is none), within the budget the batch names (`batchBudgetMs`).
 */
export function answerBatch(
  req: BatchRequest,
  deliver: (it: ActorRequest) => Promise<unknown>,
  clock: Clock,
): Promise<ItemResult[]> {
  const items = Array.isArray(req.b) ? req.b.slice(0, MAX_BATCH) : [];
  return answerItems(items, deliver, clock, batchBudgetMs(req));
}
