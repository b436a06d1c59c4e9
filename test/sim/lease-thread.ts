/**
 * The lease keeper's thread in the simulation: the production loop (src/cluster/lease-keeper-loop.ts)
 * driven by production's `ThreadLeaseKeeper`, on a simulated thread of a scheduler process.
 *
 * - The thread is a `SimProcess` of its own: a SIGSTOP of the process pauses it with the main
 *   thread, a crash kills both, but a stalled main event loop (`stall`: the main thread's process
 *   paused alone) leaves it running — as a worker thread keeps renewing while the main loop is
 *   busy, until `mainStallMs` of silence.
 * - It has a KV connection of its own (a `KvView` over the shared buckets), which a fault can cut
 *   apart from the main thread's (`thread_cut`).
 * - Messages go each way through the receiving thread's gate, one simulation step later (a
 *   paused main thread reads its backlog on resume); the shared slots are one `SharedArrayBuffer`,
 *   read and written at once, as shared memory is.
 * - The thread can die (`kill`, a fault): the keeper hears `exit` and falls back to renewing inline.
 */
import type {
  FromThread,
  LeaseThread,
  ThreadData,
  ToThread,
} from "../../src/cluster/lease-keeper-thread.ts";
import { startLeaseLoop, type LeaseLoop } from "../../src/cluster/lease-keeper-loop.ts";
import type { KvStore } from "../../src/cluster/kv.ts";
import type { SimClock, SimProcess } from "./sim-clock.ts";

type Listener = (v: never) => void;

export class SimLeaseThread implements LeaseThread {
  readonly #listeners = new Map<string, { fn: Listener; once: boolean }[]>();
  readonly #sim: SimClock;
  readonly #main: SimProcess;
  readonly #thread: SimProcess;
  #loop: LeaseLoop | undefined;
  #exited = false;

  constructor(o: {
    sim: SimClock;
    main: SimProcess;
    thread: SimProcess;
    kv: KvStore;
    data: ThreadData;
  }) {
    this.#sim = o.sim;
    this.#main = o.main;
    this.#thread = o.thread;
    // The worker thread's start: connect (a step), start the loop, say ready.
    o.sim.setTimer(1, () =>
      o.thread.gate(() => {
        this.#loop = startLeaseLoop({
          kv: o.kv,
          clock: o.thread.clock,
          sab: o.data.sab,
          partitions: o.data.partitions,
          keeper: o.data.keeper,
          tickMs: o.data.tickMs,
          mainStallMs: o.data.mainStallMs,
          send: (m) => this.#toMain(m),
          onStopped: () => this.#exit(0),
        });
        this.#toMain({ t: "ready" });
      }),
    );
  }

  postMessage(m: ToThread): void {
    const copy = structuredClone(m);
    this.#sim.setTimer(0, () => this.#thread.gate(() => this.#loop?.receive(copy)));
  }

  on(event: "message" | "error" | "exit", fn: Listener): this {
    this.#listeners.set(event, [...(this.#listeners.get(event) ?? []), { fn, once: false }]);
    return this;
  }

  once(event: "exit", fn: (code: number) => void): this {
    this.#listeners.set(event, [...(this.#listeners.get(event) ?? []), { fn, once: true }]);
    return this;
  }

  terminate(): Promise<number> {
    this.#exit(1);
    return Promise.resolve(1);
  }

  unref(): void {}

  /** The thread dies (a fault): the keeper falls back to renewing inline. */
  kill(): void {
    this.#exit(1);
  }

  #toMain(m: FromThread): void {
    if (this.#exited) return;
    const copy = structuredClone(m);
    this.#sim.setTimer(0, () => this.#main.gate(() => this.#emit("message", copy)));
  }

  #exit(code: number): void {
    if (this.#exited) return;
    this.#exited = true;
    this.#thread.kill();
    this.#sim.setTimer(0, () => this.#main.gate(() => this.#emit("exit", code)));
  }

  #emit(event: string, v: unknown): void {
    const ls = this.#listeners.get(event) ?? [];
    this.#listeners.set(
      event,
      ls.filter((l) => !l.once),
    );
    for (const l of ls) (l.fn as (x: unknown) => void)(v);
  }
}
