/**
 * The actor host: the imperative shell for every actor type on one node. It activates an actor
 * on its first message or timer in a held partition, runs one message at a time through a
 * bounded mailbox (mailbox.ts), decides and performs each turn (turn.ts), persists with CAS and
 * the epoch fence after checking the partition's trust window (persistence.ts), keeps timers in
 * the node's TimerQueues as reminders that survive passivation (reminders.ts), and passivates
 * idle actors (passivation.ts). The parts share one HostCore (host-core.ts).
 *
 * Pitfalls: a CAS conflict means another owner wrote — the actor is dropped and the caller gets
 * `not_owner`. Timer messages are redelivered with backoff while the partition is held (handlers
 * must be idempotent). Post effects run only while the partition is trusted. Deferred writes
 * (`Decision.deferWrite`) stay in memory until the next write; `onLoad` adjusts a state read back.
 */
import { HostCore, type HostOptions } from "./host-core.ts";
import { Mailbox } from "./mailbox.ts";
import { Passivation } from "./passivation.ts";
import { Persistence } from "./persistence.ts";
import type { ActorRegistration } from "./registration.ts";
import { Reminders } from "./reminders.ts";
import { Turns } from "./turn.ts";

export type { HostOptions } from "./host-core.ts";
export { TURNS_IN_FLIGHT } from "./mailbox.ts";
export { EARLY_IDLE_MS, WARM_LOADS_IN_FLIGHT, WARM_MS } from "./passivation.ts";
export { RELOAD_AFTER_DROP_MS } from "./persistence.ts";
export { REVISION_FLOOR_MS } from "./host-core.ts";
export type { ActorRegistration, ShellContext } from "./registration.ts";
export { TIMER_TURNS_IN_FLIGHT } from "./reminders.ts";

/** How old a mailbox depth (`mailboxDepth`) may be when read again. */
export const MAILBOX_DEPTH_MAX_AGE_MS = 1_000;

export class ActorHost {
  readonly #c: HostCore;
  /** The last mailbox depth summed, and when (monotonic ms). */
  #mailboxDepth: { atMs: number; n: number } | undefined;
  /** Partitions whose `acquire` has resolved (activated) and that are not released or lost since. */
  readonly #ready = new Set<number>();
  /** Per partition, the latest `acquire` (an older one resolving late does not mark it ready). */
  readonly #acquiring = new Map<number, object>();

  constructor(o: HostOptions) {
    const c = new HostCore(o);
    const mailbox = new Mailbox(c);
    const reminders = new Reminders(c, (type, id, msg) => mailbox.deliver(type, id, msg));
    const passivation = new Passivation(c);
    c.parts = {
      mailbox,
      reminders,
      passivation,
      persistence: new Persistence(c),
      turns: new Turns(c),
    };
    this.#c = c;
  }

  /**
   * Actors read back ahead of their `warmTimer` so far (a load that found one in memory does not
   * count).
   */
  get warmed(): number {
    return this.#c.parts.passivation.warmed;
  }

  /** Timer-driven turns in flight on the data-plane queue, and whether due timers wait for them. */
  get timerTurns(): { inFlight: number; held: boolean } {
    return this.#c.parts.reminders.timerTurns;
  }

  register(reg: ActorRegistration): void {
    this.#c.types.set(reg.definition.type, reg);
  }

  get activeCount(): number {
    return this.#c.actors.size;
  }

  /** Messages queued in the mailboxes of this node's actors (O(actors)). */
  get mailboxDepth(): number {
    let n = 0;
    for (const inst of this.#c.actors.values()) n += inst.mailbox.length;
    return n;
  }

  /**
   * `mailboxDepth` as summed at most MAILBOX_DEPTH_MAX_AGE_MS ago: for scrapes and the operators'
   * view (summed at every read, it took 1 s of the scheduler's CPU a minute over 200,000 actors
   * in a burst).
   */
  get recentMailboxDepth(): number {
    const now = this.#c.o.clock.monoMs();
    const last = this.#mailboxDepth;
    if (last !== undefined && now - last.atMs < MAILBOX_DEPTH_MAX_AGE_MS) return last.n;
    const n = this.mailboxDepth;
    this.#mailboxDepth = { atMs: now, n };
    return n;
  }

  get pendingTimers(): number {
    return this.#c.parts.reminders.pending;
  }

  /**
   * The in-memory state of an actor this node holds loaded (undefined: not in memory here, or its
   * partition is not accepted). For reads that must not queue behind or wake an actor: no
   * mailbox, no load. Read-only — the caller must not change what it gets.
   */
  peek(type: string, id: string): unknown {
    const c = this.#c;
    const partition = c.partitionOf(type, id);
    if (!c.accepting.has(partition)) return undefined;
    const inst = c.actors.get(`${type}.${partition}.${id}`);
    return inst?.loaded && !inst.dropped ? inst.state : undefined;
  }

  /**
   * Whether this node serves the partition to in-process requests now: held, activated (its
   * `acquire` resolved — the point where the node's NATS responder subscribes), within its trust
   * window. A partition still loading is asked over NATS, where its previous owner may answer.
   */
  serves(partition: number): boolean {
    return (
      this.#ready.has(partition) &&
      this.#c.accepting.has(partition) &&
      this.#c.o.isTrusted(partition)
    );
  }

  /** Delivers a message to a local actor and resolves with its reply. */
  deliver(type: string, id: string, raw: unknown): Promise<unknown> {
    return this.#c.parts.mailbox.deliver(type, id, raw);
  }

  /** Partition acquired: accept messages and activate the types that carry reminders. */
  async acquire(partition: number): Promise<void> {
    const token = {};
    this.#acquiring.set(partition, token);
    this.#c.accepting.add(partition);
    await this.#c.parts.persistence.activatePartition(partition);
    if (this.#acquiring.get(partition) === token && this.#c.accepting.has(partition)) {
      this.#ready.add(partition);
    }
  }

  /** Graceful release: refuse new messages, let mailboxes drain, passivate. */
  async release(partition: number): Promise<void> {
    const c = this.#c;
    this.#unready(partition);
    c.accepting.delete(partition);
    const mine = [...c.actors.values()].filter((a) => a.partition === partition);
    await Promise.all(mine.map((a) => c.parts.mailbox.idle(a)));
    this.#dropPartition(partition, "released");
  }

  /** Partition lost: drop at once; queued messages get `not_owner` so senders retry. */
  lose(partition: number): void {
    this.#unready(partition);
    this.#c.accepting.delete(partition);
    this.#dropPartition(partition, "lost");
  }

  /** Floors kept for actors passivated early (`HostCore.rememberEarly`), until they lapse. */
  get earlyFloors(): number {
    return this.#c.earlyFloors;
  }

  /**
   * Passivates actors idle longer than `idleMs`, or EARLY_IDLE_MS (`passivateEarly`); timers stay
   * armed. Past SWEEP_SLICE actors (passivation.ts) the sweep goes on in later turns of the loop.
   */
  sweep(): void {
    this.#c.parts.passivation.sweep();
  }

  stop(): void {
    const c = this.#c;
    c.parts.reminders.stop();
    c.parts.passivation.stop();
    for (const p of [...c.accepting]) this.lose(p);
  }

  #unready(partition: number): void {
    this.#ready.delete(partition);
    this.#acquiring.delete(partition);
  }

  #dropPartition(partition: number, why: string): void {
    const c = this.#c;
    c.parts.reminders.dropPartition(partition);
    c.parts.passivation.dropPartition(partition);
    for (const a of [...c.actors.values()]) {
      if (a.partition === partition) c.drop(a, why, false);
    }
  }
}
