/**
 * The shell around `decideLeases`: mirrors the lease bucket with a watch, renews held leases,
 * enforces the local trust window, and acquires, steals and releases partitions as placement
 * moves. The actor host hears about it through the callbacks and asks `isTrusted(p)` before
 * every state write.
 *
 * Lease key `p.<n>`; value `{ owner, incarnation, epoch, renewedAtMs }`. The epoch is the revision
 * of the write that acquired the lease; renewals keep it (they bump the revision only).
 *
 * Every duration here (trust window, "unchanged for a TTL") is measured on the monotonic clock
 * (`Clock.monoMs`), so a wall-clock step cannot stretch a trust window; `renewedAtMs` in the value
 * is the wall clock, for people only.
 */
import type { Clock } from "../lib/clock.ts";
import { isKairosError } from "../lib/errors.ts";
import { decode, encode } from "./codec.ts";
import type { EventBus } from "./events.ts";
import type { KvStore, KvWatch } from "./kv.ts";
import { decideLeases, trustedUntil, type LeaseView } from "./lease-decision.ts";

export interface LeaseValue {
  owner: string;
  incarnation: string;
  epoch: number;
  renewedAtMs: number;
}

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
}

interface Held {
  epoch: number;
  revision: number;
  trustedUntilMs: number;
  lastRenewMs: number;
}

const key = (p: number) => `p.${p}`;

export class PartitionManager {
  readonly #o: PartitionManagerOptions;
  readonly #mirror = new Map<number, LeaseView>();
  readonly #held = new Map<number, Held>();
  readonly #busy = new Set<number>();
  /** Renewals in flight: a release waits for them so it deletes the lease at its latest revision. */
  readonly #renewing = new Map<number, Promise<void>>();
  /** When the renewal in flight for a partition began (monotonic ms): says why trust lapsed. */
  readonly #renewSince = new Map<number, number>();
  /** Partitions whose actors are loading: not released or re-acquired meanwhile, but renewed. */
  readonly #loading = new Set<number>();
  #watch: KvWatch | undefined;
  #cancelTick: (() => void) | undefined;
  #stopped = false;
  #ticking = false;

  constructor(o: PartitionManagerOptions) {
    this.#o = o;
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
    const h = this.#held.get(p);
    return h !== undefined && this.#o.clock.monoMs() < h.trustedUntilMs;
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
    this.#mirror.set(p, { owner: v.owner, incarnation: v.incarnation, revision, changedAtMs: this.#o.clock.monoMs() });
    const h = this.#held.get(p);
    if (h && revision > h.revision && (v.owner !== this.#o.me || v.incarnation !== this.#o.incarnation)) {
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
      for (const [p, h] of this.#held) {
        if (now >= h.trustedUntilMs) {
          // Which side was late: the renewal's KV write (in flight), or this timer (none began).
          const since = this.#renewSince.get(p);
          this.#lose(p, since !== undefined
            ? `trust window over before renewal (a renewal in flight for ${Math.round(now - since)} ms)`
            : `trust window over before renewal (none in flight; the last began ${Math.round(now - h.lastRenewMs)} ms ago)`);
        }
        else if (now - h.lastRenewMs >= this.#o.renewIntervalMs && !this.#busy.has(p)) {
          const r = this.#renew(p).finally(() => this.#renewing.delete(p));
          this.#renewing.set(p, r);
        }
      }
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
    return encode({ owner: this.#o.me, incarnation: this.#o.incarnation, epoch, renewedAtMs: now } satisfies LeaseValue);
  }

  async #acquire(p: number, expectedRevision: number | undefined): Promise<void> {
    this.#busy.add(p);
    const started = this.#o.clock.monoMs();
    try {
      const v = this.#value(0, this.#o.clock.now());
      const r = expectedRevision === undefined
        ? await this.#o.leases.create(key(p), v)
        : await this.#o.leases.update(key(p), v, expectedRevision);
      if (!r.ok) return; // someone else won; the watch shows who
      const held: Held = {
        epoch: r.revision,
        revision: r.revision,
        lastRenewMs: started,
        trustedUntilMs: trustedUntil(started, this.#o.leaseTtlMs, this.#o.safetyMarginMs),
      };
      this.#held.set(p, held);
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

  async #renew(p: number): Promise<void> {
    const h = this.#held.get(p);
    if (!h) return;
    this.#busy.add(p);
    const started = this.#o.clock.monoMs();
    this.#renewSince.set(p, started);
    try {
      const r = await this.#o.leases.update(key(p), this.#value(h.epoch, this.#o.clock.now()), h.revision);
      if (this.#held.get(p) !== h) return;
      if (!r.ok) {
        this.#lose(p, "lease renewal conflict");
        return;
      }
      h.revision = r.revision;
      h.lastRenewMs = started;
      h.trustedUntilMs = trustedUntil(started, this.#o.leaseTtlMs, this.#o.safetyMarginMs);
    } catch (e) {
      // Unknown outcome or transport failure: keep trusting only until the window closes.
      if (!isKairosError(e)) this.#o.onError(`renew partition ${p}`, e);
    } finally {
      this.#busy.delete(p);
      this.#renewSince.delete(p);
    }
  }

  async #release(p: number): Promise<void> {
    const h = this.#held.get(p);
    if (!h) return;
    this.#busy.add(p);
    try {
      await this.#o.callbacks.onReleasing(p);
      await this.#renewing.get(p);
      this.#held.delete(p);
      // Delete at the latest revision; if it moved (a renewal we did not see), re-read and, if
      // the lease is still ours, delete at that revision — otherwise the next owner would wait
      // for the TTL instead of taking over at once.
      let rev = h.revision;
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
    this.#o.events.emit({ type: "partition_lost", partition: p, reason });
    this.#o.callbacks.onLost(p);
  }
}
