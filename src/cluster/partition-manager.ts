/**
 * The shell around `decideLeases`: mirrors the lease bucket with a watch, enforces the local trust
 * window, and acquires, steals and releases partitions as placement moves; renewals are a
 * `LeaseKeeper`'s (lease-keeper.ts). The actor host hears of it through callbacks and asks
 * `isTrusted(p)` before every state write. Lease key `p.<n>` → `{ owner, incarnation, epoch,
 * renewedAtMs }`; the epoch is the revision of the acquiring write (renewals keep it).
 *
 * Pitfalls: every duration (trust window, "unchanged for a TTL") is on the monotonic clock, so a
 * wall-clock step cannot stretch a trust window (`renewedAtMs` is for people only). This class
 * decides the loss: at each tick a lease whose trust window is over, or that the keeper found
 * taken, is lost.
 */
import type { Clock } from "../lib/clock.ts";
import { isKairosError } from "../lib/errors.ts";
import { decode } from "./codec.ts";
import type { EventBus } from "./events.ts";
import type { KvStore, KvWatch } from "./kv.ts";
import { decideLeases, trustedUntil, type LeaseView } from "./lease-decision.ts";
import {
  InlineLeaseKeeper,
  leaseKey as key,
  leaseValue,
  type LeaseKeeper,
  type LeaseValue,
} from "./lease-keeper.ts";

export type { LeaseValue } from "./lease-keeper.ts";

export interface PartitionCallbacks {
  /** The partition is ours under `epoch`: subscribe, load reminder-bearing actors. */
  onAcquired(partition: number, epoch: number): Promise<void>;
  /** Graceful handoff: stop taking messages, finish the current ones, passivate. */
  onReleasing(partition: number): Promise<void>;
  /** Lost without warning (CAS conflict / trust window over): drop everything, write nothing. */
  onLost(partition: number): void;
}

export interface PartitionManagerOptions {
  leases: KvStore;
  clock: Clock;
  events: EventBus;
  me: string;
  incarnation: string;
  partitions: number;
  leaseTtlMs: number;
  renewIntervalMs: number;
  safetyMarginMs: number;
  tickMs: number;
  desired: () => readonly (string | undefined)[];
  callbacks: PartitionCallbacks;
  onError: (msg: string, err: unknown) => void;
  /** Renews held leases (default: inline, from this manager's tick, on `leases` and `clock`). */
  keeper?: LeaseKeeper;
}

interface Held {
  epoch: number;
}

export class PartitionManager {
  readonly #o: PartitionManagerOptions;
  readonly #mirror = new Map<number, LeaseView>();
  readonly #held = new Map<number, Held>();
  readonly #busy = new Set<number>();
  readonly #keeper: LeaseKeeper;
  /** Partitions whose actors are loading: not released or re-acquired meanwhile, but renewed. */
  readonly #loading = new Set<number>();
  #watch: KvWatch | undefined;
  #cancelTick: (() => void) | undefined;
  #stopped = false;
  #ticking = false;

