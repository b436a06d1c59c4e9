/**
 * The actor host: the imperative shell for every actor type on one node.
 *
 * - Activation: on the first message (or timer) for an address in a held partition, load its
 *   state from the `actors` bucket (key `<type>.<partition>.<id>`), else the initial state.
 * - One message at a time per actor: a bounded mailbox drained by a single loop, so async
 *   handling never interleaves.
 * - Persist with CAS on the key's revision, after checking the partition's trust window. A
 *   conflict means another owner wrote: the actor is dropped here (no further writes) and the
 *   caller gets `not_owner`, so it retries and reaches the real owner.
 * - Timers live in the node's single TimerQueue and survive passivation (reminders); timers of a
 *   partition are dropped when it is lost or released.
 * - Passivation: actors idle for `idleMs` with an empty mailbox leave memory.
 */
import type { Clock } from "../lib/clock.ts";
import { KairosError, isKairosError } from "../lib/errors.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { EventBus } from "../cluster/events.ts";
import type { KvStore } from "../cluster/kv.ts";
import { partitionOf } from "../cluster/placement.ts";
import { TimerQueue } from "../cluster/timer-queue.ts";
import type { AnyActorDefinition, HostEffect } from "./actor.ts";

/** Shell services available to type-specific effect performers. */
export interface ShellContext {
  readonly address: { type: string; id: string };
  readonly partition: number;
  readonly epoch: number;
  readonly nodeId: string;
  /** Sends a message to this same actor (it queues behind the current one). */
  tell(msg: unknown): void;
}

export interface ActorRegistration {
  readonly definition: AnyActorDefinition;
  /**
   * Performs the decision's `pre` effects before the state write. May return follow-up messages,
   * which this actor processes next, before anything else in its mailbox.
   */
  perform?(pre: readonly unknown[], ctx: ShellContext): Promise<readonly unknown[] | void>;
  /** Performs the decision's `post` effects after the state write (not awaited by the reply). */
  performPost?(post: readonly unknown[], ctx: ShellContext): void;
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
}

interface Instance {
  readonly type: string;
  readonly id: string;
  readonly key: string;
  readonly partition: number;
  readonly reg: ActorRegistration;
  state: unknown;
  revision: number;
  loaded: boolean;
  mailbox: Envelope[];
  running: boolean;
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
}

export class ActorHost {
  readonly #o: HostOptions;
  readonly #types = new Map<string, ActorRegistration>();
  readonly #actors = new Map<string, Instance>();
  readonly #timers: TimerQueue<{ type: string; id: string; msg: unknown }>;
  readonly #accepting = new Set<number>();

