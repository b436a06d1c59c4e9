/**
 * The worker's half of a lease (src/worker/):
 * a real Worker with a fake executor that records start/kill, on the simulation bus and clock
 * (test/sim), heartbeating through a real ActorRouter to a responder this test controls on the
 * partition subjects (the owner's side: batch heartbeats `{b: [...]}` answered with one
 * ItemResult per item, single `complete` requests answered with an ActorReply). "Silent" means
 * the responder never answers (the request times out: an unknown outcome).
 *
 * - an accepted offer is started only under a fresh acknowledged heartbeat; a running
 *   attempt is killed by the worker itself (`self_fenced`) once TTL − margin passed since the
 *   send time of its last acknowledged heartbeat, with no `lease_lost` reply; an offer never
 *   acknowledged is dropped (`offer_expired`).
 * - a completion whose request timed out is kept (and heartbeated) and reported again on
 *   the next round until the owner answers ok or stale_fence; one its owner answered pending
 *   (queued there) is copied only after the longer wait of a queued report.
 *
 * The tests of these two kinds fail against a worker that starts without an acknowledgement,
 * keeps a never-acknowledged offer, does not fence itself, or stops heartbeating an attempt whose
 * completion report timed out.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { decode, encode } from "../../../src/cluster/codec.ts";
import {
  partitionSubject,
  type ActorReply,
  type ActorRequest,
  type BatchRequest,
  type ItemResult,
} from "../../../src/cluster/router.ts";
import { ActorRouter } from "../../../src/cluster/router.ts";
import type { BusMsg } from "../../../src/cluster/bus.ts";
import { seededRandom, type Random } from "../../../src/lib/random.ts";
import type {
  Execution,
  ExecutionResult,
  Executor,
  RunIdentity,
  TaskSpec,
} from "../../../src/sandbox/types.ts";
import { workerSubject } from "../../../src/protocol/worker.ts";
import { identityEnv } from "../../../src/sandbox/identity.ts";
import type { ProbeReply, StartReply, StartRequest } from "../../../src/protocol/worker.ts";
import { GIVEN_UP_OUTPUT_CHARS, OUTPUT_NOT_KEPT, Worker } from "../../../src/worker/worker.ts";
import { ADVERT_GAP_MS } from "../../../src/worker/heartbeat.ts";
import { metricsText } from "../../../src/metrics/index.ts";
import { SimBus } from "../../sim/sim-bus.ts";
import { SimClock, drainMicrotasks } from "../../sim/sim-clock.ts";

const CLUSTER = "c";
const PARTITIONS = 4;
const TTL = 5_000;
const MARGIN = 1_000;
const HB = 1_000;
const T0 = 1_000_000;
const T = { timeout: 20_000 };

/** Records every start and kill, with the simulated time; results are settled by the test. */
class RecordingExecutor implements Executor {
  readonly kind = "noop" as const;
  readonly log: { what: "start" | "kill"; key: string; at: number }[] = [];
  readonly #live = new Map<string, (r: ExecutionResult) => void>();
  /** A kill only signals: the task ends when the test calls `exit` (a task that takes its grace). */
  slowKill = false;
  /** A kill does not return until the task ends (`exit`): a container still being created. */
  hangKill = false;
  /** The task had exited 0 by itself just before the kill, its exit not yet seen: the kill reports `killed` with exit code 0. */
  endedBeforeKill = false;
  constructor(private readonly clock: SimClock) {}
  /** What each start was given. */
  readonly given: { task: TaskSpec; id: RunIdentity }[] = [];
  start(task: TaskSpec, id: RunIdentity): Execution {
    this.given.push({ task, id });
    const key = `${id.runId}#${id.attempt}`;
    this.log.push({ what: "start", key, at: this.clock.now() });
    const startedAtMs = this.clock.now();
    let settle!: (r: ExecutionResult) => void;
    const result = new Promise<ExecutionResult>((r) => (settle = r));
    let done = false;
    const finish = (r: ExecutionResult) => {
      if (done) return;
      done = true;
      this.#live.delete(key);
      settle(r);
    };
    this.#live.set(key, finish);
    return {
      result,
      kill: async () => {
        this.log.push({ what: "kill", key, at: this.clock.now() });
        if (this.slowKill) return;
        if (this.hangKill) {
          await result;
          return;
        }
        finish({
          outcome: "killed",
          exitCode: this.endedBeforeKill ? 0 : null,
          output: this.endedBeforeKill ? "done" : "",
          startedAtMs,
          finishedAtMs: this.clock.now(),
        });
        await result;
      },
    };
  }
  /** The task exits 0 now. */
  exit(key: string, output = "ok"): void {
    const f = this.#live.get(key);
    assert.ok(f, `${key} is not running`);
    f({ outcome: "exited", exitCode: 0, output, startedAtMs: T0, finishedAtMs: this.clock.now() });
  }
  starts(): number {
    return this.log.filter((e) => e.what === "start").length;
  }
  async reapOrphans(): Promise<number> {
    return 0;
  }
  async close(): Promise<void> {}
}

type HbMode = "ok" | "silent" | "lease_lost" | "hold";
/**
 * `internal`: an error answered at once that settles nothing (the report is sent again after its
 * wait); `kv_unavailable`: likewise, the owner's KV failing (the same code as a pending answer,
 * without its mark: nothing is queued at the owner).
 */
type CompleteMode = "ok" | "silent" | "stale_fence" | "internal" | "kv_unavailable";

/** The owner's side on the partition subjects. */
class Owner {
  hb: HbMode = "ok";
  /** A run's own answer, when not silent (a silent owner answers no item). */
  readonly hbFor = new Map<string, Exclude<HbMode, "silent">>();
  complete: CompleteMode = "ok";
  readonly heartbeats: { run_id: string; at: number; answered: boolean; started: boolean }[] = [];
  readonly completes: {
    run_id: string;
    at: number;
    mode: CompleteMode;
    outcome: string;
    notStarted?: boolean;
  }[] = [];
  /** Runs whose completion items are answered pending (still queued at the actor). */
  readonly completePending = new Set<string>();
  /** Requests that carried completion reports (each a patient batch of one or more). */
  completeRequests = 0;
  /** Runs whose acknowledgements carry a cover: run id → the owner's lease end (start_at + TTL). */
  readonly coverUntil = new Map<string, number>();
  /** Covers are sent as a string (a malformed reply). */
  malformedCover = false;
  constructor(private readonly clock: SimClock) {}
  handle(m: BusMsg): void {
    const req = decode<ActorRequest | BatchRequest>(m.data);
    if ("b" in req && req.b.every((it) => (it.m as { kind: string }).kind === "complete")) {
      // A batch of completion reports (patient: answered once every item is, or never when silent).
      assert.ok(
        typeof req.w === "number" && req.w >= 500,
        "completion reports name a budget (half their wait)",
      );
      this.completeRequests++;
      for (const it of req.b) {
        const msg = it.m as { run_id: string; outcome: string };
        this.completes.push({
          run_id: msg.run_id,
          at: this.clock.now(),
          mode: this.complete,
          outcome: msg.outcome,
          notStarted: (it.m as { not_started?: true }).not_started === true,
        });
      }
      if (this.complete === "silent") return;
      const e =
        this.complete === "internal"
          ? { code: "internal" as const, message: "internal error" }
          : this.complete === "kv_unavailable"
            ? {
                code: "unavailable" as const,
                message: "kv get job.0.t1.j1: jetstream is not enabled",
              }
            : { code: "stale_fence" as const, message: "stale fence" };
      const v: ItemResult[] = req.b.map((it) => {
        if (this.completePending.has((it.m as { run_id: string }).run_id))
          return {
            ok: false,
            e: {
              code: "unavailable",
              message: "pending: still queued at the actor",
              pending: true,
            },
          };
        return this.complete === "ok" ? { ok: true, v: { ok: true } } : { ok: false, e };
      });
      m.respond(encode({ ok: true, v } satisfies ActorReply));
      return;
    }
    if ("b" in req) {
      const answered = this.hb !== "silent";
      for (const it of req.b) {
        const hb = it.m as { run_id: string; started_at_ms?: number };
        this.heartbeats.push({
          run_id: hb.run_id,
          at: this.clock.now(),
          answered,
          started: hb.started_at_ms !== undefined,
        });
      }
      if (!answered) return;
      const v: ItemResult[] = req.b.map((it) => {
        const mode = this.hbFor.get((it.m as { run_id: string }).run_id) ?? this.hb;
        if (mode === "hold") return { ok: true, v: { ok: true, hold: true } };
        if (mode === "lease_lost")
          return { ok: false, e: { code: "lease_lost", message: "lease lost" } };
        // An owner that covers attempts not started yet until start_at + TTL (run-lifecycle.ts `heartbeatAck`).
        const hb = it.m as { run_id: string; started_at_ms?: number };
        const end = this.coverUntil.get(hb.run_id);
        if (end !== undefined && hb.started_at_ms === undefined && end > this.clock.now())
          return {
            ok: true,
            v: { ok: true, cover_ms: this.malformedCover ? "forever" : end - this.clock.now() },
          };
        return { ok: true, v: { ok: true } };
      });
      m.respond(encode({ ok: true, v } satisfies ActorReply));
      return;
    }
    const msg = req.m as { kind: string; run_id: string; outcome: string };
    assert.equal(msg.kind, "complete");
    this.completes.push({
      run_id: msg.run_id,
      at: this.clock.now(),
      mode: this.complete,
      outcome: msg.outcome,
      notStarted: (req.m as { not_started?: true }).not_started === true,
    });
    if (this.complete === "silent") return;
    const e =
      this.complete === "internal"
        ? { code: "internal" as const, message: "internal error" }
        : { code: "stale_fence" as const, message: "stale fence" };
    m.respond(
      encode(
        (this.complete === "ok"
          ? { ok: true, v: { ok: true } }
          : { ok: false, e }) satisfies ActorReply,
      ),
    );
  }
  acked(runId: string): { at: number }[] {
    return this.heartbeats.filter((h) => h.run_id === runId && h.answered);
  }
}

