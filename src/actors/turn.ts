/**
 * One turn of an actor: activate it if it is not in memory (soft state, or its state read back),
 * fence the epoch, decide (`receive`), perform `pre` effects, apply the state (a CAS write, a
 * deferred write kept in memory, or a soft change), then host effects, `post` effects (only while
 * the partition is trusted) and follow-up messages. Soft types with `pipelinePre` apply the state
 * at once and answer when their `pre` effects are done (durable before visible).
 *
 * Pitfall: a turn whose `pre` effects or state write fail (or end unknown) drops the actor — its
 * memory may disagree with what landed — and it is read back (`reloadSoon`), never re-decided
 * from the memory of before the failure.
 */
import { KairosError } from "../lib/errors.ts";
import type { Decision } from "./actor.ts";
import type { HostCore } from "./host-core.ts";
import { Deferred, WARM } from "./mailbox.ts";
import { PLAIN_WRITE, URGENT_WRITE } from "./persistence.ts";
import type { ShellContext } from "./registration.ts";
import { shellContextOf } from "./shell-context.ts";
import type { Envelope, Instance, TurnsPart } from "./types.ts";

type AnyDecision = Decision<unknown, unknown, unknown>;

function failure(d: AnyDecision["fail"] & object): KairosError {
  return new KairosError(d.code, d.message, d.field === undefined ? {} : { field: d.field });
}

/** Most keys remembered as not new (see `Turns.#notNew`); the oldest go first. */
export const NOT_NEW_KEYS = 4096;

export class Turns implements TurnsPart {
  readonly #c: HostCore;
  /**
   * Keys whose `assumeNew` turn could not stand (a state exists, or the turn needed it): the
   * retry of the same message reads them back instead of assuming again.
   */
  readonly #notNew = new Set<string>();

  constructor(c: HostCore) {
    this.#c = c;
  }

  /** One turn; while it runs, the fast path (`query`) stays shut (see mailbox.ts `deliver`). */
  async turn(inst: Instance, env: Envelope): Promise<unknown> {
    // Begun: a copy arriving from now on is a request of its own (it may see this one's outcome).
    if (env.coalesce !== undefined && inst.coalesced?.get(env.coalesce)?.env === env) {
      inst.coalesced.delete(env.coalesce);
      // An empty map on each of 200,000 job actors is ~20 MB.
      if (inst.coalesced.size === 0) delete inst.coalesced;
    }
    // Checked here, after any wait for admission: the actor may have been dropped meanwhile.
    if (inst.dropped) throw new KairosError("not_owner", `${inst.type}/${inst.id} moved; retry`);
    inst.inTurn = true;
    try {
      return await this.#handle(inst, env.msg);
    } finally {
      inst.inTurn = false;
    }
  }

