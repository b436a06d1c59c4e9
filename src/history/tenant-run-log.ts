/**
 * The tenant's runs log, the write side: every run record a node creates is appended to its
 * tenant's log, so the tenant's runs list newest first in O(page) (`GET /v1/runs`,
 * tenant-runs-page.ts) without scanning its jobs or asking any actor.
 *
 * Layout (runs bucket): chunks `tl.<tenant>.<seq>` (seq zero-padded to 10 digits, dense from 0),
 * value `{ids, t}` — run ids oldest first, the time the chunk was written; and `tlh.<tenant>`,
 * the seq of a recent chunk (a hint: readers probe past it).
 *
 * Off the dispatch path: `created` only pushes the id into a per-tenant buffer in memory; the
 * buffer is written as one chunk when it holds `CHUNK` ids or `FLUSH_DELAY_MS` after its first id
 * — one `create` and one `put` per chunk, never awaited by a turn. Chunks of one tenant from one
 * node are written one at a time, in order. Several nodes take seqs by `create` (a conflict means
 * another node took the seq: the next one is tried), so seqs stay dense and chunks are ordered by
 * when they were written (ids within a few hundred ms of each other may list out of creation
 * order across nodes).
 *
 * Pitfalls: ids still buffered when a node dies are lost from the log (their records and the job's
 * runs list keep them); a chunk that cannot be written after `WRITE_TRIES` is dropped (logged), and
 * readers step over up to `tenant-runs-page.ts` GAP_TOLERANCE missing chunks. Bounded: at most
 * `MAX_BUFFERED` ids buffered per node (more are dropped, logged), and a tenant's log keeps its
 * newest `KEEP_CHUNKS` chunks (older ones are purged in one request every `PRUNE_EVERY` chunks).
 * Records pruned by retention stay named in the log; readers skip them.
 */
import { decode, encode } from "../cluster/codec.ts";
import { kvPurge, type KvStore } from "../cluster/kv.ts";
import type { Clock } from "../lib/clock.ts";
import type { RunView } from "../protocol/model.ts";

/** Ids per chunk: a page of 200 reads 4-5 chunks. */
export const CHUNK = 64;
/** A partial chunk is written this long after its first id. */
export const FLUSH_DELAY_MS = 200;
/** Ids buffered per node, all tenants; past it new ids are dropped from the log. */
export const MAX_BUFFERED = 100_000;
/** Chunks a tenant's log keeps (262,144 runs). */
export const KEEP_CHUNKS = 4_096;
/** The log is pruned when a chunk whose seq is a multiple of this is written. */
export const PRUNE_EVERY = 256;
/** Tries to write one chunk (transport failures), then it is dropped. */
export const WRITE_TRIES = 5;

/** A stored chunk. */
export interface LogChunk {
  ids: string[];
  t: number;
}

export const tenantLogKey = (tenantId: string, seq: number): string =>
  `tl.${tenantId}.${String(seq).padStart(10, "0")}`;
export const tenantLogHeadKey = (tenantId: string): string => `tlh.${tenantId}`;

/** The seq a head key holds, or -1 when there is none or it is not one. */
export function decodeHead(value: Uint8Array | undefined): number {
  if (value === undefined) return -1;
  const n = decode<unknown>(value);
  return typeof n === "number" && Number.isSafeInteger(n) && n >= 0 ? n : -1;
}