async function setup(
  o: {
    completionsInFlight?: number;
    completionWaitMs?: number;
    completionDeadlineMs?: number;
    slots?: number;
    prefetch?: number;
    executor?: Executor;
    random?: Random;
  } = {},
) {
  const sim = new SimClock(T0);
  const bus = new SimBus({ clock: sim, random: seededRandom(1) });
  const workerEp = bus.endpoint("worker");
  const ownerEp = bus.endpoint("owner");
  const schedEp = bus.endpoint("sched");
  const owner = new Owner(sim);
  ownerEp.subscribe(`kairos.${CLUSTER}.p.*`, {
    queue: "owners",
    callback: (_e, m) => owner.handle(m),
  });
  assert.equal(partitionSubject(CLUSTER, 0), `kairos.${CLUSTER}.p.0`);
  const router = new ActorRouter({
    nc: workerEp,
    clusterName: CLUSTER,
    clock: sim,
    random: seededRandom(2),
    partitions: PARTITIONS,
  });
  const executor = new RecordingExecutor(sim);
  const events: { type: string; run_id: string; at: number }[] = [];
  const worker = new Worker({
    workerId: "w1",
    clusterName: CLUSTER,
    slots: 4,
    heartbeatIntervalMs: HB,
    completionDeadlineMs: 60_000,
    // Completion reports wait 2 s for their answer here (the unknown-outcome tests time them out).
    leaseSafetyMarginMs: MARGIN,
    nc: workerEp,
    router,
    executor,
    clock: sim,
    // The least spread: each copy's wait is exactly its first (report-backoff.ts).
    random: { next: () => 0 },
    log: () => undefined,
    completionWaitMs: 2_000,
    inboxes: "shared",
    // No prefetch unless a test asks: the others count slots as they always did.
    prefetch: 0,
    ...o,
    // (`o.executor`: another executor than the recording one, which the test then does not see.)
    onEvent: (e) => events.push({ type: e.type, run_id: e.run_id, at: sim.now() }),
  });
  await worker.start();
  await drainMicrotasks();
  /** Offers attempt 1 of `runId` (fence 1) starting `startInMs` from now; resolves with the reply. */
  const offer = async (
    runId: string,
    startInMs: number,
    task: StartRequest["task"] = { image: "i", args: ["true"], env: {}, timeout_s: 600 },
    scheduledForMs?: number,
    extra: Partial<StartRequest> = {},
  ): Promise<StartReply> => {
    const req: StartRequest = {
      job_actor: "t1.j1",
      tenant_id: "t1",
      job_id: "j1",
      run_id: runId,
      attempt: 1,
      fence: 1,
      scheduled_for_ms: scheduledForMs ?? sim.now() + startInMs,
      start_at_ms: sim.now() + startInMs,
      task,
      lease_ttl_ms: TTL,
      ...extra,
    };
    const p = schedEp.request(workerSubject(CLUSTER, "w1", "start"), encode(req), {
      timeout: 2_000,
    });
    await drainMicrotasks();
    return decode<StartReply>((await p).data);
  };
  const adverts: number[] = [];
  /** What each advert said executes here, by tenant. */
  const executing: (Record<string, number> | undefined)[] = [];
  ownerEp.subscribe(`kairos.${CLUSTER}.adverts.w1`, {
    callback: (_e, m) => {
      const a = decode<{ free: number; executing?: Record<string, number> }>(m.data);
      adverts.push(a.free);
      executing.push(a.executing);
    },
  });
  const cancel = (runId: string) =>
    schedEp.publish(workerSubject(CLUSTER, "w1", "cancel"), encode({ run_id: runId, fence: 1 }));
  /** The owner's probe of attempt 1 of `runId` under `fence`: resolves with the worker's answer. */
  const probe = async (runId: string, fence = 1): Promise<ProbeReply> => {
    const p = schedEp.request(
      workerSubject(CLUSTER, "w1", "probe"),
      encode({ run_id: runId, attempt: 1, fence }),
      { timeout: 2_000 },
    );
    await drainMicrotasks();
    return decode<ProbeReply>((await p).data);
  };
  const runFor = (ms: number) => sim.runUntil(sim.now() + ms);
  const runTo = (at: number) => sim.runUntil(at);
  const evs = (type: string) => events.filter((e) => e.type === type);
  return {
    sim,
    owner,
    executor,
    events,
    evs,
    worker,
    offer,
    runFor,
    runTo,
    adverts,
    executing,
    cancel,
    probe,
  };
}

/** A probe answered `ended` with a success (exited, exit code 0) and this output. */
function assertSucceeded(
  reply: {
    state: string;
    completion?: { outcome: string; exit_code: number | null; output: string };
  },
  output: string,
  why?: string,
): void {
  assert.equal(reply.state, "ended", why);
  assert.equal(reply.completion?.outcome, "exited");
  assert.equal(reply.completion?.exit_code, 0);
  assert.equal(reply.completion?.output, output);
}

describe("worker: what the executor is given", () => {
  it(
    "attempts due at one instant start together with their task and identity as offered (resources only those set), and each `started` event comes before its `completed`",
    T,
    async () => {
      const t = await setup();
      const at = T0 + 2_500;
      assert.deepEqual(
        await t.offer("r1", 2_500, {
          image: "img",
          args: ["a", "b"],
          env: { X: "1" },
          timeout_s: 30,
          resources: { memory_mb: 256, pids: 64 },
        }),
        { accepted: true },
      );
      assert.deepEqual(await t.offer("r2", at - t.sim.now()), { accepted: true });
      assert.deepEqual(
        await t.offer("r3", at - t.sim.now(), {
          image: "i",
          args: [],
          env: {},
          timeout_s: 5,
          resources: { cpus: 0.5 },
        }),
        { accepted: true },
      );
      await t.runTo(at + 50);
      assert.deepEqual(
        t.executor.given.map((g) => g.id.runId),
        ["r1", "r2", "r3"],
        "all three started at their instant, in offer order",
      );
      assert.ok(
        t.executor.log.every((e) => e.what === "start" && e.at === at),
        "each at the instant itself",
      );
      const [g1, g2, g3] = t.executor.given;
      assert.deepEqual(
        { ...g1!.task, leaseMs: undefined },
        {
          image: "img",
          args: ["a", "b"],
          env: { X: "1" },
          timeoutS: 30,
          resources: { memoryMb: 256, pids: 64 },
          leaseMs: undefined,
        },
      );
      assert.ok(
        g1!.task.leaseMs! > 0 && g1!.task.leaseMs! <= TTL,
        `what is left of the acknowledged lease (${g1!.task.leaseMs})`,
      );
      assert.equal("resources" in g2!.task, false, "no resources offered: none given");
      assert.deepEqual(g3!.task.resources, { cpus: 0.5 });
      assert.deepEqual(g1!.id, {
        runId: "r1",
        attempt: 1,
        jobId: "j1",
        tenantId: "t1",
        scheduledFor: new Date(at).toISOString().replace(/\.\d{3}Z$/, "Z"),
        workerId: "w1",
        fence: 1,
      });
      for (const r of ["r1", "r2", "r3"]) t.executor.exit(`${r}#1`);
      await t.runFor(3_000);
      const seq = t.events
        .filter((e) => e.type === "started" || e.type === "completed")
        .map((e) => `${e.type} ${e.run_id}`);
      for (const r of ["r1", "r2", "r3"]) {
        assert.ok(seq.includes(`started ${r}`), `started ${r}: ${seq.join(", ")}`);
        assert.ok(
          seq.indexOf(`started ${r}`) < seq.indexOf(`completed ${r}`),
          `started before completed: ${seq.join(", ")}`,
        );
      }
      assert.equal(seq.filter((x) => x.startsWith("started")).length, 3, "one `started` each");
      await t.worker.stop();
    },
  );
});

describe("worker: the run token of an offer", () => {
  it(
    "an offer's run_token reaches the executor's identity (and so KAIROS_RUN_TOKEN); a malformed one is refused",
    T,
    async () => {
      const t = await setup();
      const token = "eyJhbGciOiJFZERTQSJ9.eyJydW4iOiJyMSJ9.c2ln";
      for (const bad of ["not a jws", `${"a".repeat(2100)}.b.c`, "a.b.c\nX=1", 42]) {
        const r = await t.offer("r0", 1_000, undefined, undefined, {
          run_token: bad as string,
        });
        assert.equal(r.accepted, false, `run_token ${String(bad).slice(0, 20)}`);
        assert.match(String(r.reason), /malformed offer: run_token/);
      }
      assert.deepEqual(await t.offer("r1", 1_000, undefined, undefined, { run_token: token }), {
        accepted: true,
      });
      assert.deepEqual(await t.offer("r2", 1_000), { accepted: true });
      await t.runTo(T0 + 1_100);
      const [g1, g2] = t.executor.given;
      assert.equal(g1!.id.runToken, token);
      assert.equal(identityEnv(g1!.id)["KAIROS_RUN_TOKEN"], token);
      assert.equal(g2!.id.runToken, undefined);
      assert.equal("KAIROS_RUN_TOKEN" in identityEnv(g2!.id), false);
      await t.worker.stop();
    },
  );
});

describe("worker: the registry credential of an offer", () => {
  it(
    "an offer's registry_auth reaches the executor's task only (not its env or identity); a malformed one is refused",
    T,
    async () => {
      const t = await setup();
      const auth = { registry: "r.example.com", username: "u", password: "pw-secret" };
      for (const bad of [
        "u:pw",
        { registry: "r.example.com", username: "u" },
        { ...auth, password: "" },
        { ...auth, password: "x".repeat(8193) },
        { ...auth, username: 42 },
      ]) {
        const r = await t.offer("r0", 1_000, undefined, undefined, {
          registry_auth: bad as typeof auth,
        });
        assert.equal(r.accepted, false, JSON.stringify(bad).slice(0, 60));
        assert.match(String(r.reason), /malformed offer: registry_auth/);
      }
      assert.deepEqual(await t.offer("r1", 1_000, undefined, undefined, { registry_auth: auth }), {
        accepted: true,
      });
      assert.deepEqual(await t.offer("r2", 1_000), { accepted: true });
      await t.runTo(T0 + 1_100);
      const [g1, g2] = t.executor.given;
      assert.deepEqual(g1!.task.registryAuth, auth);
      assert.ok(!JSON.stringify([g1!.task.env, g1!.id]).includes("pw-secret"));
      assert.equal(g2!.task.registryAuth, undefined);
      await t.worker.stop();
    },
  );
});

describe("worker: events of attempts that end at once", () => {
  it(
    "the noop executor's attempts, due together and ended at once: each `started` comes before its `completed`, one each",
    T,
    async () => {
      const { NoopExecutor } = await import("../../../src/sandbox/noop.ts");
      const { resolveExecutorOptions } = await import("../../../src/sandbox/options.ts");
      const sim0 = new SimClock(T0); // the executor's clock only stamps results here
      const t = await setup({
        executor: new NoopExecutor(
          resolveExecutorOptions({ workerId: "w1", clock: sim0, log: () => undefined }),
        ),
      });
      for (const r of ["r1", "r2", "r3"])
        assert.deepEqual(await t.offer(r, 2_500 - (t.sim.now() - T0)), { accepted: true });
      await t.runTo(T0 + 5_000);
      const seq = t.events
        .filter((e) => e.type === "started" || e.type === "completed")
        .map((e) => `${e.type} ${e.run_id}`);
      for (const r of ["r1", "r2", "r3"]) {
        assert.equal(seq.filter((x) => x === `started ${r}`).length, 1, seq.join(", "));
        assert.equal(seq.filter((x) => x === `completed ${r}`).length, 1, seq.join(", "));
        assert.ok(
          seq.indexOf(`started ${r}`) < seq.indexOf(`completed ${r}`),
          `started before completed: ${seq.join(", ")}`,
        );
      }
      assert.ok(
        t.events.filter((e) => e.type === "started").every((e) => e.at === T0 + 2_500),
        "all started at the instant",
      );
      await t.worker.stop();
    },
  );
});

