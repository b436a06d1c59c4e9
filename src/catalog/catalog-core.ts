/**
 * The job catalog's pure logic: a tenant's jobs as `{id, name, enabled}` entries in id order,
 * cut into chunks that form a chain (each chunk holds the ids in `[lo, hi)` and names the next
 * chunk's key), plus a directory (`lo` → key) that only accelerates finding a chunk. The shell
 * (job-catalog.ts) stores them in KV; this module decides what each write makes of a chunk.
 *
 *   directory  [("" → a1), ("j5…" → b7), ("jk…" → c2)]        (may lag behind the chain)
 *   chain      a1 [""…"j5…") ─next→ b7 ["j5…"…"jk…") ─next→ c2 ["jk…"…∞)
 *
 * The chain is the truth: a split writes the new upper chunk first, then shortens the lower one
 * and points it at the new one (one CAS), and only then adds the new chunk to the directory. A
 * directory that lacks a split still names a chunk whose `lo` is at or below any id it is asked
 * for (chunks never merge and a key's `lo` never changes), so following `next` from there finds
 * the chunk that covers the id.
 *
 * An entry may carry pending values (`p`): the name and state a patch in flight may give the job.
 * A filter matches an entry if its values or any pending ones match; a page checks the job itself
 * before showing it, so a pending value left by a crash costs a read, never a wrong answer.
 */
import { assertNever } from "../lib/assert.ts";
import type { JobListState } from "../protocol/model.ts";

/** One job in the catalog (short keys: a chunk holds hundreds of them). */
export interface CatalogEntry {
  /** Job id. */
  readonly i: string;
  /** Name (null: none). */
  readonly n: string | null;
  /** Enabled (false: paused). */
  readonly e: boolean;
  /** The job version these values are of (0: a create in flight). */
  readonly v: number;
  /** When the entry was first written (ms): a create that never made its job is dropped later. */
  readonly t: number;
  /** Values a patch in flight may give the job. */
  readonly p?: readonly CatalogValues[];
}

/** The name and state of a job as a filter sees them. */
export interface CatalogValues {
  readonly n: string | null;
  readonly e: boolean;
}

/** A chunk of the chain: the entries with ids in `[lo, hi)`, sorted by id. */
export interface Chunk {
  readonly lo: string;
  /** Exclusive upper bound; null: the last chunk. */
  readonly hi: string | null;
  /** The key of the chunk that starts at `hi`; null: the last chunk. */
  readonly next: string | null;
  readonly entries: readonly CatalogEntry[];
}

/** The directory: `[lo, key]` sorted by `lo`; the first `lo` is "". */
export interface Directory {
  readonly chunks: readonly (readonly [string, string])[];
}

/** A list filter: name substring (lower case) and/or state. */
export interface CatalogFilter {
  readonly name?: string;
  readonly state?: JobListState;
}

/** A chunk splits when it holds more entries than this (into two halves). */
export const MAX_CHUNK_ENTRIES = 200;
/** Most pending values an entry keeps (the oldest go first). */
export const MAX_PENDING = 4;

/** Does the chunk hold the id's range? */
export function covers(c: Chunk, id: string): boolean {
  return c.lo <= id && (c.hi === null || id < c.hi);
}

/** The key of the directory's chunk for `id`: the last whose `lo` is at or below it. */
export function locate(d: Directory, id: string): string {
  let lo = 0;
  let hi = d.chunks.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (d.chunks[mid]![0] <= id) lo = mid;
    else hi = mid - 1;
  }
  return d.chunks[lo]![1];
}

/** The directory with `[lo, key]` added (the same object when it is there already). */
export function withChunk(d: Directory, lo: string, key: string): Directory {
  const i = d.chunks.findIndex(([l]) => l >= lo);
  if (i >= 0 && d.chunks[i]![0] === lo) return d;
  const chunks = [...d.chunks];
  chunks.splice(i < 0 ? chunks.length : i, 0, [lo, key]);
  return { chunks };
}

/** The keys the directory names after the chunk starting at `lo`, in order (at most `n`). */
export function keysAfter(d: Directory, lo: string, n: number): string[] {
  const out: string[] = [];
  for (const [l, k] of d.chunks) {
    if (out.length >= n) break;
    if (l > lo) out.push(k);
  }
  return out;
}

