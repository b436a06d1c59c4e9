/**
 * The tenant actor's shell: durable slot grants in append-only segments per tenant, key
 * `grants.<partition>.<tenant_id>.s<seq>` → `{ <grant_id>: expiry_ms }`, reloaded on activation
 * so the cap holds across passivation, moves and restarts. The highest seq holds a grant's expiry.
 * `GrantTable` group-commits: one batch in flight per tenant, each reply waits for the batch
 * holding its change, a batch costs O(its grants). Its head write is a CAS on the tail segment
 * (update below `APPEND_MAX` grants, else `create` seq+1), so two incarnations of one tenant never
 * both grant unseen by each other. Releases are written lazily; empty segments are deleted and
 * sparse ones compacted; at most `MAX_SEGMENTS`. A batch of grants for runs due later than
 * `GRANT_GATHER_LEAD_MS` waits up to `GRANT_GATHER_MS` to gather more.
 *
 * Pitfalls: a lost release over-counts until the audit (`slot_audit`) frees it — the cap may be
 * under-used after a move, never exceeded. A failed batch rejects its replies; the host drops the
 * actor, which reloads from KV. Nothing is written once this node does not own the tenant.
 */
import type { ActorRegistration, ShellContext } from "../actors/host.ts";
import { systemClock, type Clock } from "../lib/clock.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import { assertNever } from "../lib/assert.ts";
import { KairosError } from "../lib/errors.ts";
import { makeTenantActor } from "./tenant-actor.ts";
import {
  GRANT_GATHER_LEAD_MS,
  type TenantEffect,
  type TenantFairOptions,
  type TenantState,
} from "./tenant-types.ts";

export const GRANT_PREFIX = "grants";
/** The tail segment is rewritten (appended to) while it holds fewer grants than this on disk. */
export const APPEND_MAX = 256;
/** Most live segments per tenant (bounds a load's keys); more are folded into the new one. */
export const MAX_SEGMENTS = 32;
/** Dead grants on disk tolerated beyond a quarter of the live ones before compacting. */
export const COMPACT_SLACK = 64;
/** Most segments compacted by one batch. */
export const MAX_COMPACTIONS = 4;
/** How long such a batch gathers at most (its replies wait as long: their runs start ≥ 10 s later). */
export const GRANT_GATHER_MS = 1_000;
export const segmentKey = (partition: number, tenantId: string, seq: number) =>
  `${GRANT_PREFIX}.${partition}.${tenantId}.s${seq}`;
const SEGMENT_TOKEN = /^s([1-9][0-9]{0,14})$/;

/** One segment as this table last read or wrote it. */
interface Segment {
  /** Its revision (0 while its create is in flight). */
  rev: number;
  /** Grants in it on disk. */
  written: number;
  /** Those of them that are live and current here (not released, not written again later), with their expiry as written here. */
  readonly live: Map<string, number>;
}

/** One tenant's durable grants on this node: its segments as written, and the next batch. */
export class GrantTable {
  readonly #segs = new Map<number, Segment>();
  /** Live grant → the segment holding its current copy (absent: new, not in a batch yet). */
  readonly #where = new Map<string, number>();
  /** Grants decided since the last batch started (new, or refreshed) → expiry. */
  readonly #pending = new Map<string, number>();
  /** The highest seq loaded or written (0: none). Never deleted while the tail. */
  #tail = 0;
  /** Set by a failed batch: this instance is dropped, every later batch fails too. */
  #broken = false;
  #inFlight: Promise<void> = Promise.resolve();
  /** The batch that will carry the changes made now (not started yet), if any. */
  #next: Promise<void> | null = null;
  /** A pending grant's run starts within GRANT_GATHER_LEAD_MS (or at an unknown time): no gathering. */
  #urgent = false;
  /** The earliest start of the pending grants that may gather (undefined: none). */
  #earliestStart: number | undefined;
  /** Ends the next batch's gathering now (set while it gathers). */
  #stopGathering: (() => void) | undefined;
  /** Batches written and KV writes made (for tests and the cost accounting). */
  batches = 0;
  puts = 0;

