/**
 * The job catalog in KV (the `tenants` bucket): per tenant a directory `jd.<tenant>` and a chain
 * of chunks `jl.<tenant>.<key>` of `{id, name, enabled}` entries in id order (catalog-core.ts).
 * The jobs list reads it instead of the job actors' states: one or two chunks and the page's jobs
 * make a page, whatever the tenant's size, and the dispatch path's actors are never asked.
 *
 * Writes are CAS writes of one chunk (revision-checked, so concurrent writers on several API
 * nodes never lose an entry); the changes of one chunk that arrive while a write of it is in
 * flight are applied together by the next (at most MAX_GROUP). A chunk over MAX_CHUNK_ENTRIES is
 * split (in halves, or, when it grew at its end as creates make it, after its earlier entries):
 * the upper part is created under a new random key, then the lower part is written in the same
 * CAS that applies the changes, and then the directory learns the new chunk. A crash leaves
 * at worst an unreferenced chunk or a directory that lags the chain, which readers and writers
 * follow (`next`) and repair.
 *
 * A tenant's first use builds the catalog from the jobs that exist (`existing`, a listing once);
 * of two nodes building at once, the one whose directory `create` lands wins and the other's
 * chunks are removed.
 *
 * Pitfall: directories are cached per node (at most MAX_CACHED_DIRECTORIES tenants); a stale one
 * costs a `next` hop, never a wrong answer. Chunks are never merged: a tenant that deleted most
 * of its jobs keeps near-empty chunks, which a list steps over.
 */
