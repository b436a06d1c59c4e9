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

/** Stable JSON (sorted keys) so equal requests hash equally. */
export function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (v && typeof v === "object") {
    return `{${Object.entries(v as Record<string, unknown>)
      .sort(([a], [b]) => keyOrder.compare(a, b))
      .map(([k, x]) => `${JSON.stringify(k)}:${canonical(x)}`)
      .join(",")}}`;
  }
  return JSON.stringify(v) ?? "null";
}
