/**
 * How a node answers a batch request (router.ts `BatchRequest`): every item is delivered to its
 * actor at once and the batch is answered with one result per item, in order. An ordinary batch
 * (heartbeats) gives each item a budget: an item still queued behind a busy actor after
 * BATCH_ITEM_BUDGET_MS answers `unavailable` ("pending"; the sender retries it), so one slow item
 * does not hold back the acknowledgements of the others. A patient batch (`w: 1`, completion
 * reports) is answered once every item is: an early "pending" would only cost the sender a copy.
 */
import type { Clock } from "../lib/clock.ts";
import { isKairosError } from "../lib/errors.ts";
import type { ActorRequest, ItemResult } from "../cluster/router.ts";

/** How long one item of an ordinary batch may take before the batch answers it as pending. */
export const BATCH_ITEM_BUDGET_MS = 500;

export function answerItems(items: readonly ActorRequest[], deliver: (it: ActorRequest) => Promise<unknown>, clock: Clock, patient: boolean): Promise<ItemResult[]> {
  return Promise.all(items.map((it) => new Promise<ItemResult>((resolve) => {
    const cancel = patient ? undefined : clock.setTimer(BATCH_ITEM_BUDGET_MS, () => resolve({ ok: false, e: { code: "unavailable", message: "pending: still queued at the actor" } }));
    deliver(it).then(
      (v) => resolve({ ok: true, v }),
      (e: unknown) => resolve({ ok: false, e: isKairosError(e) ? { code: e.code, message: e.message } : { code: "internal", message: "internal error" } }),
    ).finally(() => cancel?.());
  })));
}