describe("worker: executions ended as they start (`Execution.ended`)", () => {
  it(
    "an offer whose scheduled_for is not a finite number is refused with a reason (the identity is made at the offer), and the worker goes on",
    T,
    async () => {
      const t = await setup();
      for (const scheduledFor of [Number.NaN, 8.64e15 + 1]) {
        const bad = await t.offer("r0", 1_000, undefined, scheduledFor);
        assert.equal(bad.accepted, false, `scheduled_for ${scheduledFor}`);
        assert.match(String(bad.reason), /malformed offer/);
      }
      assert.deepEqual(await t.offer("r1", 1_000), { accepted: true });
      await t.runTo(T0 + 1_100);
      assert.equal(t.executor.starts(), 1);
      await t.worker.stop();
    },
  );

  it(
    "an execution whose result is given as `ended` is completed and reported from it — its `result` promise, here never settled, is not awaited — and while the report is on the wire the attempt is not awake",
    T,
    async () => {
      const sim0 = new SimClock(T0);
      const given: string[] = [];
      const ended: Executor = {
        kind: "noop",
        start(_task: TaskSpec, id: RunIdentity): Execution {
          given.push(id.runId);
          // A result promise that never settles: only `ended` can complete these.
          return {
            result: new Promise<ExecutionResult>(() => undefined),
            ended: {
              outcome: "exited",
              exitCode: 0,
              output: `out ${id.runId}`,
              startedAtMs: sim0.now(),
              finishedAtMs: sim0.now(),
            },
            kill: async () => undefined,
          };
        },
        reapOrphans: async () => 0,
        close: async () => undefined,
      };
      const t = await setup({ executor: ended });
      t.owner.complete = "silent";
      for (const r of ["r1", "r2"])
        assert.deepEqual(await t.offer(r, 2_500 - (t.sim.now() - T0)), { accepted: true });
      await t.runTo(T0 + 2_600);
      assert.deepEqual(given, ["r1", "r2"], "both started at the instant");
      assert.deepEqual(
        t.owner.completes.map((c) => `${c.run_id} ${c.outcome}`),
        ["r1 exited", "r2 exited"],
        "reported from `ended`, in start order",
      );
      // Woken by their start instant (in the set only when next looked at), then put to sleep by
      // the report on the wire: the later sleep wins.
      assert.deepEqual(
        t.worker.leaseCounts,
        { held: 2, awake: 0 },
        "reports on the wire: not heartbeated",
      );
      const seq = t.events.filter((e) => e.type === "started").map((e) => e.run_id);
      assert.deepEqual(seq, ["r1", "r2"]);
      await t.worker.stop();
    },
  );
});

