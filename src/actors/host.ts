/**
 * The actor host: the imperative shell for every actor type on one node. It activates an actor
 * on its first message or timer in a held partition (state from `actors`, key
 * `<type>.<partition>.<id>`), runs one message at a time through a bounded mailbox, persists
 * with CAS after checking the partition's trust window, keeps timers in the node's TimerQueue
 * (reminders survive passivation), and passivates idle actors unless `keepLoaded` or a
 * `warmTimer` due within `warmMs` keeps them.
 *
 * Pitfalls: a CAS conflict means another owner wrote — the actor is dropped and the caller gets
 * `not_owner`. The first message under a new partition epoch rewrites the state stamped with it,
 * so an earlier owner's write still in flight fails. Timer messages are redelivered with backoff
 * while the partition is held (handlers must be idempotent). Post effects run only while the
 * partition is trusted. Deferred writes (`Decision.deferWrite`) stay in memory until the next
 * write; `onLoad` adjusts a state read back.
 */
import { backoffMs, type BackoffPolicy } from "../lib/backoff.ts";
import type { Clock } from "../lib/clock.ts";
import { KairosError, isKairosError } from "../lib/errors.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { EventBus } from "../cluster/events.ts";
import type { KvStore, WriteOptions } from "../cluster/kv.ts";
import { partitionOf } from "../cluster/placement.ts";
import { TimerQueue } from "../cluster/timer-queue.ts";
import { InFlightLimiter } from "../cluster/in-flight.ts";
import type { ActorContext, AnyActorDefinition, HostEffect } from "./actor.ts";

/** Shell services available to type-specific effect performers. */
export interface ShellContext {
  readonly address: { type: string; id: string };
  readonly partition: number;
  readonly epoch: number;
  readonly nodeId: string;
  /** True while this node may still act for the actor (partition trusted, instance current). */
  stillOwner(): boolean;
  /** Sends a message to this same actor (it queues behind the current one). */
  tell(msg: unknown): void;
}

interface TimerPayload {
  type: string;
  id: string;
  msg: unknown;
  /** Failed deliveries so far (for backoff). */
  failures?: number;
}

/** Backoff of a timer message whose handling failed (at-least-once reminders), and of a partition's load. */
const TIMER_RETRY: BackoffPolicy = { baseMs: 250, maxMs: 5_000 };
/** Most arrival keys remembered per actor. */
const ARRIVALS_LIMIT = 1_024;

export interface ActorRegistration {
  readonly definition: AnyActorDefinition;
  /**
   * Performs the decision's `pre` effects before the state write. May return follow-up messages,
   * which this actor processes next, before anything else in its mailbox.
   */
  perform?(pre: readonly unknown[], ctx: ShellContext): Promise<readonly unknown[] | void>;
  /** Performs the decision's `post` effects after the state write (not awaited by the reply). */
  performPost?(post: readonly unknown[], ctx: ShellContext): void;
  /**
   * For soft-state types (`persist: false`) whose state is rebuilt from elsewhere on activation
   * (e.g. a tenant's slot grants, one KV key each): resolves to the state to start from.
   */
  loadSoft?(id: string, partition: number): Promise<unknown>;
  /**
   * For persisted types: adjusts a state just read back from KV (after the definition's `onLoad`)
   * with what other keys say, before the actor's first decision and its `onActivate` — e.g. a
   * job's runs whose end was a deferred state change (their terminal records say they ended).
   * A failure fails the activation (retried like any load).
   */
  reconcile?(state: unknown, at: { partition: number; id: string }): Promise<unknown>;
  /**
   * For soft-state types: `pre` effects are started in message order and the state applied at
   * once, so the next message does not wait for them; this message's reply, host effects (sends,
   * timers) and post effects wait until its `pre` effects are done. Durable before visible,
   * without one KV round trip per message in series (a tenant's grants in a burst).
   */
  readonly pipelinePre?: boolean;
}

/** A reply that waits for its pipelined `pre` effects (see ActorRegistration.pipelinePre). */
class Deferred {
  constructor(readonly reply: Promise<unknown>) {}
}

/** A stored state read back (see `#readBack`): the state as the actor starts from it, and its epoch. */
interface ReadBack {
  s: unknown;
  e: number;
}

/** Stored form of actor state: the state, the epoch and node that wrote it. */
interface Stored {
  s: unknown;
  e: number;
  w: string;
}

interface Envelope {
  msg: unknown;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
  /** Its `coalesceKey`: copies may join it until its turn begins (see `Instance.coalesced`). */
  coalesce?: string;
}