  constructor(o: PartitionManagerOptions) {
    this.#o = o;
    this.#keeper =
      o.keeper ??
      new InlineLeaseKeeper(
        o.leases,
        o.clock,
        {
          me: o.me,
          incarnation: o.incarnation,
          leaseTtlMs: o.leaseTtlMs,
          renewIntervalMs: o.renewIntervalMs,
          safetyMarginMs: o.safetyMarginMs,
        },
        o.onError,
      );
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.#o.leases
        .watch("p.*", (c) => this.#onLeaseChange(c.key, c.value, c.revision), resolve)
        .then((w) => (this.#watch = w), reject);
    });
    this.#schedule(0);
  }

  /** True while this node may act as the partition's owner (lease held, trust window open). */
  isTrusted(p: number): boolean {
    return this.#held.has(p) && this.#o.clock.monoMs() < this.#keeper.trustedUntilMs(p);
  }

  /** True while this node holds the partition's lease (trusted or in a blip before the loss). */
  holds(p: number): boolean {
    return this.#held.has(p);
  }

  epochOf(p: number): number | undefined {
    return this.#held.get(p)?.epoch;
  }

  heldPartitions(): number[] {
    return [...this.#held.keys()].sort((a, b) => a - b);
  }

  /** Nudges the loop (membership changed). */
  poke(): void {
    this.#schedule(0);
  }

  /** Releases every held partition gracefully (SIGTERM path). */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#cancelTick?.();
    await Promise.all([...this.#held.keys()].map((p) => this.#release(p)));
    this.#watch?.stop();
    await this.#keeper.stop();
  }

  #onLeaseChange(k: string, value: Uint8Array | null, revision: number): void {
    const p = Number(k.slice(2));
    if (!Number.isInteger(p)) return;
    if (value === null) {
      this.#mirror.delete(p);
      this.poke();
      return;
    }
    const v = decode<LeaseValue>(value);
    this.#mirror.set(p, {
      owner: v.owner,
      incarnation: v.incarnation,
      revision,
      changedAtMs: this.#o.clock.monoMs(),
    });
    const h = this.#keeper.view(p);
    if (
      this.#held.has(p) &&
      h &&
      revision > h.revision &&
      (v.owner !== this.#o.me || v.incarnation !== this.#o.incarnation)
    ) {
      this.#lose(p, "lease taken by another node");
    }
  }

  #schedule(delayMs: number): void {
    if (this.#stopped) return;
    this.#cancelTick?.();
    this.#cancelTick = this.#o.clock.setTimer(delayMs, () => {
      this.#cancelTick = undefined;
      void this.#tick();
    });
  }

  async #tick(): Promise<void> {
    if (this.#ticking || this.#stopped) return;
    this.#ticking = true;
    try {
      const now = this.#o.clock.monoMs();
      for (const p of [...this.#held.keys()]) {
        const v = this.#keeper.view(p);
        if (v?.lost !== undefined) this.#lose(p, v.lost);
        else if (v === undefined || now >= v.trustedUntilMs) {
          // Which side was late: the renewal's KV write (in flight), this timer (none began), or
          // the main loop (the keeper's thread paused its renewals).
          this.#lose(
            p,
            v?.stalledMs !== undefined
              ? `trust window over before renewal (renewals paused: the main event loop silent for ${Math.round(v.stalledMs)} ms)`
              : v?.renewingSinceMs !== undefined
                ? `trust window over before renewal (a renewal in flight for ${Math.round(now - v.renewingSinceMs)} ms)`
                : `trust window over before renewal (none in flight; the last began ${Math.round(now - (v?.lastRenewMs ?? now))} ms ago)`,
          );
        }
      }
      // After the losses: no renewal starts for a lease this node has just given up.
      this.#keeper.tick(now);
      const actions = decideLeases({
        me: this.#o.me,
        incarnation: this.#o.incarnation,
        partitions: this.#o.partitions,
        desired: this.#o.desired(),
        leases: this.#mirror,
        held: new Set(this.#held.keys()),
        busy: new Set([...this.#busy, ...this.#loading]),
        nowMs: now,
        leaseTtlMs: this.#o.leaseTtlMs,
      });
      for (const p of actions.acquire) void this.#acquire(p, undefined);
      for (const s of actions.steal) void this.#acquire(s.partition, s.expectedRevision);
      for (const p of actions.release) void this.#release(p);
    } finally {
      this.#ticking = false;
      this.#schedule(this.#o.tickMs);
    }
  }

  #value(epoch: number, now: number): Uint8Array {
    return leaseValue(this.#o, epoch, now);
  }

  async #acquire(p: number, expectedRevision: number | undefined): Promise<void> {
    this.#busy.add(p);
    const started = this.#o.clock.monoMs();
    try {
      const v = this.#value(0, this.#o.clock.now());
      const r =
        expectedRevision === undefined
          ? await this.#o.leases.create(key(p), v)
          : await this.#o.leases.update(key(p), v, expectedRevision);
      if (!r.ok) return; // someone else won; the watch shows who
      this.#held.set(p, { epoch: r.revision });
      this.#keeper.hold(p, {
        epoch: r.revision,
        revision: r.revision,
        lastRenewMs: started,
        trustedUntilMs: trustedUntil(started, this.#o.leaseTtlMs, this.#o.safetyMarginMs),
      });
      this.#o.events.emit({ type: "partition_acquired", partition: p, epoch: r.revision });
      // Loading may take longer than a renew interval: let the renew loop run meanwhile.
      this.#busy.delete(p);
      this.#loading.add(p);
      try {
        await this.#o.callbacks.onAcquired(p, r.revision);
      } finally {
        this.#loading.delete(p);
      }
    } catch (e) {
      // Timeout: outcome unknown. The watch will show our lease if it was applied; the renew
      // loop cannot adopt it without the revision, so it simply expires and is re-acquired.
      if (!isKairosError(e)) this.#o.onError(`acquire partition ${p}`, e);
    } finally {
      this.#busy.delete(p);
    }
  }

  async #release(p: number): Promise<void> {
    if (!this.#held.has(p)) return;
    this.#busy.add(p);
    try {
      // The keeper renews meanwhile: passivating a partition's actors may outlast a trust window.
      await this.#o.callbacks.onReleasing(p);
      const last = await this.#keeper.release(p);
      if (!this.#held.delete(p) || last === undefined) return; // lost meanwhile
      // Delete at the latest revision; if it moved (a renewal we did not see), re-read and, if
      // the lease is still ours, delete at that revision — otherwise the next owner would wait
      // for the TTL instead of taking over at once.
      let rev = last;
      for (let i = 0; i < 3; i++) {
        const r = await this.#o.leases.delete(key(p), rev).catch(() => null);
        if (!r || r.ok) break;
        const e = await this.#o.leases.get(key(p)).catch(() => null);
        if (!e) break;
        const v = decode<LeaseValue>(e.value);
        if (v.owner !== this.#o.me || v.incarnation !== this.#o.incarnation) break;
        rev = e.revision;
      }
      this.#o.events.emit({ type: "partition_released", partition: p });
    } finally {
      this.#busy.delete(p);
    }
  }

  #lose(p: number, reason: string): void {
    if (!this.#held.delete(p)) return;
    this.#keeper.drop(p);
    this.#o.events.emit({ type: "partition_lost", partition: p, reason });
    this.#o.callbacks.onLost(p);
  }
}
