/**
 * Lease keepers: what renews the partition leases a node holds, apart from what decides which it
 * should hold (`PartitionManager`). Two implementations pass one conformance suite
 * (test/unit/cluster/lease-keeper.test.ts, test/integration/lease-keeper.test.ts): `Inline`
 * renews from the manager's tick on the caller's loop and `Clock` (simulation, tests);
 * `ThreadLeaseKeeper` (lease-keeper-thread.ts) from a worker thread with its own connection
 * (production), so a main loop busy for seconds (a burst, a long GC) does not let every trust
 * window lapse.
 *
 * Pitfall: the thread renews only while the main loop shows signs of life (`tick`, within
 * `mainStallMs`), so a wedged process still loses its partitions (as Kafka's heartbeat thread
 * with `max.poll.interval.ms`). Safety does not rest on this: writes are revision-checked and a
 * renewal is a CAS (a conflict = lost at once); a keeper only keeps the trust window open.
 */
import type { Clock } from "../lib/clock.ts";
import { isKairosError } from "../lib/errors.ts";
import { encode } from "./codec.ts";
import type { KvStore } from "./kv.ts";
import { trustedUntil } from "./lease-decision.ts";

export interface LeaseValue {
  owner: string;
  incarnation: string;
  epoch: number;
  renewedAtMs: number;
}

export const leaseKey = (p: number): string => `p.${p}`;

/** A lease as held: its epoch (the acquiring write's revision) and its latest revision. */
export interface HeldLease {
  epoch: number;
  revision: number;
  /** The trust window ends here (monotonic ms of the caller's clock). */
  trustedUntilMs: number;
  /** When the last successful renewal (or the acquire) began (monotonic ms). */
  lastRenewMs: number;
}

export interface LeaseView extends HeldLease {
  /** When the renewal in flight began (monotonic ms); undefined when none is. */
  renewingSinceMs: number | undefined;
  /** Why the keeper gave the lease up on its own (a renewal conflict); undefined while kept. */
  lost: string | undefined;
  /** The keeper paused renewals because the main loop showed no life for this long (ms), if so. */
  stalledMs: number | undefined;
}

export interface LeaseKeeperOptions {
  me: string;
  incarnation: string;
  leaseTtlMs: number;
  renewIntervalMs: number;
  safetyMarginMs: number;
}

export interface LeaseKeeper {
  /** Keep renewing partition `p`'s lease from now on (just acquired). */
  hold(p: number, lease: HeldLease): void;
  /** Stop renewing `p` at once (the partition is lost); a renewal in flight is ignored. */
  drop(p: number): void;
  /** Stop renewing `p` once no renewal is in flight; resolves with the lease's latest revision. */
  release(p: number): Promise<number | undefined>;
  /** What the keeper knows of `p` now; undefined when not held. */
  view(p: number): LeaseView | undefined;
  /** The end of `p`'s trust window (0 when not held): the hot path of `isTrusted`. */
  trustedUntilMs(p: number): number;
  /** The partition manager's tick: renew what is due (inline) / the main loop is alive (thread). */
  tick(nowMs: number): void;
  stop(): Promise<void>;
}

export function leaseValue(
  o: Pick<LeaseKeeperOptions, "me" | "incarnation">,
  epoch: number,
  wallMs: number,
): Uint8Array {
  return encode({
    owner: o.me,
    incarnation: o.incarnation,
    epoch,
    renewedAtMs: wallMs,
  } satisfies LeaseValue);
}

interface Kept extends HeldLease {
  renewingSinceMs: number | undefined;
  inFlight: Promise<void> | undefined;
  lost: string | undefined;
}

/**
 * Renews each held lease every `renewIntervalMs` from `tick`, one renewal in flight per partition.
 * Also the renewal engine of the worker thread (lease-keeper-worker.ts), there with its own clock.
 */
export class InlineLeaseKeeper implements LeaseKeeper {
  readonly #held = new Map<number, Kept>();

  constructor(
    private readonly kv: KvStore,
    private readonly clock: Pick<Clock, "now" | "monoMs">,
    private readonly o: LeaseKeeperOptions,
    private readonly onError: (msg: string, err: unknown) => void,
    /** Told after each renewal's outcome (the thread mirrors it into shared memory). */
    private readonly onChange: (p: number, k: Readonly<Kept>) => void = () => undefined,
  ) {}

  hold(p: number, lease: HeldLease): void {
    const k: Kept = { ...lease, renewingSinceMs: undefined, inFlight: undefined, lost: undefined };
    this.#held.set(p, k);
    this.onChange(p, k);
  }

  drop(p: number): void {
    this.#held.delete(p);
  }

  async release(p: number): Promise<number | undefined> {
    const k = this.#held.get(p);
    if (!k) return undefined;
    await k.inFlight;
    if (this.#held.get(p) === k) this.#held.delete(p);
    return k.revision;
  }

  view(p: number): LeaseView | undefined {
    const k = this.#held.get(p);
    return (
      k && {
        epoch: k.epoch,
        revision: k.revision,
        trustedUntilMs: k.trustedUntilMs,
        lastRenewMs: k.lastRenewMs,
        renewingSinceMs: k.renewingSinceMs,
        lost: k.lost,
        stalledMs: undefined,
      }
    );
  }

  trustedUntilMs(p: number): number {
    return this.#held.get(p)?.trustedUntilMs ?? 0;
  }

  tick(nowMs: number): void {
    for (const [p, k] of this.#held) {
      // Not once its trust window is over: the partition manager gives such a lease up.
      if (
        k.inFlight === undefined &&
        k.lost === undefined &&
        nowMs < k.trustedUntilMs &&
        nowMs - k.lastRenewMs >= this.o.renewIntervalMs
      ) {
        k.inFlight = this.#renew(p, k).finally(() => (k.inFlight = undefined));
      }
    }
  }

  /** Partitions held (the thread's loop and tests). */
  held(): number[] {
    return [...this.#held.keys()];
  }

  async #renew(p: number, k: Kept): Promise<void> {
    const started = this.clock.monoMs();
    k.renewingSinceMs = started;
    this.onChange(p, k);
    try {
      const r = await this.kv.update(
        leaseKey(p),
        leaseValue(this.o, k.epoch, this.clock.now()),
        k.revision,
      );
      if (this.#held.get(p) !== k) return;
      if (!r.ok) {
        k.lost = "lease renewal conflict";
        k.trustedUntilMs = 0;
        return;
      }
      k.revision = r.revision;
      k.lastRenewMs = started;
      k.trustedUntilMs = trustedUntil(started, this.o.leaseTtlMs, this.o.safetyMarginMs);
    } catch (e) {
      // Unknown outcome or transport failure: keep trusting only until the window closes.
      if (!isKairosError(e)) this.onError(`renew partition ${p}`, e);
    } finally {
      k.renewingSinceMs = undefined;
      if (this.#held.get(p) === k) this.onChange(p, k);
    }
  }

  async stop(): Promise<void> {
    await Promise.all([...this.#held.values()].map((k) => k.inFlight ?? Promise.resolve()));
    this.#held.clear();
  }
}
