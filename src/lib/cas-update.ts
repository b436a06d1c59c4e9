/**
 * The one read-modify-write loop over a key-value store with compare-and-set: read the key,
 * decide from its value, write at the revision read (create when absent), and on a concurrent
 * change read again and decide again — never overwrite. A conflict on every try is the typed
 * `conflict` error (retryable). Transport failures are not retried here: they propagate.
 *
 * Structural over the store (src/cluster/kv.ts `KvStore` satisfies `CasStore`) and the codec,
 * so that this lowest area imports no other.
 */
import { KairosError } from "./errors.ts";

/** The store operations a read-modify-write needs. */
export interface CasStore {
  get(key: string): Promise<{ readonly value: Uint8Array; readonly revision: number } | null>;
  create(key: string, value: Uint8Array): Promise<{ readonly ok: boolean }>;
  update(
    key: string,
    value: Uint8Array,
    expectedRevision: number,
  ): Promise<{ readonly ok: boolean }>;
}

/** A decision: write `write` (then answer `result`), or answer `done` with nothing written. */
export type CasStep<T, R> = { readonly write: T; readonly result: R } | { readonly done: R };

export interface CasOptions<T> {
  /** Most tries (reads) before giving up with `conflict`. */
  readonly attempts: number;
  readonly encode: (value: T) => Uint8Array;
  readonly decode: (bytes: Uint8Array) => T;
  /** The message of the `conflict` error thrown when every try met a concurrent change. */
  readonly conflictMessage: string;
  /** A pause after the `i`-th conflict (0, 1, …) before the next try; none by default. */
  readonly pause?: (i: number) => Promise<void>;
}

/**
 * Runs `decide` on the key's current value (null: absent) until its write lands. `decide` may
 * throw (not found, a quota) to stop without writing; it is called again after each conflict.
 */
export async function casUpdate<T, R>(
  store: CasStore,
  key: string,
  decide: (current: T | null) => CasStep<T, R> | Promise<CasStep<T, R>>,
  o: CasOptions<T>,
): Promise<R> {
  for (let i = 0; i < o.attempts; i++) {
    const e = await store.get(key);
    const decided = decide(e === null ? null : o.decode(e.value));
    // A decision made at once is not awaited: no turn of the event loop more than a loop of
    // one read and one write takes.
    const step = decided instanceof Promise ? await decided : decided;
    if ("done" in step) return step.done;
    const value = o.encode(step.write);
    const r =
      e === null ? await store.create(key, value) : await store.update(key, value, e.revision);
    if (r.ok) return step.result;
    if (o.pause !== undefined) await o.pause(i);
  }
  throw new KairosError("conflict", o.conflictMessage);
}
