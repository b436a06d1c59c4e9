/**
 * A tenant's waiting list: asks beyond its limit, taken earliest start first (a run due now is not
 * kept behind one prepared minutes ahead), then by arrival. A map by grant id and a lazy min-heap:
 * an entry queued again gets a new seq, and stale heap entries are skipped.
 *
 * Pitfall: the heap is rebuilt when its garbage outgrows the list (ORDER_SLACK); a state built by
 * hand (tests) or reloaded has none, and gets one at its first use.
 */
import { heapify, heapPop, heapPush } from "../lib/min-heap.ts";
import type { TenantState, WaitEntry, Waiter } from "./tenant-types.ts";

const earlier = (a: WaitEntry, b: WaitEntry): boolean =>
  a.at < b.at || (a.at === b.at && a.seq < b.seq);

/** Lazy entries beyond the waiting requests' count before the heap is rebuilt (bounds its garbage). */
const ORDER_SLACK = 1_024;

/** Adds a waiting request (under a new seq) to `waiting` and to the heap. */
export function enqueue(state: TenantState, id: string, w: Waiter, now: number): void {
  // A state without its heap (built by hand, in tests; a reloaded tenant starts with nobody waiting): the waiters it holds keep their places.
  if (state.order === undefined) rebuildOrder(state, now);
  const seq = (state.wait_seq ?? 0) + 1;
  state.wait_seq = seq;
  const entry: Waiter = { ...w, seq, at: w.start_at_ms ?? now };
  state.waiting.set(id, entry);
  const order = state.order!;
  if (order.length > 2 * state.waiting.size + ORDER_SLACK) rebuildOrder(state, now);
  else heapPush(order, { at: entry.at!, seq, id }, earlier);
}

/** The heap rebuilt from `waiting` (entries without a seq — a state built by hand — get one in map order). */
function rebuildOrder(state: TenantState, now: number): void {
  const order: WaitEntry[] = [];
  for (const [id, w] of state.waiting) {
    if (w.seq === undefined) w.seq = state.wait_seq = (state.wait_seq ?? 0) + 1;
    w.at ??= w.start_at_ms ?? now;
    order.push({ at: w.at, seq: w.seq, id });
  }
  heapify(order, earlier);
  state.order = order;
}

/** Takes the waiting request that starts first out of `waiting` (undefined: none waits). */
export function nextWaiter(state: TenantState, now: number): [string, Waiter] | undefined {
  if (state.waiting.size === 0) return undefined;
  for (let rebuilt = false; ;) {
    const e = state.order ? heapPop(state.order, earlier) : undefined;
    if (e === undefined) {
      if (rebuilt) return undefined; // unreachable: a rebuilt heap holds every waiting request
      rebuildOrder(state, now);
      rebuilt = true;
      continue;
    }
    const w = state.waiting.get(e.id);
    if (w === undefined || (w.seq !== undefined && w.seq !== e.seq)) continue; // gone, or queued again
    state.waiting.delete(e.id);
    return [e.id, w];
  }
}