import { decode, encode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import { backoffMs } from "../lib/backoff.ts";
import { casUpdate } from "../lib/cas-update.ts";
import type { Clock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import type { Random } from "../lib/random.ts";
import {
  applyOps,
  buildChain,
  covers,
  entryMatches,
  keysAfter,
  locate,
  MAX_CHUNK_ENTRIES,
  opId,
  split,
  withChunk,
  type CatalogEntry,
  type CatalogFilter,
  type CatalogOp,
  type Chunk,
  type Directory,
} from "./catalog-core.ts";
import { OrderedMap } from "../lib/ordered-map.ts";

/**
 * Most changes of one chunk applied by one write: a chunk's size at most, so the split of a full
 * chunk a write overfills leaves both parts within MAX_CHUNK_ENTRIES (a batch's thousand creates
 * meet at one chunk; larger groups left chunks of 300 entries and more, which every read of
 * them decodes).
 */
export const MAX_GROUP = MAX_CHUNK_ENTRIES;
/** Most tries of one chunk write against concurrent writers. */
const MAX_CAS_TRIES = 30;
/** Tenants whose directory a node keeps in memory. */
export const MAX_CACHED_DIRECTORIES = 1024;
/** Most `next` hops a write follows before it gives up (a chain being split under it). */
const MAX_HOPS = 64;
/** Chunks a node remembers, decoded: for its next write of them, and reads of the same revision (~20 KB each). */
export const MAX_KNOWN_CHUNKS = 1024;
/** Most chunks a filtered read fetches at once, ahead of the one it is reading. */
const READ_AHEAD = 16;

/**
 * How many chunks a filtered read fetches ahead: enough for the `wanted` matches still missing
 * at the rate seen so far (`matched` in `chunks` chunks), with one to spare; READ_AHEAD when
 * nothing matched yet; never more than `budget`, the chunks the read may still examine. Reading
 * all READ_AHEAD for a page that needed two more chunks cost a common filter (a part of the
 * name, a state) most of its time, and a rare match's read fetched chunks past its bound.
 */
export function readAhead(wanted: number, matched: number, chunks: number, budget: number): number {
  const more =
    matched === 0 || chunks === 0 ? READ_AHEAD : Math.ceil(wanted / (matched / chunks)) + 1;
  return Math.max(1, Math.min(READ_AHEAD, more, budget));
}

/** The directory's key. */
export const directoryKey = (tenantId: string): string => `jd.${tenantId}`;
/** A chunk's key. */
export const chunkKey = (tenantId: string, key: string): string => `jl.${tenantId}.${key}`;

/** A chunk as read or written, with its revision. */
interface KnownChunk {
  readonly revision: number;
  readonly chunk: Chunk;
}

/** One change waiting for its chunk's write. */
interface Pending {
  readonly op: CatalogOp;
  readonly resolve: () => void;
  readonly reject: (e: unknown) => void;
}

export interface CatalogDeps {
  /** The `tenants` bucket. */
  readonly kv: KvStore;
  readonly clock: Clock;
  readonly random: Random;
  /** The tenant's jobs now, as entries (its first use: the catalog is built from them). */
  readonly existing: (tenantId: string) => Promise<CatalogEntry[]>;
}

/** What `read` found: matching entries after the position, and where to go on from. */
export interface CatalogRead {
  readonly entries: CatalogEntry[];
  /** Examined up to here (resume after it); null when the chain ended. */
  readonly resume: string | null;
  /** Entries examined. */
  readonly examined: number;
}

export class JobCatalog {
  readonly #dirs = new OrderedMap<string, Directory>();
  readonly #loading = new Map<string, Promise<Directory>>();
  readonly #queues = new Map<string, Pending[]>();
  /** Chunks as this node last wrote or read them (LRU): a write skips its read while they last. */
  readonly #known = new OrderedMap<string, KnownChunk>();
  /** Per tenant, links learnt and not yet written to its directory (present while one is written). */
  readonly #learning = new Map<string, Map<string, string>>();

  constructor(private readonly d: CatalogDeps) {}

  /** Applies the changes (each to the chunk that covers its id); resolves once all are stored. */
  async apply(tenantId: string, ops: readonly CatalogOp[]): Promise<void> {
    const dir = await this.#directory(tenantId);
    await Promise.all(ops.map((op) => this.#enqueue(tenantId, locate(dir, opId(op)), op, 0)));
  }

  /**
   * Entries after `after` (id order) that match the filter: at most `want`, examining whole
   * chunks until `maxExamined` entries were looked at.
   */
  async read(
    tenantId: string,
    after: string,
    o: { filter: CatalogFilter; want: number; maxExamined: number },
  ): Promise<CatalogRead> {
    const dir = await this.#directory(tenantId);
    const filtered = o.filter.name !== undefined || o.filter.state !== undefined;
    const out: CatalogEntry[] = [];
    let examined = 0;
    let seen = 0; // entries examined (`examined` counts the chunks too)
    let chunk = await this.#chunkFor(tenantId, dir, after);
    const ahead = new Map<string, Promise<Chunk | null>>();
    for (;;) {
      examined++; // a chunk counts, so a run of empty ones is bounded too
      for (const e of chunk.entries) {
        if (e.i <= after) continue;
        examined++;
        seen++;
        if (!entryMatches(e, o.filter)) continue;
        out.push(e);
        if (out.length >= o.want) return { entries: out, resume: e.i, examined };
      }
      if (chunk.next === null || chunk.hi === null) return { entries: out, resume: null, examined };
      if (examined >= o.maxExamined)
        return { entries: out, resume: positionBefore(chunk.hi), examined };
      // A filtered read goes through many chunks: those the directory names next are fetched
      // together — as many as the matches so far say the page still needs and its bound allows —
      // each used only if the chain leads to it.
      if (filtered && ahead.size === 0) {
        const chunks = examined - seen;
        const budget = Math.ceil((o.maxExamined - examined) / Math.max(1, seen / chunks));
        for (const k of keysAfter(
          dir,
          chunk.lo,
          readAhead(o.want - out.length, out.length, chunks, budget),
        )) {
          const p = this.#getChunk(tenantId, k);
          p.catch(() => undefined); // an unused read's failure is nobody's
          ahead.set(k, p);
        }
      }
      const next: string = chunk.next;
      const got = await (ahead.get(next) ?? this.#getChunk(tenantId, next));
      if (!ahead.delete(next)) ahead.clear(); // the directory lags here: guess again from here
      if (got === null) throw missingChunk(tenantId, next);
      chunk = got;
    }
  }

  /** The entry of `id`, or null when the catalog has none. */
  async find(tenantId: string, id: string): Promise<CatalogEntry | null> {
    const chunk = await this.#chunkFor(tenantId, await this.#directory(tenantId), id);
    return chunk.entries.find((e) => e.i === id) ?? null;
  }

  /** The chunk that covers `id`, from the directory's guess and the chain's `next` links. */
  async #chunkFor(tenantId: string, dir: Directory, id: string): Promise<Chunk> {
    let key = locate(dir, id);
    for (let hops = 0; hops <= MAX_HOPS; hops++) {
      const c = await this.#getChunk(tenantId, key);
      if (c === null) throw missingChunk(tenantId, key);
      if (covers(c, id) || c.next === null) return c;
      key = c.next;
      if (hops === 0) this.#learn(tenantId, c.hi!, key);
    }
    throw new KairosError(
      "unavailable",
      `job catalog of tenant ${tenantId}: chain too long; retry`,
    );
  }

  /**
   * A chunk as the leader holds it now. A revision this node has seen already is not decoded
   * again: the same revision is the same value, and decoding the ~30 chunks a sparse filter
   * examines, page after page, was most of such a page's CPU and garbage.
   */
  async #getChunk(tenantId: string, key: string): Promise<Chunk | null> {
    const fullKey = chunkKey(tenantId, key);
    const e = await this.d.kv.get(fullKey);
    if (e === null) return null;
    const seen = this.#known.get(fullKey);
    const chunk = seen?.revision === e.revision ? seen.chunk : decode<Chunk>(e.value);
    this.#remember(fullKey, { revision: e.revision, chunk });
    return chunk;
  }

  async #readForWrite(fullKey: string): Promise<KnownChunk | null> {
    const e = await this.d.kv.get(fullKey);
    if (e === null) return null;
    const known = { revision: e.revision, chunk: decode<Chunk>(e.value) };
    this.#remember(fullKey, known);
    return known;
  }

  #remember(fullKey: string, known: KnownChunk): void {
    this.#known.delete(fullKey);
    this.#known.set(fullKey, known);
    if (this.#known.size > MAX_KNOWN_CHUNKS) this.#known.delete(this.#known.oldest()!);
  }

  /** The tenant's directory: cached, read, or (first use) built from its jobs. */
  #directory(tenantId: string): Promise<Directory> {
    const cached = this.#dirs.get(tenantId);
    if (cached !== undefined) return Promise.resolve(cached);
    let p = this.#loading.get(tenantId);
    if (p === undefined) {
      p = this.#loadDirectory(tenantId).finally(() => this.#loading.delete(tenantId));
      this.#loading.set(tenantId, p);
    }
    return p;
  }

  async #loadDirectory(tenantId: string): Promise<Directory> {
    const e = await this.d.kv.get(directoryKey(tenantId));
    if (e !== null) return this.#cache(tenantId, decode<Directory>(e.value));
    const built = buildChain(await this.d.existing(tenantId), () => this.#newKey());
    for (const c of built.chunks) {
      const r = await this.d.kv.create(chunkKey(tenantId, c.key), encode(c.chunk));
      if (!r.ok) throw new KairosError("unavailable", `job catalog chunk ${c.key} exists; retry`);
    }
    const r = await this.d.kv.create(directoryKey(tenantId), encode(built.directory));
    if (r.ok) return this.#cache(tenantId, built.directory);
    // Another node built it first: ours goes, theirs is used.
    for (const c of built.chunks)
      await this.d.kv.delete(chunkKey(tenantId, c.key)).catch(() => undefined);
    const theirs = await this.d.kv.get(directoryKey(tenantId));
    if (theirs === null)
      throw new KairosError("unavailable", `job catalog of tenant ${tenantId} vanished; retry`);
    return this.#cache(tenantId, decode<Directory>(theirs.value));
  }

  #cache(tenantId: string, dir: Directory): Directory {
    this.#dirs.delete(tenantId);
    this.#dirs.set(tenantId, dir);
    if (this.#dirs.size > MAX_CACHED_DIRECTORIES) this.#dirs.delete(this.#dirs.oldest()!);
    return dir;
  }

  /** A random chunk key (12 base36 characters). */
  #newKey(): string {
    let s = "";
    for (let i = 0; i < 12; i++) s += Math.floor(this.d.random.next() * 36).toString(36);
    return s;
  }

  /**
   * A link the directory may lack (a split here or elsewhere, or one whose directory write was
   * lost): added to the cached directory at once (a link read from the chain is never wrong), and
   * to the directory in KV in the background — the links learnt meanwhile written together by the
   * next CAS, one at a time per tenant. Concurrent CASes of one node on the one key lost to each
   * other under a batch's splits, the directory lagged by tens of chunks and every create and
   * page then hopped along the chain (up to "chain too long"). A failure only leaves the link to
   * be learnt again.
   */
  #learn(tenantId: string, lo: string, key: string): void {
    const cached = this.#dirs.get(tenantId);
    if (cached !== undefined) this.#cache(tenantId, withChunk(cached, lo, key));
    const queued = this.#learning.get(tenantId);
    if (queued !== undefined) return void queued.set(lo, key);
    if (this.#learning.size >= MAX_CACHED_DIRECTORIES) return; // bounded: learnt again later
    const links = new Map([[lo, key]]);
    this.#learning.set(tenantId, links);
    void this.#drainLearnt(tenantId, links);
  }

  async #drainLearnt(tenantId: string, links: Map<string, string>): Promise<void> {
    while (links.size > 0) {
      const batch = [...links];
      links.clear();
      await this.#addToDirectory(tenantId, batch).catch(() => undefined);
    }
    this.#learning.delete(tenantId); // no await since the last check: nothing was queued meanwhile
  }

  async #addToDirectory(tenantId: string, links: readonly [string, string][]): Promise<void> {
    const dir = await casUpdate<Directory, Directory>(
      this.d.kv,
      directoryKey(tenantId),
      (cur) => {
        if (cur === null) throw new KairosError("not_found", `no job catalog for ${tenantId}`);
        let next = cur;
        for (const [lo, key] of links) next = withChunk(next, lo, key);
        return next === cur ? { done: cur } : { write: next, result: next };
      },
      {
        attempts: MAX_CAS_TRIES,
        encode: (v) => encode(v),
        decode: (b) => decode<Directory>(b),
        conflictMessage: `the job catalog directory of tenant ${tenantId} kept changing`,
        pause: (i) => this.#pause(i),
      },
    );
    // The cache keeps what it learnt meanwhile (links queued after this write's read).
    // Only the links the write lacks are added: a tenant of 100,000 jobs has ~500 chunks, and
    // looking each one up in the written directory cost O(chunks²) a write.
    const written = new Set(dir.chunks.map(([lo]) => lo));
    let cached = dir;
    for (const [lo, key] of this.#dirs.get(tenantId)?.chunks ?? [])
      if (!written.has(lo)) cached = withChunk(cached, lo, key);
    this.#cache(tenantId, cached);
  }

  #pause(i: number): Promise<void> {
    const ms = backoffMs(i, { baseMs: 1, maxMs: 64, jitter: { random: this.d.random, min: 1 } });
    return new Promise<void>((r) => this.d.clock.setTimer(ms, r));
  }

  #enqueue(tenantId: string, key: string, op: CatalogOp, hops: number): Promise<void> {
    if (hops > MAX_HOPS)
      return Promise.reject(
        new KairosError("unavailable", `job catalog of tenant ${tenantId}: chain too long; retry`),
      );
    const qKey = chunkKey(tenantId, key);
    return new Promise<void>((resolve, reject) => {
      const p: Pending = { op, resolve, reject };
      const queue = this.#queues.get(qKey);
      if (queue !== undefined) return void queue.push(p);
      const fresh = [p];
      this.#queues.set(qKey, fresh);
      void this.#drain(tenantId, key, fresh, hops);
    });
  }

  async #drain(tenantId: string, key: string, queue: Pending[], hops: number): Promise<void> {
    while (queue.length > 0) {
      const group = queue.splice(0, MAX_GROUP);
      try {
        const beyond = await this.#write(tenantId, key, group);
        for (const p of group) if (!beyond.next.has(p)) p.resolve();
        for (const p of beyond.next)
          void this.#enqueue(tenantId, beyond.key!, p.op, hops + 1).then(p.resolve, p.reject);
      } catch (e) {
        for (const p of group) p.reject(e);
      }
    }
    this.#queues.delete(chunkKey(tenantId, key));
  }

  /**
   * One CAS write of a chunk with a group's changes (split if it grows too big). Returns the
   * changes for ids past the chunk, for the chunk its `next` names.
   */
  async #write(
    tenantId: string,
    key: string,
    group: readonly Pending[],
  ): Promise<{ next: Set<Pending>; key: string | null }> {
    const kv = this.d.kv;
    const ops = group.map((p) => p.op);
    const fullKey = chunkKey(tenantId, key);
    let fresh = false;
    for (let i = 0; i < MAX_CAS_TRIES; i++) {
      // The value this node last wrote or read, if any: a write from it is checked by its CAS
      // (a stale one fails and reads again); a decision to write nothing is taken on a fresh read.
      const known = fresh ? undefined : this.#known.get(fullKey);
      const e = known ?? (await this.#readForWrite(fullKey));
      if (e === null) throw missingChunk(tenantId, key);
      const c = e.chunk;
      const { chunk, beyond } = applyOps(c, ops);
      const next = new Set(group.filter((p) => beyond.includes(p.op)));
      if (next.size > 0 && c.next === null) throw missingChunk(tenantId, `after ${key}`);
      if (next.size > 0) this.#learn(tenantId, c.hi!, c.next!);
      if (chunk === null && known !== undefined) {
        fresh = true;
        i--; // not a conflict
        continue;
      }
      if (chunk === null) return { next, key: c.next };
      const upperKey = this.#newKey();
      const halves = split(chunk, upperKey, c.entries[c.entries.length - 1]?.i);
      if (halves !== null) {
        const made = await kv.create(chunkKey(tenantId, upperKey), encode(halves.upper));
        if (!made.ok) continue; // a key taken (never in practice): another one
      }
      const written = halves?.lower ?? chunk;
      this.#known.delete(fullKey); // until the outcome is known
      const r = await kv.update(fullKey, encode(written), e.revision);
      if (r.ok) {
        this.#remember(fullKey, { revision: r.revision, chunk: written });
        if (halves !== null) this.#learn(tenantId, halves.upper.lo, upperKey);
        return { next, key: c.next };
      }
      if (halves !== null) await kv.delete(chunkKey(tenantId, upperKey)).catch(() => undefined);
      fresh = true;
      if (known === undefined)
        await this.#pause(i); // a stale copy's conflict is not a race
      else i--;
    }
    // Retryable (503): the change was not stored, nothing else happened.
    throw new KairosError(
      "unavailable",
      `the job catalog chunk ${key} of tenant ${tenantId} kept changing; retry`,
    );
  }
}

/**
 * A position just before `hi`: every job id below `hi` is at or before it, `hi` is after it.
 * (Ids are `[A-Za-z0-9_-]`: `hi` with its last character lowered by one and a character above
 * them all appended.)
 */
export function positionBefore(hi: string): string {
  const last = hi.charCodeAt(hi.length - 1);
  return `${hi.slice(0, -1)}${String.fromCharCode(last - 1)}~`;
}

const missingChunk = (tenantId: string, key: string) =>
  new KairosError("internal", `job catalog of tenant ${tenantId}: chunk ${key} is missing`);
