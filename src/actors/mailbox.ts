/**
 * The mailbox of each actor: one message at a time, a bounded queue drained by a single loop, so
 * async handling never interleaves. A message arriving records its arrival key, may be answered
 * at once from the committed state (`query`, the fast path), may join a queued copy of itself
 * (`coalesceKey`) instead of queueing again, and is refused `overloaded` past the mailbox limit.
 * Turns of persisted types are admitted at most TURNS_IN_FLIGHT at a time per node; `urgent`
 * messages go ahead of the others waiting for admission (the urgent lane).
 */
import { KairosError } from "../lib/errors.ts";
import { InFlightLimiter } from "../cluster/in-flight.ts";
import type { HostCore } from "./host-core.ts";
import type { ActorRegistration } from "./registration.ts";
import type { Envelope, Instance, MailboxPart } from "./types.ts";

/** Most arrival keys remembered per actor. */
const ARRIVALS_LIMIT = 1_024;

/** A mailbox entry that only loads the actor (see `warmTimer`, `loadAhead`). */
export const WARM: unique symbol = Symbol("warm");

/** A reply that waits for its pipelined `pre` effects (see ActorRegistration.pipelinePre). */
export class Deferred {
  constructor(readonly reply: Promise<unknown>) {}
}

/**
 * Admission: at most this many turns of persisted actor types (job actors: each turn may write
 * KV) run at once on a node; further messages wait in their mailboxes, as they arrived (a few
 * hundred bytes each), not as half-done turns holding their new state, their encoded records and
 * a place in the KV queue (several KB each). Unbounded, a burst's tens of thousands of completions
 * at once fill the heap with turns waiting for KV, GC takes the main thread and the tenant actors
 * stop answering. Soft types (tenant, fleet: the slot economy, no state writes) are not bounded
 * by it, so they keep answering while job actors queue. 8,192 is ~40 MB of half-done turns at
 * most; a much lower bound (512) costs sustained throughput.
 */
export const TURNS_IN_FLIGHT = 8192;

export class Mailbox implements MailboxPart {
  readonly #c: HostCore;
  /** Turns of persisted types in flight (see `TURNS_IN_FLIGHT`). */
  readonly #turns: InFlightLimiter;
  readonly #idleWaiters = new Map<Instance, (() => void)[]>();

  constructor(c: HostCore) {
    this.#c = c;
    this.#turns = new InFlightLimiter(c.o.turnsInFlight ?? TURNS_IN_FLIGHT);
  }

  /** Delivers a message to a local actor and resolves with its reply. */
  async deliver(type: string, id: string, raw: unknown): Promise<unknown> {
    const c = this.#c;
    const { o } = c;
    const reg = c.types.get(type);
    if (!reg) throw new KairosError("invalid_argument", `unknown actor type "${type}"`);
    const partition = c.partitionOf(type, id);
    if (!c.accepting.has(partition) || !o.isTrusted(partition)) {
      throw new KairosError("not_owner", `partition ${partition} is not served by ${o.nodeId}`);
    }
    const def = reg.definition;
    const msg = def.parse ? def.parse(raw) : raw;
    const inst = c.instance(reg, type, id, partition);
    const now = o.clock.now();
    this.#recordArrival(reg, inst, msg, now);
    const fast = this.#query(reg, inst, msg, now);
    if (fast && !fast.alsoQueue) return fast.reply;
    // A copy of a request still waiting in the mailbox (a sender's retry): it shares that one's
    // reply instead of queueing again. Under a burst, a worker's completions time out at the busy
    // owner and are sent again; without this the copies pile up behind busy job actors.
    const coalesce = fast ? undefined : def.coalesceKey?.(msg);
    const joined = coalesce === undefined ? undefined : inst.coalesced?.get(coalesce);
    if (joined) return joined.reply;
    const limit = def.mailboxLimit ?? o.mailboxLimit;
    if (inst.mailbox.length >= limit) {
      if (fast) return fast.reply; // acknowledged already; the state change comes with a later one
      throw new KairosError("overloaded", `mailbox of ${type}/${id} is full (${limit})`);
    }
    const queued = this.#enqueue(inst, msg, coalesce);
    if (!fast) return queued;
    queued.catch(() => undefined); // its reply went out already
    return fast.reply;
  }

