/**
 * A fault-injecting view of a shared `MemoryKv`: what one simulated process sees of the KV store.
 * The cluster shares one MemoryKv per bucket; each process gets its own `KvView` (its own faults),
 * so a paused, partitioned or crashed process's writes are delayed, fail, or hang.
 *
 * Faults (all off by default, then FaultyKv behaves exactly like the MemoryKv it wraps and
 * passes the KV conformance suite):
 * - `delayMs`: every operation waits a random delay (simulation clock) before it is applied;
 * - `timeout`: probability that an operation times out: it is applied (half of the time, at a
 *   random point of the wait) or not, and then throws `KairosError("timeout")` — the unknown
 *   outcome of the KvStore contract (src/cluster/kv.ts);
 * - `unavailable`: operations throw `KairosError("unavailable")`, never applied; watch events
 *   are held and delivered, in order, once the store is reachable again;
 * - `stale`: a share of the reads the port lets a replica answer — `get` with `{ from: "replica" }`
 *   (src/cluster/kv.ts) — is answered by a follower that lags up to `lagMs` behind:
 *   the store as it was then (`HistoryKv`), as a direct get served by a lagging replica of an R3
 *   bucket answers. Such a read may miss a key written since, or show an older value. Every other
 *   read (a `get` from the leader, `list`, `keys`, a watch's initial values) and every write is
 *   decided on the latest state, as the port promises. `everyRead` (an experiment: what a read
 *   that decides would do if it were answered by a replica) lets them lag too.
 * Process semantics (sim-clock.ts `SimProcess`): an operation starts only while its process
 * runs (a paused process issues nothing) and its result is delivered through the process gate
 * (a paused process sees it on resume; a crashed one never). A write already on its way when
 * the process stops still lands.
 */
import type { Buckets } from "../../src/cluster/buckets.ts";
import {
  keyMatches,
  type KvChange,
  type KvEntry,
  type KvKey,
  type KvPage,
  type KvStore,
  type KvWatch,
  type ReadOptions,
  type WriteOptions,
  type WriteResult,
} from "../../src/cluster/kv.ts";
import { MemoryKv } from "../../src/cluster/kv-memory.ts";
import type { Clock } from "../../src/lib/clock.ts";
import { KairosError } from "../../src/lib/errors.ts";
import type { Random } from "../../src/lib/random.ts";
import type { EndpointHost } from "./sim-bus.ts";

export interface KvFaults {
  delayMs: readonly [number, number];
  /** A share of replica reads answered from the store as it was up to `lagMs` ago (null: none; `everyRead`: leader reads too). */
  stale: { share: number; lagMs: number; everyRead?: boolean } | null;
  /** Probability that one operation times out (outcome unknown). */
  timeout: number;
  /** How long a timed-out operation makes its caller wait. */
  timeoutMs: number;
  unavailable: boolean;
}

export const NO_KV_FAULTS: KvFaults = Object.freeze({
  delayMs: [0, 0] as const,
  stale: null,
  timeout: 0,
  timeoutMs: 2000,
  unavailable: false,
});

/** Observes fault decisions (for the simulation's trace). */
export type KvTap = (e: {
  kind: "timeout_applied" | "timeout_lost" | "unavailable" | "stale_read";
  bucket: string;
  op: string;
  key: string;
}) => void;

/** One process's connection to the KV store: its faults, its gate, its watches. */
export class KvView {
  faults: KvFaults;
  tap: KvTap | undefined;
  readonly host: EndpointHost;
  readonly clock: Clock;
  readonly random: Random;
  /** Owned by a simulated process: every operation passes its gate, even with faults off. */
  readonly gated: boolean;
  readonly #held: (() => void)[] = [];

  constructor(o: { clock: Clock; random: Random; host?: EndpointHost; faults?: KvFaults }) {
    this.clock = o.clock;
    this.random = o.random;
    this.host = o.host ?? { clock: o.clock, gate: (fn) => fn() };
    this.gated = o.host !== undefined;
    this.faults = o.faults ?? NO_KV_FAULTS;
  }