describe("worker: start only under an acknowledged heartbeat", () => {
  it(
    "2: an accepted offer whose start time passes before any acknowledgement is not started; it starts on the acknowledgement",
    T,
    async () => {
      const t = await setup();
      t.owner.hb = "silent";
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 900); // start_at (T0+100) passed long ago
      assert.ok(
        t.owner.heartbeats.some((h) => h.run_id === "r1"),
        "the worker asked for an acknowledgement",
      );
      assert.equal(t.executor.starts(), 0, "started without an acknowledged heartbeat");
      t.owner.hb = "ok";
      await t.runTo(T0 + 3_000);
      assert.equal(t.executor.starts(), 1, "started once acknowledged");
      const firstAck = t.owner.acked("r1")[0]!.at;
      assert.ok(
        t.executor.log[0]!.at >= firstAck,
        `started at ${t.executor.log[0]!.at}, first acknowledgement at ${firstAck}`,
      );
      await t.worker.stop();
    },
  );

  it(
    "look-ahead gate: an attempt acknowledged with `hold` is kept (not started, not dropped) past its start time; it starts on the first acknowledgement without hold, asking again promptly",
    T,
    async () => {
      const t = await setup();
      t.owner.hb = "hold";
      assert.deepEqual(await t.offer("r1", 500), { accepted: true });
      await t.runTo(T0 + 4 * TTL); // many rounds, all `hold`: the lease stays alive, nothing starts
      assert.equal(t.executor.starts(), 0, "started while the owner said hold");
      assert.deepEqual(
        t.evs("offer_expired"),
        [],
        "a held attempt is still acknowledged: not dropped",
      );
      t.owner.hb = "ok";
      const goAt = t.sim.now();
      await t.runTo(goAt + 200);
      assert.equal(t.executor.starts(), 1, "started on the first acknowledgement without hold");
      assert.ok(
        t.executor.log[0]!.at - goAt < HB,
        `a due held attempt asks again soon, not at the next periodic round (${t.executor.log[0]!.at - goAt} ms)`,
      );
      await t.worker.stop();
    },
  );

  it(
    "an attempt prepared a minute ahead, acknowledged without a cover, is heartbeated at its claim and as its start nears only, is not dropped meanwhile, and starts on time under a fresh acknowledgement",
    T,
    async () => {
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 60_000), { accepted: true });
      await t.runTo(T0 + 60_000 + 200);
      assert.equal(t.executor.starts(), 1);
      assert.ok(
        t.executor.log[0]!.at >= T0 + 60_000 && t.executor.log[0]!.at < T0 + 60_000 + 50,
        `started at +${t.executor.log[0]!.at - T0} ms`,
      );
      assert.deepEqual(t.evs("offer_expired"), []);
      const before = t.owner.heartbeats
        .filter((h) => h.run_id === "r1" && h.at < T0 + 60_000)
        .map((h) => h.at - T0);
      const claim = before.filter((at) => at < HB);
      const nearing = before.filter((at) => at >= HB);
      assert.ok(claim.length >= 1, "the claim is confirmed at once");
      assert.ok(
        nearing.length >= 1 && nearing.length <= 4,
        `a few rounds as the start nears, not one per round for a minute: ${JSON.stringify(before)}`,
      );
      assert.ok(
        nearing.every((at) => at >= 60_000 - Math.max(TTL / 2, 2 * HB)),
        `none long before the start: ${JSON.stringify(nearing)}`,
      );
      await t.worker.stop();
    },
  );

  it(
    "an attempt prepared five minutes ahead whose claim is acknowledged with a cover is not heartbeated again before its start, starts on time, and is heartbeated by the next periodic round after it",
    T,
    async () => {
      const t = await setup();
      t.owner.coverUntil.set("r1", T0 + 300_000 + TTL);
      assert.deepEqual(await t.offer("r1", 300_000), { accepted: true });
      await t.runTo(T0 + 300_000 + HB + 100);
      assert.equal(t.executor.starts(), 1);
      assert.ok(
        t.executor.log[0]!.at >= T0 + 300_000 && t.executor.log[0]!.at < T0 + 300_000 + 50,
        `started at +${t.executor.log[0]!.at - T0} ms`,
      );
      const before = t.owner.heartbeats
        .filter((h) => h.run_id === "r1" && h.at < T0 + 300_000)
        .map((h) => h.at - T0);
      assert.equal(before.length, 1, `the claim only: ${JSON.stringify(before)}`);
      assert.ok(before[0]! < HB, "the claim is confirmed at once");
      const after = t.owner.heartbeats.filter((h) => h.run_id === "r1" && h.at >= T0 + 300_000);
      assert.ok(
        after.length >= 1 && after[0]!.started && after[0]!.at <= T0 + 300_000 + HB,
        `the first periodic round after the start carries it: ${JSON.stringify(after)}`,
      );
      assert.deepEqual(t.evs("offer_expired"), []);
      assert.equal(t.executor.log.filter((e) => e.what === "kill").length, 0);
      await t.worker.stop();
    },
  );

  it(
    "attempts acknowledged through their start are parked: rounds do not visit them until their start timer wakes them",
    T,
    async () => {
      const t = await setup();
      for (const id of ["r1", "r2", "r3"]) t.owner.coverUntil.set(id, T0 + 300_000 + TTL);
      for (const id of ["r1", "r2", "r3"])
        assert.deepEqual(await t.offer(id, 300_000), { accepted: true });
      assert.deepEqual(
        t.worker.leaseCounts,
        { held: 3, awake: 3 },
        "claims not acknowledged yet are awake",
      );
      await t.runTo(T0 + 10_000);
      assert.deepEqual(
        t.worker.leaseCounts,
        { held: 3, awake: 0 },
        "acknowledged with a cover: parked",
      );
      // An uncovered claim stays awake (it is asked again as its start nears).
      assert.deepEqual(await t.offer("r4", 300_000), { accepted: true });
      await t.runTo(T0 + 20_000);
      assert.deepEqual(t.worker.leaseCounts, { held: 4, awake: 1 });
      t.cancel("r1");
      await t.runFor(100);
      assert.deepEqual(
        t.worker.leaseCounts,
        { held: 3, awake: 1 },
        "a parked attempt can still be cancelled",
      );
      await t.runTo(T0 + 300_000 + 100);
      assert.equal(t.executor.starts(), 2, "the parked ones (r2, r3) started from their timer");
      assert.deepEqual(
        t.worker.leaseCounts,
        { held: 3, awake: 3 },
        "woken at their start (and r4, due later, still awake)",
      );
      await t.worker.stop();
    },
  );

  it(
    "a cover counts from the heartbeat's send time: with its owner silent from the claim on, a covered attempt starts at start_at and is killed by the worker itself before start_at + TTL − margin",
    T,
    async () => {
      const t = await setup();
      t.owner.coverUntil.set("r1", T0 + 30_000 + TTL);
      assert.deepEqual(await t.offer("r1", 30_000), { accepted: true });
      await t.runTo(T0 + 5_000);
      assert.equal(t.owner.acked("r1").length, 1, "the claim was acknowledged (with its cover)");
      t.owner.hb = "silent";
      await t.runTo(T0 + 30_000 + TTL + 1_000);
      assert.equal(t.executor.starts(), 1, "started under the claim's cover");
      assert.ok(t.executor.log[0]!.at >= T0 + 30_000 && t.executor.log[0]!.at < T0 + 30_000 + 50);
      const fenced = t.evs("self_fenced");
      assert.deepEqual(
        fenced.map((e) => e.run_id),
        ["r1"],
        "no acknowledgement after the start: the worker fences itself",
      );
      const killedAt = fenced[0]!.at;
      assert.ok(
        killedAt <= T0 + 30_000 + TTL - MARGIN,
        `killed at +${killedAt - T0} ms, after the owner's lease end minus the margin`,
      );
      assert.ok(
        killedAt >= T0 + 30_000 + TTL - MARGIN - 100,
        `not long before it either: +${killedAt - T0} ms`,
      );
      await t.worker.stop();
    },
  );

  it(
    "an attempt started with little cover left is fenced when that cover runs out, not when the heartbeat round in flight ends (sim seed 910)",
    T,
    async () => {
      const t = await setup();
      // The claim's cover leaves 300 ms after start_at (T0 + 30,500): valid until ≈ T0 + 30,800.
      const startAt = T0 + 30_500;
      t.owner.coverUntil.set("r1", startAt + 300 + MARGIN);
      assert.deepEqual(await t.offer("r1", 30_500), { accepted: true });
      await t.runTo(T0 + 5_000);
      assert.equal(t.owner.acked("r1").length, 1, "the claim was acknowledged (with its cover)");
      t.owner.hb = "silent"; // every round from now on waits out its deadline (one interval)
      await t.runTo(startAt + TTL);
      assert.equal(t.executor.starts(), 1, "started under what is left of the claim's cover");
      const fenced = t.evs("self_fenced");
      assert.deepEqual(
        fenced.map((e) => e.run_id),
        ["r1"],
      );
      // The round in flight at start_at ends at about T0 + 31,000; only the start's own fence kills at the cover's end.
      assert.ok(
        fenced[0]!.at <= startAt + 300 + 30,
        `killed at +${fenced[0]!.at - startAt} ms after start_at, past its cover (+300)`,
      );
      await t.worker.stop();
    },
  );

  it(
    "an attempt started by a heartbeat round is fenced even while that round waits on another attempt's kill",
    T,
    async () => {
      const t = await setup();
      // r2 starts under a long cover (prepared ahead): its own fence is a minute away, so no fence
      // armed for it can catch r1 by the way.
      t.owner.coverUntil.set("r2", T0 + 100 + 60_000);
      assert.deepEqual(await t.offer("r2", 100), { accepted: true });
      await t.runTo(T0 + 1_500);
      assert.equal(t.executor.starts(), 1, "r2 runs");
      // r1 is gated (acknowledged with `hold`): acknowledged, so no offer fence is armed for it.
      t.owner.hbFor.set("r1", "hold");
      assert.deepEqual(await t.offer("r1", 1_000), { accepted: true });
      await t.runTo(T0 + 2_600);
      assert.equal(t.executor.starts(), 1, "r1 is due but held: waiting");
      // The owner falls silent long enough that r2 is carried by every round too (its last
      // acknowledgement over half an interval ago); then one round acknowledges r1 without hold (it
      // starts from the round) and tells r2 lease_lost, and r2's kill does not return (its
      // container still being created): that round never ends.
      t.owner.hb = "silent";
      await t.runTo(T0 + 4_000);
      t.executor.hangKill = true;
      t.owner.hbFor.set("r2", "lease_lost");
      t.owner.hbFor.set("r1", "ok");
      t.owner.hb = "ok";
      await t.runTo(T0 + 12_000);
      const start = t.executor.log.find((e) => e.what === "start" && e.key === "r1#1");
      assert.ok(start, "r1 started on the round's acknowledgement");
      const ack = t.owner
        .acked("r1")
        .filter((h) => h.at <= start.at)
        .at(-1)!.at;
      assert.equal(
        t.owner.acked("r1").filter((h) => h.at > start.at).length,
        0,
        "no round after the stuck one acknowledged it",
      );
      const fenced = t.evs("self_fenced").filter((e) => e.run_id === "r1");
      assert.equal(fenced.length, 1, "r1 ran past its acknowledgement unfenced");
      assert.ok(
        fenced[0]!.at <= ack + TTL - MARGIN + 30,
        `fenced at +${fenced[0]!.at - ack} ms after its acknowledgement`,
      );
      t.executor.exit("r2#1");
      await t.worker.stop();
    },
  );

  it(
    "a malformed cover is ignored: the attempt is acknowledged as without one (asked again as its start nears)",
    T,
    async () => {
      const t = await setup();
      t.owner.malformedCover = true;
      t.owner.coverUntil.set("r1", T0 + 30_000 + TTL);
      assert.deepEqual(await t.offer("r1", 30_000), { accepted: true });
      await t.runTo(T0 + 30_000 + 200);
      assert.equal(t.executor.starts(), 1);
      const nearing = t.owner.heartbeats.filter(
        (h) => h.run_id === "r1" && h.at >= T0 + HB && h.at < T0 + 30_000,
      );
      assert.ok(
        nearing.length >= 1 &&
          nearing.every((h) => h.at >= T0 + 30_000 - Math.max(TTL / 2, 2 * HB)),
        `asked again as its start neared: ${JSON.stringify(nearing.map((h) => h.at - T0))}`,
      );
      await t.worker.stop();
    },
  );

  it(
    "a running attempt is heartbeated by every periodic round and at most once per half interval by the rounds in between (a burst of offers each asks for a round soon); its start asks for no round of its own and goes with the next periodic one",
    T,
    async () => {
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 150);
      assert.equal(t.executor.starts(), 1);
      const startedAt = t.executor.log[0]!.at;
      await t.runTo(T0 + 1_100);
      const afterStart = t.owner.heartbeats.filter((h) => h.run_id === "r1" && h.at >= startedAt);
      assert.equal(
        afterStart.filter((h) => h.at < startedAt + HB / 2).length,
        0,
        `the start asked for no round: ${JSON.stringify(afterStart)}`,
      );
      assert.ok(
        afterStart.length >= 1 && afterStart.every((h) => h.started),
        `the next round (periodic) reports the start: ${JSON.stringify(afterStart)}`,
      );
      assert.ok(afterStart[0]!.at <= startedAt + HB, "within one interval");
      // Offers arriving every 100 ms: each asks for a heartbeat round soon (their claims).
      const from = t.sim.now();
      for (let i = 0; i < 3; i++) {
        assert.deepEqual(await t.offer(`x${i}`, 60_000), { accepted: true });
        await t.runFor(100);
      }
      await t.runTo(from + 4 * HB);
      const r1 = t.owner.heartbeats
        .filter((h) => h.run_id === "r1" && h.at >= from)
        .map((h) => h.at - from);
      assert.ok(
        r1.length >= 4 && r1.length <= 8,
        `at least each periodic round, not one per round: ${JSON.stringify(r1)}`,
      );
      for (let i = 1; i < r1.length; i++) {
        const gap = r1[i]! - r1[i - 1]!;
        assert.ok(gap >= HB / 2 - 50, `two within half an interval: ${JSON.stringify(r1)}`);
        assert.ok(
          gap <= HB + 50,
          `every periodic round carries it (a lost acknowledgement costs one interval, not two): ${JSON.stringify(r1)}`,
        );
      }
      assert.equal(
        t.executor.log.filter((e) => e.what === "kill").length,
        0,
        "the lease stayed fresh",
      );
      await t.worker.stop();
    },
  );

  it(
    "an attempt prepared ahead whose owner re-offered it elsewhere learns it at its first heartbeat as its start nears and never starts",
    T,
    async () => {
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 30_000), { accepted: true });
      await t.runTo(T0 + 10_000);
      t.owner.hb = "lease_lost";
      await t.runTo(T0 + 31_000);
      assert.equal(t.executor.starts(), 0);
      assert.deepEqual(
        t.evs("lease_lost").map((e) => e.run_id),
        ["r1"],
      );
      await t.worker.stop();
    },
  );

  it(
    "an attempt prepared ahead whose owner stays silent as its start nears does not start, and is dropped at start_at + TTL",
    T,
    async () => {
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 30_000), { accepted: true });
      await t.runTo(T0 + 10_000);
      t.owner.hb = "silent";
      await t.runTo(T0 + 30_000 + TTL - 10);
      assert.equal(t.executor.starts(), 0, "never started without a fresh acknowledgement");
      assert.deepEqual(t.evs("offer_expired"), [], "kept while its owner's lease runs");
      await t.runTo(T0 + 30_000 + TTL + 100);
      assert.deepEqual(
        t.evs("offer_expired").map((e) => e.run_id),
        ["r1"],
      );
      await t.worker.stop();
    },
  );

  it(
    "2: an offer never acknowledged is dropped (offer_expired) and not started when an acknowledgement would come later",
    T,
    async () => {
      const t = await setup();
      t.owner.hb = "silent";
      assert.deepEqual(await t.offer("r1", 10_000), { accepted: true });
      await t.runTo(T0 + TTL - MARGIN + 500);
      assert.deepEqual(
        t.evs("offer_expired").map((e) => e.run_id),
        ["r1"],
      );
      assert.ok(
        t.evs("offer_expired")[0]!.at >= T0 + TTL - MARGIN,
        "not dropped before its acceptance + TTL − margin",
      );
      t.owner.hb = "ok";
      const asked = t.owner.heartbeats.length;
      await t.runTo(T0 + 15_000); // past start_at
      assert.equal(t.executor.starts(), 0, "a dropped offer was started");
      assert.equal(
        t.owner.heartbeats.slice(asked).filter((h) => h.run_id === "r1").length,
        0,
        "a dropped offer is no longer heartbeated",
      );
      await t.worker.stop();
    },
  );

  it(
    "2: a running attempt is killed by the worker itself once no heartbeat was acknowledged for TTL − margin (no lease_lost reply)",
    T,
    async () => {
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      assert.equal(t.executor.starts(), 1);
      t.owner.hb = "silent"; // cut off: heartbeats are no longer answered
      const lastAck = Math.max(...t.owner.acked("r1").map((h) => h.at));
      const fenceAt = lastAck + TTL - MARGIN;
      await t.runTo(fenceAt - 1);
      assert.equal(
        t.executor.log.filter((e) => e.what === "kill").length,
        0,
        "killed before its acknowledgement ran out",
      );
      await t.runTo(fenceAt + 50);
      const kills = t.executor.log.filter((e) => e.what === "kill");
      assert.equal(kills.length, 1, "the worker did not fence itself");
      assert.ok(
        kills[0]!.at >= fenceAt && kills[0]!.at <= fenceAt + 50,
        `killed at ${kills[0]!.at}, due at ${fenceAt}`,
      );
      assert.deepEqual(
        t.evs("self_fenced").map((e) => e.run_id),
        ["r1"],
      );
      assert.deepEqual(t.evs("lease_lost"), [], "no lease_lost reply was involved");
      await t.worker.stop();
    },
  );
});