  async #handle(inst: Instance, msg: unknown): Promise<unknown> {
    const c = this.#c;
    const { o } = c;
    const p = c.parts.persistence;
    if (!inst.loaded && inst.reg.definition.persist === false) {
      const soft = inst.reg.loadSoft ? await inst.reg.loadSoft(inst.id, inst.partition) : undefined;
      if (inst.dropped) throw new KairosError("not_owner", `${inst.type}/${inst.id} moved; retry`);
      if (!inst.loaded) c.adopt(inst, null, 0, soft);
    }
    const assumed = this.#assumeNew(inst, msg);
    if (!inst.loaded) {
      const e = await o.kv.get(inst.key);
      // No value, or an older one, below a revision seen here: a deposed leader's answer.
      const floor = inst.loaded ? undefined : c.behind(inst.key, e?.revision ?? 0);
      if (floor !== undefined)
        throw new KairosError(
          "not_owner",
          `${inst.type}/${inst.id}: read back at revision ${e?.revision ?? "none"}, behind revision ${floor} seen here; retry`,
        );
      const stored = e && !inst.loaded ? await p.readBack(inst, e.value) : null;
      if (inst.dropped) throw new KairosError("not_owner", `${inst.type}/${inst.id} moved; retry`);
      if (!inst.loaded) c.adopt(inst, stored, e?.revision ?? 0);
    }
    if (msg === WARM) return undefined; // loaded ahead of its timer: nothing to decide
    const def = inst.reg.definition;
    // An urgent turn's own writes (the fence, the state) go ahead in the KV limiter too: a claim
    // admitted first still waited there behind the admitted turns' writes.
    const write = def.urgent?.(msg) === true ? URGENT_WRITE : PLAIN_WRITE;
    const epoch = o.epochOf(inst.partition);
    if (
      def.persist !== false &&
      inst.revision > 0 &&
      epoch !== undefined &&
      inst.storedEpoch !== epoch
    )
      await p.fence(inst, epoch, write);
    const d = def.receive(inst.state, msg, c.ctx(inst, o.clock.now()));
    const ctx = shellContextOf(this.#c, inst, epoch);
    let followUps: readonly unknown[] = [];
    if (assumed && (d.state === inst.state || (d.pre?.length ?? 0) > 0 || d.deferWrite === true))
      throw this.#unassume(inst, "no create write");
    if (inst.reg.pipelinePre && def.persist === false) return this.#pipelined(inst, d, ctx);
    if (d.pre && d.pre.length > 0) followUps = await this.#performPre(inst, d.pre, ctx);
    if (def.persist === false) {
      p.checkTrusted(inst, "before a soft-state change"); // (also for a state mutated in place)
      inst.state = d.state;
    } else if (d.state !== inst.state && d.deferWrite === true) {
      // Recoverable if lost (see Decision.deferWrite): memory only, written with the next write.
      p.checkTrusted(inst, "before a deferred state change");
      inst.state = d.state;
    } else if (d.state !== inst.state) {
      p.checkTrusted(inst, "before write");
      const value = p.encodeState(d.state, epoch ?? 0);
      let r;
      try {
        r = await p.writeState(inst, value, write);
      } catch (e) {
        // Unknown outcome: forget the cached state; the next message reloads and decides again.
        c.drop(inst, "write outcome unknown");
        p.reloadSoon(inst);
        throw e;
      }
      if (!r.ok && assumed && r.conflict === "exists") throw this.#unassume(inst, "state exists");
      if (!r.ok) {
        o.events.emit({
          type: "write_fenced",
          actorType: inst.type,
          id: inst.id,
          partition: inst.partition,
          reason: r.conflict,
        });
        c.drop(inst, r.conflict);
        throw new KairosError(
          "not_owner",
          `${inst.type}/${inst.id} was written by another owner; retry`,
        );
      }
      inst.state = d.state;
      inst.revision = r.revision;
      inst.storedEpoch = epoch ?? 0;
    }
    return this.#finish(inst, d, ctx, followUps);
  }

  /**
   * Activates a persisted actor from its initial state without a read when its type assumes the
   * message is for a new one (`assumeNew`) and its key was not found otherwise lately. Every way
   * the turn could go wrong on a state that exists after all ends in `#unassume`.
   */
  #assumeNew(inst: Instance, msg: unknown): boolean {
    const def = inst.reg.definition;
    if (inst.loaded || def.persist === false || msg === WARM || def.assumeNew?.(msg) !== true)
      return false;
    if (this.#notNew.delete(inst.key)) return false; // this retry reads
    this.#c.adopt(inst, null, 0);
    return true;
  }

  /**
   * An actor activated without a read (`assumeNew`) whose turn cannot stand: dropped (it holds
   * nothing of what KV may hold), its message answered `not_owner` for the sender to retry.
   */
  #unassume(inst: Instance, why: string): KairosError {
    this.#c.drop(inst, `assumed new: ${why}`, false);
    // As every drop: a type kept in memory from its partition's acquisition is read back soon (a
    // read-back armed by an earlier drop gives up while this guess holds the instance).
    this.#c.parts.persistence.reloadSoon(inst);
    if (this.#notNew.size >= NOT_NEW_KEYS) this.#notNew.delete(this.#notNew.values().next().value!);
    this.#notNew.add(inst.key);
    return new KairosError("not_owner", `${inst.type}/${inst.id}: ${why}; retry`);
  }

