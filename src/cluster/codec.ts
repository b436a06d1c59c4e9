/**
 * Wire and storage encoding: msgpack (msgpackr) for every NATS body and KV value.
 *
 * Imported as `msgpackr/pack` (on Node, msgpackr's plain `index.js`), never as `msgpackr`, whose
 * Node entry turns on its native string extraction: that decodes a message's strings as one
 * native string and hands out slices of it, so every short string a job state kept (its tenant
 * id, its task's image) would hold the whole `create` message alive (megabytes of a scheduler's
 * heap). Decoding in JS is also faster at these sizes (a 429-byte create: 2.65 µs vs 3.32 µs).
 * test/unit/cluster/codec.test.ts keeps it so.
 */
import type { Packr as PackrClass } from "msgpackr";
import * as plain from "msgpackr/pack";

// msgpackr's `pack.d.ts` re-exports from '.', which NodeNext resolution does not follow: the
// types come from the main entry (a type-only import, erased: it loads nothing).
const { Packr } = plain as unknown as { Packr: typeof PackrClass };

const packr = new Packr({ useRecords: false, moreTypes: false });

export function encode(value: unknown): Uint8Array {
  return packr.pack(value);
}

export function decode<T>(bytes: Uint8Array): T {
  return packr.unpack(bytes) as T;
}