describe("worker: a cancelled attempt (the tenant cap during a kill)", () => {
  it(
    "keeps its worker slot until the task is gone, is no longer heartbeated, and its end is reported once as killed",
    T,
    async () => {
      const t = await setup();
      t.executor.slowKill = true;
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      assert.equal(t.executor.starts(), 1);
      t.cancel("r1");
      await t.runFor(10);
      assert.equal(
        t.executor.log.filter((e) => e.what === "kill").length,
        1,
        "killed on the cancel",
      );
      const cancelledAt = t.sim.now();
      t.adverts.length = 0;
      await t.runFor(3 * HB); // the task takes its kill grace
      const allFree = (n: number): boolean =>
        t.adverts.length > 0 && t.adverts.every((free) => free === n);
      assert.ok(allFree(3), `the slot stays taken while the task runs: ${t.adverts.join(",")}`);
      assert.equal(
        t.owner.heartbeats.filter((h) => h.run_id === "r1" && h.at > cancelledAt).length,
        0,
        "not heartbeated after the cancel",
      );
      assert.equal(t.owner.completes.length, 0, "nothing reported while the task still runs");
      // A probe meanwhile (its owner stopping it for a pause waits on the answer): the task still
      // holds its slot, so its owner keeps the tenant's too.
      assert.deepEqual(await t.probe("r1"), { state: "running" }, "dying, not unknown");
      t.executor.exit("r1#1");
      await t.runFor(10);
      assert.deepEqual(
        t.owner.completes.map((c) => [c.run_id, c.outcome, c.notStarted]),
        [["r1", "killed", false]],
        "the end reported once, as killed (it had started)",
      );
      t.adverts.length = 0;
      await t.runFor(2 * HB);
      assert.ok(allFree(4), `the slot is free once the task is gone: ${t.adverts.join(",")}`);
      await t.worker.stop();
    },
  );

  it(
    "its adverts say how many attempts execute here by tenant: from their start to their end",
    T,
    async () => {
      const t = await setup();
      const other = { job_actor: "t2.j1", tenant_id: "t2" };
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      assert.deepEqual(await t.offer("r2", 100), { accepted: true });
      assert.deepEqual(await t.offer("r3", 100, undefined, undefined, other), { accepted: true });
      assert.deepEqual(await t.offer("r4", 60_000), { accepted: true }); // accepted, not started
      await t.runFor(HB);
      t.executing.length = 0;
      await t.runFor(HB);
      assert.ok(t.executing.length > 0, "not advertised at the beat");
      assert.deepEqual(t.executing.at(-1), { t1: 2, t2: 1 });
      t.executor.exit("r1#1");
      t.executor.exit("r3#1");
      t.executing.length = 0;
      await t.runFor(3 * HB);
      assert.deepEqual(t.executing.at(-1), { t1: 1 }, "advertised once their slots free");
      t.executor.exit("r2#1");
      t.executing.length = 0;
      await t.runFor(3 * HB);
      assert.deepEqual(t.executing.at(-1), {});
      await t.worker.stop();
    },
  );

  it(
    "an accepted attempt not started yet is dropped at once and reported, as not started",
    T,
    async () => {
      const t = await setup();
      assert.deepEqual(await t.offer("r2", 10_000), { accepted: true });
      await t.runFor(500);
      t.cancel("r2");
      await t.runTo(T0 + 15_000);
      assert.equal(t.executor.starts(), 0, "a cancelled attempt never starts");
      // `not_started`: a pause's stop records the run "before it started" on this word alone.
      assert.deepEqual(
        t.owner.completes.map((c) => [c.run_id, c.outcome, c.notStarted]),
        [["r2", "killed", true]],
      );
      await t.worker.stop();
    },
  );
});