/** Index of `id` in sorted entries, or where it would go (`found` false). */
function search(entries: readonly CatalogEntry[], id: string): { at: number; found: boolean } {
  let lo = 0;
  let hi = entries.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (entries[mid]!.i < id) lo = mid + 1;
    else hi = mid;
  }
  return { at: lo, found: entries[lo]?.i === id };
}

/** A change of one entry; the chunk must cover its id. */
export type CatalogOp =
  /** A create: the entry, unless the job is listed already (a replayed create). */
  | { readonly kind: "add"; readonly entry: CatalogEntry }
  /** A patch about to be applied: it may give the job these values (absent: unchanged). */
  | { readonly kind: "pend"; readonly id: string; readonly values: Partial<CatalogValues> }
  /** The job's values at `v` (a patch applied, or a page saw them): drops pending values. */
  | {
      readonly kind: "settle";
      readonly id: string;
      readonly values: CatalogValues;
      readonly v: number;
    }
  /** The job is gone. */
  | { readonly kind: "remove"; readonly id: string }
  /**
   * The job is enabled at version `v` (the paused index, job-lists.ts): its entry goes, unless
   * it is of a later version or a pause is pending on it (a patch in flight may yet pause it).
   */
  | { readonly kind: "leave"; readonly id: string; readonly v: number };

/** Is a pause pending on the entry (a patch in flight, or one a crash cut short)? */
export const pausePending = (e: CatalogEntry): boolean => (e.p ?? []).some((v) => !v.e);

/** The id an op is about. */
export const opId = (op: CatalogOp): string => (op.kind === "add" ? op.entry.i : op.id);

/** One op applied to sorted entries, in place on a copy the caller owns. */
function applyOne(entries: CatalogEntry[], op: CatalogOp): boolean {
  const { at, found } = search(entries, opId(op));
  const cur = found ? entries[at]! : undefined;
  switch (op.kind) {
    case "add":
      if (cur) return false;
      entries.splice(at, 0, op.entry);
      return true;
    case "pend": {
      if (!cur) return false;
      const want: CatalogValues = {
        n: op.values.n === undefined ? cur.n : op.values.n,
        e: op.values.e ?? cur.e,
      };
      const has = (v: CatalogValues) => v.n === want.n && v.e === want.e;
      if (has(cur) || (cur.p ?? []).some(has)) return false;
      const p = [...(cur.p ?? []), want].slice(-MAX_PENDING);
      entries[at] = { ...cur, p };
      return true;
    }
    case "settle": {
      if (!cur || op.v < cur.v) return false;
      if (op.v === cur.v && cur.p === undefined && cur.n === op.values.n && cur.e === op.values.e)
        return false;
      entries[at] = { i: cur.i, n: op.values.n, e: op.values.e, v: op.v, t: cur.t };
      return true;
    }
    case "remove":
      if (!cur) return false;
      entries.splice(at, 1);
      return true;
    case "leave":
      if (!cur || cur.v > op.v || pausePending(cur)) return false;
      entries.splice(at, 1);
      return true;
    default:
      return assertNever(op, "catalog op");
  }
}

/** The result of applying ops to a chunk. */
export interface Applied {
  /** The new chunk, or null when nothing changed. */
  readonly chunk: Chunk | null;
  /** The ops whose ids the chunk does not cover (for the chunk its `next` leads to). */
  readonly beyond: readonly CatalogOp[];
}

/** Applies the ops the chunk covers. */
export function applyOps(c: Chunk, ops: readonly CatalogOp[]): Applied {
  const entries = [...c.entries];
  const beyond: CatalogOp[] = [];
  let changed = false;
  for (const op of ops) {
    if (!covers(c, opId(op))) beyond.push(op);
    else if (applyOne(entries, op)) changed = true;
  }
  return { chunk: changed ? { ...c, entries } : null, beyond };
}

/**
 * A chunk over the size cut in two: the lower part keeps the chunk's key and points at the upper
 * part, stored under `upperKey`. Null when the chunk is small enough. In halves, unless the chunk
 * grew at its end — past `grewAfter`, its last id before the write, as creates do (new ids rise
 * with time) — with at least half and at most MAX_CHUNK_ENTRIES of its entries at or below it:
 * then the lower part keeps those and the upper takes the new ones, so chunks that creates fill
 * stay full, not half full.
 */
