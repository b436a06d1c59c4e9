/**
 * Persistence of actor state in the `actors` bucket (key `<type>.<partition>.<id>`): a state
 * read back goes through the type's `onLoad` and the registration's `reconcile`; every write is a
 * CAS on the revision read, stamped with the partition epoch and made only while the partition
 * is trusted. The epoch fence: the first turn under a new epoch first rewrites the state stamped
 * with it, so a write of an earlier owner still in flight fails. A conflict means another owner
 * wrote: the actor is dropped (the caller gets `not_owner`). A write of unknown outcome — of the
 * state, or of a `pre` effect before it (turn.ts) — drops the actor too, and it is read back soon
 * (`reloadSoon`) if its type must stay in memory.
 */
import { backoffMs, type BackoffPolicy } from "../lib/backoff.ts";
import { KairosError } from "../lib/errors.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { WriteOptions, WriteResult } from "../cluster/kv.ts";
import type { HostCore } from "./host-core.ts";
import { TIMER_RETRY } from "./reminders.ts";
import { shellContextOf } from "./shell-context.ts";
import type { Instance, PersistencePart, ReadBack } from "./types.ts";

/** Stored form of actor state: the state, the epoch and node that wrote it. */
interface Stored {
  s: unknown;
  e: number;
  w: string;
}

/** How soon an actor dropped with its state in doubt is read back (see `reloadSoon`). */
export const RELOAD_AFTER_DROP_MS = 500;
/** Backoff of that read-back while it fails or the partition is not trusted yet. */
const RELOAD_RETRY: BackoffPolicy = { baseMs: RELOAD_AFTER_DROP_MS, maxMs: 10_000 };
/** The write options of an urgent turn's fence and state write, and of every other turn's. */
export const URGENT_WRITE: WriteOptions = Object.freeze({ urgent: true });
export const PLAIN_WRITE: WriteOptions = Object.freeze({});

export class Persistence implements PersistencePart {
  readonly #c: HostCore;

  constructor(c: HostCore) {
    this.#c = c;
  }