  setUnavailable(v: boolean): void {
    this.faults = { ...this.faults, unavailable: v };
    if (!v) for (const fn of this.#held.splice(0)) fn();
  }

  /** @internal Delivers a watch event now, or once the store is reachable again. */
  deliver(fn: () => void): void {
    if (this.faults.unavailable) this.#held.push(fn);
    else queueMicrotask(() => this.host.gate(fn));
  }

  /** Wraps every bucket of a cluster (`HistoryKv`s, for stale reads). */
  buckets(shared: Buckets): Buckets {
    const w = (kv: KvStore) => new FaultyKv(kv as HistoryKv, this);
    return {
      cluster: w(shared.cluster),
      leases: w(shared.leases),
      nodes: w(shared.nodes),
      actors: w(shared.actors),
      runs: w(shared.runs),
      tenants: w(shared.tenants),
      idempotency: w(shared.idempotency),
    };
  }
}

/**
 * A `MemoryKv` that remembers every version it held and when (simulation time): `asOf` answers
 * what a lagging follower would. Purges are remembered as the end of the versions they removed.
 */
export class HistoryKv extends MemoryKv {
  /** Per key, its versions oldest first (value null: deleted or purged). */
  readonly #history = new Map<string, { atMs: number; entry: KvEntry | null }[]>();

  constructor(
    bucket: string,
    private readonly clock: Pick<Clock, "now">,
  ) {
    super(bucket);
  }

  #note(key: string, entry: KvEntry | null): void {
    const h = this.#history.get(key);
    const v = { atMs: this.clock.now(), entry };
    if (h) h.push(v);
    else this.#history.set(key, [v]);
  }

  override async create(key: string, value: Uint8Array): Promise<WriteResult> {
    const r = await super.create(key, value);
    if (r.ok) this.#note(key, { key, value: value.slice(), revision: r.revision });
    return r;
  }

  override async update(
    key: string,
    value: Uint8Array,
    expectedRevision: number,
    opts?: WriteOptions,
  ): Promise<WriteResult> {
    const r = await super.update(key, value, expectedRevision, opts);
    if (r.ok) this.#note(key, { key, value: value.slice(), revision: r.revision });
    return r;
  }

  override async put(key: string, value: Uint8Array): Promise<number> {
    const revision = await super.put(key, value);
    this.#note(key, { key, value: value.slice(), revision });
    return revision;
  }

  override async delete(key: string, expectedRevision?: number): Promise<WriteResult> {
    const r = await super.delete(key, expectedRevision);
    if (r.ok) this.#note(key, null);
    return r;
  }

  override async purge(filter: string, beforeRevision?: number): Promise<void> {
    const gone = (await super.keys(filter)).filter(
      (k) => beforeRevision === undefined || k.revision < beforeRevision,
    );
    await super.purge(filter, beforeRevision);
    for (const k of gone) this.#note(k.key, null);
  }

  /** The live entries matching `filter` as the store held them at `atMs`, in revision order. */
  asOf(filter: string, atMs: number): KvEntry[] {
    const out: KvEntry[] = [];
    for (const [key, h] of this.#history) {
      if (!keyMatches(filter, key)) continue;
      let e: KvEntry | null = null;
      for (const v of h) {
        if (v.atMs > atMs) break;
        e = v.entry;
      }
      if (e) out.push(e);
    }
    return out.sort((a, b) => a.revision - b.revision);
  }
}

export class FaultyKv implements KvStore {
  readonly bucket: string;
  readonly #inner: HistoryKv;
  readonly #view: KvView;

  constructor(inner: HistoryKv, view: KvView) {
    this.#inner = inner;
    this.bucket = inner.bucket;
    this.#view = view;
  }

  /** A stale answer (a lagging follower's) for a read a replica may answer, or undefined for the latest one. */
  #staleAt(op: string, key: string, replica: boolean): number | undefined {
    const s = this.#view.faults.stale;
    if (!s || (!replica && s.everyRead !== true) || this.#view.random.next() >= s.share)
      return undefined;
    this.#view.tap?.({ kind: "stale_read", bucket: this.bucket, op, key });
    return this.#view.clock.now() - Math.floor(this.#view.random.next() * s.lagMs);
  }

