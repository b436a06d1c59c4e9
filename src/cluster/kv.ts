/**
 * The KV port: the only way Kairos reads and writes durable state. A conflict is a value, not an
 * exception: `create` and `update` return `{ ok: false, conflict }`. Only transport failures
 * throw (`unavailable`); a `timeout` is an unknown outcome — the write may have been applied — so
 * the caller reads the key back (values carry a writer id) before deciding anything.
 *
 * Reads see every acknowledged write unless asked otherwise: `get` is answered by the stream
 * leader by default, and `list`, `keys` and `watch`'s initial values wait for the leader's last
 * matching revision. Only reads whose staleness is harmless ask `{ from: "replica" }`, saying why.
 *
 * Two implementations pass one conformance suite (test/integration/kv-conformance.test.ts):
 * `NatsKv` over JetStream KV and `MemoryKv` (unit tests and the simulation only).
 */

/** One stored value with the revision that wrote it (the stream sequence in JetStream). */
export interface KvEntry {
  readonly key: string;
  readonly value: Uint8Array;
  readonly revision: number;
}

export type WriteResult =
  | { readonly ok: true; readonly revision: number }
  | { readonly ok: false; readonly conflict: "exists" | "revision_mismatch" };

/** A change seen by a watcher; `value` is null for a delete or purge. */
export interface KvChange {
  readonly key: string;
  readonly value: Uint8Array | null;
  readonly revision: number;
}

/** A page of `KvStore.scan`. */
export interface KvPage {
  readonly entries: KvEntry[];
  /** Pass as `afterRevision` for the next page; null when nothing matches past this page. */
  readonly next: number | null;
}

/** A key and the revision of its latest value (`KvStore.keys`). */
export interface KvKey {
  readonly key: string;
  readonly revision: number;
}

export interface KvWatch {
  stop(): void;
}

/** How a write waits for a place in a store's in-flight bound (see `KvStore.update`). */
export interface WriteOptions {
  /** Ahead of waiting non-urgent operations: an actor turn admitted urgently (`ActorDefinition.urgent`). */
  readonly urgent?: boolean;
}

/**
 * Where a `get` is answered. `leader` (the default): by the stream leader, which holds every
 * acknowledged write — read-after-write even on a replica that is behind (stopped and resumed,
 * restarted). `replica`: by any replica (NATS direct get: the server the client is connected to,
 * if it holds the bucket), which may not have applied the latest writes yet — cheaper for the
 * leader and spread over the servers; only where an old value or a missing key decides nothing.
 */
export type ReadFrom = "leader" | "replica";

export interface ReadOptions {
  readonly from?: ReadFrom;
}

/** The options of a read whose staleness is harmless (the call site says why). */
export const REPLICA_READ: ReadOptions = Object.freeze({ from: "replica" });

export interface KvStore {
  readonly bucket: string;
  /**
   * Latest value, or null when absent or deleted: the stream leader's answer unless `from` is
   * `replica` (see `ReadFrom`; a deposed leader that has not yet heard of its successor is the
   * one exception: docs/kv.md, "What a read sees").
   */
  get(key: string, opts?: ReadOptions): Promise<KvEntry | null>;
  /** Writes only if the key has no live value. */
  create(key: string, value: Uint8Array): Promise<WriteResult>;
  /**
   * Writes only if the key's latest revision is `expectedRevision`. `urgent`: ahead of every
   * waiting non-urgent operation where the store bounds operations in flight (NatsKv's shared
   * limiter); a store without such a bound ignores it.
   */
  update(
    key: string,
    value: Uint8Array,
    expectedRevision: number,
    opts?: WriteOptions,
  ): Promise<WriteResult>;
  /** Unconditional write; use only for values nobody races on (heartbeats, caches). */
  put(key: string, value: Uint8Array): Promise<number>;
  /** Deletes if the latest revision is `expectedRevision` (or blindly when omitted). */
  delete(key: string, expectedRevision?: number): Promise<WriteResult>;
  /**
   * Every live entry whose key matches the subject-style filter (`a.*.c`, `a.>`), including
   * every write the stream leader had applied when the listing began.
   */
  list(filter: string): Promise<KvEntry[]>;
  /**
   * One page of live entries matching `filter` whose revision is above `afterRevision`, in
   * revision order, at most `limit` (1..1000). Costs O(limit + deletes skipped), not O(all
   * matches): the store is read from that revision on (NATS: direct gets with `next_by_subj`).
   * Served by the stream leader: a replica behind would end a listing short.
   * `next` is the revision to scan after for the next page, null at the end.
   * Meant for keys written once and never rewritten (a rewrite moves a key to a later revision).
   */
  scan(filter: string, afterRevision: number, limit: number): Promise<KvPage>;
  /**
   * Calls `onChange` for the current value of every matching key, then `onReady` once (by then
   * every write the stream leader had applied when the watch began was passed), then for every
   * later change, in revision order.
   */
  watch(filter: string, onChange: (c: KvChange) => void, onReady?: () => void): Promise<KvWatch>;
  /**
   * The live keys matching the filter with their latest revisions, without values (cheaper than
   * `list`: JetStream sends headers only), as complete as `list`. Unordered. Optional: callers use `kvKeys`, which
   * falls back to `list`.
   */
  keys?(filter: string): Promise<KvKey[]>;
  /**
   * Removes the stored revisions of the keys matching the filter — all of them, or those below
   * `beforeRevision` — and leaves NO delete marker (a JetStream stream purge: one request however
   * many keys match). Watchers are not told. Unconditional: use only for values nobody writes any
   * more (old run records, a deleted job's state). Optional: callers use `kvPurge`, which falls
   * back to a `delete` (a marker) per matching key.
   */
  purge?(filter: string, beforeRevision?: number): Promise<void>;
}

/** `kv.keys(filter)`, or the keys of `kv.list(filter)` for a store without `keys`. */
export async function kvKeys(kv: KvStore, filter: string): Promise<KvKey[]> {
  return kv.keys
    ? kv.keys(filter)
    : (await kv.list(filter)).map((e) => ({ key: e.key, revision: e.revision }));
}

/** `kv.purge(filter, before)`, or a blind `delete` of each matching key for a store without `purge`. */
export async function kvPurge(kv: KvStore, filter: string, beforeRevision?: number): Promise<void> {
  if (kv.purge) return kv.purge(filter, beforeRevision);
  for (const k of await kvKeys(kv, filter))
    if (beforeRevision === undefined || k.revision < beforeRevision) await kv.delete(k.key);
}

/** Tests a key against a NATS-subject-style filter (`*` one token, `>` the rest). */
export function keyMatches(filter: string, key: string): boolean {
  const f = filter.split(".");
  const k = key.split(".");
  for (let i = 0; i < f.length; i++) {
    const t = f[i];
    if (t === ">") return k.length > i;
    if (i >= k.length) return false;
    if (t !== "*" && t !== k[i]) return false;
  }
  return f.length === k.length;
}

const KEY_RE = /^[-/_=.a-zA-Z0-9]+$/;
/** True when `key` is a legal KV key (NATS subject tokens, no empty token). */
export function isValidKey(key: string): boolean {
  return KEY_RE.test(key) && !key.startsWith(".") && !key.endsWith(".") && !key.includes("..");
}