  /**
   * Partition acquired: activates the actors of the types that carry reminders (`loadOnAcquire`).
   */
  async activatePartition(partition: number): Promise<void> {
    const c = this.#c;
    for (const reg of c.types.values()) {
      if (!reg.definition.loadOnAcquire) continue;
      const entries = await this.#whileHeld(partition, `partition ${partition}`, () =>
        c.o.kv.list(`${reg.definition.type}.${partition}.>`),
      );
      if (entries === null) return; // lost while loading
      for (const e of entries) {
        if (!c.accepting.has(partition)) return; // lost while loading
        const id = e.key.slice(reg.definition.type.length + String(partition).length + 2);
        const inst = c.instance(reg, reg.definition.type, id, partition);
        if (inst.loaded) continue;
        const state = await this.#whileHeld(partition, `${inst.type}/${inst.id}`, () =>
          this.readBack(inst, e.value),
        );
        if (state === null) return; // lost while loading
        if (!inst.loaded) c.adopt(inst, state, e.revision);
      }
    }
  }

  /**
   * Runs `step` (loading a partition: listing its reminder-bearing actors, reading one back),
   * retrying failures with backoff for as long as the partition is ours: a failed load must not
   * leave a held partition whose timers were never armed (its jobs would never fire again). Null
   * when the partition is gone meanwhile.
   */
  async #whileHeld<T>(partition: number, what: string, step: () => Promise<T>): Promise<T | null> {
    const { o, accepting } = this.#c;
    for (let failures = 0; ; failures++) {
      if (!accepting.has(partition)) return null;
      try {
        return await step();
      } catch (e) {
        o.onError(`loading ${what} (will retry)`, e);
        await new Promise<void>((r) => o.clock.setTimer(backoffMs(failures, TIMER_RETRY), r));
      }
    }
  }

  /**
   * A stored value read back: its state through the type's `onLoad` and the registration's
   * `reconcile`.
   */
  async readBack(inst: Instance, value: Uint8Array): Promise<ReadBack> {
    const stored = decode<Stored>(value);
    const def = inst.reg.definition;
    let state = def.onLoad ? def.onLoad(stored.s) : stored.s;
    if (inst.reg.reconcile)
      state = await inst.reg.reconcile(
        state,
        shellContextOf(this.#c, inst, this.#c.o.epochOf(inst.partition)),
      );
    return { s: state, e: stored.e };
  }

  /** The stored form of `state` written under `epoch` by this node. */
  encodeState(state: unknown, epoch: number): Uint8Array {
    return encode({ s: state, e: epoch, w: this.#c.o.nodeId } satisfies Stored);
  }

  /** The CAS write of an encoded state (a create for an actor never written). */
  writeState(inst: Instance, value: Uint8Array, write: WriteOptions): Promise<WriteResult> {
    const { kv } = this.#c.o;
    return inst.revision === 0
      ? kv.create(inst.key, value)
      : kv.update(inst.key, value, inst.revision, write);
  }

  /**
   * Stamps the stored state with the current epoch (CAS) before the first decision under it, so a
   * write of an earlier owner that is still in flight can no longer land (its revision is gone).
   */
  async fence(inst: Instance, epoch: number, write: WriteOptions): Promise<void> {
    const c = this.#c;
    this.checkTrusted(inst, "before fencing");
    const value = encode({ s: inst.state, e: epoch, w: c.o.nodeId } satisfies Stored);
    let r;
    try {
      r = await c.o.kv.update(inst.key, value, inst.revision, write);
    } catch (e) {
      c.drop(inst, "fence outcome unknown");
      this.reloadSoon(inst);
      throw e;
    }
    if (!r.ok) {
      c.o.events.emit({
        type: "write_fenced",
        actorType: inst.type,
        id: inst.id,
        partition: inst.partition,
        reason: `epoch fence: ${r.conflict}`,
      });
      c.drop(inst, r.conflict);
      throw new KairosError(
        "not_owner",
        `${inst.type}/${inst.id} was written by another owner; retry`,
      );
    }
    inst.revision = r.revision;
    inst.storedEpoch = epoch;
  }

  /**
   * Throws `not_owner` (dropping the actor, to be read back soon) unless the partition is trusted.
   */
  checkTrusted(inst: Instance, when: string): void {
    const c = this.#c;
    if (!c.o.isTrusted(inst.partition)) {
      c.o.events.emit({
        type: "write_fenced",
        actorType: inst.type,
        id: inst.id,
        partition: inst.partition,
        reason: `lease not trusted ${when}`,
      });
      c.drop(inst, "lease not trusted");
      this.reloadSoon(inst);
      throw new KairosError(
        "not_owner",
        `partition ${inst.partition} no longer owned by ${c.o.nodeId}`,
      );
    }
  }

  /**
   * An actor dropped with its state possibly ahead of (or behind) what KV holds — a write of
   * unknown outcome, a turn whose effects were skipped, a trust blip — is read back soon when its
   * type must be in memory while its partition is held (`loadOnAcquire`: the activation re-arms
   * its timers, e.g. a run's dispatch). Otherwise only the next message would reload it, and a job
   * no message comes for would keep a run its failed turn created `queued` until its partition
   * moved (e.g. a run-now whose state write timed out but was applied).
   * Retried, doubling to 10 s, while the partition is held and the read fails; a partition not
   * trusted yet waits.
   */
  reloadSoon(inst: Instance, failures = 0): void {
    const c = this.#c;
    if (!inst.reg.definition.loadOnAcquire) return;
    const again = () => this.reloadSoon(inst, failures + 1);
    c.o.clock.setTimer(backoffMs(failures, RELOAD_RETRY), () => {
      if (!c.accepting.has(inst.partition)) return;
      if (!c.o.isTrusted(inst.partition)) return again();
      const fresh = c.instance(inst.reg, inst.type, inst.id, inst.partition);
      // In memory, or on its way.
      if (fresh.loaded || fresh.running || fresh.mailbox.length > 0) return;
      c.parts.mailbox.loadAhead(fresh).catch(again);
    });
  }
}
