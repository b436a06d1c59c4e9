/**
 * A bucket this process's NATS identity may not use: every operation fails at once with
 * `permission_denied`, naming the bucket, without a request on the bus. A worker-only node holds
 * these for every bucket but `cluster` and `nodes` (buckets.ts, scope `worker`), so a code path
 * that reached for another bucket from a worker fails loudly here instead of as a permission
 * violation logged by the server (and a timeout).
 */
import { KairosError } from "../lib/errors.ts";
import type { KvEntry, KvKey, KvPage, KvStore, KvWatch, WriteResult } from "./kv.ts";

export class DeniedKv implements KvStore {
  readonly bucket: string;
  readonly #why: string;

  constructor(bucket: string, who: string) {
    this.bucket = bucket;
    this.#why = `${who} may not use the ${bucket} bucket`;
  }

  #deny<T>(): Promise<T> {
    return Promise.reject(new KairosError("permission_denied", this.#why));
  }

  get(): Promise<KvEntry | null> {
    return this.#deny();
  }
  create(): Promise<WriteResult> {
    return this.#deny();
  }
  update(): Promise<WriteResult> {
    return this.#deny();
  }
  put(): Promise<number> {
    return this.#deny();
  }
  delete(): Promise<WriteResult> {
    return this.#deny();
  }
  list(): Promise<KvEntry[]> {
    return this.#deny();
  }
  scan(): Promise<KvPage> {
    return this.#deny();
  }
  watch(): Promise<KvWatch> {
    return this.#deny();
  }
  keys(): Promise<KvKey[]> {
    return this.#deny();
  }
  purge(): Promise<void> {
    return this.#deny();
  }
}