interface Instance {
  readonly type: string;
  readonly id: string;
  readonly key: string;
  readonly partition: number;
  readonly reg: ActorRegistration;
  state: unknown;
  revision: number;
  /** Partition epoch stamped in the stored state (0: never written or unknown). */
  storedEpoch: number;
  loaded: boolean;
  /** Arrival times by arrival key (bounded), see ActorContext.arrivalMs; made at the first (~180 bytes a job actor that has none). */
  arrivals?: Map<string, number>;
  mailbox: Envelope[];
  /**
   * Queued messages that copies may join, by `coalesceKey` (see ActorDefinition): registered
   * before the message can begin, removed as its turn begins (never later: a copy must not be
   * answered by a decision made before it arrived).
   */
  coalesced?: Map<string, { env: Envelope; reply: Promise<unknown> }>;
  running: boolean;
  /** A turn is being decided or performed (not merely waiting for admission, `TURNS_IN_FLIGHT`). */
  inTurn: boolean;
  dropped: boolean;
  lastActiveMs: number;
}

export interface HostOptions {
  nodeId: string;
  clock: Clock;
  events: EventBus;
  kv: KvStore;
  partitions: number;
  isTrusted: (partition: number) => boolean;
  epochOf: (partition: number) => number | undefined;
  /** Sends a message to another actor (through the router). */
  send: (to: { type: string; id: string }, msg: unknown) => Promise<unknown>;
  mailboxLimit: number;
  idleMs: number;
  onError: (msg: string, err: unknown) => void;
  /** Most timer deliveries (actor turns) of the data-plane queue in flight; default `TIMER_TURNS_IN_FLIGHT`. */
  timerTurnsInFlight?: number;
  /** Most turns of persisted actor types in flight on the node; default `TURNS_IN_FLIGHT`. */
  turnsInFlight?: number;
  /** How long before its `warmTimer` an actor is in memory (0: never loaded ahead); default `WARM_MS`. */
  warmMs?: number;
}

/**
 * How long before its `warmTimer` (a job's `fire`) an actor is read back and kept in memory. Job
 * actors passivate a minute after their last message; a top-of-the-hour burst read 166,000 of
 * 200,000 back in its look-ahead window (a minute then) (one KV get, a decode and the re-arming of its timers
 * each, ~8 % of the scheduler's main thread then), when the same work fits in the quiet minutes
 * before.
 */
export const WARM_MS = 120_000;
/** Most ahead-of-time loads in flight on a node (each one KV get): a background lane. */
export const WARM_LOADS_IN_FLIGHT = 16;
/** How soon an actor dropped with its state in doubt is read back (see `#reloadSoon`). */
export const RELOAD_AFTER_DROP_MS = 500;
/** Backoff of that read-back while it fails or the partition is not trusted yet. */
const RELOAD_RETRY: BackoffPolicy = { baseMs: RELOAD_AFTER_DROP_MS, maxMs: 10_000 };
/** A timer's key in the node's queues: by partition first, so a lost partition's go by prefix. */
function timerKey(partition: number, type: string, id: string, name: string): string {
  return `${partition}|${type}|${id}|${name}`;
}
/** The write options of an urgent turn's fence and state write, and of every other turn's. */
const URGENT_WRITE: WriteOptions = Object.freeze({ urgent: true });
const PLAIN_WRITE: WriteOptions = Object.freeze({});
/** A mailbox entry that only loads the actor (see `warmTimer`). */
const WARM: unique symbol = Symbol("warm");

/**
 * Back-pressure on timers: at most this many timer-driven actor turns (a burst's `fire`s) are in
 * flight on a node; the rest wait in the timer queue, in due order. Delivered all at once, a
 * 200,000-job burst put every `fire` (its state read, its record create) in the KV queue at once:
 * hundreds of thousands of operations waited there, and the tenant actors' slot batches and the
 * fleet's reports behind them ran past their deadlines and were done again. The data-plane KV
 * limiter allows 512 operations in flight (buckets.ts); a turn is mostly one or two of them.
 * The control plane's timers (`urgentTimers`) are not bounded by it.
 */
export const TIMER_TURNS_IN_FLIGHT = 512;

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
export class ActorHost {
  readonly #o: HostOptions;
  readonly #types = new Map<string, ActorRegistration>();
  readonly #actors = new Map<string, Instance>();
  readonly #timers: TimerQueue<TimerPayload>;
  /** Timers of `urgentTimers` types (the control plane: tenant actors), fired on their own. */
  readonly #urgent: TimerQueue<TimerPayload>;
  readonly #accepting = new Set<number>();

