/**
 * A binary min-heap over an array (pure, no I/O): `heapPush` and `heapPop` in O(log n), `heapify`
 * in O(n). The order is the `before` function given to each call, so the heap itself can live in
 * plain state (an array) and callers keep their entries' shape. Used by the node's timer queue,
 * the tenant actor's waiting list and the simulation's clock.
 */
export type Before<T> = (a: T, b: T) => boolean;

export function heapPush<T>(heap: T[], item: T, before: Before<T>): void {
  heap.push(item);
  let i = heap.length - 1;
  while (i > 0) {
    const parent = (i - 1) >> 1;
    if (!before(heap[i]!, heap[parent]!)) break;
    [heap[i], heap[parent]] = [heap[parent]!, heap[i]!];
    i = parent;
  }
}

/** Removes and returns the first entry (undefined: empty). */
export function heapPop<T>(heap: T[], before: Before<T>): T | undefined {
  if (heap.length === 0) return undefined;
  const top = heap[0]!;
  const last = heap.pop()!;
  if (heap.length > 0) {
    heap[0] = last;
    siftDown(heap, 0, before);
  }
  return top;
}

/** Orders an arbitrary array into a heap in place, in O(n). */
export function heapify<T>(heap: T[], before: Before<T>): void {
  for (let i = (heap.length >> 1) - 1; i >= 0; i--) siftDown(heap, i, before);
}

function siftDown<T>(heap: T[], start: number, before: Before<T>): void {
  for (let i = start; ;) {
    const l = 2 * i + 1;
    const r = l + 1;
    let m = i;
    if (l < heap.length && before(heap[l]!, heap[m]!)) m = l;
    if (r < heap.length && before(heap[r]!, heap[m]!)) m = r;
    if (m === i) return;
    [heap[i], heap[m]] = [heap[m]!, heap[i]!];
    i = m;
  }
}