  get(key: string, opts?: ReadOptions): Promise<KvEntry | null> {
    return this.#op("get", key, async () => {
      const at = this.#staleAt("get", key, opts?.from === "replica");
      return at === undefined ? this.#inner.get(key, opts) : (this.#inner.asOf(key, at)[0] ?? null);
    });
  }
  create(key: string, value: Uint8Array): Promise<WriteResult> {
    return this.#op("create", key, () => this.#inner.create(key, value));
  }
  update(
    key: string,
    value: Uint8Array,
    expectedRevision: number,
    opts?: WriteOptions,
  ): Promise<WriteResult> {
    return this.#op("update", key, () => this.#inner.update(key, value, expectedRevision, opts));
  }
  put(key: string, value: Uint8Array): Promise<number> {
    return this.#op("put", key, () => this.#inner.put(key, value));
  }
  delete(key: string, expectedRevision?: number): Promise<WriteResult> {
    return this.#op("delete", key, () => this.#inner.delete(key, expectedRevision));
  }
  list(filter: string): Promise<KvEntry[]> {
    return this.#op("list", filter, async () => {
      const at = this.#staleAt("list", filter, false);
      return at === undefined ? this.#inner.list(filter) : this.#inner.asOf(filter, at);
    });
  }
  scan(filter: string, afterRevision: number, limit: number): Promise<KvPage> {
    return this.#op("list", filter, async () => {
      const at = this.#staleAt("scan", filter, false);
      if (at === undefined) return this.#inner.scan(filter, afterRevision, limit);
      const all = this.#inner.asOf(filter, at).filter((e) => e.revision > afterRevision);
      const entries = all.slice(0, limit);
      return { entries, next: all.length > limit ? entries[entries.length - 1]!.revision : null };
    });
  }
  keys(filter: string): Promise<KvKey[]> {
    return this.#op("list", filter, async () => {
      const at = this.#staleAt("keys", filter, false);
      return (at === undefined ? await this.#inner.keys(filter) : this.#inner.asOf(filter, at)).map(
        (e) => ({ key: e.key, revision: e.revision }),
      );
    });
  }
  purge(filter: string, beforeRevision?: number): Promise<void> {
    return this.#op("purge", filter, () => this.#inner.purge(filter, beforeRevision));
  }

  async watch(
    filter: string,
    onChange: (c: KvChange) => void,
    onReady?: () => void,
  ): Promise<KvWatch> {
    await this.#enter();
    if (this.#view.faults.unavailable)
      throw new KairosError("unavailable", `kv ${this.bucket} unavailable`);
    let stopped = false;
    const w = await this.#inner.watch(
      filter,
      (c) => this.#view.deliver(() => !stopped && onChange(c)),
      () => this.#view.deliver(() => !stopped && onReady?.()),
    );
    return {
      stop: () => {
        stopped = true;
        w.stop();
      },
    };
  }

  /** Resolves when the process runs (never, if it crashed). */
  #enter(): Promise<void> {
    return new Promise((r) => this.#view.host.gate(r));
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((r) => this.#view.clock.setTimer(ms, r));
  }

  async #op<T>(op: string, key: string, apply: () => Promise<T>): Promise<T> {
    const v = this.#view;
    const f = v.faults;
    const faulty =
      v.gated || f.unavailable || f.timeout > 0 || f.delayMs[1] > 0 || f.stale !== null;
    if (!faulty) return apply();
    await this.#enter();
    if (f.unavailable) {
      await this.#sleep(5);
      v.tap?.({ kind: "unavailable", bucket: this.bucket, op, key });
      await this.#enter();
      throw new KairosError("unavailable", `kv ${this.bucket}: no connection`);
    }
    const [lo, hi] = f.delayMs;
    const delay = hi > 0 ? lo + Math.floor(v.random.next() * (hi - lo + 1)) : 0;
    if (f.timeout > 0 && v.random.next() < f.timeout) {
      const applied = op !== "get" && op !== "list" && v.random.next() < 0.5;
      const at = Math.floor(v.random.next() * f.timeoutMs);
      await this.#sleep(at);
      if (applied) await apply();
      await this.#sleep(f.timeoutMs - at);
      v.tap?.({ kind: applied ? "timeout_applied" : "timeout_lost", bucket: this.bucket, op, key });
      await this.#enter();
      throw new KairosError("timeout", `kv ${this.bucket}: ${op} ${key} timed out`);
    }
    if (delay > 0) await this.#sleep(delay);
    // Became unreachable while on the way: not applied.
    if (v.faults.unavailable) {
      await this.#enter();
      throw new KairosError("unavailable", `kv ${this.bucket}: connection lost`);
    }
    const r = await apply();
    await this.#enter();
    return r;
  }
}
