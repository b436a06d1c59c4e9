/**
 * `KvStore` over a JetStream KV bucket (nats.js v3). Maps the client's exceptions onto the port's
 * contract: a wrong-last-sequence error is a conflict value, a timeout is `KairosError("timeout")`
 * (outcome unknown: read back), anything else is `KairosError("unavailable")`.
 *
 * Reads (see `ReadFrom` in kv.ts): the client's `kv.get` is a direct get (`allow_direct`), which
 * any replica answers — the one on the server this connection uses first — from whatever it has
 * applied: a replica stopped and resumed, or restarted, answers old values or "no key" for a while
 * after the write was acknowledged. So `get` asks the stream leader (`$JS.API.STREAM.MSG.GET`,
 * which only the leader answers) unless the caller accepts a replica's answer. Watches and
 * listings run on an ordered consumer that any replica may host: they are ready only once they
 * passed the leader's last matching revision (`#leaderRevision`).
 */
import type { KV } from "@nats-io/kv";
import type { JetStreamManager, MsgRequest, StoredMsg } from "@nats-io/jetstream";
import { JetStreamApiCodes, JetStreamApiError } from "@nats-io/jetstream";
import { TimeoutError } from "@nats-io/transport-node";
import { withDeadline } from "./deadline.ts";
import { KairosError } from "../lib/errors.ts";
import { systemClock } from "../lib/clock.ts";
import {
  isValidKey,
  type KvChange,
  type KvEntry,
  type KvKey,
  type KvPage,
  type KvStore,
  type KvWatch,
  type ReadOptions,
  type WriteOptions,
  type WriteResult,
} from "./kv.ts";
import { startKvOp, type KvOp } from "../metrics/index.ts";

/** Times `fn` as one KV operation on `bucket` (kairos_kv_op_seconds{op,bucket}), whether it succeeds or throws. */
async function timed<T>(op: KvOp, bucket: string, fn: () => Promise<T>): Promise<T> {
  const done = startKvOp(op, bucket);
  try {
    return await fn();
  } finally {
    done();
  }
}
import type { InFlightLimiter } from "./in-flight.ts";

/** A listing that receives nothing for this long fails with `timeout` (see `list`). */
export const LIST_IDLE_TIMEOUT_MS = 15_000;

function isTimeout(e: unknown): boolean {
  for (let c: unknown = e, i = 0; c instanceof Error && i < 5; c = c.cause, i++) {
    if (c instanceof TimeoutError || c.name === "TimeoutError") return true;
  }
  return false;
}