export function split(
  c: Chunk,
  upperKey: string,
  grewAfter?: string,
): { lower: Chunk; upper: Chunk } | null {
  if (c.entries.length <= MAX_CHUNK_ENTRIES) return null;
  let mid = c.entries.length >> 1;
  if (grewAfter !== undefined) {
    const { at, found } = search(c.entries, grewAfter);
    const end = found ? at + 1 : at;
    if (end >= mid && end <= MAX_CHUNK_ENTRIES && end < c.entries.length) mid = end;
  }
  const m = c.entries[mid]!.i;
  return {
    lower: { lo: c.lo, hi: m, next: upperKey, entries: c.entries.slice(0, mid) },
    upper: { lo: m, hi: c.hi, next: c.next, entries: c.entries.slice(mid) },
  };
}

/**
 * A catalog built from jobs that exist (a tenant's first use): chunks of half the split size,
 * each named by `keyOf(i)`; the directory lists them all.
 */
export function buildChain(
  entries: readonly CatalogEntry[],
  keyOf: (i: number) => string,
): { chunks: { key: string; chunk: Chunk }[]; directory: Directory } {
  const sorted = [...entries].sort((a, b) => (a.i < b.i ? -1 : a.i > b.i ? 1 : 0));
  const size = MAX_CHUNK_ENTRIES >> 1;
  const n = Math.max(1, Math.ceil(sorted.length / size));
  const keys = Array.from({ length: n }, (_, i) => keyOf(i)); // once each: keys may be random
  const chunks: { key: string; chunk: Chunk }[] = [];
  for (let i = 0; i < n; i++) {
    const part = sorted.slice(i * size, (i + 1) * size);
    const lo = i === 0 ? "" : part[0]!.i;
    const hi = i === n - 1 ? null : sorted[(i + 1) * size]!.i;
    chunks.push({ key: keys[i]!, chunk: { lo, hi, next: keys[i + 1] ?? null, entries: part } });
  }
  return { chunks, directory: { chunks: chunks.map((c) => [c.chunk.lo, c.key] as const) } };
}

/** Do the values match the filter? */
export function valuesMatch(v: CatalogValues, f: CatalogFilter): boolean {
  if (f.state !== undefined && v.e !== (f.state === "enabled")) return false;
  return f.name === undefined || (v.n !== null && v.n.toLowerCase().includes(f.name));
}

/** Does the entry, with its current or any pending values, match the filter? */
export function entryMatches(e: CatalogEntry, f: CatalogFilter): boolean {
  return valuesMatch(e, f) || (e.p ?? []).some((v) => valuesMatch(v, f));
}

/** What a reader learns of an entry from its job (null: the job is not there). */
export type Verdict =
  | { readonly kind: "show" }
  | { readonly kind: "hide" }
  | { readonly kind: "repair"; readonly op: CatalogOp; readonly show: boolean };

/** A create older than this whose job does not exist never made it (its entry goes). */
export const ABANDONED_CREATE_MS = 3_600_000;

/**
 * An entry against its job as read: shown if the job matches the filter, and repaired when the
 * entry disagrees with it — removed for a deleted job (or one whose create was abandoned long
 * ago), settled to the job's values when they differ or pending values linger.
 */
export function verdict(
  e: CatalogEntry,
  job: { readonly deleted: boolean; readonly values: CatalogValues; readonly v: number } | null,
  f: CatalogFilter,
  nowMs: number,
): Verdict {
  if (job === null) {
    // A create in flight writes its entry before its job: only a long-missing job is gone.
    return nowMs - e.t > ABANDONED_CREATE_MS
      ? { kind: "repair", op: { kind: "remove", id: e.i }, show: false }
      : { kind: "hide" };
  }
  if (job.deleted) return { kind: "repair", op: { kind: "remove", id: e.i }, show: false };
  const show = valuesMatch(job.values, f);
  const stale =
    job.v >= e.v &&
    (e.p !== undefined || e.n !== job.values.n || e.e !== job.values.e || e.v !== job.v);
  if (stale)
    return { kind: "repair", op: { kind: "settle", id: e.i, values: job.values, v: job.v }, show };
  return show ? { kind: "show" } : { kind: "hide" };
}
