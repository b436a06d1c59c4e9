/**
 * The worker's start loop alone (`npm run bench -- worker-starts [--attempts 200000] [--no-md]`):
 * a diagnostic for the burst benchmark's tail, whose bound is one worker starting every attempt
 * of the due second in one loop.
 *
 * A real `Worker` (src/worker/worker.ts) with the real `noop` executor, on the simulation's bus and
 * clock (test/sim): N attempts are offered for one instant a minute ahead and acknowledged with a
 * cover through their start by an owner this benchmark plays on the partition subjects (batch
 * heartbeats answered with `cover_ms`, completion reports with ok), as the job actors of the
 * burst benchmark do. Then the simulated clock reaches the instant and the worker's timer starts
 * them all. Measured in real time (performance.now): from the first start to the last (the
 * executor's own calls), the whole timer turn with its completions, and V8's GC pauses inside the
 * loop (a PerformanceObserver). It leaves out NATS, msgpack on a socket and the log lines of a
 * real process, so it is a floor for the burst's spread, not the burst's figure.
 *
 * Last line: one JSON object `{attempts, started, started_events, loop_ms, us_per_start,
 * gc_ms_in_loop, gc_count_in_loop, turn_ms, offers_ms}`; it fails if not every attempt started
 * (and was reported started) at the instant.
 */
import { PerformanceObserver, performance } from "node:perf_hooks";
import { decode, encode } from "../src/cluster/codec.ts";
import {
  ActorRouter,
  type ActorReply,
  type BatchRequest,
  type ItemResult,
} from "../src/cluster/router.ts";
import { seededRandom } from "../src/lib/random.ts";
import { NoopExecutor } from "../src/sandbox/noop.ts";
import { resolveExecutorOptions } from "../src/sandbox/options.ts";
import type { Execution, Executor, RunIdentity, TaskSpec } from "../src/sandbox/types.ts";
import { workerSubject, type StartReply, type StartRequest } from "../src/protocol/worker.ts";
import { Worker } from "../src/worker/worker.ts";
import { SimBus } from "../test/sim/sim-bus.ts";
import { SimClock, drainMicrotasks } from "../test/sim/sim-clock.ts";
import { appendSection, machine } from "./report.ts";

const CLUSTER = "bench";
const PARTITIONS = 64;
const TTL = 30_000;
const T0 = 1_800_000_000_000;
/** Offers in flight at once: the simulated bus matches each message against every open reply inbox. */
const OFFER_CHUNK = 25;

function arg(args: string[], name: string, dflt: number): number {
  const i = args.indexOf(`--${name}`);
  if (i < 0) return dflt;
  const v = Number(args[i + 1]);
  if (!Number.isInteger(v) || v < 1) throw new Error(`--${name} must be an integer >= 1`);
  return v;
}

