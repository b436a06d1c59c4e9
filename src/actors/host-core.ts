/**
 * What the parts of an actor host share: its options, the registered types, the actors in
 * memory (one `Instance` each) and the partitions it accepts, and the parts themselves (mailbox,
 * turns, persistence, reminders, passivation), wired by host.ts. Also activation (`adopt`), the
 * host effects of a decision, and dropping an actor.
 */
import type { Clock } from "../lib/clock.ts";
import { OrderedMap } from "../lib/ordered-map.ts";
import type { EventBus } from "../cluster/events.ts";
import type { KvStore } from "../cluster/kv.ts";
import { partitionOf } from "../cluster/placement.ts";
import type { ActorContext, HostEffect } from "./actor.ts";
import type { ActorRegistration } from "./registration.ts";
import type { HostParts, Instance, ReadBack } from "./types.ts";

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
  /**
   * Most timer deliveries (actor turns) of the data-plane queue in flight; default
   * `TIMER_TURNS_IN_FLIGHT`.
   */
  timerTurnsInFlight?: number;
  /** Most turns of persisted actor types in flight on the node; default `TURNS_IN_FLIGHT`. */
  turnsInFlight?: number;
  /**
   * How long before its `warmTimer` an actor is in memory (0: never loaded ahead); default
   * `WARM_MS`.
   */
  warmMs?: number;
}

/** Most revision floors kept (see `HostCore.behind`); the oldest go first. */
export const REVISION_FLOORS = 16_384;
/**
 * How long a floor holds (monotonic ms): a deposed stream leader hears of its successor within
 * seconds. Past it a read below is taken: a stream whose replicas diverged may have lost the write
 * for good (docs/kv.md), and a key read as behind for ever could never be written again.
 */
export const REVISION_FLOOR_MS = 30_000;
/**
 * Most floors kept for actors passivated early (`rememberEarly`), apart from REVISION_FLOORS: a
 * batch of 200,000 jobs created for later passivates them all within seconds, and must not push
 * out the floors of actors dropped after a failed write. Past it, the oldest go first.
 */
export const EARLY_FLOORS = 262_144;

type Floor = { revision: number; untilMono: number };

export class HostCore {
  readonly o: HostOptions;
  readonly types = new Map<string, ActorRegistration>();
  readonly actors = new Map<string, Instance>();
  readonly accepting = new Set<number>();
  /** Revisions of actors dropped outside a partition drop, by key (see `behind`). */
  readonly #floors = new OrderedMap<string, Floor>();
  /** Revisions of actors passivated early (see `rememberEarly`), by key, oldest first. */
  readonly #earlyFloors = new OrderedMap<string, Floor>();
  #parts: HostParts | undefined;

  constructor(o: HostOptions) {
    this.o = o;
  }

  /** The parts, set once by the host that made them. */
  get parts(): HostParts {
    return this.#parts!;
  }
  set parts(p: HostParts) {
    this.#parts = p;
  }

  /** The partition an actor's address falls in. */
  partitionOf(type: string, id: string): number {
    return partitionOf({ type, id }, this.o.partitions);
  }

  /** The actor's instance in memory, made (not loaded) if there is none. */
  instance(reg: ActorRegistration, type: string, id: string, partition: number): Instance {
    const key = `${type}.${partition}.${id}`;
    let inst = this.actors.get(key);
    if (!inst) {
      inst = {
        type,
        id,
        key,
        partition,
        reg,
        state: undefined,
        revision: 0,
        storedEpoch: 0,
        loaded: false,
        mailbox: [],
        running: false,
        inTurn: false,
        dropped: false,
        lastActiveMs: this.o.clock.now(),
      };
      this.actors.set(key, inst);
    }
    return inst;
  }

  ctx(inst: Instance, nowMs: number): Required<ActorContext> {
    return {
      id: inst.id,
      nowMs,
      arrivalMs: (k) => inst.arrivals?.get(k),
      pending: (k) => inst.coalesced?.has(k) === true,
    };
  }

  /**
   * Activation: the state read back (or soft, or initial) becomes the actor's; `onActivate` runs.
   */
  adopt(inst: Instance, stored: ReadBack | null, revision: number, soft?: unknown): void {
    const def = inst.reg.definition;
    inst.state = stored ? stored.s : soft !== undefined ? soft : def.initialState(inst.id);
    inst.storedEpoch = stored?.e ?? 0;
    inst.revision = revision;
    inst.loaded = true;
    this.o.events.emit({
      type: "actor_activated",
      actorType: inst.type,
      id: inst.id,
      partition: inst.partition,
    });
    const fx =
      inst.reg.definition.onActivate?.(inst.state, this.ctx(inst, this.o.clock.now())) ?? [];
    this.hostEffects(inst, fx);
  }