function isWrongSequence(e: unknown): boolean {
  return (
    e instanceof JetStreamApiError &&
    (e.code === JetStreamApiCodes.StreamWrongLastSequence ||
      e.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}

/** A KV delete or purge marker (`KV-Operation` header), not a value. */
function isMarker(m: StoredMsg): boolean {
  const op = m.header.get("KV-Operation");
  return op === "DEL" || op === "PURGE";
}

function transportError(op: string, key: string, e: unknown): KairosError {
  if (isTimeout(e))
    return new KairosError("timeout", `kv ${op} ${key}: timed out (outcome unknown)`, { cause: e });
  const msg = e instanceof Error ? e.message : String(e);
  return new KairosError("unavailable", `kv ${op} ${key}: ${msg}`, { cause: e });
}

/**
 * The client library's timeout as a multiple of ours: ours (stall-aware, deadline.ts) decides; the
 * library's only ends a request ours gave up on. Buckets open with a JetStream client this slow.
 */
export const LIBRARY_TIMEOUT_FACTOR = 3;

/** NatsKv's own deadline per operation, unless its constructor is given another. */
export const KV_TIMEOUT_MS = 5000;

/** A watch that could not ask the leader where it must get to asks again after this long. */
const WATCH_RETRY_MS = 1000;

/** Deletes `scan` skips in one call before it returns a short page (see `KvStore.scan`). */
const SCAN_SKIP_LIMIT = 1000;

export class NatsKv implements KvStore {
  readonly bucket: string;
  readonly #kv: KV;
  readonly #jsm: JetStreamManager;
  readonly #timeoutMs: number;
  readonly #limit: <T>(op: () => Promise<T>, urgent?: boolean) => Promise<T>;

  readonly #listIdleMs: number;

  /** `limiter` bounds this bucket's reads and writes in flight (shared between buckets). */
  constructor(
    bucket: string,
    kv: KV,
    jsm: JetStreamManager,
    timeoutMs = KV_TIMEOUT_MS,
    limiter?: InFlightLimiter,
    listIdleMs = LIST_IDLE_TIMEOUT_MS,
  ) {
    this.#listIdleMs = listIdleMs;
    this.bucket = bucket;
    this.#kv = kv;
    this.#jsm = jsm;
    this.#timeoutMs = timeoutMs;
    this.#limit = limiter ? (op, urgent) => limiter.run(op, urgent) : (op) => op();
  }

  /**
   * The operation's deadline (`timeoutMs`), stall-aware (deadline.ts): the library's own timeout
   * is `LIBRARY_TIMEOUT_FACTOR` times longer, so this one decides.
   */
  #deadline<T>(op: Promise<T>): Promise<T> {
    return withDeadline(op, systemClock, this.#timeoutMs, () => new TimeoutError());
  }

  /**
   * An operation in the in-flight limiter with our deadline: the caller's answer is bounded by
   * the deadline, but the limiter's slot is held until the request itself settles (the library
   * may keep it on the wire up to its own, longer timeout), so no more than the limit are ever on
   * the wire (releasing at our deadline would let several times the limit out under overload).
   */
  #bounded<T>(op: () => Promise<T>, urgent = false): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#limit(() => {
        const p = op();
        this.#deadline(p).then(resolve, reject);
        return p.then(
          () => undefined,
          () => undefined,
        );
      }, urgent).catch(reject);
    });
  }

  /**
   * The revision of the last message (a value or a delete marker) matching `filter` that the
   * stream leader holds, 0 when none: what a watch must have passed to be as fresh as the leader
   * when it began. Under our deadline, outside the in-flight bound (as the watch itself).
   */
  async #leaderRevision(filter: string): Promise<number> {
    const m = await this.#deadline(
      this.#jsm.streams.getMessage(`KV_${this.bucket}`, {
        last_by_subj: `$KV.${this.bucket}.${filter}`,
      }),
    );
    return m?.seq ?? 0;
  }

  async get(key: string, opts: ReadOptions = {}): Promise<KvEntry | null> {
    const fromReplica = opts.from === "replica";
    if (!isValidKey(key))
      throw new KairosError(
        "invalid_argument",
        `kv get: ${JSON.stringify(key.slice(0, 80))} is not a key`,
      );
    return timed(
      fromReplica ? "get_replica" : "get",
      this.bucket,
      async (): Promise<KvEntry | null> => {
        try {
          if (fromReplica) {
            const e = await this.#bounded(() => this.#kv.get(key));
            return !e || e.operation !== "PUT"
              ? null
              : { key, value: e.value, revision: e.revision };
          }
          const m = await this.#bounded(() =>
            this.#jsm.streams.getMessage(`KV_${this.bucket}`, {
              last_by_subj: `$KV.${this.bucket}.${key}`,
            }),
          );
          return m === null || isMarker(m) ? null : { key, value: m.data, revision: m.seq };
        } catch (err) {
          throw transportError("get", key, err);
        }
      },
    );
  }

  async create(key: string, value: Uint8Array): Promise<WriteResult> {
    return timed("create", this.bucket, async (): Promise<WriteResult> => {
      try {
        try {
          return { ok: true, revision: await this.#bounded(() => this.#kv.create(key, value)) };
        } catch (err) {
          if (!isWrongSequence(err)) throw err;
        }
        // The key has a last entry. The library looked at it with a direct get, which any replica
        // answers: one behind still holds the value a delete marker has since replaced, and a
        // create after a delete failed as `exists` (seen on an R3 cluster after a fault). Asked
        // again of the stream leader: a marker is created over, fenced on its revision.
        const m = await this.#bounded(() =>
          this.#jsm.streams.getMessage(`KV_${this.bucket}`, {
            last_by_subj: `$KV.${this.bucket}.${key}`,
          }),
        );
        if (m !== null && !isMarker(m)) return { ok: false, conflict: "exists" };
        const revision = await this.#bounded(() =>
          m === null ? this.#kv.create(key, value) : this.#kv.update(key, value, m.seq),
        );
        return { ok: true, revision };
      } catch (err) {
        if (isWrongSequence(err)) return { ok: false, conflict: "exists" };
        throw transportError("create", key, err);
      }
    });
  }

  async update(
    key: string,
    value: Uint8Array,
    expectedRevision: number,
    opts: WriteOptions = {},
  ): Promise<WriteResult> {
    return timed("update", this.bucket, async (): Promise<WriteResult> => {
      try {
        const revision = await this.#bounded(
          () =>
            this.#kv.put(key, value, {
              previousSeq: expectedRevision,
              timeout: LIBRARY_TIMEOUT_FACTOR * this.#timeoutMs,
            }),
          opts.urgent === true,
        );
        return { ok: true, revision };
      } catch (err) {
        if (isWrongSequence(err)) return { ok: false, conflict: "revision_mismatch" };
        throw transportError("update", key, err);
      }
    });
  }

  async put(key: string, value: Uint8Array): Promise<number> {
    return timed("put", this.bucket, async (): Promise<number> => {
      try {
        return await this.#bounded(() =>
          this.#kv.put(key, value, { timeout: LIBRARY_TIMEOUT_FACTOR * this.#timeoutMs }),
        );
      } catch (err) {
        throw transportError("put", key, err);
      }
    });
  }

  async delete(key: string, expectedRevision?: number): Promise<WriteResult> {
    return timed("delete", this.bucket, async (): Promise<WriteResult> => {
      try {
        await this.#bounded(() =>
          this.#kv.delete(
            key,
            expectedRevision === undefined ? {} : { previousSeq: expectedRevision },
          ),
        );
        // The client does not return the marker's revision; read it back (never needed for fencing).
        return { ok: true, revision: 0 };
      } catch (err) {
        if (isWrongSequence(err)) return { ok: false, conflict: "revision_mismatch" };
        throw transportError("delete", key, err);
      }
    });
  }

  async list(filter: string): Promise<KvEntry[]> {
    return timed("list", this.bucket, async (): Promise<KvEntry[]> => {
      const out = new Map<string, KvEntry>();
      await new Promise<void>((resolve, reject) => {
        let w: KvWatch | undefined;
        let ready = false;
        // A listing that stops making progress (its connection closed or cut mid-way: the watch
        // then neither ends nor fails) is a timeout, not a hang: callers retry or give up.
        let cancelIdle: (() => void) | undefined;
        const clearIdle = () => cancelIdle?.();
        const stall = () => {
          clearIdle();
          cancelIdle = systemClock.setTimer(this.#listIdleMs, () => {
            if (ready) return;
            ready = true;
            w?.stop();
            reject(
              new KairosError(
                "timeout",
                `kv list ${filter}: no progress for ${this.#listIdleMs} ms`,
              ),
            );
          });
        };
        // Armed once the watch is set up (counting a large filter's keys first may take long;
        // that request has its own timeout), re-armed by every entry.
        this.watch(
          filter,
          (c) => {
            if (ready) return;
            stall();
            if (c.value === null) out.delete(c.key);
            else out.set(c.key, { key: c.key, value: c.value, revision: c.revision });
          },
          () => {
            if (ready) return;
            ready = true;
            clearIdle();
            w?.stop();
            resolve();
          },
        ).then(
          (watch) => {
            w = watch;
            if (ready) watch.stop();
            else stall();
          },
          (e: unknown) => {
            clearIdle();
            ready = true;
            reject(e instanceof Error ? e : new Error(String(e)));
          },
        );
      });
      return [...out.values()].sort((a, b) => a.revision - b.revision);
    });
  }

  async scan(filter: string, afterRevision: number, limit: number): Promise<KvPage> {
    return timed("list", this.bucket, async () => {
      const stream = `KV_${this.bucket}`;
      const prefix = `$KV.${this.bucket}.`;
      const entries: KvEntry[] = [];
      // Deletes and superseded revisions met on the way are skipped; at most this many, so one
      // page stays bounded.
      let skips = SCAN_SKIP_LIMIT;
      for (let seq = afterRevision + 1; ;) {
        let m;
        try {
          // From the leader (STREAM.MSG.GET takes `next_by_subj` though the client's type does not
          // say so): a replica behind would end the listing short of what it has missed.
          m = await this.#bounded(() =>
            this.#jsm.streams.getMessage(stream, {
              seq,
              next_by_subj: `${prefix}${filter}`,
            } as unknown as MsgRequest),
          );
        } catch (err) {
          throw transportError("scan", filter, err);
        }
        if (!m) return { entries, next: null };
        seq = m.seq + 1;
        const op = m.header?.get("KV-Operation");
        if (op === "DEL" || op === "PURGE") {
          if (--skips <= 0) return { entries, next: m.seq };
          continue;
        }
        // In a bucket that keeps history, this may be an older revision of a key that was
        // rewritten or deleted since: only the key's latest revision counts.
        const key = m.subject.slice(prefix.length);
        const latest = await this.get(key);
        if (latest?.revision !== m.seq) {
          if (--skips <= 0) return { entries, next: m.seq };
          continue;
        }
        if (entries.length === limit) return { entries, next: entries[limit - 1]!.revision };
        entries.push(latest);
      }
    });
  }

  async keys(filter: string): Promise<KvKey[]> {
    return timed("keys", this.bucket, async (): Promise<KvKey[]> => {
      const out = new Map<string, number>();
      await new Promise<void>((resolve, reject) => {
        let w: KvWatch | undefined;
        let ready = false;
        this.#watch(
          filter,
          true,
          (c) => {
            if (ready) return;
            if (c.value === null) out.delete(c.key);
            else out.set(c.key, c.revision);
          },
          () => {
            ready = true;
            w?.stop();
            resolve();
          },
        ).then((watch) => {
          w = watch;
          if (ready) watch.stop();
        }, reject);
      });
      return [...out].map(([key, revision]) => ({ key, revision }));
    });
  }

  async purge(filter: string, beforeRevision?: number): Promise<void> {
    return timed("purge", this.bucket, async (): Promise<void> => {
      const subject = `$KV.${this.bucket}.${filter}`;
      try {
        await this.#bounded(() =>
          this.#jsm.streams.purge(
            `KV_${this.bucket}`,
            beforeRevision === undefined
              ? { filter: subject }
              : { filter: subject, seq: beforeRevision },
          ),
        );
      } catch (err) {
        throw transportError("purge", filter, err);
      }
    });
  }

  watch(filter: string, onChange: (c: KvChange) => void, onReady?: () => void): Promise<KvWatch> {
    return this.#watch(filter, false, onChange, onReady);
  }

  /**
   * A watch; `headersOnly`: values are not sent (come as empty arrays), deletes still as null.
   *
   * Ready once an entry at or past the leader's last matching revision (asked before subscribing)
   * was passed: the consumer replays the last revision of each key in revision order, from the
   * replica that hosts it, which may be behind the leader. A replica at its end (`delta` 0)
   * short of that revision makes us ask the leader again: the message we wait for may have been
   * purged since (no marker), and then the leader's revision is lower.
   */
  async #watch(
    filter: string,
    headersOnly: boolean,
    onChange: (c: KvChange) => void,
    onReady?: () => void,
  ): Promise<KvWatch> {
    let readyCalled = false;
    const ready = () => {
      if (!readyCalled) {
        readyCalled = true;
        onReady?.();
      }
    };
    let iter;
    let floor: number;
    try {
      // Asked before subscribing: writes racing in only make the replay longer, never shorter.
      floor = await this.#leaderRevision(filter);
      iter = await this.#kv.watch({ key: filter, ...(headersOnly ? { headers_only: true } : {}) });
    } catch (err) {
      throw transportError("watch", filter, err);
    }
    if (floor === 0) ready();
    const it = iter;
    let passed = 0;
    let asking = false;
    let stopped = false;
    let cancelRetry: (() => void) | undefined;
    const askAgain = (): void => {
      if (readyCalled || stopped) return;
      asking = true;
      this.#leaderRevision(filter).then(
        (f) => {
          floor = f;
          asking = false;
          if (passed >= floor) ready();
        },
        () => {
          // No answer (leader unreachable meanwhile): ask again in a while, not only on the next entry.
          if (!stopped) cancelRetry = systemClock.setTimer(WATCH_RETRY_MS, askAgain);
        },
      );
    };
    void (async () => {
      try {
        for await (const e of it) {
          onChange({
            key: e.key,
            value: e.operation === "PUT" ? e.value : null,
            revision: e.revision,
          });
          passed = Math.max(passed, e.revision);
          if (readyCalled) continue;
          if (passed >= floor) ready();
          else if (e.delta === 0 && !asking) askAgain();
        }
      } catch {
        // The watcher ends when the connection closes; owners re-create watches on restart.
      }
    })();
    return {
      stop: () => {
        stopped = true;
        cancelRetry?.();
        it.stop();
      },
    };
  }
}