describe("worker: a completion with an unknown outcome is retried", () => {
  it(
    "9: a completion whose request times out is kept and sent again (a copy after each wait, the waits growing) until the owner answers ok; while a copy is on the wire the attempt is not heartbeated",
    T,
    async () => {
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      assert.equal(t.executor.starts(), 1);
      t.owner.complete = "silent";
      t.executor.exit("r1#1");
      const exitedAt = t.sim.now();
      // Copies a 2 s wait apart, each after the reports' gathering (REPORT_COALESCE_MS, 20 ms): the
      // first at the next timer (the heartbeat tick at +500 ms), then +2.52 s, +4.54 s.
      await t.runTo(exitedAt + 4_600);
      assert.equal(
        t.owner.completes.length,
        3,
        `a copy each wait: ${JSON.stringify(t.owner.completes.map((c) => c.at - exitedAt))}`,
      );
      assert.deepEqual(t.evs("completed"), []);
      assert.deepEqual(
        t.worker.leaseCounts,
        { held: 1, awake: 0 },
        "a lease whose report is on the wire is not walked by rounds",
      );
      // A round already out when the task ended may still arrive; none after.
      const hbAfter = t.owner.heartbeats.filter((h) => h.run_id === "r1" && h.at > exitedAt + HB);
      assert.deepEqual(
        hbAfter,
        [],
        "its report's arrival keeps the lease: no heartbeat while a copy is on the wire",
      );
      assert.equal(t.executor.log.filter((e) => e.what === "kill").length, 0);
      t.owner.complete = "ok";
      // The copy in flight waits out its 2 s; the next, the fourth, goes 4 s after the third (the
      // waits double from the third copy here: report-backoff.ts) and is answered.
      await t.runTo(t.sim.now() + 4_000 + 100);
      assert.equal(t.evs("completed").length, 1);
      const reported = t.owner.completes.length;
      const asked = t.owner.heartbeats.length;
      await t.runTo(t.sim.now() + 3 * HB);
      assert.equal(t.owner.completes.length, reported, "no copy after the answer");
      assert.equal(
        t.owner.heartbeats.slice(asked).filter((h) => h.run_id === "r1").length,
        0,
        "dropped once acknowledged",
      );
      assert.deepEqual(
        t.evs("self_fenced"),
        [],
        "a finished attempt waiting for its report is not self-fenced",
      );
      await t.worker.stop();
    },
  );

  it(
    "a copy that fails at once (an error that settles nothing) is sent again only after its wait, and the attempt is heartbeated in between (its owner answers: not saturated)",
    T,
    async () => {
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      t.owner.complete = "internal";
      t.executor.exit("r1#1");
      const exitedAt = t.sim.now();
      await t.runTo(exitedAt + 1_900);
      assert.equal(t.owner.completes.length, 1, "no copy before the wait (2 s) is out: no spin");
      const firstAt = t.owner.completes[0]!.at;
      const beats = t.owner.heartbeats.filter((h) => h.run_id === "r1" && h.at > firstAt);
      assert.ok(beats.length >= 1, "answered with an error: heartbeated until the next copy");
      await t.runTo(exitedAt + 2_600);
      assert.equal(t.owner.completes.length, 2, "the next copy after the wait");
      t.owner.complete = "ok";
      await t.runTo(t.sim.now() + 2_500);
      assert.equal(t.evs("completed").length, 1);
      assert.deepEqual(t.evs("self_fenced"), []);
      await t.worker.stop();
    },
  );

  it(
    "a report failing for its owner's KV (unavailable, not queued there) is copied after the short wait, not taken for pending",
    T,
    async () => {
      // Taken for a report queued at its owner, it went silent for the longer wait (15 s, up to
      // 45 s): an owner that had lost the attempt's start with its actor never heard of it again,
      // and a pause meanwhile cancelled the run "before it started" though it had run.
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      t.owner.complete = "kv_unavailable";
      t.executor.exit("r1#1");
      const exitedAt = t.sim.now();
      await t.runTo(exitedAt + 1_900);
      assert.equal(t.owner.completes.length, 1);
      await t.runTo(exitedAt + 2_600);
      assert.equal(t.owner.completes.length, 2, "copied after the short wait (2 s), not 15 s");
      t.owner.complete = "ok";
      await t.runTo(t.sim.now() + 2_500);
      assert.equal(t.evs("completed").length, 1);
      await t.worker.stop();
    },
  );

  it(
    "a copy's wait is the configured one (up to a quarter of the deadline), not bounded by the lease: meanwhile the owner's probe of the lease it no longer hears learns the completion",
    T,
    async () => {
      // Bounded by the lease (~6.5 s at the default TTL), a burst's first copies timed out at the
      // saturated owner, which answers seconds after it is asked, and came back as copies.
      const t = await setup({ completionWaitMs: 12_000 });
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      t.owner.complete = "silent";
      t.executor.exit("r1#1");
      const exitedAt = t.sim.now();
      await t.runTo(exitedAt + 1_000);
      assert.equal(t.owner.completes.length, 1);
      const firstAt = t.owner.completes[0]!.at;
      await t.runTo(firstAt + TTL + 100);
      assert.equal(t.owner.completes.length, 1, "no copy within the lease TTL");
      assertSucceeded(await t.probe("r1"), "ok", "a probe hears the completion while it waits");
      await t.runTo(firstAt + 12_000 + 100);
      assert.deepEqual(
        t.owner.completes.map((c) => c.at - firstAt),
        [0, 12_000 + 20],
        "the copy after the configured wait and the gathering",
      );
      await t.worker.stop();
    },
  );

  it(
    "at most `completionsInFlight` reports are out at once; the rest wait on the worker (heartbeated) and go as answers come",
    T,
    async () => {
      // A burst's completions sent all at once and again every round would bury a saturated owner
      // under copies nobody waits for.
      const t = await setup({ completionsInFlight: 2 });
      for (const r of ["r1", "r2", "r3", "r4"])
        assert.deepEqual(await t.offer(r, 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      assert.equal(t.executor.starts(), 4);
      t.owner.complete = "silent";
      for (const r of ["r1", "r2", "r3", "r4"]) t.executor.exit(`${r}#1`);
      const exitedAt = t.sim.now();
      await t.runTo(exitedAt + 1_900); // within the reports' 2 s deadline
      assert.deepEqual(
        t.owner.completes.map((c) => c.run_id),
        ["r1", "r2"],
        "two out; two wait on the worker",
      );
      const hb = t.owner.heartbeats.filter((h) => h.at > exitedAt + 1_000).map((h) => h.run_id);
      for (const r of ["r3", "r4"])
        assert.ok(hb.includes(r), `${r}, waiting to be reported, is heartbeated`);
      t.owner.complete = "ok";
      await t.runTo(t.sim.now() + 2_000 + 3 * HB);
      assert.deepEqual(
        t
          .evs("completed")
          .map((e) => e.run_id)
          .sort(),
        ["r1", "r2", "r3", "r4"],
      );
      assert.deepEqual(t.evs("self_fenced"), []);
      await t.worker.stop();
    },
  );

  it(
    "attempts that end together are reported in one request per partition, not one each",
    T,
    async () => {
      // A burst's completions were a request each (200,000 at the 200,000-run burst): on the
      // worker a socket write each, on the owner a message to parse and answer each.
      const t = await setup();
      for (const r of ["r1", "r2", "r3", "r4"])
        assert.deepEqual(await t.offer(r, 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      assert.equal(t.executor.starts(), 4);
      for (const r of ["r1", "r2", "r3", "r4"]) t.executor.exit(`${r}#1`);
      await t.runTo(t.sim.now() + 2 * HB);
      assert.deepEqual(
        t
          .evs("completed")
          .map((e) => e.run_id)
          .sort(),
        ["r1", "r2", "r3", "r4"],
      );
      assert.equal(t.owner.completes.length, 4);
      assert.equal(
        t.owner.completeRequests,
        1,
        "the four reports (one job actor: one partition) in one request",
      );
      await t.worker.stop();
    },
  );

  it(
    "in one batch, a report answered pending is handed over — never copied nor heartbeated, its lease gone, its completion kept for the owner's probe — while the others settle",
    T,
    async () => {
      // One slow item must not cost every item of its batch a copy.
      const t = await setup();
      for (const r of ["r1", "r2"]) assert.deepEqual(await t.offer(r, 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      t.owner.completePending.add("r2");
      for (const r of ["r1", "r2"]) t.executor.exit(`${r}#1`);
      await drainMicrotasks();
      const exitedAt = t.sim.now();
      await t.runTo(exitedAt + 1_900); // the batch (one request) answered: r1 ok, r2 pending
      assert.equal(t.owner.completeRequests, 1);
      assert.deepEqual(
        t.evs("completed").map((e) => e.run_id),
        ["r1"],
      );
      assert.deepEqual(
        t.evs("report_queued").map((e) => e.run_id),
        ["r2"],
      );
      const firstAt = t.owner.completes.find((c) => c.run_id === "r2")!.at;
      assert.deepEqual(t.worker.leaseCounts, { held: 0, awake: 0 }, "both leases gone");
      // Its owner settles it from its mailbox (and keeps the lease meanwhile); should it lose the
      // report (its actor dropped), its probe of the lease hears the completion.
      await t.runTo(firstAt + 200_000);
      assert.equal(
        t.owner.completes.filter((c) => c.run_id === "r2").length,
        1,
        "queued at its owner: never copied",
      );
      assert.deepEqual(
        t.owner.heartbeats.filter((h) => h.run_id === "r2" && h.at > firstAt),
        [],
        "nor heartbeated",
      );
      assertSucceeded(await t.probe("r2"), "ok", "a probe under its fence hears the completion");
      assert.deepEqual(t.evs("report_given_up"), []);
      assert.equal(
        t.owner.completes.filter((c) => c.run_id === "r1").length,
        1,
        "the answered report was not copied",
      );
      await t.worker.stop();
    },
  );

  it(
    "a short attempt's start goes with its completion: no heartbeat reports the start of an attempt that already ended",
    T,
    async () => {
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 100);
      assert.equal(t.executor.starts(), 1);
      t.executor.exit("r1#1"); // ends at once (before any round after its start)
      await drainMicrotasks();
      await t.runTo(T0 + 100 + 3 * HB);
      assert.equal(t.owner.completes.length, 1, "one completion, carrying started_at");
      assert.equal(t.evs("completed").length, 1);
      const startedReports = t.owner.heartbeats.filter((h) => h.run_id === "r1" && h.started);
      assert.deepEqual(startedReports, [], "the start was not also reported by a heartbeat");
      await t.worker.stop();
    },
  );

  it(
    "9: a completion whose request timed out is dropped on a stale_fence verdict, not before",
    T,
    async () => {
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      t.owner.complete = "silent";
      t.executor.exit("r1#1");
      await t.runTo(t.sim.now() + 3_500);
      assert.deepEqual(t.evs("stale_fence"), []);
      assert.ok(t.owner.completes.length >= 2, "still reported");
      t.owner.complete = "stale_fence";
      await t.runTo(t.sim.now() + 2_000 + 100); // the copy in flight may wait out its deadline first
      assert.equal(t.evs("stale_fence").length, 1);
      assert.deepEqual(t.evs("completed"), []);
      const asked = t.owner.heartbeats.length;
      const reported = t.owner.completes.length;
      await t.runTo(t.sim.now() + 3 * HB);
      assert.equal(t.owner.heartbeats.slice(asked).filter((h) => h.run_id === "r1").length, 0);
      assert.equal(t.owner.completes.length, reported);
      await t.worker.stop();
    },
  );
});

/** Offers r1, lets it start, then silences its owner until the worker kills it itself (self-fenced); `before` runs once it has started. */
async function selfFenced(
  t: Awaited<ReturnType<typeof setup>>,
  before: () => void = () => undefined,
): Promise<void> {
  assert.deepEqual(await t.offer("r1", 100), { accepted: true });
  await t.runTo(T0 + 2_500);
  assert.equal(t.executor.starts(), 1);
  before();
  t.owner.hb = "silent"; // its owner's partition between two nodes
  await t.runTo(T0 + 12_000);
  assert.deepEqual(
    t.evs("self_fenced").map((e) => e.run_id),
    ["r1"],
  );
}

describe("worker: the copies of an unsettled report back off", () => {
  /** A Random that returns `values` in turn, then the last one for ever. */
  const draws = (...values: number[]): Random => {
    let i = 0;
    return { next: () => values[Math.min(i++, values.length - 1)]! };
  };

  it(
    "with no answer, the waits between copies double (spread by the random factor) up to the cap, and the attempt is not heartbeated between copies",
    T,
    async () => {
      // A fixed period sent a burst's reports again every 5.5 s to an owner still decoding the
      // earlier copies; the waits must grow instead. Factor 1.25 (a draw of 0.75).
      const t = await setup({ random: draws(0.75) });
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      t.owner.complete = "silent";
      t.executor.exit("r1#1");
      const exitedAt = t.sim.now();
      await t.runTo(exitedAt + 59_000); // within the completion deadline: never given up
      const at = t.owner.completes.map((c) => c.at);
      const gaps = at.slice(1).map((x, i) => x - at[i]!);
      // Waits 2 s × 1.25, 4 s × 1.25, 8 s × 1.25, 16 s × 1.25, each + the 20 ms gathering.
      assert.deepEqual(gaps, [2_520, 5_020, 10_020, 20_020], `gaps ${JSON.stringify(gaps)}`);
      assert.equal(t.worker.leaseCounts.held, 1, "not given up before the deadline");
      // The copies keep the owner's lease (or it probes): heartbeats of a burst's ended attempts,
      // each unanswered by a saturated owner, were most of what it received.
      assert.deepEqual(
        t.owner.heartbeats.filter((h) => h.run_id === "r1" && h.at > at[0]!).map((h) => h.at),
        [],
        "not heartbeated once its first copy went",
      );
      // The next copy is due past the 60 s deadline: the report is given up then, and its
      // completion kept for the owner's probe — the outcome is not lost.
      await t.runTo(exitedAt + 60_000 + 2 * HB);
      assert.equal(t.evs("report_given_up").length, 1, "given up at the completion deadline");
      assert.equal(t.worker.leaseCounts.held, 0);
      assertSucceeded(await t.probe("r1"), "ok", "the probe still learns the completion");
      assert.deepEqual(t.evs("self_fenced"), []);
      await t.worker.stop();
    },
  );

  it(
    "reports of one batch are spread apart by their own draws, and copies due within the same 100 ms share a timer and a request",
    T,
    async () => {
      const ids = Array.from({ length: 12 }, (_, i) => `r${i}`);
      // Draws for the 12 reports of the first batch: six due within 10 ms of one another
      // (factors 1.100-1.105 of 2 s), six 1 s later (1.6).
      const t = await setup({
        slots: 12,
        random: draws(0.6, 0.601, 0.602, 0.603, 0.604, 0.605, 1.1, 1.1, 1.1, 1.1, 1.1, 1.1),
      });
      for (const r of ids) assert.deepEqual(await t.offer(r, 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      assert.equal(t.executor.starts(), 12);
      t.owner.complete = "internal"; // answered at once, settling nothing: an unknown outcome
      const timersBefore = t.sim.pending;
      for (const r of ids) t.executor.exit(`${r}#1`);
      await drainMicrotasks();
      const exitedAt = t.sim.now();
      await t.runTo(exitedAt + 1_000);
      assert.equal(t.owner.completeRequests, 1, "the first copies in one request");
      assert.ok(
        t.sim.pending - timersBefore <= 3,
        `12 copies waiting on at most 3 timers (two 100 ms spans and one), not one each: ${t.sim.pending - timersBefore}`,
      );
      const firstAt = t.owner.completes[0]!.at;
      t.owner.complete = "ok";
      await t.runTo(firstAt + 4_000);
      const second = t.owner.completes.slice(12);
      assert.equal(second.length, 12, "each report copied once");
      const early = second.filter((c) => c.at - firstAt < 2_900).map((c) => c.run_id);
      assert.deepEqual(early.sort(), ["r0", "r1", "r2", "r3", "r4", "r5"].sort());
      for (const c of second) {
        const gap = c.at - firstAt;
        if (early.includes(c.run_id)) assert.ok(gap >= 2_200 && gap <= 2_330, `gap ${gap}`);
        else assert.ok(gap >= 3_200 && gap <= 3_330, `gap ${gap}`);
      }
      assert.ok(
        t.owner.completeRequests <= 1 + 2 + 2,
        `copies grouped: ${t.owner.completeRequests - 1} requests for 12 copies in two clusters`,
      );
      assert.equal(t.evs("completed").length, 12);
      await t.worker.stop();
    },
  );
});

describe("worker: a probe of a silent lease is answered with the truth", () => {
  it(
    "an attempt held and not started is dropped by the probe: it answers not_started and never starts, even when acknowledged later",
    T,
    async () => {
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 3_000), { accepted: true });
      await t.runTo(T0 + 500);
      assert.deepEqual(await t.probe("r1"), { state: "not_started" });
      assert.deepEqual(
        t.evs("probe_dropped").map((e) => e.run_id),
        ["r1"],
      );
      assert.deepEqual(
        await t.offer("r1", 2_500),
        { accepted: false, reason: "attempt already gone from here" },
        "a late copy of the offer cannot bring it back",
      );
      await t.runTo(T0 + 6_000); // past start_at, the owner answering heartbeats
      assert.equal(t.executor.starts(), 0, "a probed attempt started");
      assert.deepEqual(await t.probe("r1"), { state: "not_started" }, "remembered");
      await t.worker.stop();
    },
  );

  it(
    "a running attempt answers running and goes on; an ended one answers with its completion while its report is stuck",
    T,
    async () => {
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      assert.equal(t.executor.starts(), 1);
      assert.deepEqual(await t.probe("r1"), { state: "running" });
      assert.equal(t.executor.log.filter((e) => e.what === "kill").length, 0);
      t.owner.complete = "silent"; // its report goes unanswered (a swamped owner)
      t.executor.exit("r1#1");
      await t.runTo(t.sim.now() + 500);
      const reply = await t.probe("r1");
      assertSucceeded(reply, "ok");
      await t.worker.stop();
    },
  );

  it(
    "an ended attempt whose heartbeat is answered lease_lost keeps its completion: a later probe under that fence hears ended with it, not started",
    T,
    async () => {
      // An owner that answers from a state behind the one stored (its actor read back an older
      // value) says lease_lost, and one that reads the stored state later holds the lease still
      // and probes it: answered `started`, it counts the result lost and offers the run again.
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      t.owner.complete = "internal"; // no verdict: the report waits for its next copy, heartbeated
      t.executor.exit("r1#1");
      const exitedAt = t.sim.now();
      t.owner.hbFor.set("r1", "lease_lost");
      await t.runTo(exitedAt + 1_900);
      assert.deepEqual(
        t.evs("lease_lost").map((e) => e.run_id),
        ["r1"],
      );
      assert.equal(
        t.executor.log.filter((e) => e.what === "kill").length,
        0,
        "an execution that ended is not killed",
      );
      assertSucceeded(
        await t.probe("r1"),
        "ok",
        "a success thrown away on lease_lost answered started: its owner offered the run again",
      );
      assert.deepEqual(await t.probe("r1", 2), { state: "unknown" }, "only under its own fence");
      await t.worker.stop();
    },
  );

  it(
    "a completion its owner refuses (stale_fence) is kept for a probe under that fence",
    T,
    async () => {
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      t.owner.complete = "stale_fence";
      t.executor.exit("r1#1");
      await t.runTo(t.sim.now() + 1_000);
      assert.deepEqual(
        t.evs("stale_fence").map((e) => e.run_id),
        ["r1"],
      );
      assertSucceeded(await t.probe("r1"), "ok", "answered started, the result was lost");
      await t.worker.stop();
    },
  );

  it(
    "an attempt killed by the worker itself answers started; another fence or an attempt never seen answers unknown",
    T,
    async () => {
      const t = await setup();
      await selfFenced(t);
      assert.deepEqual(await t.probe("r1"), { state: "started" });
      assert.deepEqual(await t.probe("r1", 2), { state: "unknown" });
      assert.deepEqual(await t.probe("r9"), { state: "unknown" });
      await t.worker.stop();
    },
  );

  it(
    "an attempt killed at once just as it ended by itself (exit 0, its exit not yet seen) answers ended with its success (answered started, its owner offered the run again)",
    T,
    async () => {
      const t = await setup();
      await selfFenced(t, () => (t.executor.endedBeforeKill = true));
      assert.deepEqual(
        t.evs("ended_before_kill").map((e) => e.run_id),
        ["r1"],
      );
      const reply = await t.probe("r1");
      assertSucceeded(
        reply,
        "done",
        "a success thrown away answered started: the owner offered the run again",
      );
      await t.worker.stop();
    },
  );

  it(
    "while the result of an attempt killed at once is not in, a probe hears running (not started): it may have ended by itself just before",
    T,
    async () => {
      const t = await setup();
      // The kill returns once the task is gone (a container being removed).
      await selfFenced(t, () => (t.executor.hangKill = true));
      assert.deepEqual(
        await t.probe("r1"),
        { state: "running" },
        "answered started, its owner would offer it again at once",
      );
      t.executor.exit("r1#1"); // its exit 0, seen only now
      await t.runFor(100);
      const reply = await t.probe("r1");
      assert.equal(reply.state, "ended");
      assert.equal(reply.completion?.exit_code, 0);
      await t.worker.stop();
    },
  );

  it(
    "a worker whose clock runs 60 s ahead of its owner's starts a prepared attempt by the owner's clock, not early",
    T,
    async () => {
      const t = await setup();
      // The owner's clock reads 60 s less than the worker's: its start_at (5 s from its now) is 55 s in the worker's past.
      const ownerNow = t.sim.now() - 60_000;
      t.owner.coverUntil.set("r1", T0 + 5_000 + TTL); // the owner's lease end, in true time
      assert.deepEqual(
        await t.offer("r1", 0, undefined, ownerNow + 5_000, {
          owner_now_ms: ownerNow,
          start_at_ms: ownerNow + 5_000,
        }),
        { accepted: true },
      );
      await t.runTo(T0 + 3_900);
      assert.equal(
        t.executor.starts(),
        0,
        "not started before start_at − tolerance by the owner's clock",
      );
      await t.runTo(T0 + 4_100);
      assert.equal(
        t.executor.starts(),
        1,
        "started at start_at − START_SKEW_TOLERANCE_MS by the owner's clock",
      );
      assert.equal(t.worker.skewDeferrals, 1);
      assert.equal(t.evs("start_deferred_skew").length, 1);
      await t.worker.stop();
    },
  );

  it("an offer whose owner time is not a finite time is refused", T, async () => {
    const t = await setup();
    const r = await t.offer("r1", 1_000, undefined, undefined, {
      owner_now_ms: Number.POSITIVE_INFINITY,
    });
    assert.equal(r.accepted, false);
    assert.match(r.reason ?? "", /owner_now_ms/);
    await t.worker.stop();
  });

  it(
    "a drain gives back the attempts it holds ahead of their start: their owners hear it at once, and they never start here",
    T,
    async () => {
      const t = await setup();
      t.owner.coverUntil.set("ahead", T0 + 60_000 + TTL);
      assert.deepEqual(await t.offer("ahead", 60_000), { accepted: true });
      assert.deepEqual(await t.offer("now", 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      assert.equal(t.executor.starts(), 1, "only the due attempt started");
      const drained = t.worker.drain(10_000);
      await t.runFor(1_000);
      const given = t.owner.completes.filter((c) => c.run_id === "ahead");
      assert.deepEqual(
        given.map((c) => [c.outcome, c.notStarted]),
        [["error", true]],
        "given back at once (not_started), not left to a lease expiry and a probe",
      );
      t.executor.exit("now#1");
      await t.runFor(70_000);
      assert.deepEqual(await drained, { finished: 1, handedBack: 0, dropped: 1 });
      assert.equal(t.executor.starts(), 1, "the attempt given back never started");
      assert.equal((await t.probe("ahead")).state, "not_started");
      await t.worker.stop();
    },
  );

  it(
    "a drain confirms the reports handed over before it ends (its memory ends with it), asking again while the owner still holds one queued; while draining, a pending answer hands nothing over",
    T,
    async () => {
      // A rolling restart handed over a report, stopped at once and lost its memory; the owner's
      // KV write then timed out, dropping the queued report, and its probe heard `unknown` from the
      // next process: the run ran again (sim seed 12000042).
      const t = await setup();
      for (const r of ["r1", "r2"]) assert.deepEqual(await t.offer(r, 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      t.owner.completePending.add("r1");
      t.executor.exit("r1#1");
      await t.runFor(1_500);
      assert.deepEqual(
        t.evs("report_queued").map((e) => e.run_id),
        ["r1"],
      );
      const drained = t.worker.drain(10_000);
      t.owner.completePending.add("r2");
      t.executor.exit("r2#1");
      await t.runFor(3_500);
      const r1 = () => t.owner.completes.filter((c) => c.run_id === "r1").length;
      const r2 = () => t.owner.completes.filter((c) => c.run_id === "r2").length;
      assert.ok(r1() >= 3, `r1 asked again while still pending (${r1()} reports)`);
      assert.equal(t.evs("report_queued").length, 1, "r2, answered pending, is not handed over");
      assert.ok(r2() >= 2, `r2 copied after the draining wait (${r2()} reports)`);
      let settled = false;
      void drained.then(() => (settled = true));
      await t.runFor(100);
      assert.equal(settled, false, "the drain waits for both");
      t.owner.completePending.clear();
      await t.runFor(20_000);
      assert.equal(settled, true);
      assert.deepEqual(await drained, { finished: 1, handedBack: 0, dropped: 0 });
      assert.deepEqual(
        t
          .evs("completed")
          .map((e) => e.run_id)
          .sort(),
        ["r2"],
        "r2 settled by its own report's copy; r1 confirmed by the drain",
      );
      const afterR1 = r1();
      await t.runFor(20_000);
      assert.equal(r1(), afterR1, "confirmed once answered ok: not asked again");
      await t.worker.stop();
    },
  );

  it(
    "a drain's hand-back that meets a task which had ended by itself (exit 0) reports its success, not a retryable error",
    T,
    async () => {
      const t = await setup();
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      assert.equal(t.executor.starts(), 1);
      t.executor.endedBeforeKill = true;
      const drained = t.worker.drain(1_000);
      await t.runFor(5_000);
      assert.deepEqual(await drained, { finished: 0, handedBack: 1, dropped: 0 });
      assert.deepEqual(
        t.owner.completes.filter((c) => c.run_id === "r1").map((c) => c.outcome),
        ["exited"],
      );
      await t.worker.stop();
    },
  );

  it(
    "a report given up past the completion deadline still answers ended, with its completion (a burst's reports wait here that long)",
    T,
    async () => {
      const t = await setup({ completionDeadlineMs: 5_000 });
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      t.owner.complete = "silent";
      t.executor.exit("r1#1");
      await t.runTo(t.sim.now() + 9_000);
      const reported = t.owner.completes.length;
      await t.runTo(t.sim.now() + 3_000);
      assert.equal(t.owner.completes.length, reported, "given up: no more copies");
      const reply = await t.probe("r1");
      assert.equal(reply.state, "ended");
      assert.equal(reply.completion?.exit_code, 0);
      assert.equal(reply.completion?.output, "ok");
      await t.worker.stop();
    },
  );

  it(
    "reports given up past the output budget keep their outcome, the oldest without their output: none answers started (result lost), and each given-up report is counted",
    T,
    async () => {
      const MIB = 1024 * 1024;
      const n = GIVEN_UP_OUTPUT_CHARS / MIB + 4;
      const t = await setup({ completionDeadlineMs: 5_000, slots: n });
      const ids = Array.from({ length: n }, (_, i) => `r${i}`);
      for (const id of ids) assert.deepEqual(await t.offer(id, 100), { accepted: true });
      await t.runTo(T0 + 2_500);
      assert.equal(t.executor.starts(), n);
      t.owner.complete = "silent";
      const big = "x".repeat(MIB);
      for (const id of ids) t.executor.exit(`${id}#1`, big);
      await t.runTo(t.sim.now() + 12_000);
      assert.equal(t.evs("report_given_up").length, n);
      const replies = await Promise.all(ids.map((id) => t.probe(id)));
      assert.deepEqual(
        replies.map((r) => r.state),
        ids.map(() => "ended"),
        "every given-up attempt answers with its completion",
      );
      assert.ok(
        replies.every((r) => r.completion?.exit_code === 0 && r.completion.outcome === "exited"),
      );
      const lose = n - GIVEN_UP_OUTPUT_CHARS / MIB;
      assert.deepEqual(
        replies.slice(0, lose).map((r) => r.completion?.output),
        ids.slice(0, lose).map(() => OUTPUT_NOT_KEPT),
        "the oldest lose their output past the budget",
      );
      assert.ok(
        replies.slice(lose).every((r) => r.completion?.output === big),
        "the newest keep theirs",
      );
      assert.deepEqual(
        await t.offer("r0", 100),
        { accepted: false, reason: "attempt already gone from here" },
        "a late copy of a given-up attempt's offer is refused",
      );
      assert.deepEqual(t.evs("probe_ended").length, n, "probe answers are counted by state");
      await t.worker.stop();
    },
  );

  it("an offer dropped unacknowledged (offer_expired) answers not_started", T, async () => {
    const t = await setup();
    t.owner.hb = "silent";
    assert.deepEqual(await t.offer("r1", 10_000), { accepted: true });
    await t.runTo(T0 + TTL - MARGIN + 500);
    assert.deepEqual(
      t.evs("offer_expired").map((e) => e.run_id),
      ["r1"],
    );
    assert.deepEqual(await t.probe("r1"), { state: "not_started" });
    await t.worker.stop();
  });
});

/** `kairos_slot_idle_seconds`: its count, and how many fell in its first bucket (≤ 1 ms). */
async function slotIdle(): Promise<{ count: number; underMs: number }> {
  const { body } = await metricsText();
  const read = (re: RegExp) => Number(re.exec(body)?.[1] ?? 0);
  return {
    count: read(/^kairos_slot_idle_seconds_count (\d+)$/m),
    underMs: read(/^kairos_slot_idle_seconds_bucket\{le="0.001"\} (\d+)$/m),
  };
}

describe("worker: the prefetch queue (a freed slot reused at once)", () => {
  it(
    "with its slot taken, an attempt already due waits in the queue, heartbeated, and starts the moment the slot frees — no round, no report answered",
    T,
    async () => {
      const t = await setup({ slots: 1, prefetch: 1 });
      assert.deepEqual(await t.offer("r1", 100), { accepted: true });
      assert.deepEqual(await t.offer("r2", 0), { accepted: true }, "due: queued");
      assert.deepEqual(
        await t.offer("r3", 0),
        { accepted: false, reason: "no free slot" },
        "the queue holds one",
      );
      await t.runTo(T0 + 3 * HB + 500);
      assert.deepEqual(
        t.executor.given.map((g) => g.id.runId),
        ["r1"],
        "r2 waits for the slot",
      );
      assert.ok(t.owner.acked("r2").length >= 3, "kept fresh by the periodic rounds");
      t.owner.complete = "silent"; // r1's report is never answered: its slot frees at its end
      const before = await slotIdle();
      const rounds = t.owner.heartbeats.length;
      t.adverts.length = 0;
      const endAt = t.sim.now();
      t.executor.exit("r1#1");
      await drainMicrotasks();
      assert.deepEqual(
        t.executor.log.filter((e) => e.what === "start").map((e) => [e.key, e.at]),
        [
          ["r1#1", T0 + 100],
          ["r2#1", endAt],
        ],
        "r2 started at r1's end",
      );
      assert.equal(t.owner.heartbeats.length, rounds, "no heartbeat round in between");
      const after = await slotIdle();
      assert.equal(after.count - before.count, 1, "one turnaround observed");
      assert.equal(after.underMs - before.underMs, 1, "of no time at all");
      await t.runFor(ADVERT_GAP_MS + 1);
      assert.deepEqual(t.adverts, [1], "its room advertised at once, not at the next beat");
      assert.deepEqual(await t.offer("r3", 0), { accepted: true }, "and taken");
      await t.worker.stop();
    },
  );

  it(
    "a queued attempt prepared ahead holds no slot idle: a slot freed before its start goes to a later arrival; after its start, the next freed slot is its",
    T,
    async () => {
      const t = await setup({ slots: 1, prefetch: 2 });
      assert.deepEqual(await t.offer("r1", 0), { accepted: true });
      assert.deepEqual(await t.offer("ahead", 3_000), { accepted: true }, "queued, due in 3 s");
      await t.runFor(500);
      t.executor.exit("r1#1"); // the slot frees 2.5 s before `ahead` is due
      await t.runFor(100);
      assert.deepEqual(await t.offer("r2", 0), { accepted: true }, "the free slot: taken");
      await t.runFor(100);
      assert.deepEqual(
        t.executor.given.map((g) => g.id.runId),
        ["r1", "r2"],
        "r2 started in the slot `ahead` did not hold",
      );
      await t.runTo(T0 + 3_000 + 500);
      assert.equal(t.executor.starts(), 2, "`ahead` is due, the slot busy: it waits");
      assert.deepEqual(await t.offer("r3", 0), { accepted: true }, "a later arrival queues");
      await t.runFor(100);
      const endAt = t.sim.now();
      t.executor.exit("r2#1");
      await drainMicrotasks();
      const starts = t.executor.log.filter((e) => e.what === "start");
      assert.deepEqual(
        starts.map((e) => e.key),
        ["r1#1", "r2#1", "ahead#1"],
        "`ahead` takes the freed slot before the later r3",
      );
      assert.equal(starts[2]!.at, endAt, "at once");
      await t.worker.stop();
    },
  );

  it(
    "a slot freed within SLOT_HOLD_MS of a queued on-time run's start is kept for it: a late run ready now does not take it",
    T,
    async () => {
      const t = await setup({ slots: 1, prefetch: 1 });
      assert.deepEqual(await t.offer("r1", 0), { accepted: true });
      assert.deepEqual(await t.offer("late", -2_000), { accepted: true }, "late: queued");
      assert.deepEqual(await t.offer("light", 3_000), { accepted: true }, "on time: queued");
      await t.runTo(T0 + 2_000);
      t.executor.exit("r1#1"); // the slot frees 1 s before `light` is due
      await t.runFor(100);
      assert.deepEqual(
        t.executor.given.map((g) => g.id.runId),
        ["r1"],
        "the slot is kept for `light`: `late` does not start in it",
      );
      await t.runTo(T0 + 3_100);
      assert.deepEqual(
        t.executor.log.filter((e) => e.what === "start").map((e) => [e.key, e.at]),
        [
          ["r1#1", T0],
          ["light#1", T0 + 3_000],
        ],
        "`light` starts on time in the kept slot",
      );
      await t.worker.stop();
    },
  );

  it(
    "a start is near by its owner's clock: a worker whose clock runs 60 s ahead keeps no slot for a run 4.5 s from its start",
    T,
    async () => {
      const t = await setup({ slots: 1, prefetch: 2 });
      assert.deepEqual(await t.offer("r1", 0), { accepted: true });
      // The owner's clock reads 60 s less than the worker's: its start_at, 5 s from its now, is
      // 55 s in the worker's past.
      const ownerNow = t.sim.now() - 60_000;
      t.owner.coverUntil.set("ahead", T0 + 5_000 + TTL);
      assert.deepEqual(
        await t.offer("ahead", 0, undefined, ownerNow + 5_000, {
          owner_now_ms: ownerNow,
          start_at_ms: ownerNow + 5_000,
        }),
        { accepted: true },
        "queued (its start deferred to the owner's time)",
      );
      await t.runFor(500);
      t.executor.exit("r1#1"); // 4.5 s before `ahead` starts by its owner's clock: not near
      await t.runFor(100);
      assert.deepEqual(await t.offer("r2", 0), { accepted: true });
      await t.runFor(100);
      assert.deepEqual(
        t.executor.given.map((g) => g.id.runId),
        ["r1", "r2"],
        "the slot was not kept for `ahead`: r2 started in it",
      );
      await t.worker.stop();
    },
  );

  it(
    "a run offered on time finds a place of its own and takes the next freed slot before a run offered late, queued before it",
    T,
    async () => {
      const t = await setup({ slots: 1, prefetch: 1 });
      assert.deepEqual(await t.offer("r1", 0), { accepted: true });
      assert.deepEqual(
        await t.offer("late", -2_000),
        { accepted: true },
        "2 s late already: queued",
      );
      assert.deepEqual(
        await t.offer("late-2", -2_000),
        { accepted: false, reason: "no free slot" },
        "the queue holds one run offered late",
      );
      assert.deepEqual(
        await t.offer("light", 1_500),
        { accepted: true },
        "on time: a place of its own",
      );
      await t.runTo(T0 + 3 * HB + 500);
      assert.deepEqual(
        t.executor.given.map((g) => g.id.runId),
        ["r1"],
        "both due now, both wait for the slot",
      );
      t.executor.exit("r1#1");
      await drainMicrotasks();
      assert.deepEqual(
        t.executor.given.map((g) => g.id.runId),
        ["r1", "light"],
        "the run that was on time goes first",
      );
      t.executor.exit("light#1");
      await drainMicrotasks();
      assert.deepEqual(
        t.executor.given.map((g) => g.id.runId),
        ["r1", "light", "late"],
      );
      await t.worker.stop();
    },
  );

  it(
    "a queued attempt probed is dropped (not_started) and never starts; a cancelled one is dropped and reported",
    T,
    async () => {
      const t = await setup({ slots: 1, prefetch: 2 });
      assert.deepEqual(await t.offer("r1", 0), { accepted: true });
      assert.deepEqual(await t.offer("r2", 0), { accepted: true });
      assert.deepEqual(await t.offer("r3", 0), { accepted: true });
      await t.runFor(500);
      assert.deepEqual(await t.probe("r2"), { state: "not_started" });
      t.cancel("r3");
      await t.runFor(500);
      assert.deepEqual(
        t.owner.completes.map((c) => [c.run_id, c.outcome]),
        [["r3", "killed"]],
        "the cancelled one reported once",
      );
      t.executor.exit("r1#1");
      await t.runFor(500);
      assert.deepEqual(
        t.executor.given.map((g) => g.id.runId),
        ["r1"],
        "neither starts when the slot frees",
      );
      await t.worker.stop();
    },
  );
});
