/**
 * The lease keeper thread's loop (see lease-keeper-thread.ts), apart from how the thread is made:
 * an `InlineLeaseKeeper` ticking every `tickMs` on the thread's clock, every change mirrored into
 * the shared slots, and the commands of the main thread (`ToThread`). Renewals pause while the
 * main loop shows no life for `mainStallMs` (its trust windows then lapse on their own: a wedged
 * process loses its partitions, a busy one keeps them).
 *
 * The worker thread (lease-keeper-worker.ts) runs it over its own NATS connection and the system
 * clock; the simulation (test/sim/lease-thread.ts) runs the same loop on simulated time, with a
 * KV connection of its own that faults can cut apart from the main thread's.
 */
import type { Clock } from "../lib/clock.ts";
import type { KvStore } from "./kv.ts";
import { InlineLeaseKeeper, type LeaseKeeperOptions } from "./lease-keeper.ts";
import { Layout, type FromThread, type ToThread } from "./lease-keeper-thread.ts";

export interface LeaseLoopOptions {
  /** The thread's lease bucket handle (its own connection). */
  kv: KvStore;
  /** The thread's clock: `monoMs` in the main clock's milliseconds (the shared slots' unit). */
  clock: Clock;
  sab: SharedArrayBuffer;
  partitions: number;
  keeper: LeaseKeeperOptions;
  tickMs: number;
  mainStallMs: number;
  /** To the main thread. */
  send(m: FromThread): void;
  /** After a `stop`: the keeper has stopped; close the connection and end the thread. */
  onStopped(): void;
}

export interface LeaseLoop {
  /** A command of the main thread, in order. */
  receive(m: ToThread): void;
}

const int = (ms: number) => BigInt(Math.floor(ms));

/** Starts ticking at once; the caller says `ready` to the main thread. */
export function startLeaseLoop(o: LeaseLoopOptions): LeaseLoop {
  const slots = new BigInt64Array(o.sab);
  const g = o.partitions * Layout.FIELDS;
  const gens = new Map<number, number>();
  const keeper = new InlineLeaseKeeper(
    o.kv,
    o.clock,
    o.keeper,
    (message, err) => o.send({ t: "error", message, err: String(err) }),
    (p, k) => {
      const b = p * Layout.FIELDS;
      Atomics.store(slots, b + Layout.EPOCH, BigInt(k.epoch));
      Atomics.store(slots, b + Layout.REVISION, BigInt(k.revision));
      Atomics.store(slots, b + Layout.TRUSTED_UNTIL, int(k.trustedUntilMs));
      Atomics.store(slots, b + Layout.LAST_RENEW, int(k.lastRenewMs));
      Atomics.store(
        slots,
        b + Layout.RENEWING_SINCE,
        k.renewingSinceMs === undefined ? -1n : int(k.renewingSinceMs),
      );
      Atomics.store(slots, b + Layout.STATE, k.lost === undefined ? 1n : 2n);
      // Last: the main thread reads the slot only once it carries its hold's generation.
      Atomics.store(slots, b + Layout.GEN, BigInt(gens.get(p) ?? 0));
    },
  );
  let stopped = false;
  let cancel: () => void = () => undefined;
  const loop = () => {
    if (stopped) return;
    const now = o.clock.monoMs();
    const silent = now - Number(Atomics.load(slots, g + Layout.MAIN_ALIVE));
    if (silent > o.mainStallMs) Atomics.store(slots, g + Layout.STALLED, int(silent));
    else {
      Atomics.store(slots, g + Layout.STALLED, -1n);
      keeper.tick(now);
    }
    cancel = o.clock.setTimer(o.tickMs, loop);
  };
  loop();
  return {
    receive(m: ToThread): void {
      switch (m.t) {
        case "hold":
          gens.set(m.p, m.gen);
          keeper.hold(m.p, m.lease);
          break;
        case "drop":
          gens.delete(m.p);
          keeper.drop(m.p);
          Atomics.store(slots, m.p * Layout.FIELDS + Layout.STATE, 0n);
          break;
        case "release":
          void keeper.release(m.p).then((revision) => {
            // A hold of the same partition may have come meanwhile (not before the reply, by the
            // manager's order); only clear the slot of this hold.
            if (!keeper.held().includes(m.p)) {
              gens.delete(m.p);
              Atomics.store(slots, m.p * Layout.FIELDS + Layout.STATE, 0n);
            }
            o.send({ t: "released", id: m.id, revision });
          });
          break;
        case "stop":
          stopped = true;
          cancel();
          void keeper.stop().finally(() => o.onStopped());
          break;
        default: {
          const never: never = m;
          void never;
        }
      }
    },
  };
}
