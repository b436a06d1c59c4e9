/**
 * The idempotency hashes of the jobs service: a key's digest and a request's, over its canonical
 * JSON (sorted keys), so that equal requests hash equally whatever their key order.
 */
import { createHash } from "node:crypto";

export const sha256 = (s: string): string => createHash("sha256").update(s).digest("hex");

/**
 * The order of keys: `localeCompare`'s (ECMA-402: a new `Intl.Collator()` per call — the same
 * order, made once here). Stored request hashes depend on it: it must not change.
 */
const keyOrder = new Intl.Collator();

/** Sorted key orders by their object's keys in insertion order (`\0`-joined); bounded. */
const orders = new Map<string, readonly (readonly [key: string, json: string])[]>();
/** Most key orders kept: a spec's objects have a few shapes; past it the map starts afresh. */
const MAX_ORDERS = 512;
/**
 * Only small shapes are kept (at most this many keys, and joined keys this long): the fixed
 * objects of a spec. A client's own maps (`task.env`: any number of keys, any length, up to a 4 MB
 * batch) differ per job, gain nothing from a cache and, kept, would pin their bytes 512 times.
 */
const MAX_KEPT_KEYS = 32;
const MAX_KEPT_SHAPE_CHARS = 512;

/** How many key orders are kept (for tests: a client's large maps are never kept). */
export function keyOrdersKept(): number {
  return orders.size;
}

/**
 * An object's keys in `keyOrder`, each with its JSON: sorted once per shape (a collator compare
 * is slow, and every create hashes objects of the same few shapes).
 */
function sortedKeys(o: object, keys: string[]): readonly (readonly [string, string])[] {
  const shape = keys.join("\0");
  let order = orders.get(shape);
  // Two key lists may join alike (a key holding `\0`): the order found must name these keys.
  if (
    order !== undefined &&
    (order.length !== keys.length || !order.every(([k]) => Object.hasOwn(o, k)))
  )
    return [...keys].sort((a, b) => keyOrder.compare(a, b)).map((k) => [k, JSON.stringify(k)]);
  if (order === undefined) {
    order = [...keys].sort((a, b) => keyOrder.compare(a, b)).map((k) => [k, JSON.stringify(k)]);
    if (keys.length <= MAX_KEPT_KEYS && shape.length <= MAX_KEPT_SHAPE_CHARS) {
      if (orders.size >= MAX_ORDERS) orders.clear();
      orders.set(shape, order);
    }
  }
  return order;
}

/** Stable JSON (sorted keys) so equal requests hash equally. */
export function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (v && typeof v === "object") {
    const o = v as Record<string, unknown>;
    let out = "{";
    for (const [k, json] of sortedKeys(o, Object.keys(o)))
      out += `${out.length > 1 ? "," : ""}${json}:${canonical(o[k])}`;
    return `${out}}`;
  }
  return JSON.stringify(v) ?? "null";
}
