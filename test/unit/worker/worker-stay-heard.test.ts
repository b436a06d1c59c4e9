/**
 * A worker starting a burst in one synchronous stretch stays heard: once a heartbeat interval
 * has passed inside the stretch it sends a slot advert and flushes, instead of going silent until
 * the stretch ends (the schedulers forget a worker silent for three intervals; the 200,000 burst's
 * worker was silent ≥ 9-15 s).
 */
import { it } from "node:test";
import assert from "node:assert/strict";
import { decode, encode } from "../../../src/cluster/codec.ts";
import {
  ActorRouter,
  type ActorReply,
  type BatchRequest,
  type ItemResult,
} from "../../../src/cluster/router.ts";
import type { Bus } from "../../../src/cluster/bus.ts";
import type { Clock } from "../../../src/lib/clock.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import type { Execution, Executor } from "../../../src/sandbox/types.ts";
import {
  workerAdvertSubject,
  workerSubject,
  type StartRequest,
} from "../../../src/protocol/worker.ts";
import { Worker } from "../../../src/worker/worker.ts";
import { SimBus } from "../../sim/sim-bus.ts";
import { SimClock, drainMicrotasks } from "../../sim/sim-clock.ts";

const HB = 500;
const T0 = 1_000_000;

it(
  "a worker starting 2,000 attempts in one stretch that takes 6 heartbeat intervals sends adverts from inside it",
  { timeout: 30_000 },
  async () => {
    const sim = new SimClock(T0);
    // The worker's clock: the simulated one plus the time its starts take (each start 1.5 ms, and
    // no timer can fire meanwhile: one synchronous stretch).
    let spent = 0;
    const clock: Clock = {
      now: () => sim.now() + spent,
      monoMs: () => sim.monoMs() + spent,
      setTimer: (ms, fn) => sim.setTimer(ms, fn),
    };
    const bus = new SimBus({ clock: sim, random: seededRandom(1) });
    const ep = bus.endpoint("worker");
    const owner = bus.endpoint("owner");
    const sched = bus.endpoint("sched");
    // Every heartbeat item acknowledged with a cover through its start: attempts start from their timer.
    owner.subscribe("kairos.c.p.*", {
      queue: "owners",
      callback: (_e, m) => {
        const req = decode<BatchRequest>(m.data);
        const v: ItemResult[] = req.b.map(() => ({ ok: true, v: { ok: true, cover_ms: 600_000 } }));
        m.respond(encode({ ok: true, v } satisfies ActorReply));
      },
    });
    // When (on the worker's clock) each advert left the worker: the publish itself, not its delivery.
    const advertsAt: number[] = [];
    const nc: Bus = {
      publish: (subject, data) => {
        if (subject === workerAdvertSubject("c", "w1")) advertsAt.push(clock.now());
        ep.publish(subject, data);
      },
      request: (subject, data, opts) => ep.request(subject, data, opts),
      subscribe: (subject, opts) => ep.subscribe(subject, opts),
      flush: () => ep.flush(),
      isClosed: () => ep.isClosed(),
    };
    const executor: Executor = {
      kind: "noop",
      start(): Execution {
        spent += 1.5;
        return { result: new Promise(() => undefined), kill: async () => undefined };
      },
      reapOrphans: async () => 0,
      close: async () => undefined,
    };
    const worker = new Worker({
      workerId: "w1",
      clusterName: "c",
      slots: 2_000,
      heartbeatIntervalMs: HB,
      completionDeadlineMs: 60_000,
      nc,
      router: new ActorRouter({
        nc: ep,
        clusterName: "c",
        clock: sim,
        random: seededRandom(2),
        partitions: 4,
      }),
      executor,
      clock,
      random: seededRandom(3),
      log: () => undefined,
      inboxes: "shared",
    });
    await worker.start();
    const startAt = T0 + 5_000;
    for (let i = 0; i < 2_000; i++) {
      const req: StartRequest = {
        job_actor: `t1.j${i}`,
        tenant_id: "t1",
        job_id: `j${i}`,
        run_id: `r${i}`,
        attempt: 1,
        fence: 1,
        scheduled_for_ms: startAt,
        start_at_ms: startAt,
        task: { image: "i", args: ["true"], env: {}, timeout_s: 600 },
        lease_ttl_ms: 5_000,
      };
      void sched.request(workerSubject("c", "w1", "start"), encode(req), { timeout: 5_000 });
    }
    await drainMicrotasks();
    await sim.runUntil(startAt - 1);
    const before = advertsAt.length;
    await sim.runUntil(startAt);
    assert.ok(spent >= 3_000, `the stretch took ${spent} ms of the worker's clock`);
    const during = advertsAt.slice(before).filter((at) => at > startAt && at < startAt + spent);
    // 3 s in one stretch: the clock looked at every 256 starts (384 ms), an advert once an interval
    // (500 ms) has passed since the last — every second look, not every look.
    const shown = JSON.stringify(during.map((a) => a - startAt));
    assert.ok(during.length >= 3, `adverts sent inside the stretch: ${during.length} (${shown})`);
    for (let i = 1; i < during.length; i++)
      assert.ok(during[i]! - during[i - 1]! >= HB, `adverts at most one an interval: ${shown}`);
    await worker.stop();
  },
);
