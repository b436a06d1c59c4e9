/** Wire and storage encoding: msgpack (msgpackr) for every NATS body and KV value. */
import { Packr } from "msgpackr";

const packr = new Packr({ useRecords: false, moreTypes: false });

export function encode(value: unknown): Uint8Array {
  return packr.pack(value);
}

export function decode<T>(bytes: Uint8Array): T {
  return packr.unpack(bytes) as T;
}