  constructor(
    private readonly kv: KvStore,
    private readonly partition: number,
    private readonly tenantId: string,
    private readonly clock: Clock = systemClock,
  ) {}

  /** Live segments (for tests and the cost accounting). */
  get segments(): number {
    return this.#segs.size;
  }

  /** Reads the tenant's segments into `running` (grant id → expiry; the highest seq wins). */
  async load(running: Map<string, number>): Promise<void> {
    const prefix = `${GRANT_PREFIX}.${this.partition}.${this.tenantId}.`;
    const found: { seq: number; rev: number; grants: Record<string, number> }[] = [];
    for (const e of await this.kv.list(`${prefix}*`)) {
      const m = SEGMENT_TOKEN.exec(e.key.slice(prefix.length));
      if (!m) continue; // the 16-shard layout's keys (never shipped): not read
      found.push({
        seq: Number(m[1]),
        rev: e.revision,
        grants: decode<Record<string, number>>(e.value),
      });
    }
    found.sort((a, b) => a.seq - b.seq);
    for (const f of found) {
      const seg: Segment = { rev: f.rev, written: 0, live: new Map() };
      this.#segs.set(f.seq, seg);
      this.#tail = f.seq;
      for (const [id, exp] of Object.entries(f.grants)) {
        seg.written++;
        const before = this.#where.get(id);
        if (before !== undefined) this.#segs.get(before)!.live.delete(id);
        this.#where.set(id, f.seq);
        seg.live.set(id, exp);
        running.set(id, exp);
      }
    }
  }