type Log = (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;

interface TenantBuffer {
  ids: string[];
  /** The pending flush timer's cancel, if armed. */
  cancel?: () => void;
  /** The chain of this tenant's chunk writes from this node (in order). */
  writing: Promise<void>;
  /** The seq to try next (-1: read the head first). */
  next: number;
}

export class TenantRunLog {
  readonly #tenants = new Map<string, TenantBuffer>();
  #buffered = 0;
  #dropped = 0;
  #closed = false;

  constructor(
    /** The runs bucket (read when a chunk is written: the node's current connection's). */
    private readonly runs: () => KvStore,
    private readonly clock: Clock,
    private readonly log: Log,
  ) {}

  /** Ids buffered now, all tenants (for tests and bounds). */
  get buffered(): number {
    return this.#buffered;
  }

  /** A run record was created: its id joins its tenant's log (synchronous, no I/O). */
  created(record: Pick<RunView, "tenant_id" | "run_id">): void {
    if (this.#closed) return;
    if (this.#buffered >= MAX_BUFFERED) {
      if (this.#dropped++ % 10_000 === 0)
        this.log("warn", "tenant runs log buffer full: run ids dropped from the log", {
          dropped: this.#dropped,
        });
      return;
    }
    let b = this.#tenants.get(record.tenant_id);
    if (!b) {
      b = { ids: [], writing: Promise.resolve(), next: -1 };
      this.#tenants.set(record.tenant_id, b);
    }
    b.ids.push(record.run_id);
    this.#buffered++;
    if (b.ids.length >= CHUNK) this.#flush(record.tenant_id, b);
    else if (!b.cancel)
      b.cancel = this.clock.setTimer(FLUSH_DELAY_MS, () => this.#flush(record.tenant_id, b));
  }

  /** Writes every buffered id now and resolves once all writes ended (tests, clean stop). */
  async flush(): Promise<void> {
    for (const [tenantId, b] of this.#tenants) if (b.ids.length > 0) this.#flush(tenantId, b);
    await Promise.all([...this.#tenants.values()].map((b) => b.writing));
  }

  /** Writes what is buffered, then takes no more ids. */
  async close(): Promise<void> {
    await this.flush();
    this.#closed = true;
  }

  #flush(tenantId: string, b: TenantBuffer): void {
    b.cancel?.();
    delete b.cancel;
    while (b.ids.length > 0) {
      const ids = b.ids.splice(0, CHUNK);
      b.writing = b.writing
        .then(() => this.#write(tenantId, b, ids))
        .catch((e: unknown) => {
          this.log("warn", "tenant runs log chunk not written: its runs are missing from the log", {
            tenant: tenantId,
            runs: ids.length,
            err: String(e),
          });
        })
        .finally(() => {
          this.#buffered -= ids.length;
          if (b.ids.length === 0 && this.#tenants.get(tenantId) === b && !b.cancel)
            this.#forgetWhenIdle(tenantId, b);
        });
    }
  }

  /** Drops an idle tenant's buffer (its next seq is read from the head again). */
  #forgetWhenIdle(tenantId: string, b: TenantBuffer): void {
    const w = b.writing;
    void w.then(() => {
      if (b.writing === w && b.ids.length === 0 && !b.cancel) this.#tenants.delete(tenantId);
    });
  }

  /** Writes one chunk at the next free seq; the head hint after it, and prunes now and then. */
  async #write(tenantId: string, b: TenantBuffer, ids: string[]): Promise<void> {
    const value = encode({ ids, t: this.clock.now() } satisfies LogChunk);
    let failures = 0;
    for (;;) {
      try {
        if (b.next < 0) b.next = (await this.#head(tenantId)) + 1;
        const key = tenantLogKey(tenantId, b.next);
        const r = await this.runs().create(key, value);
        if (r.ok || (await this.#ours(key, ids))) break;
        // Another node took this seq: past it, and past the head if that is further.
        b.next = Math.max(b.next + 1, (await this.#head(tenantId)) + 1);
      } catch (e) {
        // Unknown outcome: the same seq again (a create that landed is recognised as ours).
        if (++failures >= WRITE_TRIES) throw e;
      }
    }
    const seq = b.next++;
    await this.runs().put(tenantLogHeadKey(tenantId), encode(seq));
    if (seq % PRUNE_EVERY === 0 && seq >= KEEP_CHUNKS) await this.#prune(tenantId, seq);
  }

  async #head(tenantId: string): Promise<number> {
    return decodeHead((await this.runs().get(tenantLogHeadKey(tenantId)))?.value);
  }

  /** Whether the chunk at `key` holds exactly `ids` (our own earlier create that landed). */
  async #ours(key: string, ids: readonly string[]): Promise<boolean> {
    const e = await this.runs().get(key);
    if (!e) return false;
    const got = decode<LogChunk>(e.value).ids;
    return got.length === ids.length && got.every((x, i) => x === ids[i]);
  }

  /** Purges the chunks below the oldest one kept (`seq` − KEEP_CHUNKS + 1), in one request. */
  async #prune(tenantId: string, seq: number): Promise<void> {
    const oldestKept = await this.runs().get(tenantLogKey(tenantId, seq - KEEP_CHUNKS + 1));
    if (oldestKept) await kvPurge(this.runs(), `tl.${tenantId}.*`, oldestKept.revision);
  }
}