  constructor(o: HostOptions) {
    this.#o = o;
    this.#timers = new TimerQueue(o.clock, (_k, t) => {
      this.deliver(t.type, t.id, t.msg).catch((e: unknown) => {
        if (!isKairosError(e, "not_owner")) o.onError(`timer for ${t.type}/${t.id}`, e);
      });
    });
  }

  register(reg: ActorRegistration): void {
    this.#types.set(reg.definition.type, reg);
  }

  get activeCount(): number {
    return this.#actors.size;
  }

  get pendingTimers(): number {
    return this.#timers.size;
  }

  /** Delivers a message to a local actor and resolves with its reply. */
  async deliver(type: string, id: string, raw: unknown): Promise<unknown> {
    const reg = this.#types.get(type);
    if (!reg) throw new KairosError("invalid_argument", `unknown actor type "${type}"`);
    const partition = partitionOf({ type, id }, this.#o.partitions);
    if (!this.#accepting.has(partition) || !this.#o.isTrusted(partition)) {
      throw new KairosError("not_owner", `partition ${partition} is not served by ${this.#o.nodeId}`);
    }
    const msg = reg.definition.parse ? reg.definition.parse(raw) : raw;
    const inst = this.#instance(reg, type, id, partition);
    if (inst.mailbox.length >= this.#o.mailboxLimit) {
      throw new KairosError("overloaded", `mailbox of ${type}/${id} is full (${this.#o.mailboxLimit})`);
    }
    return new Promise((resolve, reject) => {
      inst.mailbox.push({ msg, resolve, reject });
      if (!inst.running) void this.#drain(inst);
    });
  }

  /** Partition acquired: accept messages and activate the types that carry reminders. */
  async acquire(partition: number): Promise<void> {
    this.#accepting.add(partition);
    for (const reg of this.#types.values()) {
      if (!reg.definition.loadOnAcquire) continue;
      const entries = await this.#o.kv.list(`${reg.definition.type}.${partition}.>`);
      for (const e of entries) {
        if (!this.#accepting.has(partition)) return; // lost while loading
        const id = e.key.slice(reg.definition.type.length + String(partition).length + 2);
        const inst = this.#instance(reg, reg.definition.type, id, partition);
        if (!inst.loaded) this.#adopt(inst, e.value, e.revision);
      }
    }
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
      if (!a.running && a.mailbox.length === 0 && now - a.lastActiveMs > this.#o.idleMs) {
        this.#actors.delete(a.key);
        this.#o.events.emit({ type: "actor_passivated", actorType: a.type, id: a.id });
      }
    }
  }

  stop(): void {
    this.#timers.stop();
    for (const p of [...this.#accepting]) this.lose(p);
  }

  #instance(reg: ActorRegistration, type: string, id: string, partition: number): Instance {
    const key = `${type}.${partition}.${id}`;
    let inst = this.#actors.get(key);
    if (!inst) {
      inst = {
        type, id, key, partition, reg,
        state: undefined, revision: 0, loaded: false,
        mailbox: [], running: false, dropped: false,
        lastActiveMs: this.#o.clock.now(),
      };
      this.#actors.set(key, inst);
    }
    return inst;
  }

  #adopt(inst: Instance, value: Uint8Array | null, revision: number): void {
    inst.state = value ? decode<Stored>(value).s : inst.reg.definition.initialState(inst.id);
    inst.revision = revision;
    inst.loaded = true;
    this.#o.events.emit({ type: "actor_activated", actorType: inst.type, id: inst.id, partition: inst.partition });
    const fx = inst.reg.definition.onActivate?.(inst.state, { id: inst.id, nowMs: this.#o.clock.now() }) ?? [];
    this.#hostEffects(inst, fx);
  }

  async #drain(inst: Instance): Promise<void> {
    inst.running = true;
    try {
      while (inst.mailbox.length > 0) {
        const env = inst.mailbox.shift()!;
        if (inst.dropped) {
          env.reject(new KairosError("not_owner", `${inst.type}/${inst.id} moved; retry`));
          continue;
        }
        try {
          env.resolve(await this.#handle(inst, env.msg));
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

  async #handle(inst: Instance, msg: unknown): Promise<unknown> {
    if (!inst.loaded && inst.reg.definition.persist === false) this.#adopt(inst, null, 0);
    if (!inst.loaded) {
      const e = await this.#o.kv.get(inst.key);
      if (inst.dropped) throw new KairosError("not_owner", `${inst.type}/${inst.id} moved; retry`);
      if (!inst.loaded) this.#adopt(inst, e?.value ?? null, e?.revision ?? 0);
    }
    const def = inst.reg.definition;
    const d = def.receive(inst.state, msg, { id: inst.id, nowMs: this.#o.clock.now() });
    const epoch = this.#o.epochOf(inst.partition);
    const ctx: ShellContext = {
      address: { type: inst.type, id: inst.id }, partition: inst.partition, epoch: epoch ?? 0, nodeId: this.#o.nodeId,
      tell: (m) => {
        this.deliver(inst.type, inst.id, m).catch((e: unknown) => {
          if (!isKairosError(e, "not_owner")) this.#o.onError(`tell ${inst.type}/${inst.id}`, e);
        });
      },
    };
    let followUps: readonly unknown[] = [];
    if (d.pre && d.pre.length > 0) {
      this.#checkTrusted(inst, "before effects");
      followUps = (await inst.reg.perform?.(d.pre, ctx)) ?? [];
    }
    if (d.state !== inst.state && def.persist === false) {
      this.#checkTrusted(inst, "before a soft-state change");
      inst.state = d.state;
    } else if (d.state !== inst.state) {
      this.#checkTrusted(inst, "before write");
      const value = encode({ s: d.state, e: epoch ?? 0, w: this.#o.nodeId } satisfies Stored);
      let r;
      try {
        r = inst.revision === 0 ? await this.#o.kv.create(inst.key, value) : await this.#o.kv.update(inst.key, value, inst.revision);
      } catch (e) {
        // Unknown outcome: forget the cached state; the next message reloads and decides again.
        this.#drop(inst, "write outcome unknown");
        throw e;
      }
      if (!r.ok) {
        this.#o.events.emit({ type: "write_fenced", actorType: inst.type, id: inst.id, partition: inst.partition, reason: r.conflict });
        this.#drop(inst, r.conflict);
        throw new KairosError("not_owner", `${inst.type}/${inst.id} was written by another owner; retry`);
      }
      inst.state = d.state;
      inst.revision = r.revision;
    }
    this.#hostEffects(inst, d.effects ?? []);
    if (d.post && d.post.length > 0) inst.reg.performPost?.(d.post, ctx);
    for (let i = followUps.length - 1; i >= 0; i--) {
      inst.mailbox.unshift({ msg: followUps[i], resolve: () => undefined, reject: (e) => this.#o.onError(`follow-up of ${inst.type}/${inst.id}`, e) });
    }
    if (d.fail) {
      throw new KairosError(d.fail.code, d.fail.message, d.fail.field === undefined ? {} : { field: d.fail.field });
    }
    return d.reply;
  }

  #checkTrusted(inst: Instance, when: string): void {
    if (!this.#o.isTrusted(inst.partition)) {
      this.#o.events.emit({ type: "write_fenced", actorType: inst.type, id: inst.id, partition: inst.partition, reason: `lease not trusted ${when}` });
      this.#drop(inst, "lease not trusted");
      throw new KairosError("not_owner", `partition ${inst.partition} no longer owned by ${this.#o.nodeId}`);
    }
  }

  #hostEffects(inst: Instance, effects: readonly HostEffect<unknown>[]): void {
    for (const fx of effects) {
      switch (fx.kind) {
        case "timer":
          this.#timers.schedule(`${inst.partition}|${inst.type}|${inst.id}|${fx.name}`, fx.atMs, { type: inst.type, id: inst.id, msg: fx.msg });
          break;
        case "cancel_timer":
          this.#timers.cancel(`${inst.partition}|${inst.type}|${inst.id}|${fx.name}`);
          break;
        case "send":
          this.#o.send(fx.to, fx.msg).catch((e: unknown) => this.#o.onError(`send from ${inst.type}/${inst.id} to ${fx.to.type}/${fx.to.id}`, e));
          break;
      }
    }
  }

  #drop(inst: Instance, _reason: string): void {
    inst.dropped = true;
    if (this.#actors.get(inst.key) === inst) this.#actors.delete(inst.key);
  }

  #dropPartition(partition: number, _why: string): void {
    this.#timers.cancelPrefix(`${partition}|`);
    for (const a of [...this.#actors.values()]) {
      if (a.partition === partition) this.#drop(a, _why);
    }
  }
}
