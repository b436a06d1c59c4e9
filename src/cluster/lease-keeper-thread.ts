/**
 * `ThreadLeaseKeeper`: partition leases renewed from a worker thread (lease-keeper.ts says why).
 * The thread (lease-keeper-worker.ts, loop in lease-keeper-loop.ts) has its own NATS connection
 * and mirrors what the main thread reads on its hot path — each partition's trust window,
 * revision, renewal in flight, conflict — into shared memory, so `trustedUntilMs(p)` is an
 * atomic load. Commands go by message, in order; a slot carries the generation of the hold that
 * wrote it, so the main thread never reads a slot the thread has not taken over yet.
 *
 * Pitfalls: both threads measure on the process's monotonic clock, converted to the main clock's
 * milliseconds (`performance.now()`). If the thread cannot start or dies, the keeper falls back
 * to renewing inline on the main loop with each lease's latest revision — never to renewing
 * nothing. `spawn` makes the thread: a worker thread by default, simulated time in test/sim.
 */
import { Worker } from "node:worker_threads";
import type { Clock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import type { NatsAuthOptions } from "./nats.ts";
import type { KvStore } from "./kv.ts";
import {
  InlineLeaseKeeper,
  type HeldLease,
  type LeaseKeeper,
  type LeaseKeeperOptions,
  type LeaseView,
} from "./lease-keeper.ts";

/** Shared memory: `FIELDS` BigInt64 per partition, then the globals. */
export const Layout = {
  FIELDS: 8,
  GEN: 0,
  STATE: 1, // 0 free, 1 held, 2 lost (renewal conflict)
  EPOCH: 2,
  REVISION: 3,
  TRUSTED_UNTIL: 4,
  LAST_RENEW: 5,
  RENEWING_SINCE: 6, // -1: none in flight
  /** Globals after the partitions: the main loop's last sign of life; how long renewals have been paused (-1: not). */
  MAIN_ALIVE: 0,
  STALLED: 1,
  GLOBALS: 2,
} as const;

export type ToThread =
  | { t: "hold"; p: number; gen: number; lease: HeldLease }
  | { t: "drop"; p: number }
  | { t: "release"; p: number; id: number }
  | { t: "stop" };

export type FromThread =
  | { t: "ready" }
  | { t: "fatal"; message: string }
  | { t: "error"; message: string; err: string }
  | { t: "released"; id: number; revision: number | undefined };

export interface ThreadLeaseKeeperOptions {
  keeper: LeaseKeeperOptions;
  partitions: number;
  natsUrl: string;
  natsAuth: NatsAuthOptions;
  connectionName: string;
  /** The lease bucket's name (the thread opens it on its own connection). */
  bucket: string;
  tickMs: number;
  /** The thread stops renewing when the main loop has shown no life for this long. */
  mainStallMs: number;
  /** How long the thread may take to connect before the keeper falls back to inline (ms). */
  startTimeoutMs: number;
  /** The main thread's clock: must be `systemClock` (monotonic = performance.now()). */
  clock: Clock;
  /** The main thread's lease bucket: the fallback renews through it. */
  leases: KvStore;
  onError: (msg: string, err: unknown) => void;
  /** Makes the thread (default: a worker thread running lease-keeper-worker.ts). */
  spawn?: (data: ThreadData) => LeaseThread;
}

/** What the keeper needs of its thread: the part of node's `Worker` it uses. */
export interface LeaseThread {
  postMessage(m: ToThread): void;
  on(event: "message", fn: (m: FromThread) => void): unknown;
  on(event: "error", fn: (e: Error) => void): unknown;
  on(event: "exit", fn: (code: number) => void): unknown;
  once(event: "exit", fn: (code: number) => void): unknown;
  terminate(): unknown;
  unref?(): void;
}

/** A worker thread running lease-keeper-worker.ts (TypeScript, through lease-keeper-boot.mjs). */
export function spawnWorkerThread(data: ThreadData): LeaseThread {
  const w = new Worker(new URL("./lease-keeper-boot.mjs", import.meta.url), {
    workerData: { entry: new URL("./lease-keeper-worker.ts", import.meta.url).href, data },
    execArgv: [],
  });
  w.unref();
  return w;
}

/** What the thread is started with: its part of the options, the shared memory, the clock offset. */
export type ThreadData = Pick<
  ThreadLeaseKeeperOptions,
  | "keeper"
  | "partitions"
  | "natsUrl"
  | "natsAuth"
  | "connectionName"
  | "bucket"
  | "tickMs"
  | "mainStallMs"
> & {
  sab: SharedArrayBuffer;
  /** Main clock ms − hrtime ms (constant: both are the process's monotonic clock). */
  offsetMs: number;
};

export const hrMs = (): number => Number(process.hrtime.bigint()) / 1e6;

export class ThreadLeaseKeeper implements LeaseKeeper {
  readonly #o: ThreadLeaseKeeperOptions;
  readonly #slots: BigInt64Array;
  readonly #g: number;
  /** Held partitions: the generation of their hold and the values handed over with it. */
  readonly #held = new Map<number, { gen: number; lease: HeldLease }>();
  readonly #releases = new Map<number, (rev: number | undefined) => void>();
  #worker: LeaseThread | undefined;
  #fallback: InlineLeaseKeeper | undefined;
  #nextGen = 1;
  #nextId = 1;
  #stopping = false;

  private constructor(o: ThreadLeaseKeeperOptions) {
    this.#o = o;
    const sab = new SharedArrayBuffer(8 * (o.partitions * Layout.FIELDS + Layout.GLOBALS));
    this.#slots = new BigInt64Array(sab);
    this.#g = o.partitions * Layout.FIELDS;
  }

  /** Starts the thread and waits for its connection; falls back to inline renewals if it fails. */
  static async start(o: ThreadLeaseKeeperOptions): Promise<ThreadLeaseKeeper> {
    const k = new ThreadLeaseKeeper(o);
    await k.#spawn();
    return k;
  }

  /** True while the thread renews (false: fallen back to the main loop). */
  get threaded(): boolean {
    return this.#fallback === undefined;
  }

  async #spawn(): Promise<void> {
    const o = this.#o;
    Atomics.store(this.#slots, this.#g + Layout.MAIN_ALIVE, BigInt(Math.floor(o.clock.monoMs())));
    Atomics.store(this.#slots, this.#g + Layout.STALLED, -1n);
    const data: ThreadData = {
      sab: this.#slots.buffer as SharedArrayBuffer,
      partitions: o.partitions,
      keeper: o.keeper,
      natsUrl: o.natsUrl,
      natsAuth: o.natsAuth,
      connectionName: o.connectionName,
      bucket: o.bucket,
      tickMs: o.tickMs,
      mainStallMs: o.mainStallMs,
      offsetMs: o.clock.monoMs() - hrMs(),
    };
    const w = (o.spawn ?? spawnWorkerThread)(data);
    this.#worker = w;
    const ready = new Promise<void>((resolve, reject) => {
      const timer = o.clock.setTimer(o.startTimeoutMs, () =>
        reject(
          new KairosError(
            "unavailable",
            `lease thread did not connect within ${o.startTimeoutMs} ms`,
          ),
        ),
      );
      w.on("message", (m: FromThread) => {
        switch (m.t) {
          case "ready":
            timer();
            resolve();
            break;
          case "fatal":
            timer();
            reject(new KairosError("unavailable", `lease thread: ${m.message}`));
            break;
          case "error":
            o.onError(m.message, m.err);
            break;
          case "released":
            this.#releases.get(m.id)?.(m.revision);
            this.#releases.delete(m.id);
            break;
          default: {
            const never: never = m;
            void never;
          }
        }
      });
      w.on("error", (e) => {
        timer();
        reject(e);
      });
      w.on("exit", (code) => {
        timer();
        reject(new KairosError("unavailable", `lease thread exited (${code})`));
        if (!this.#stopping) this.#fallBack(`lease thread exited with code ${code}`);
      });
    });
    try {
      await ready;
    } catch (e) {
      this.#fallBack(e instanceof Error ? e.message : String(e));
    }
  }

  #fallBack(why: string): void {
    if (this.#fallback) return;
    const o = this.#o;
    o.onError("lease renewals fall back to the main event loop", why);
    const inline = new InlineLeaseKeeper(o.leases, o.clock, o.keeper, o.onError);
    for (const p of this.#held.keys()) {
      const v = this.view(p);
      if (v && v.lost === undefined) inline.hold(p, v);
    }
    this.#fallback = inline;
    this.#settleReleases();
    const w = this.#worker;
    this.#worker = undefined;
    if (w) void w.terminate();
  }

  /** Releases the thread will never answer (it is gone): the caller takes the last known revision. */
  #settleReleases(): void {
    for (const resolve of this.#releases.values()) resolve(undefined);
    this.#releases.clear();
  }

  #post(m: ToThread): void {
    this.#worker?.postMessage(m);
  }

  hold(p: number, lease: HeldLease): void {
    if (this.#fallback) return this.#fallback.hold(p, lease);
    const gen = this.#nextGen++;
    this.#held.set(p, { gen, lease: { ...lease } });
    this.#post({ t: "hold", p, gen, lease });
  }

  drop(p: number): void {
    if (this.#fallback) return this.#fallback.drop(p);
    if (this.#held.delete(p)) this.#post({ t: "drop", p });
  }

  async release(p: number): Promise<number | undefined> {
    if (this.#fallback) return this.#fallback.release(p);
    if (!this.#held.has(p)) return undefined;
    const last = this.view(p)?.revision;
    const id = this.#nextId++;
    const rev = await new Promise<number | undefined>((resolve) => {
      this.#releases.set(id, resolve);
      this.#post({ t: "release", p, id });
    });
    this.#held.delete(p);
    // Fell back meanwhile: the inline keeper holds it now.
    const fallback = this.#fallback as InlineLeaseKeeper | undefined;
    if (fallback) return (await fallback.release(p)) ?? last;
    return rev ?? last;
  }

  view(p: number): LeaseView | undefined {
    if (this.#fallback) return this.#fallback.view(p);
    const h = this.#held.get(p);
    if (!h) return undefined;
    const s = this.#slots;
    const b = p * Layout.FIELDS;
    const stalled = Number(Atomics.load(s, this.#g + Layout.STALLED));
    if (Number(Atomics.load(s, b + Layout.GEN)) !== h.gen) {
      return {
        ...h.lease,
        renewingSinceMs: undefined,
        lost: undefined,
        stalledMs: stalled >= 0 ? stalled : undefined,
      };
    }
    const since = Number(Atomics.load(s, b + Layout.RENEWING_SINCE));
    return {
      epoch: Number(Atomics.load(s, b + Layout.EPOCH)),
      revision: Number(Atomics.load(s, b + Layout.REVISION)),
      trustedUntilMs: Number(Atomics.load(s, b + Layout.TRUSTED_UNTIL)),
      lastRenewMs: Number(Atomics.load(s, b + Layout.LAST_RENEW)),
      renewingSinceMs: since >= 0 ? since : undefined,
      lost: Atomics.load(s, b + Layout.STATE) === 2n ? "lease renewal conflict" : undefined,
      stalledMs: stalled >= 0 ? stalled : undefined,
    };
  }

  trustedUntilMs(p: number): number {
    if (this.#fallback) return this.#fallback.trustedUntilMs(p);
    const h = this.#held.get(p);
    if (!h) return 0;
    const b = p * Layout.FIELDS;
    if (Number(Atomics.load(this.#slots, b + Layout.GEN)) !== h.gen) return h.lease.trustedUntilMs;
    return Number(Atomics.load(this.#slots, b + Layout.TRUSTED_UNTIL));
  }

  tick(nowMs: number): void {
    if (this.#fallback) return this.#fallback.tick(nowMs);
    Atomics.store(this.#slots, this.#g + Layout.MAIN_ALIVE, BigInt(Math.floor(nowMs)));
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    if (this.#fallback) return this.#fallback.stop();
    const w = this.#worker;
    if (!w) return;
    const exited = new Promise<void>((resolve) => w.once("exit", () => resolve()));
    this.#post({ t: "stop" });
    // A thread that does not end on its own (its connection hung) is ended.
    const cancel = this.#o.clock.setTimer(5000, () => void w.terminate());
    await exited;
    cancel();
    this.#worker = undefined;
    this.#settleReleases();
  }
}
