/**
 * The lease keeper's worker thread (see lease-keeper-thread.ts): its own NATS connection and
 * lease bucket handle, an `InlineLeaseKeeper` ticking every `tickMs` on this thread's event loop,
 * every change mirrored into the shared slots. Renewals pause while the main loop shows no life
 * for `mainStallMs` (its trust windows then lapse on their own: a wedged process loses its
 * partitions, a busy one keeps them).
 */
import { parentPort, workerData } from "node:worker_threads";
import { Kvm } from "@nats-io/kv";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { systemClock } from "../lib/clock.ts";
import { connectNats } from "./nats.ts";
import { KV_TIMEOUT_MS, LIBRARY_TIMEOUT_FACTOR, NatsKv } from "./kv-nats.ts";
import { InlineLeaseKeeper } from "./lease-keeper.ts";
import { hrMs, Layout, type FromThread, type ThreadData, type ToThread } from "./lease-keeper-thread.ts";

const { data } = workerData as { data: ThreadData };
const port = parentPort!;
const send = (m: FromThread) => port.postMessage(m);
const slots = new BigInt64Array(data.sab);
const g = data.partitions * Layout.FIELDS;
const mono = () => hrMs() + data.offsetMs;
const int = (ms: number) => BigInt(Math.floor(ms));

async function main(): Promise<void> {
  const nc = await connectNats({ url: data.natsUrl, name: data.connectionName, ...data.natsAuth });
  const kv = new NatsKv(data.bucket, await new Kvm(jetstream(nc, { timeout: LIBRARY_TIMEOUT_FACTOR * KV_TIMEOUT_MS })).open(data.bucket), await jetstreamManager(nc));
  const gens = new Map<number, number>();
  const keeper = new InlineLeaseKeeper(
    kv,
    { now: () => systemClock.now(), monoMs: mono },
    data.keeper,
    (message, err) => send({ t: "error", message, err: String(err) }),
    (p, k) => {
      const b = p * Layout.FIELDS;
      Atomics.store(slots, b + Layout.EPOCH, BigInt(k.epoch));
      Atomics.store(slots, b + Layout.REVISION, BigInt(k.revision));
      Atomics.store(slots, b + Layout.TRUSTED_UNTIL, int(k.trustedUntilMs));
      Atomics.store(slots, b + Layout.LAST_RENEW, int(k.lastRenewMs));
      Atomics.store(slots, b + Layout.RENEWING_SINCE, k.renewingSinceMs === undefined ? -1n : int(k.renewingSinceMs));
      Atomics.store(slots, b + Layout.STATE, k.lost === undefined ? 1n : 2n);
      // Last: the main thread reads the slot only once it carries its hold's generation.
      Atomics.store(slots, b + Layout.GEN, BigInt(gens.get(p) ?? 0));
    },
  );
  let stopped = false;
  let cancel: () => void = () => undefined;
  const loop = () => {
    if (stopped) return;
    const now = mono();
    const silent = now - Number(Atomics.load(slots, g + Layout.MAIN_ALIVE));
    if (silent > data.mainStallMs) Atomics.store(slots, g + Layout.STALLED, int(silent));
    else {
      Atomics.store(slots, g + Layout.STALLED, -1n);
      keeper.tick(now);
    }
    cancel = systemClock.setTimer(data.tickMs, loop);
  };
  port.on("message", (m: ToThread) => {
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
          send({ t: "released", id: m.id, revision });
        });
        break;
      case "stop":
        stopped = true;
        cancel();
        void keeper.stop().finally(() => nc.close().finally(() => port.close()));
        break;
      default: {
        const never: never = m;
        void never;
      }
    }
  });
  // A connection closed for good (not by `stop`) ends the thread: the keeper then falls back to
  // renewing inline instead of a thread whose every renewal fails (review finding 1).
  void nc.closed().then(() => {
    if (stopped) return;
    send({ t: "error", message: "lease thread: its NATS connection closed", err: "closed" });
    process.exit(1);
  });
  send({ t: "ready" });
  loop();
}

main().catch((e: unknown) => {
  send({ t: "fatal", message: e instanceof Error ? e.message : String(e) });
  port.close();
});