  hostEffects(inst: Instance, effects: readonly HostEffect<unknown>[]): void {
    const { reminders, passivation } = this.parts;
    for (const fx of effects) {
      switch (fx.kind) {
        case "timer":
          reminders.arm(inst, fx.name, fx.atMs, fx.msg);
          if (fx.name === inst.reg.definition.warmTimer) passivation.warmAhead(inst, fx.atMs);
          break;
        case "cancel_timer":
          reminders.cancel(inst, fx.name);
          if (fx.name === inst.reg.definition.warmTimer) passivation.cancelWarm(inst);
          break;
        case "send":
          this.o
            .send(fx.to, fx.msg)
            .catch((e: unknown) =>
              this.o.onError(`send from ${inst.type}/${inst.id} to ${fx.to.type}/${fx.to.id}`, e),
            );
          break;
      }
    }
  }

  /**
   * `floor`: the actor leaves while its partition stays (a write failed or of unknown outcome, a
   * conflict, a trust blip): the revision it was at is remembered, and a read back below it is
   * behind (`behind`). With its partition it leaves without: a new epoch's fence write catches a
   * stale read.
   */
  drop(inst: Instance, _reason: string, floor = true): void {
    inst.dropped = true;
    if (this.actors.get(inst.key) === inst) this.actors.delete(inst.key);
    if (!floor || inst.revision === 0) return;
    const prev = this.#floors.get(inst.key);
    this.#floors.delete(inst.key);
    if (this.#floors.size >= REVISION_FLOORS) this.#floors.delete(this.#floors.oldest()!);
    this.#floors.set(inst.key, {
      revision: Math.max(inst.revision, prev?.revision ?? 0),
      untilMono: this.o.clock.monoMs() + REVISION_FLOOR_MS,
    });
  }

  /**
   * The revision this node already saw of `key` when `revision` (read back; 0: no value) is below
   * it: the read was answered by a stream leader deposed without knowing it (docs/kv.md, "What a
   * read sees"), and its state is older than one this node wrote or read (or, no value, it missed
   * the key's creation). Within the same epoch no fence write
   * catches it: its fast path and its turns would answer from that older state until its next
   * write (a heartbeat `lease_lost` for a lease the stored state holds). Undefined otherwise; a
   * read at or above the floor, or past REVISION_FLOOR_MS, clears it.
   */
  behind(key: string, revision: number): number | undefined {
    return (
      this.#below(this.#floors, key, revision) ?? this.#below(this.#earlyFloors, key, revision)
    );
  }

  #below(floors: OrderedMap<string, Floor>, key: string, revision: number): number | undefined {
    const f = floors.get(key);
    if (f === undefined) return undefined;
    if (revision < f.revision && this.o.clock.monoMs() < f.untilMono) return f.revision;
    floors.delete(key);
    return undefined;
  }

  /**
   * An actor passivated seconds after its last write (passivation.ts, EARLY_IDLE_MS) is read back
   * as after a drop: a read below the revision it was at is behind (a deposed stream leader's
   * older state) for REVISION_FLOOR_MS, or until the host's idle time since its last turn if that
   * is later — as long as the idle rule would have kept it in memory, unread.
   */
  rememberEarly(inst: Instance): void {
    if (inst.revision === 0) return;
    this.#earlyFloors.delete(inst.key);
    if (this.#earlyFloors.size >= EARLY_FLOORS)
      this.#earlyFloors.delete(this.#earlyFloors.oldest()!);
    // Never weaker than the idle rule: kept at least until the host's idle time since its last
    // turn (it would have stayed in memory, never read back, until then), and REVISION_FLOOR_MS.
    const idleLeft = this.o.idleMs - (this.o.clock.now() - inst.lastActiveMs);
    this.#earlyFloors.set(inst.key, {
      revision: inst.revision,
      untilMono: this.o.clock.monoMs() + Math.max(REVISION_FLOOR_MS, idleLeft),
    });
  }

  /**
   * Forgets the early floors past their time (oldest first, up to the first still held: their
   * lengths differ by seconds at most), so a batch's 100,000 do not stay in memory until pushed
   * out.
   */
  pruneEarlyFloors(): void {
    const now = this.o.clock.monoMs();
    for (let k = this.#earlyFloors.oldest(); k !== undefined; k = this.#earlyFloors.oldest()) {
      if (this.#earlyFloors.get(k)!.untilMono > now) return;
      this.#earlyFloors.delete(k);
    }
  }

  /** Early floors held (see `rememberEarly`). */
  get earlyFloors(): number {
    return this.#earlyFloors.size;
  }
}
