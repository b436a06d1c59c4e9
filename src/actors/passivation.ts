/**
 * Passivation: actors idle for `idleMs` with an empty mailbox leave memory (their timers stay
 * armed) — unless their type's `keepLoaded` says so, or their `warmTimer` fires within `warmMs`.
 * One whose type's `passivateEarly` says so, and whose `warmTimer` is further off than `warmMs`
 * and `idleMs` together, leaves after EARLY_IDLE_MS instead.
 * A passivated actor is read back that long before its `warmTimer` (at most
 * `WARM_LOADS_IN_FLIGHT` loads at once, a background lane), so its timer finds it in memory.
 */
import { isKairosError } from "../lib/errors.ts";
import { partitionOf } from "../cluster/placement.ts";
import { TimerQueue } from "../cluster/timer-queue.ts";
import type { HostCore } from "./host-core.ts";
import type { ActorRegistration } from "./registration.ts";
import { timerKey } from "./reminders.ts";
import type { Instance, PassivationPart } from "./types.ts";

/**
 * How long before its `warmTimer` (a job's `fire`) an actor is read back and kept in memory. Job
 * actors passivate a minute after their last message; a top-of-the-hour burst read 166,000 of
 * 200,000 back in its look-ahead window (a minute then) (one KV get, a decode and the re-arming of
 * its timers
 * each, ~8 % of the scheduler's main thread then), when the same work fits in the quiet minutes
 * before.
 */
export const WARM_MS = 120_000;
/**
 * The idle time after which an actor leaves memory when its type's `passivateEarly` says so and
 * its `warmTimer` is further off than `warmMs` and the host's idle time together (when the host's
 * idle time is longer): it would leave before its warm-up window anyway, and be read back in it,
 * so only when it leaves changes. With the host's minute, 100,000 jobs created in batches for
 * later kept ~300 MB of job states in memory for that minute. The sweep runs every quarter of the
 * host's idle time (src/server/node.ts), so such an actor leaves 5-20 s after its last turn.
 * Pitfall: read back within seconds of its last write, a deposed stream leader may answer an
 * older state; the host keeps its revision as a floor (`rememberEarly`), as for a dropped actor.
 */
export const EARLY_IDLE_MS = 5_000;
/** Most ahead-of-time loads in flight on a node (each one KV get): a background lane. */
export const WARM_LOADS_IN_FLIGHT = 16;
/**
 * Actors a sweep looks at between two yields to the event loop (`sweep`): a sweep that passivated
 * 54,000 of 64,000 job actors at once held the loop for 370 ms, and an API read waited behind it.
 */
export const SWEEP_SLICE = 1_000;

export class Passivation implements PassivationPart {
  readonly #c: HostCore;
  /**
   * Ahead-of-time loads (see `warmTimer`): due ones wait in `#warmDue`, at most
   * `WARM_LOADS_IN_FLIGHT` run.
   */
  readonly #warmMs: number;
  readonly #warm: TimerQueue<{ type: string; id: string }>;
  #warmDue: { type: string; id: string }[] = [];
  #warmHead = 0;
  #warmLoads = 0;
  #warmed = 0;
  /** The actors a sweep under way has yet to look at (see `sweep`). */
  #sweeping: Iterator<Instance> | undefined;
  #cancelSweep: (() => void) | undefined;
  #stopped = false;

  constructor(c: HostCore) {
    this.#c = c;
    const { o } = c;
    this.#warmMs = o.warmMs ?? WARM_MS;
    if (!Number.isFinite(this.#warmMs) || this.#warmMs < 0)
      throw new RangeError(`warmMs must be >= 0, got ${this.#warmMs}`);
    this.#warm = new TimerQueue(o.clock, (_k, a) => {
      this.#warmDue.push(a);
      this.#pumpWarm();
    });
  }

  /**
   * Actors read back ahead of their `warmTimer` so far (a load that found one in memory does not
   * count).
   */
  get warmed(): number {
    return this.#warmed;
  }

  /** Starts due ahead-of-time loads while fewer than `WARM_LOADS_IN_FLIGHT` run. */
  #pumpWarm(): void {
    const c = this.#c;
    const { o } = c;
    while (this.#warmLoads < WARM_LOADS_IN_FLIGHT && this.#warmHead < this.#warmDue.length) {
      const a = this.#warmDue[this.#warmHead++]!;
      if (this.#warmHead === this.#warmDue.length) {
        this.#warmDue = [];
        this.#warmHead = 0;
      } else if (this.#warmHead > 1024 && this.#warmHead * 2 > this.#warmDue.length) {
        this.#warmDue.splice(0, this.#warmHead); // served entries do not stay in memory
        this.#warmHead = 0;
      }
      const reg = c.types.get(a.type);
      const partition = partitionOf(a, o.partitions);
      if (!reg || !c.accepting.has(partition) || !o.isTrusted(partition)) continue;
      // Still worth it: its timer still armed and that close (not cancelled, moved, fired or
      // dropped with its partition while this entry waited for a free load).
      if (!this.#warmTimerClose(reg, partition, a.id, o.clock.now())) continue;
      const inst = c.instance(reg, a.type, a.id, partition);
      // In memory, or on its way.
      if (inst.loaded || inst.running || inst.mailbox.length > 0) continue;
      this.#warmLoads++;
      c.parts.mailbox
        .loadAhead(inst)
        // A failed load is redone by the timer's own message; only the unexpected is reported.
        .then(
          () => void this.#warmed++,
          (e: unknown) => {
            if (!isKairosError(e, "not_owner"))
              o.onError(`loading ${a.type}/${a.id} ahead of its timer`, e);
          },
        )
        .finally(() => {
          this.#warmLoads--;
          this.#pumpWarm();
        });
    }
  }