  /**
   * Applies the changes; resolves once a batch holding them is written. A release (`del_grant`)
   * alone starts no batch: it leaves KV with the cleanup of a later batch (a lost release
   * over-counts after a reload — never under — until the grant audit frees it).
   */
  apply(fx: readonly TenantEffect[], ctx: ShellContext): Promise<void> {
    /** A confirmed grant not yet written (still pending): its reply waits for the next batch. */
    let syncPending = false;
    let sync = false;
    let put = false;
    for (const f of fx) {
      switch (f.kind) {
        case "del_grant": {
          const seq = this.#where.get(f.run_id);
          if (seq !== undefined) this.#segs.get(seq)?.live.delete(f.run_id);
          this.#where.delete(f.run_id);
          this.#pending.delete(f.run_id);
          break;
        }
        case "sync_grant":
          sync = true;
          if (this.#pending.has(f.run_id)) {
            syncPending = true;
            if (!this.#gatherable(f.start_at_ms)) this.#urgent = true;
          }
          break;
        case "put_grant":
          // A refresh stays in its old segment until the batch with its new expiry is written.
          this.#pending.set(f.run_id, f.expires_at_ms);
          put = true;
          if (!this.#gatherable(f.start_at_ms)) this.#urgent = true;
          else if (this.#earliestStart === undefined || f.start_at_ms < this.#earliestStart)
            this.#earliestStart = f.start_at_ms;
          break;
        default:
          assertNever(f, "tenant effect");
      }
    }
    // A grant confirmed unchanged (a duplicate acquire) is answered only once no batch that may
    // hold it is still being written: a failed batch then fails this reply too, instead of the
    // job holding a grant the reloaded tenant never saw.
    if (this.#urgent) this.#stopGathering?.();
    // Nothing of this message to write: a release is not written on its own; a confirmed grant
    // waits for the batch writing it — the next if it is still pending, else the one in flight.
    if (!put) return syncPending ? this.#nextBatch(ctx) : sync ? this.#inFlight : Promise.resolve();
    return this.#nextBatch(ctx);
  }

  /** The batch that will carry what is pending now (started, after its gathering, once the one in flight is done). */
  #nextBatch(ctx: ShellContext): Promise<void> {
    this.#next ??= this.#inFlight
      .catch(() => undefined)
      .then(() => this.#gathered())
      .then(() => this.#write(ctx));
    return this.#next;
  }

  /** A grant of a run starting this far ahead may wait for its batch to gather (not of unknown start). */
  #gatherable(startAtMs: number | undefined): startAtMs is number {
    return startAtMs !== undefined && startAtMs - this.clock.now() >= GRANT_GATHER_LEAD_MS;
  }

  /**
   * Resolves when the next batch may go: at once if a pending grant is urgent, if the earliest
   * pending start has come within GRANT_GATHER_LEAD_MS meanwhile (the batch before took long), or
   * if this table is broken (the batch fails anyway); else after GRANT_GATHER_MS, or when a
   * grant that is urgent comes.
   */
  #gathered(): Promise<void> {
    if (
      this.#urgent ||
      this.#broken ||
      this.#pending.size === 0 ||
      !this.#gatherable(this.#earliestStart)
    )
      return Promise.resolve();
    return new Promise<void>((resolve) => {
      const stop = () => {
        this.#stopGathering = undefined;
        cancel();
        resolve();
      };
      const cancel = this.clock.setTimer(GRANT_GATHER_MS, stop);
      this.#stopGathering = stop;
    });
  }

  async #write(ctx: ShellContext): Promise<void> {
    this.#inFlight = this.#next!;
    this.#next = null;
    this.#urgent = false; // what is decided from now on goes into the next batch
    this.#earliestStart = undefined;
    if (this.#broken)
      throw new KairosError(
        "not_owner",
        `tenant ${this.tenantId}: an earlier grant batch failed; reload`,
      );
    if (!ctx.stillOwner()) {
      this.#broken = true;
      throw new KairosError("not_owner", `tenant ${this.tenantId}: no longer the owner`);
    }
    if (this.#pending.size === 0) return; // everything decided was released again
    try {
      await this.#commit();
    } catch (e) {
      this.#broken = true;
      throw e;
    }
  }

  /** One batch: the head write, then (in parallel with it) cleanup, then the folded segments' deletes. */
  async #commit(): Promise<void> {
    const batch = new Map(this.#pending);
    this.#pending.clear();
    const oldTail = this.#tail;
    const tail = this.#segs.get(oldTail);
    // The head write, from the tail's on-disk state alone (see "Two incarnations").
    const append = tail !== undefined && tail.written < APPEND_MAX;
    const headSeq = append ? oldTail : oldTail + 1;
    const head: Segment = append ? tail : { rev: 0, written: 0, live: new Map() };
    const folded: [number, Segment][] = [];
    if (!append) {
      const full = [...this.#segs].filter(([, s]) => s.live.size > 0);
      const excess = full.length + 1 - MAX_SEGMENTS;
      if (excess > 0)
        folded.push(...full.sort((a, b) => a[1].live.size - b[1].live.size).slice(0, excess));
      this.#segs.set(headSeq, head);
      this.#tail = headSeq;
    }
    for (const [seq, s] of folded) {
      this.#segs.delete(seq);
      for (const [id, exp] of s.live) {
        this.#where.set(id, headSeq);
        head.live.set(id, exp);
      }
    }
    /** Grants whose older copy leaves its segment once the head is written. */
    const moved: [string, number][] = [];
    for (const [id, exp] of batch) {
      const before = this.#where.get(id);
      if (before !== undefined && before !== headSeq) moved.push([id, before]);
      this.#where.set(id, headSeq);
      head.live.set(id, exp);
    }
    const headValue = encode(Object.fromEntries(head.live));
    head.written = head.live.size;
    // Cleanup: segments emptied by releases (or by moves already written), below the tail; then compaction.
    const ops: Promise<void>[] = [...this.#cleanup(oldTail), ...this.#compact(headSeq)];
    const fail = (what: string) => this.#stale(what);
    this.batches++;
    this.puts++;
    const key = segmentKey(this.partition, this.tenantId, headSeq);
    const written = (
      append ? this.kv.update(key, headValue, head.rev) : this.kv.create(key, headValue)
    ).then((r) => {
      if (!r.ok) throw fail(`${headSeq}`);
      head.rev = r.revision;
    });
    await Promise.all([written, ...ops]);
    for (const [id, seq] of moved) this.#segs.get(seq)?.live.delete(id);
    // Folded segments go only now: their grants are in the head.
    await Promise.all(
      folded.map(async ([seq, s]) => {
        if (!(await this.#delete(seq, s.rev))) throw fail(`${seq} (fold)`);
      }),
    );
  }

  #stale(what: string): KairosError {
    return new KairosError(
      "not_owner",
      `tenant ${this.tenantId}: grant segment ${what} was written by another incarnation; reload`,
    );
  }

  /** Deletes the segments below the tail that releases (or moves already written) emptied. */
  #cleanup(oldTail: number): Promise<void>[] {
    const ops: Promise<void>[] = [];
    const fail = (what: string) => this.#stale(what);
    for (const [seq, s] of [...this.#segs]) {
      if (seq >= oldTail || s.live.size > 0) continue;
      this.#segs.delete(seq);
      ops.push(
        this.#delete(seq, s.rev).then((ok) => {
          if (!ok) throw fail(`${seq} (delete)`);
        }),
      );
    }
    return ops;
  }

  /**
   * Compaction: rewrites segments while the dead grants on disk exceed a quarter of the live ones
   * (+ slack); an empty segment kept (the old tail) is not counted: the next batch deletes it.
   */
  #compact(headSeq: number): Promise<void>[] {
    const ops: Promise<void>[] = [];
    const fail = (what: string) => this.#stale(what);
    let live = 0;
    let dead = 0;
    for (const s of this.#segs.values()) {
      if (s.live.size === 0) continue;
      live += s.live.size;
      dead += s.written - s.live.size;
    }
    const candidates = [...this.#segs]
      .filter(([seq, s]) => seq !== headSeq && s.live.size > 0 && s.written > s.live.size)
      .sort(
        (a, b) =>
          (b[1].written - b[1].live.size) / b[1].written -
          (a[1].written - a[1].live.size) / a[1].written,
      );
    for (const [seq, s] of candidates.slice(0, MAX_COMPACTIONS)) {
      if (dead <= live / 4 + COMPACT_SLACK) break;
      dead -= s.written - s.live.size;
      const value = encode(Object.fromEntries(s.live));
      s.written = s.live.size;
      this.puts++;
      ops.push(
        this.kv.update(segmentKey(this.partition, this.tenantId, seq), value, s.rev).then((r) => {
          if (!r.ok) throw fail(`${seq} (compaction)`);
          s.rev = r.revision;
        }),
      );
    }
    return ops;
  }

  async #delete(seq: number, rev: number): Promise<boolean> {
    this.puts++;
    return (await this.kv.delete(segmentKey(this.partition, this.tenantId, seq), rev)).ok;
  }
}

/** `fair`: report demand to the fleet actor and grant within the fair share (tenant-actor.ts). */
export function tenantRegistration(
  kv: KvStore,
  defaultMaxConcurrent = 100,
  fair?: TenantFairOptions,
  clock: Clock = systemClock,
): ActorRegistration & { tables: Map<string, GrantTable> } {
  const definition = makeTenantActor(defaultMaxConcurrent, fair);
  /** Per tenant actor instance on this node (`<partition>.<tenant>`), replaced at each load. */
  const tables = new Map<string, GrantTable>();
  return {
    definition,
    tables,
    // Grant writes are pipelined: each reply waits for its own batch, the next message does not.
    pipelinePre: true,
    async loadSoft(id, partition): Promise<TenantState> {
      const state = definition.initialState(id);
      const table = new GrantTable(kv, partition, id, clock);
      await table.load(state.running);
      tables.set(`${partition}.${id}`, table);
      return state;
    },
    async perform(pre, ctx) {
      const table = tables.get(`${ctx.partition}.${ctx.address.id}`);
      if (!table)
        throw new KairosError("not_owner", `tenant ${ctx.address.id}: grant table not loaded here`);
      await table.apply(pre as TenantEffect[], ctx);
    },
  };
}