  /** A decision's `pre` effects (not pipelined), performed before its state is applied. */
  async #performPre(
    inst: Instance,
    pre: readonly unknown[],
    ctx: ShellContext,
  ): Promise<readonly unknown[]> {
    const p = this.#c.parts.persistence;
    p.checkTrusted(inst, "before effects");
    try {
      return (await inst.reg.perform?.(pre, ctx)) ?? [];
    } catch (e) {
      // Some of them may have landed (a write that timed out may be applied; the ones before it
      // were): what is durable can be past what memory holds — a run's terminal record written,
      // the run still active in memory. Kept, the actor would re-decide from that memory (a
      // retried timer), unaware of the record: a gated run whose `skipped` record landed unseen
      // was started once nothing blocked it any more (sim seed 2000356). Dropped, the next
      // message (or the reload) reads back what is durable, reconciled with those records.
      this.#c.drop(inst, "pre effects failed");
      p.reloadSoon(inst);
      throw e;
    }
  }

  /**
   * A soft type's turn with pipelined `pre` effects (registration.ts `pipelinePre`): the state
   * is applied now, the reply waits for the effects.
   */
  #pipelined(inst: Instance, d: AnyDecision, ctx: ShellContext): Deferred {
    const c = this.#c;
    const p = c.parts.persistence;
    const started =
      d.pre && d.pre.length > 0
        ? (p.checkTrusted(inst, "before effects"), inst.reg.perform?.(d.pre, ctx))
        : undefined;
    // Checked even when the state object is the same: a soft core may mutate it in place.
    p.checkTrusted(inst, "before a soft-state change");
    inst.state = d.state;
    // A failed (or unknown) write must not leave memory ahead of the store: drop the actor so
    // the next message reloads what is durable (sim seed 55: an audit confirmed a grant whose
    // write had timed out; after a move the tenant ran one over its cap).
    const durable = Promise.resolve(started).catch((e: unknown) => {
      c.drop(inst, "pipelined write failed");
      p.reloadSoon(inst);
      throw e;
    });
    return new Deferred(
      durable.then(() => {
        if (!ctx.stillOwner()) {
          // Its effects (sends, timers) are skipped: drop it, so that the next message reloads
          // it and re-arms its timers, instead of a loaded actor whose timer is gone for good.
          c.drop(inst, "not owner after its write");
          p.reloadSoon(inst);
          throw new KairosError(
            "not_owner",
            `partition ${inst.partition} no longer owned by ${c.o.nodeId}`,
          );
        }
        c.hostEffects(inst, d.effects ?? []);
        if (d.post && d.post.length > 0) inst.reg.performPost?.(d.post, ctx);
        if (d.fail) throw failure(d.fail);
        return d.reply;
      }),
    );
  }

  /** After the state is applied: host effects, `post` effects, follow-ups, the reply. */
  #finish(
    inst: Instance,
    d: AnyDecision,
    ctx: ShellContext,
    followUps: readonly unknown[],
  ): unknown {
    const c = this.#c;
    c.hostEffects(inst, d.effects ?? []);
    // A stale owner (trust lapsed while it worked) performs no post effects.
    if (d.post && d.post.length > 0 && ctx.stillOwner()) inst.reg.performPost?.(d.post, ctx);
    for (let i = followUps.length - 1; i >= 0; i--) {
      inst.mailbox.unshift({
        msg: followUps[i],
        resolve: () => undefined,
        reject: (e) => c.o.onError(`follow-up of ${inst.type}/${inst.id}`, e),
      });
    }
    if (d.fail) throw failure(d.fail);
    return d.reply;
  }
}
