/**
 * The lease keeper's worker thread (see lease-keeper-thread.ts): its own NATS connection and
 * lease bucket handle, running the lease loop (lease-keeper-loop.ts) on this thread's event loop
 * and the process's monotonic clock.
 */
import { parentPort, workerData } from "node:worker_threads";
import { Kvm } from "@nats-io/kv";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { systemClock } from "../lib/clock.ts";
import { connectNats } from "./nats.ts";
import { KV_TIMEOUT_MS, LIBRARY_TIMEOUT_FACTOR, NatsKv } from "./kv-nats.ts";
import { startLeaseLoop } from "./lease-keeper-loop.ts";
import { hrMs, type FromThread, type ThreadData, type ToThread } from "./lease-keeper-thread.ts";

const { data } = workerData as { data: ThreadData };
const port = parentPort!;
const send = (m: FromThread) => port.postMessage(m);

async function main(): Promise<void> {
  const nc = await connectNats({ url: data.natsUrl, name: data.connectionName, ...data.natsAuth });
  const kv = new NatsKv(
    data.bucket,
    await new Kvm(jetstream(nc, { timeout: LIBRARY_TIMEOUT_FACTOR * KV_TIMEOUT_MS })).open(
      data.bucket,
    ),
    await jetstreamManager(nc),
  );
  let stopped = false;
  const loop = startLeaseLoop({
    kv,
    sab: data.sab,
    partitions: data.partitions,
    keeper: data.keeper,
    tickMs: data.tickMs,
    mainStallMs: data.mainStallMs,
    send,
    // Both threads measure on the process's monotonic clock; the shared slots hold the main clock's ms.
    clock: {
      now: () => systemClock.now(),
      monoMs: () => hrMs() + data.offsetMs,
      setTimer: (ms, fn) => systemClock.setTimer(ms, fn),
    },
    onStopped: () => void nc.close().finally(() => port.close()),
  });
  port.on("message", (m: ToThread) => {
    if (m.t === "stop") stopped = true;
    loop.receive(m);
  });
  // A connection closed for good (not by `stop`) ends the thread: the keeper then falls back to
  // renewing inline instead of a thread whose every renewal fails.
  void nc.closed().then(() => {
    if (stopped) return;
    send({ t: "error", message: "lease thread: its NATS connection closed", err: "closed" });
    process.exit(1);
  });
  send({ t: "ready" });
}

main().catch((e: unknown) => {
  send({ t: "fatal", message: e instanceof Error ? e.message : String(e) });
  port.close();
});
