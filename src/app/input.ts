/**
 * Input errors shared by every transport (REST, the NATS API): an `invalid_argument` naming its
 * field, and a short rendering of a bad value for the message (never the whole body).
 */
import { KairosError } from "../lib/errors.ts";

/** An `invalid_argument` error for `field` whose message starts with the field's name. */
export function invalid(field: string, why: string): KairosError {
  return new KairosError("invalid_argument", `${field}: ${why}`, { field });
}

/** Renders an input value for an error message: short, JSON-quoted, never the whole body. */
export function show(v: unknown): string {
  if (v === undefined) return "nothing";
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "string") return clip(JSON.stringify(v));
  if (typeof v === "number" || typeof v === "boolean" || typeof v === "bigint")
    return clip(String(v));
  return typeof v === "object" ? "an object" : `a ${typeof v}`;
}

function clip(s: string): string {
  return s.length > 60 ? `${s.slice(0, 57)}...` : s;
}