/** The noop executor, with the real time of its first and last start. */
class TimedNoop implements Executor {
  readonly kind = "noop" as const;
  first = 0;
  last = 0;
  starts = 0;
  constructor(private readonly inner: NoopExecutor) {}
  start(task: TaskSpec, id: RunIdentity): Execution {
    const now = performance.now();
    if (this.starts++ === 0) this.first = now;
    this.last = now;
    return this.inner.start(task, id);
  }
  reapOrphans(isLive: (runId: string, attempt: number) => boolean): Promise<number> {
    return this.inner.reapOrphans(isLive);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

export async function run(args: string[]): Promise<void> {
  const n = arg(args, "attempts", 200_000);
  const md = !args.includes("--no-md");
  const sim = new SimClock(T0);
  const bus = new SimBus({ clock: sim, random: seededRandom(1) });
  const workerEp = bus.endpoint("worker");
  const ownerEp = bus.endpoint("owner");
  const schedEp = bus.endpoint("sched");
  const dueMs = T0 + 60_000;
  // The owners: every heartbeat acknowledged with a cover until start_at + TTL (run-lifecycle.ts
  // `heartbeatAck`), every completion report with ok.
  ownerEp.subscribe(`kairos.${CLUSTER}.p.*`, {
    queue: "owners",
    callback: (_e, m) => {
      const req = decode<BatchRequest>(m.data);
      const v: ItemResult[] = req.b.map((it) => {
        const msg = it.m as { kind: string; started_at_ms?: number };
        if (msg.kind === "heartbeat" && msg.started_at_ms === undefined && dueMs + TTL > sim.now())
          return { ok: true, v: { ok: true, cover_ms: dueMs + TTL - sim.now() } };
        return { ok: true, v: { ok: true } };
      });
      m.respond(encode({ ok: true, v } satisfies ActorReply));
    },
  });
  const router = new ActorRouter({
    nc: workerEp,
    clusterName: CLUSTER,
    clock: sim,
    random: seededRandom(2),
    partitions: PARTITIONS,
  });
  const executor = new TimedNoop(
    new NoopExecutor(resolveExecutorOptions({ workerId: "w1", clock: sim, log: () => undefined })),
  );
  let startedEvents = 0;
  const worker = new Worker({
    workerId: "w1",
    clusterName: CLUSTER,
    slots: n,
    heartbeatIntervalMs: 1_000,
    completionDeadlineMs: 60_000,
    nc: workerEp,
    router,
    executor,
    clock: sim,
    random: seededRandom(3),
    log: () => undefined,
    inboxes: "shared", // the simulated bus's `_INBOX.` replies (reply-guard.ts)
    onEvent: (e) => {
      if (e.type === "started") startedEvents++;
    },
  });
  await worker.start();
  await drainMicrotasks();
  // Offers, in chunks (each a request on the simulated bus), all for the one instant.
  const t0 = performance.now();
  for (let i = 0; i < n; i += OFFER_CHUNK) {
    const replies: Promise<unknown>[] = [];
    for (let j = i; j < Math.min(n, i + OFFER_CHUNK); j++) {
      const req: StartRequest = {
        job_actor: `t${j % 10}.j${j}`,
        tenant_id: `t${j % 10}`,
        job_id: `j${j}`,
        run_id: `r${j}`,
        attempt: 1,
        fence: 1,
        scheduled_for_ms: dueMs,
        start_at_ms: dueMs,
        task: { image: "noop", args: ["noop"], env: {}, timeout_s: 60 },
        lease_ttl_ms: TTL,
      };
      replies.push(
        schedEp
          .request(workerSubject(CLUSTER, "w1", "start"), encode(req), { timeout: 10_000 })
          .then((m) => {
            if (!decode<StartReply>(m.data).accepted) throw new Error(`offer r${j} refused`);
          }),
      );
    }
    await drainMicrotasks();
    await Promise.all(replies);
  }
  // Claims acknowledged (with their covers) well before the instant.
  await sim.runUntil(dueMs - 5_000);
  const offerMs = performance.now() - t0;
  const gc: { start: number; duration: number }[] = [];
  const obs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) gc.push({ start: e.startTime, duration: e.duration });
  });
  obs.observe({ entryTypes: ["gc"] });
  const turn0 = performance.now();
  await sim.runUntil(dueMs);
  const turnMs = performance.now() - turn0;
  await new Promise((r) => setImmediate(r)); // the observer's entries are delivered asynchronously
  obs.disconnect();
  const inLoop = gc.filter((g) => g.start >= executor.first && g.start <= executor.last);
  const loopMs = executor.last - executor.first;
  await worker.stop();
  if (executor.starts !== n || startedEvents !== n)
    throw new Error(
      `${executor.starts} of ${n} attempts started at the instant (${startedEvents} started events): the figure would not be the loop's`,
    );
  const summary = {
    attempts: n,
    started: executor.starts,
    started_events: startedEvents,
    loop_ms: Math.round(loopMs),
    us_per_start: Number(((loopMs * 1000) / Math.max(1, executor.starts - 1)).toFixed(2)),
    gc_ms_in_loop: Math.round(inLoop.reduce((a, g) => a + g.duration, 0)),
    gc_count_in_loop: inLoop.length,
    turn_ms: Math.round(turnMs),
    offers_ms: Math.round(offerMs),
  };
  const lines = [
    `${n} attempts offered for one instant (simulated bus, ${Math.round(offerMs)} ms real time); started ${executor.starts} at the instant`,
    `start loop: first to last start ${summary.loop_ms} ms = ${summary.us_per_start} µs a start; GC inside it ${summary.gc_ms_in_loop} ms (${summary.gc_count_in_loop} pauses); the whole timer turn with its completions ${summary.turn_ms} ms`,
  ];
  for (const l of lines) console.log(l);
  if (md)
    await appendSection(
      "worker start loop (noop executor, simulated bus)",
      [
        `date: ${new Date().toISOString()}; machine: ${machine()}`,
        `command: \`npm run bench -- worker-starts ${args.join(" ")}\``,
      ],
      lines,
      false,
    );
  console.log(JSON.stringify(summary));
}
