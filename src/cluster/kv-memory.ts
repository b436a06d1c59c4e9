/**
 * In-memory KV for pure and simulation tests. It honours the same contract as `NatsKv`
 * (revisions are one counter per bucket, like a stream sequence; deletes leave no live value;
 * create succeeds over a deleted key) and passes the same conformance suite.
 */
import type {
  KvChange,
  KvEntry,
  KvKey,
  KvPage,
  KvStore,
  KvWatch,
  ReadOptions,
  WriteOptions,
  WriteResult,
} from "./kv.ts";
import { keyMatches } from "./kv.ts";

export class MemoryKv implements KvStore {
  readonly bucket: string;
  #seq = 0;
  #data = new Map<string, KvEntry>();
  #lastRevision = new Map<string, number>();
  #watchers = new Set<{ filter: string; fn: (c: KvChange) => void }>();

  constructor(bucket = "memory") {
    this.bucket = bucket;
  }

  /** One copy, always the latest: both `ReadFrom` answers are the same here. */
  async get(key: string, _opts?: ReadOptions): Promise<KvEntry | null> {
    return this.#data.get(key) ?? null;
  }

  async create(key: string, value: Uint8Array): Promise<WriteResult> {
    if (this.#data.has(key)) return { ok: false, conflict: "exists" };
    return { ok: true, revision: this.#write(key, value) };
  }

  /** `_opts.urgent` has nothing to go ahead of here: no bound on operations in flight. */
  async update(
    key: string,
    value: Uint8Array,
    expectedRevision: number,
    _opts?: WriteOptions,
  ): Promise<WriteResult> {
    if ((this.#lastRevision.get(key) ?? 0) !== expectedRevision) {
      return { ok: false, conflict: "revision_mismatch" };
    }
    return { ok: true, revision: this.#write(key, value) };
  }

  async put(key: string, value: Uint8Array): Promise<number> {
    return this.#write(key, value);
  }

  async delete(key: string, expectedRevision?: number): Promise<WriteResult> {
    if (expectedRevision !== undefined && (this.#lastRevision.get(key) ?? 0) !== expectedRevision) {
      return { ok: false, conflict: "revision_mismatch" };
    }
    return { ok: true, revision: this.#write(key, null) };
  }

  async list(filter: string): Promise<KvEntry[]> {
    return [...this.#data.values()]
      .filter((e) => keyMatches(filter, e.key))
      .sort((a, b) => a.revision - b.revision);
  }

  async scan(filter: string, afterRevision: number, limit: number): Promise<KvPage> {
    const all = (await this.list(filter)).filter((e) => e.revision > afterRevision);
    const entries = all.slice(0, limit);
    return { entries, next: all.length > limit ? entries[entries.length - 1]!.revision : null };
  }

  async keys(filter: string): Promise<KvKey[]> {
    return [...this.#data.values()]
      .filter((e) => keyMatches(filter, e.key))
      .map((e) => ({ key: e.key, revision: e.revision }));
  }

  /** Like a stream purge: no marker, no watcher notification, and the key's revision is gone. */
  async purge(filter: string, beforeRevision?: number): Promise<void> {
    for (const [k, rev] of [...this.#lastRevision]) {
      if (!keyMatches(filter, k) || (beforeRevision !== undefined && rev >= beforeRevision))
        continue;
      this.#data.delete(k);
      this.#lastRevision.delete(k);
    }
  }

  async watch(
    filter: string,
    onChange: (c: KvChange) => void,
    onReady?: () => void,
  ): Promise<KvWatch> {
    // Synchronous snapshot + registration: no write can fall between them.
    const current = [...this.#data.values()]
      .filter((e) => keyMatches(filter, e.key))
      .sort((a, b) => a.revision - b.revision);
    for (const e of current) onChange({ key: e.key, value: e.value, revision: e.revision });
    onReady?.();
    const w = { filter, fn: onChange };
    this.#watchers.add(w);
    return { stop: () => this.#watchers.delete(w) };
  }

  #write(key: string, value: Uint8Array | null): number {
    const revision = ++this.#seq;
    this.#lastRevision.set(key, revision);
    if (value === null) this.#data.delete(key);
    else this.#data.set(key, { key, value: value.slice(), revision });
    for (const w of this.#watchers) if (keyMatches(w.filter, key)) w.fn({ key, value, revision });
    return revision;
  }
}