  /** Turns of persisted types in flight (see `TURNS_IN_FLIGHT`). */
  readonly #turns: InFlightLimiter;
  /** Data-plane timer deliveries in flight (see `TIMER_TURNS_IN_FLIGHT`). */
  #timerTurns = 0;
  readonly #timerTurnLimit: number;
  /** Ahead-of-time loads (see `warmTimer`): due ones wait in `#warmDue`, at most `WARM_LOADS_IN_FLIGHT` run. */
  readonly #warmMs: number;
  readonly #warm: TimerQueue<{ type: string; id: string }>;
  #warmDue: { type: string; id: string }[] = [];
  #warmHead = 0;
  #warmLoads = 0;
  #warmed = 0;

  constructor(o: HostOptions) {
    this.#o = o;
    this.#turns = new InFlightLimiter(o.turnsInFlight ?? TURNS_IN_FLIGHT);
    this.#timerTurnLimit = o.timerTurnsInFlight ?? TIMER_TURNS_IN_FLIGHT;
    if (!Number.isInteger(this.#timerTurnLimit) || this.#timerTurnLimit < 1) throw new RangeError(`timerTurnsInFlight must be a positive integer, got ${this.#timerTurnLimit}`);
    this.#timers = new TimerQueue(o.clock, (k, t) => this.#fireTimer(k, t, true));
    this.#timers.admitWith(() => this.#timerTurns < this.#timerTurnLimit);
    this.#urgent = new TimerQueue(o.clock, (k, t) => this.#fireTimer(k, t, false));
    this.#warmMs = o.warmMs ?? WARM_MS;
    if (!Number.isFinite(this.#warmMs) || this.#warmMs < 0) throw new RangeError(`warmMs must be >= 0, got ${this.#warmMs}`);
    this.#warm = new TimerQueue(o.clock, (_k, a) => {
      this.#warmDue.push(a);
      this.#pumpWarm();
    });
  }

  /** Actors read back ahead of their `warmTimer` so far (a load that found one in memory does not count). */
  get warmed(): number {
    return this.#warmed;
  }

  /** Starts due ahead-of-time loads while fewer than `WARM_LOADS_IN_FLIGHT` run. */
  #pumpWarm(): void {
    while (this.#warmLoads < WARM_LOADS_IN_FLIGHT && this.#warmHead < this.#warmDue.length) {
      const a = this.#warmDue[this.#warmHead++]!;
      if (this.#warmHead === this.#warmDue.length) {
        this.#warmDue = [];
        this.#warmHead = 0;
      } else if (this.#warmHead > 1024 && this.#warmHead * 2 > this.#warmDue.length) {
        this.#warmDue.splice(0, this.#warmHead); // served entries do not stay in memory
        this.#warmHead = 0;
      }
      const reg = this.#types.get(a.type);
      const partition = partitionOf(a, this.#o.partitions);
      if (!reg || !this.#accepting.has(partition) || !this.#o.isTrusted(partition)) continue;
      // Still worth it: its timer still armed and that close (not cancelled, moved, fired or
      // dropped with its partition while this entry waited for a free load).
      if (!this.#warmTimerClose(reg, partition, a.id, this.#o.clock.now())) continue;
      const inst = this.#instance(reg, a.type, a.id, partition);
      if (inst.loaded || inst.running || inst.mailbox.length > 0) continue; // in memory, or on its way
      this.#warmLoads++;
      new Promise((resolve, reject) => {
        inst.mailbox.push({ msg: WARM, resolve, reject });
        void this.#drain(inst);
      })
        // A failed load is redone by the timer's own message; only the unexpected is reported.
        .then(() => void this.#warmed++, (e: unknown) => {
          if (!isKairosError(e, "not_owner")) this.#o.onError(`loading ${a.type}/${a.id} ahead of its timer`, e);
        })
        .finally(() => {
          this.#warmLoads--;
          this.#pumpWarm();
        });
    }
  }

  /** Timer-driven turns in flight on the data-plane queue, and whether due timers wait for them. */
  get timerTurns(): { inFlight: number; held: boolean } {
    return { inFlight: this.#timerTurns, held: this.#timers.held };
  }

  /** The queue of a type's timers (see `ActorDefinition.urgentTimers`). */
  #queue(type: string): TimerQueue<TimerPayload> {
    return this.#types.get(type)?.definition.urgentTimers === true ? this.#urgent : this.#timers;
  }

  /**
   * Delivers a timer's message; if handling fails while the partition is still ours, delivers it
   * again with capped backoff (unless the timer was re-armed meanwhile). Timers are reminders.
   */
  #fireTimer(key: string, t: TimerPayload, bounded: boolean): void {
    let delivery = this.deliver(t.type, t.id, t.msg);
    if (bounded) {
      this.#timerTurns++;
      delivery = delivery.finally(() => {
        this.#timerTurns--;
        this.#timers.resume();
      });
    }
    delivery.catch((e: unknown) => {
      const partition = partitionOf({ type: t.type, id: t.id }, this.#o.partitions);
      if (!this.#accepting.has(partition)) return; // a new owner re-arms from state on activation
      if (!isKairosError(e, "not_owner") && !isKairosError(e, "overloaded")) this.#o.onError(`timer for ${t.type}/${t.id} (will retry)`, e);
      const queue = this.#queue(t.type);
      if (queue.dueOf(key) !== undefined) return; // re-armed meanwhile: that one wins
      const failures = t.failures ?? 0;
      const delay = backoffMs(failures, TIMER_RETRY);
      queue.schedule(key, this.#o.clock.now() + delay, { ...t, failures: failures + 1 });
    });
  }

  register(reg: ActorRegistration): void {
    this.#types.set(reg.definition.type, reg);
  }

  get activeCount(): number {
    return this.#actors.size;
  }

  /** Messages queued in the mailboxes of this node's actors (O(actors); read at scrape time). */
  get mailboxDepth(): number {
    let n = 0;
    for (const inst of this.#actors.values()) n += inst.mailbox.length;
    return n;
  }

  get pendingTimers(): number {
    return this.#timers.size + this.#urgent.size;
  }

  /** Delivers a message to a local actor and resolves with its reply. */
  async deliver(type: string, id: string, raw: unknown): Promise<unknown> {
    const reg = this.#types.get(type);
    if (!reg) throw new KairosError("invalid_argument", `unknown actor type "${type}"`);
    const partition = partitionOf({ type, id }, this.#o.partitions);
    if (!this.#accepting.has(partition) || !this.#o.isTrusted(partition)) {
      throw new KairosError("not_owner", `partition ${partition} is not served by ${this.#o.nodeId}`);
    }
    const def = reg.definition;
    const msg = def.parse ? def.parse(raw) : raw;
    const inst = this.#instance(reg, type, id, partition);
    const now = this.#o.clock.now();
    const arrival = def.arrivalKey?.(msg);
    if (arrival !== undefined) {
      // Least recently ARRIVED first out: re-inserting moves a live lease's key to the end, so a
      // long-running lease is never evicted by many short ones.
      const arrivals = (inst.arrivals ??= new Map());
      arrivals.delete(arrival);
      if (arrivals.size >= ARRIVALS_LIMIT) arrivals.delete(arrivals.keys().next().value!);
      arrivals.set(arrival, now);
      inst.lastActiveMs = now;
    }
    // Fast path: answer from the last committed state, fenced under the current epoch — not
    // while a turn is in flight: it may have decided from a state before this arrival (a lease
    // expiry) and be writing a change the committed state does not show yet; answered from the
    // old state, a worker would start an attempt the owner is re-offering (sim seed 50). Queued
    // behind that turn, this message sees its outcome. (A turn merely queued is harmless: it
    // runs after this arrival was recorded.)
    let fast: { reply: unknown; alsoQueue: boolean } | undefined;
    if (def.query && inst.loaded && !inst.dropped && !inst.inTurn && (def.persist === false || inst.storedEpoch === (this.#o.epochOf(partition) ?? -1))) {
      const q = def.query(inst.state, msg, this.#ctx(inst, now));
      if (q && "fail" in q) throw new KairosError(q.fail.code, q.fail.message, q.fail.field === undefined ? {} : { field: q.fail.field });
      fast = q;
      if (fast && !fast.alsoQueue) return fast.reply;
    }
    // A copy of a request still waiting in the mailbox (a sender's retry): it shares that one's
    // reply instead of queueing again. Under a burst, a worker's completions time out at the busy
    // owner and are sent again; without this the copies pile up behind busy job actors.
    const coalesce = fast ? undefined : def.coalesceKey?.(msg);
    const joined = coalesce === undefined ? undefined : inst.coalesced?.get(coalesce);
    if (joined) return joined.reply;
    const limit = def.mailboxLimit ?? this.#o.mailboxLimit;
    if (inst.mailbox.length >= limit) {
      if (fast) return fast.reply; // acknowledged already; the state change comes with a later one
      throw new KairosError("overloaded", `mailbox of ${type}/${id} is full (${limit})`);
    }
    let env!: Envelope;
    const queued = new Promise((resolve, reject) => {
      env = coalesce === undefined ? { msg, resolve, reject } : { msg, resolve, reject, coalesce };
    });
    // Registered before the message can begin (an idle actor's drain begins it at once, below).
    if (coalesce !== undefined) (inst.coalesced ??= new Map()).set(coalesce, { env, reply: queued });
    inst.mailbox.push(env);
    if (!inst.running) void this.#drain(inst);
    if (!fast) return queued;
    queued.catch(() => undefined); // its reply went out already
    return fast.reply;
  }

  /** Partition acquired: accept messages and activate the types that carry reminders. */
  async acquire(partition: number): Promise<void> {
    this.#accepting.add(partition);
    for (const reg of this.#types.values()) {
      if (!reg.definition.loadOnAcquire) continue;
      const entries = await this.#whileHeld(partition, `partition ${partition}`, () => this.#o.kv.list(`${reg.definition.type}.${partition}.>`));
      if (entries === null) return; // lost while loading
      for (const e of entries) {
        if (!this.#accepting.has(partition)) return; // lost while loading
        const id = e.key.slice(reg.definition.type.length + String(partition).length + 2);
        const inst = this.#instance(reg, reg.definition.type, id, partition);
        if (inst.loaded) continue;
        const state = await this.#whileHeld(partition, `${inst.type}/${inst.id}`, () => this.#readBack(inst, e.value));
        if (state === null) return; // lost while loading
        if (!inst.loaded) this.#adopt(inst, state, e.revision);
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
    for (let failures = 0; ; failures++) {
      if (!this.#accepting.has(partition)) return null;
      try {
        return await step();
      } catch (e) {
        this.#o.onError(`loading ${what} (will retry)`, e);
        await new Promise<void>((r) => this.#o.clock.setTimer(backoffMs(failures, TIMER_RETRY), r));
      }
    }
  }

  /** A stored value read back: its state through the type's `onLoad` and the registration's `reconcile`. */
  async #readBack(inst: Instance, value: Uint8Array): Promise<ReadBack> {
    const stored = decode<Stored>(value);
    const def = inst.reg.definition;
    let state = def.onLoad ? def.onLoad(stored.s) : stored.s;
    if (inst.reg.reconcile) state = await inst.reg.reconcile(state, { partition: inst.partition, id: inst.id });
    return { s: state, e: stored.e };
  }

  /** Graceful release: refuse new messages, let mailboxes drain, passivate. */
  async release(partition: number): Promise<void> {
    this.#accepting.delete(partition);
    const mine = [...this.#actors.values()].filter((a) => a.partition === partition);
    await Promise.all(mine.map((a) => this.#idle(a)));
    this.#dropPartition(partition, "released");
  }

  /** Partition lost: drop at once; queued messages get `not_owner` so senders retry. */
  lose(partition: number): void {
    this.#accepting.delete(partition);
    this.#dropPartition(partition, "lost");
  }

  /** Passivates actors idle longer than `idleMs` (timers stay armed). */
  sweep(): void {
    const now = this.#o.clock.now();
    for (const a of this.#actors.values()) {
      if (this.#mayPassivate(a, now)) {
        this.#actors.delete(a.key);
        this.#o.events.emit({ type: "actor_passivated", actorType: a.type, id: a.id });
      }
    }
  }

  /** Idle (nothing running or queued for `idleMs`), and neither `keepLoaded` nor a close `warmTimer` keeps it. */
  #mayPassivate(a: Instance, now: number): boolean {
    if (a.running || a.mailbox.length > 0 || now - a.lastActiveMs <= this.#o.idleMs) return false;
    if (a.loaded && a.reg.definition.keepLoaded?.(a.state) === true) return false;
    return !this.#warmTimerClose(a.reg, a.partition, a.id, now);
  }

  /** Whether the actor's `warmTimer` is armed and fires within `warmMs`. */
  #warmTimerClose(reg: ActorRegistration, partition: number, id: string, now: number): boolean {
    const name = reg.definition.warmTimer;
    if (name === undefined || this.#warmMs === 0) return false;
    const due = this.#queue(reg.definition.type).dueOf(timerKey(partition, reg.definition.type, id, name));
    return due !== undefined && due - now <= this.#warmMs;
  }

  stop(): void {
    this.#timers.stop();
    this.#urgent.stop();
    this.#warm.stop();
    for (const p of [...this.#accepting]) this.lose(p);
  }

  #instance(reg: ActorRegistration, type: string, id: string, partition: number): Instance {
    const key = `${type}.${partition}.${id}`;
    let inst = this.#actors.get(key);
    if (!inst) {
      inst = {
        type, id, key, partition, reg,
        state: undefined, revision: 0, storedEpoch: 0, loaded: false,
        mailbox: [], running: false, inTurn: false, dropped: false,
        lastActiveMs: this.#o.clock.now(),
      };
      this.#actors.set(key, inst);
    }
    return inst;
  }

  #ctx(inst: Instance, nowMs: number): Required<ActorContext> {
    return { id: inst.id, nowMs, arrivalMs: (k) => inst.arrivals?.get(k), pending: (k) => inst.coalesced?.has(k) === true };
  }

  #adopt(inst: Instance, stored: ReadBack | null, revision: number, soft?: unknown): void {
    const def = inst.reg.definition;
    inst.state = stored ? stored.s : soft !== undefined ? soft : def.initialState(inst.id);
    inst.storedEpoch = stored?.e ?? 0;
    inst.revision = revision;
    inst.loaded = true;
    this.#o.events.emit({ type: "actor_activated", actorType: inst.type, id: inst.id, partition: inst.partition });
    const fx = inst.reg.definition.onActivate?.(inst.state, this.#ctx(inst, this.#o.clock.now())) ?? [];
    this.#hostEffects(inst, fx);
  }

  async #drain(inst: Instance): Promise<void> {
    inst.running = true;
    try {
      while (inst.mailbox.length > 0) {
        const env = inst.mailbox.shift()!;
        try {
          const def = inst.reg.definition;
          const out = def.persist === false ? await this.#turn(inst, env) : await this.#turns.run(() => this.#turn(inst, env), env.msg !== WARM && def.urgent?.(env.msg) === true);
          if (out instanceof Deferred) out.reply.then(env.resolve, env.reject);
          else env.resolve(out);
        } catch (e) {
          env.reject(e);
        }
        inst.lastActiveMs = this.#o.clock.now();
      }
    } finally {
      inst.running = false;
      for (const w of this.#idleWaiters.get(inst) ?? []) w();
      this.#idleWaiters.delete(inst);
    }
  }

  readonly #idleWaiters = new Map<Instance, (() => void)[]>();
  #idle(inst: Instance): Promise<void> {
    if (!inst.running) return Promise.resolve();
    return new Promise((resolve) => {
      const list = this.#idleWaiters.get(inst) ?? [];
      list.push(resolve);
      this.#idleWaiters.set(inst, list);
    });
  }

  /** One turn; while it runs, the fast path (`query`) stays shut (see `deliver`). */
  async #turn(inst: Instance, env: Envelope): Promise<unknown> {
    // Begun: a copy arriving from now on is a request of its own (it may see this one's outcome).
    if (env.coalesce !== undefined && inst.coalesced?.get(env.coalesce)?.env === env) {
      inst.coalesced.delete(env.coalesce);
      if (inst.coalesced.size === 0) delete inst.coalesced; // an empty map on each of 200,000 job actors is ~20 MB
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
    if (!inst.loaded && inst.reg.definition.persist === false) {
      const soft = inst.reg.loadSoft ? await inst.reg.loadSoft(inst.id, inst.partition) : undefined;
      if (inst.dropped) throw new KairosError("not_owner", `${inst.type}/${inst.id} moved; retry`);
      if (!inst.loaded) this.#adopt(inst, null, 0, soft);
    }
    if (!inst.loaded) {
      const e = await this.#o.kv.get(inst.key);
      const stored = e && !inst.loaded ? await this.#readBack(inst, e.value) : null;
      if (inst.dropped) throw new KairosError("not_owner", `${inst.type}/${inst.id} moved; retry`);
      if (!inst.loaded) this.#adopt(inst, stored, e?.revision ?? 0);
    }
    if (msg === WARM) return undefined; // loaded ahead of its timer: nothing to decide
    const def = inst.reg.definition;
    // An urgent turn's own writes (the fence, the state) go ahead in the KV limiter too: a claim
    // admitted first still waited there behind the admitted turns' writes.
    const write = def.urgent?.(msg) === true ? URGENT_WRITE : PLAIN_WRITE;
    const epoch = this.#o.epochOf(inst.partition);
    if (def.persist !== false && inst.revision > 0 && epoch !== undefined && inst.storedEpoch !== epoch) await this.#fence(inst, epoch, write);
    const d = def.receive(inst.state, msg, this.#ctx(inst, this.#o.clock.now()));
    const ctx: ShellContext = {
      address: { type: inst.type, id: inst.id }, partition: inst.partition, epoch: epoch ?? 0, nodeId: this.#o.nodeId,
      stillOwner: () => !inst.dropped && this.#accepting.has(inst.partition) && this.#o.isTrusted(inst.partition) && this.#o.epochOf(inst.partition) === epoch,
      tell: (m) => {
        this.deliver(inst.type, inst.id, m).catch((e: unknown) => {
          if (!isKairosError(e, "not_owner")) this.#o.onError(`tell ${inst.type}/${inst.id}`, e);
        });
      },
    };
    let followUps: readonly unknown[] = [];
    if (inst.reg.pipelinePre && def.persist === false) {
      const started = d.pre && d.pre.length > 0 ? (this.#checkTrusted(inst, "before effects"), inst.reg.perform?.(d.pre, ctx)) : undefined;
      // Checked even when the state object is the same: a soft core may mutate it in place.
      this.#checkTrusted(inst, "before a soft-state change");
      inst.state = d.state;
      // A failed (or unknown) write must not leave memory ahead of the store: drop the actor so
      // the next message reloads what is durable (sim seed 55: an audit confirmed a grant whose
      // write had timed out; after a move the tenant ran one over its cap).
      const durable = Promise.resolve(started).catch((e: unknown) => {
        this.#drop(inst, "pipelined write failed");
        this.#reloadSoon(inst);
        throw e;
      });
      return new Deferred(durable.then(() => {
        if (!ctx.stillOwner()) {
          // Its effects (sends, timers) are skipped: drop it, so that the next message reloads
          // it and re-arms its timers, instead of a loaded actor whose timer is gone for good.
          this.#drop(inst, "not owner after its write");
          this.#reloadSoon(inst);
          throw new KairosError("not_owner", `partition ${inst.partition} no longer owned by ${this.#o.nodeId}`);
        }
        this.#hostEffects(inst, d.effects ?? []);
        if (d.post && d.post.length > 0) inst.reg.performPost?.(d.post, ctx);
        if (d.fail) throw new KairosError(d.fail.code, d.fail.message, d.fail.field === undefined ? {} : { field: d.fail.field });
        return d.reply;
      }));
    }
    if (d.pre && d.pre.length > 0) {
      this.#checkTrusted(inst, "before effects");
      followUps = (await inst.reg.perform?.(d.pre, ctx)) ?? [];
    }
    if (def.persist === false) {
      this.#checkTrusted(inst, "before a soft-state change"); // (also for a state mutated in place)
      inst.state = d.state;
    } else if (d.state !== inst.state && d.deferWrite === true) {
      // Recoverable if lost (see Decision.deferWrite): memory only, written with the next write.
      this.#checkTrusted(inst, "before a deferred state change");
      inst.state = d.state;
    } else if (d.state !== inst.state) {
      this.#checkTrusted(inst, "before write");
      const value = encode({ s: d.state, e: epoch ?? 0, w: this.#o.nodeId } satisfies Stored);
      let r;
      try {
        r = inst.revision === 0 ? await this.#o.kv.create(inst.key, value) : await this.#o.kv.update(inst.key, value, inst.revision, write);
      } catch (e) {
        // Unknown outcome: forget the cached state; the next message reloads and decides again.
        this.#drop(inst, "write outcome unknown");
        this.#reloadSoon(inst);
        throw e;
      }
      if (!r.ok) {
        this.#o.events.emit({ type: "write_fenced", actorType: inst.type, id: inst.id, partition: inst.partition, reason: r.conflict });
        this.#drop(inst, r.conflict);
        throw new KairosError("not_owner", `${inst.type}/${inst.id} was written by another owner; retry`);
      }
      inst.state = d.state;
      inst.revision = r.revision;
      inst.storedEpoch = epoch ?? 0;
    }
    this.#hostEffects(inst, d.effects ?? []);
    // A stale owner (trust lapsed while it worked) performs no post effects.
    if (d.post && d.post.length > 0 && ctx.stillOwner()) inst.reg.performPost?.(d.post, ctx);
    for (let i = followUps.length - 1; i >= 0; i--) {
      inst.mailbox.unshift({ msg: followUps[i], resolve: () => undefined, reject: (e) => this.#o.onError(`follow-up of ${inst.type}/${inst.id}`, e) });
    }
    if (d.fail) {
      throw new KairosError(d.fail.code, d.fail.message, d.fail.field === undefined ? {} : { field: d.fail.field });
    }
    return d.reply;
  }

  /**
   * Stamps the stored state with the current epoch (CAS) before the first decision under it, so a
   * write of an earlier owner that is still in flight can no longer land (its revision is gone).
   */
  async #fence(inst: Instance, epoch: number, write: WriteOptions): Promise<void> {
    this.#checkTrusted(inst, "before fencing");
    const value = encode({ s: inst.state, e: epoch, w: this.#o.nodeId } satisfies Stored);
    let r;
    try {
      r = await this.#o.kv.update(inst.key, value, inst.revision, write);
    } catch (e) {
      this.#drop(inst, "fence outcome unknown");
      this.#reloadSoon(inst);
      throw e;
    }
    if (!r.ok) {
      this.#o.events.emit({ type: "write_fenced", actorType: inst.type, id: inst.id, partition: inst.partition, reason: `epoch fence: ${r.conflict}` });
      this.#drop(inst, r.conflict);
      throw new KairosError("not_owner", `${inst.type}/${inst.id} was written by another owner; retry`);
    }
    inst.revision = r.revision;
    inst.storedEpoch = epoch;
  }

  #checkTrusted(inst: Instance, when: string): void {
    if (!this.#o.isTrusted(inst.partition)) {
      this.#o.events.emit({ type: "write_fenced", actorType: inst.type, id: inst.id, partition: inst.partition, reason: `lease not trusted ${when}` });
      this.#drop(inst, "lease not trusted");
      this.#reloadSoon(inst);
      throw new KairosError("not_owner", `partition ${inst.partition} no longer owned by ${this.#o.nodeId}`);
    }
  }

  #hostEffects(inst: Instance, effects: readonly HostEffect<unknown>[]): void {
    for (const fx of effects) {
      switch (fx.kind) {
        case "timer":
          this.#queue(inst.type).schedule(timerKey(inst.partition, inst.type, inst.id, fx.name), fx.atMs, { type: inst.type, id: inst.id, msg: fx.msg });
          if (fx.name === inst.reg.definition.warmTimer && this.#warmMs > 0) {
            // Loaded ahead if it is passivated by then (a timer closer than that keeps it in memory).
            const key = `${inst.partition}|${inst.type}|${inst.id}`;
            if (fx.atMs - this.#warmMs > this.#o.clock.now()) this.#warm.schedule(key, fx.atMs - this.#warmMs, { type: inst.type, id: inst.id });
            else this.#warm.cancel(key);
          }
          break;
        case "cancel_timer":
          this.#queue(inst.type).cancel(timerKey(inst.partition, inst.type, inst.id, fx.name));
          if (fx.name === inst.reg.definition.warmTimer) this.#warm.cancel(`${inst.partition}|${inst.type}|${inst.id}`);
          break;
        case "send":
          this.#o.send(fx.to, fx.msg).catch((e: unknown) => this.#o.onError(`send from ${inst.type}/${inst.id} to ${fx.to.type}/${fx.to.id}`, e));
          break;
      }
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
  #reloadSoon(inst: Instance, failures = 0): void {
    if (!inst.reg.definition.loadOnAcquire) return;
    const again = () => this.#reloadSoon(inst, failures + 1);
    this.#o.clock.setTimer(backoffMs(failures, RELOAD_RETRY), () => {
      if (!this.#accepting.has(inst.partition)) return;
      if (!this.#o.isTrusted(inst.partition)) return again();
      const fresh = this.#instance(inst.reg, inst.type, inst.id, inst.partition);
      if (fresh.loaded || fresh.running || fresh.mailbox.length > 0) return; // in memory, or on its way
      new Promise((resolve, reject) => {
        fresh.mailbox.push({ msg: WARM, resolve, reject });
        void this.#drain(fresh);
      }).catch(again);
    });
  }

  #drop(inst: Instance, _reason: string): void {
    inst.dropped = true;
    if (this.#actors.get(inst.key) === inst) this.#actors.delete(inst.key);
  }

  #dropPartition(partition: number, _why: string): void {
    this.#timers.cancelPrefix(`${partition}|`);
    this.#urgent.cancelPrefix(`${partition}|`);
    this.#warm.cancelPrefix(`${partition}|`);
    for (const a of [...this.#actors.values()]) {
      if (a.partition === partition) this.#drop(a, _why);
    }
  }
}