  /** Records the message's arrival key (see ActorContext.arrivalMs), bounded. */
  #recordArrival(reg: ActorRegistration, inst: Instance, msg: unknown, now: number): void {
    const arrival = reg.definition.arrivalKey?.(msg);
    if (arrival === undefined) return;
    // Least recently ARRIVED first out: re-inserting moves a live lease's key to the end, so a
    // long-running lease is never evicted by many short ones.
    const arrivals = (inst.arrivals ??= new Map());
    arrivals.delete(arrival);
    if (arrivals.size >= ARRIVALS_LIMIT) arrivals.delete(arrivals.keys().next().value!);
    arrivals.set(arrival, now);
    inst.lastActiveMs = now;
  }

  /**
   * Fast path: answer from the last committed state, fenced under the current epoch — not
   * while a turn is in flight: it may have decided from a state before this arrival (a lease
   * expiry) and be writing a change the committed state does not show yet; answered from the
   * old state, a worker would start an attempt the owner is re-offering (sim seed 50). Queued
   * behind that turn, this message sees its outcome. (A turn merely queued is harmless: it
   * runs after this arrival was recorded.) Except the reads the definition lets through
   * (`queryDuringTurn`): answered from the state before the turn.
   */
  #query(
    reg: ActorRegistration,
    inst: Instance,
    msg: unknown,
    now: number,
  ): { reply: unknown; alsoQueue: boolean } | undefined {
    const def = reg.definition;
    if (!def.query || !inst.loaded || inst.dropped) return undefined;
    if (inst.inTurn && def.queryDuringTurn?.(msg) !== true) return undefined;
    if (def.persist !== false && inst.storedEpoch !== (this.#c.o.epochOf(inst.partition) ?? -1))
      return undefined;
    const q = def.query(inst.state, msg, this.#c.ctx(inst, now));
    if (q && "fail" in q)
      throw new KairosError(
        q.fail.code,
        q.fail.message,
        q.fail.field === undefined ? {} : { field: q.fail.field },
      );
    return q;
  }

  /** Queues a message; its reply when its turn is done. */
  #enqueue(inst: Instance, msg: unknown, coalesce: string | undefined): Promise<unknown> {
    let env!: Envelope;
    const queued = new Promise((resolve, reject) => {
      env = coalesce === undefined ? { msg, resolve, reject } : { msg, resolve, reject, coalesce };
    });
    // Registered before the message can begin (an idle actor's drain begins it at once, below).
    if (coalesce !== undefined)
      (inst.coalesced ??= new Map()).set(coalesce, { env, reply: queued });
    inst.mailbox.push(env);
    if (!inst.running) void this.#drain(inst);
    return queued;
  }

  /** Loads an actor through its mailbox (a `WARM` entry: nothing decided); resolves once loaded. */
  loadAhead(inst: Instance): Promise<unknown> {
    return new Promise((resolve, reject) => {
      inst.mailbox.push({ msg: WARM, resolve, reject });
      void this.#drain(inst);
    });
  }

  async #drain(inst: Instance): Promise<void> {
    const { turns } = this.#c.parts;
    inst.running = true;
    try {
      while (inst.mailbox.length > 0) {
        const env = inst.mailbox.shift()!;
        try {
          const def = inst.reg.definition;
          const out =
            def.persist === false
              ? await turns.turn(inst, env)
              : await this.#turns.run(
                  () => turns.turn(inst, env),
                  env.msg !== WARM && def.urgent?.(env.msg) === true,
                );
          if (out instanceof Deferred) out.reply.then(env.resolve, env.reject);
          else env.resolve(out);
        } catch (e) {
          env.reject(e);
        }
        inst.lastActiveMs = this.#c.o.clock.now();
      }
    } finally {
      inst.running = false;
      for (const w of this.#idleWaiters.get(inst) ?? []) w();
      this.#idleWaiters.delete(inst);
    }
  }

  /** Resolves when the actor's mailbox loop is not running (at once if it is not). */
  idle(inst: Instance): Promise<void> {
    if (!inst.running) return Promise.resolve();
    return new Promise((resolve) => {
      const list = this.#idleWaiters.get(inst) ?? [];
      list.push(resolve);
      this.#idleWaiters.set(inst, list);
    });
  }
}