  /**
   * A `warmTimer` armed at `atMs`: the actor is loaded `warmMs` before it if passivated by then.
   */
  warmAhead(inst: Instance, atMs: number): void {
    if (this.#warmMs === 0) return;
    // Loaded ahead if it is passivated by then (a timer closer than that keeps it in memory).
    const key = `${inst.partition}|${inst.type}|${inst.id}`;
    if (atMs - this.#warmMs > this.#c.o.clock.now())
      this.#warm.schedule(key, atMs - this.#warmMs, { type: inst.type, id: inst.id });
    else this.#warm.cancel(key);
  }

  /** The `warmTimer` was cancelled: no load ahead. */
  cancelWarm(inst: Instance): void {
    this.#warm.cancel(`${inst.partition}|${inst.type}|${inst.id}`);
  }

  /**
   * Passivates actors idle longer than `idleMs`, or EARLY_IDLE_MS (see `passivateEarly`); timers
   * stay armed. The first SWEEP_SLICE actors are looked at now, the rest in later turns of the
   * event loop.
   */
  sweep(): void {
    // A sweep still under way goes on where it is (each slice judges with its own `now`).
    if (this.#sweeping) return;
    this.#c.pruneEarlyFloors();
    this.#sweeping = this.#c.actors.values();
    this.#sweepSlice();
  }

  /**
   * Looks at up to SWEEP_SLICE actors, then yields (a timer of 0) and goes on until every actor
   * was seen once. A Map iterator visits the entries present when it reaches them, so actors
   * activated or passivated meanwhile are met or skipped correctly.
   */
  #sweepSlice(): void {
    const c = this.#c;
    const it = this.#sweeping;
    if (!it || this.#stopped) return;
    const now = c.o.clock.now();
    try {
      for (let n = 0; n < SWEEP_SLICE; n++) {
        const next = it.next();
        if (next.done) {
          this.#sweeping = undefined;
          return;
        }
        const a = next.value;
        const how = this.#mayPassivate(a, now);
        if (how === "keep") continue;
        if (how === "early") c.rememberEarly(a);
        c.actors.delete(a.key);
        c.o.events.emit({ type: "actor_passivated", actorType: a.type, id: a.id });
      }
    } catch (e) {
      // A hook or listener that throws ends this sweep, not every later one.
      this.#sweeping = undefined;
      c.o.onError("sweeping idle actors", e);
      return;
    }
    this.#cancelSweep = c.o.clock.setTimer(0, () => {
      this.#cancelSweep = undefined;
      this.#sweepSlice();
    });
  }

  /** Whether the actor leaves memory now, and after which idle time. */
  #mayPassivate(a: Instance, now: number): Residency {
    if (a.running || a.mailbox.length > 0) return "keep";
    const def = a.reg.definition;
    return residency({
      idleFor: now - a.lastActiveMs,
      idleMs: this.#c.o.idleMs,
      warmMs: this.#warmMs,
      early: () => a.loaded && def.passivateEarly?.(a.state) === true,
      keep: () => a.loaded && def.keepLoaded?.(a.state) === true,
      warmDue: () => this.#warmTimerDue(a.reg, a.partition, a.id),
      now,
    });
  }

  /** When the actor's `warmTimer` fires (undefined: none armed, or no loading ahead). */
  #warmTimerDue(reg: ActorRegistration, partition: number, id: string): number | undefined {
    const name = reg.definition.warmTimer;
    if (name === undefined || this.#warmMs === 0) return undefined;
    return this.#c.parts.reminders
      .queue(reg.definition.type)
      .dueOf(timerKey(partition, reg.definition.type, id, name));
  }

  /** Whether the actor's `warmTimer` is armed and fires within `warmMs`. */
  #warmTimerClose(reg: ActorRegistration, partition: number, id: string, now: number): boolean {
    const due = this.#warmTimerDue(reg, partition, id);
    return due !== undefined && due - now <= this.#warmMs;
  }

  dropPartition(partition: number): void {
    this.#warm.cancelPrefix(`${partition}|`);
  }

  stop(): void {
    this.#stopped = true;
    this.#cancelSweep?.();
    this.#sweeping = undefined;
    this.#warm.stop();
  }
}

/** An idle actor's residency at a sweep: stays, leaves after the host's idle time, or early. */
export type Residency = "keep" | "idle" | "early";

/**
 * Pure. Whether an actor with nothing running or queued leaves memory now. `idle` past `idleMs`,
 * unless `keep` (its type's `keepLoaded`) or its `warmDue` is within `warmMs`; `early` past
 * EARLY_IDLE_MS, when `early` (its type's `passivateEarly`) and its `warmDue` is further off than
 * `warmMs + idleMs` (so it would leave before its warm-up window at the host's idle time too).
 * The state's hooks and the timer are looked up only when the idle time calls for them.
 */
export function residency(a: {
  idleFor: number;
  idleMs: number;
  warmMs: number;
  now: number;
  early: () => boolean;
  keep: () => boolean;
  warmDue: () => number | undefined;
}): Residency {
  const { idleFor, idleMs, warmMs, now } = a;
  if (idleFor <= Math.min(idleMs, EARLY_IDLE_MS)) return "keep";
  if (idleFor <= idleMs && !a.early()) return "keep";
  if (a.keep()) return "keep";
  const due = a.warmDue();
  if (due !== undefined && due - now <= warmMs) return "keep"; // close: read back ahead anyway
  if (idleFor > idleMs) return "idle";
  return due !== undefined && due - now > warmMs + idleMs ? "early" : "keep";
}
