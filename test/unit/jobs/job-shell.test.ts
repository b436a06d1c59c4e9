/**
 * The job actor's shell (src/jobs/job-shell.ts), one fence per worker and epoch-stamped writes: the run
 * record writes (`put_run` modes, epoch `_e` in the stored record) on the in-memory KV, and the
 * worker offer (`dispatch`) over a Bus that records requests. The shell is driven directly through
 * its registration (`perform` / `performPost`) with a hand-made ShellContext.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { ShellContext } from "../../../src/actors/host.ts";
import type { Bus } from "../../../src/cluster/bus.ts";
import { decode, encode } from "../../../src/cluster/codec.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { DEFAULT_JOB_CONFIG, type JobEffect } from "../../../src/job-state/job-types.ts";
import { jobRegistration } from "../../../src/jobs/job-shell.ts";
import { PROBE_NO_RESPONDER_ASKS, PROBE_TIMEOUT_MS } from "../../../src/runs/probe.ts";
import { runKey } from "../../../src/protocol/ids.ts";
import type { RunStatus, RunView } from "../../../src/protocol/model.ts";
import { FakeClock, type Clock } from "../../../src/lib/clock.ts";
import { isKairosError } from "../../../src/lib/errors.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import { WorkerDirectory } from "../../../src/slots/worker-directory.ts";
import { workerSubject } from "../../../src/protocol/worker.ts";
import type { StartReply, StartRequest } from "../../../src/protocol/worker.ts";

const CLUSTER = "c";
const PARTITION = 3;
const ACTOR_ID = "t1.j1";

function run(status: RunStatus, over: Partial<RunView> = {}): RunView {
  return {
    run_id: "r1",
    job_id: "j1",
    tenant_id: "t1",
    scheduled_for: "2024-01-01T00:00:00Z",
    trigger: "schedule",
    status,
    attempt: 1,
    attempts: [],
    created_at: "2024-01-01T00:00:00Z",
    started_at: null,
    finished_at: null,
    next_attempt_at: null,
    result: null,
    reason: null,
    ...over,
  };
}
const KEY = runKey(PARTITION, "t1", "j1", "r1");

type Responder = (subject: string, req: StartRequest) => Promise<StartReply>;

function setup(
  respond: Responder = async () => ({ accepted: true }),
  sleep?: (ms: number) => Promise<void>,
) {
  const clock = new FakeClock(1_000_000);
  const runs = new MemoryKv("runs");
  const requests: { subject: string; req: StartRequest; timeout: number }[] = [];
  const bus: Bus = {
    publish: () => undefined,
    async request(subject, data, opts) {
      const req = decode<StartRequest>(data);
      requests.push({ subject, req, timeout: opts.timeout });
      return { data: encode(await respond(subject, req)) };
    },
    subscribe: () => ({ unsubscribe: () => undefined }),
    flush: async () => undefined,
    isClosed: () => false,
  };
  const workers = new WorkerDirectory(clock, seededRandom(1), 60_000);
  for (const w of ["w1", "w2", "w3", "w4"])
    workers.observe({ worker_id: w, slots: 4, free: 4, executor: "noop" });
  const logs: string[] = [];
  // The shell's clock: the directory's time; a wait is reported to `sleep` and ends when it resolves.
  const shellClock: Clock = {
    now: () => clock.now(),
    monoMs: () => clock.monoMs(),
    setTimer: (ms, fn) => {
      void (sleep?.(ms) ?? Promise.resolve()).then(fn);
      return () => undefined;
    },
  };
  const reg = jobRegistration(DEFAULT_JOB_CONFIG, {
    log: (_l, m, x) => logs.push(`${m} ${JSON.stringify(x ?? {})}`),
    clock: shellClock,
    workers: { nc: bus, clusterName: CLUSTER, directory: workers },
    history: { runs },
    slots: {
      router: () => {
        throw new Error("no router in this test");
      },
    },
  });
  const told: unknown[] = [];
  let onTell: (() => void) | undefined;
  const ctx = (epoch: number, stillOwner: () => boolean = () => true): ShellContext => ({
    address: { type: "job", id: ACTOR_ID },
    partition: PARTITION,
    epoch,
    nodeId: `node-e${epoch}`,
    stillOwner,
    tell: (m) => {
      told.push(m);
      onTell?.();
    },
  });
  /** Resolves once the shell told its actor something (arm before acting). */
  const nextTell = () => new Promise<void>((r) => (onTell = r));
  const putRun = (
    c: ShellContext,
    record: RunView,
    mode: "create" | "update" | "terminal" | "settle",
  ) => reg.perform!([{ kind: "put_run", record, mode } satisfies JobEffect], c);
  const stored = async () => {
    const e = await runs.get(KEY);
    return e ? decode<RunView & { _e?: number }>(e.value) : null;
  };
  /** A record as written by the owner of `epoch` (the stored form: the view plus `_e`). */
  const seed = (record: RunView, epoch: number) => runs.put(KEY, encode({ ...record, _e: epoch }));
  return { clock, runs, requests, workers, reg, told, ctx, nextTell, putRun, stored, seed, logs };
}

const notOwner = (e: unknown) => {
  assert.ok(isKairosError(e, "not_owner"), `expected not_owner, got ${String(e)}`);
  return true;
};

describe("job shell: putRun", () => {
  it("update refuses not_owner when the stored record carries a later epoch, and leaves it alone", async () => {
    const t = setup();
    await t.seed(run("succeeded"), 9);
    await assert.rejects(t.putRun(t.ctx(5), run("queued"), "update"), notOwner);
    const s = await t.stored();
    assert.equal(s?.status, "succeeded");
    assert.equal(s?._e, 9);
  });

  it("a stale owner whose cached revision conflicts re-reads and refuses; succeeded is not turned back into queued", async () => {
    const t = setup();
    const old = t.ctx(5);
    await t.putRun(old, run("queued"), "create");
    await t.putRun(old, run("running"), "update"); // the old owner caches the record's revision
    // The new owner (epoch 6, another node: its own registration and revision cache) settles it.
    const freshReg = jobRegistration(DEFAULT_JOB_CONFIG, {
      log: () => undefined,
      clock: t.clock,
      workers: { nc: {} as Bus, clusterName: CLUSTER, directory: t.workers },
      history: { runs: t.runs },
      slots: {
        router: () => {
          throw new Error("unused");
        },
      },
    });
    await freshReg.perform!(
      [{ kind: "put_run", record: run("succeeded"), mode: "update" } satisfies JobEffect],
      t.ctx(6),
    );
    assert.equal((await t.stored())?.status, "succeeded");
    // The stalled old owner's write lands now: CAS conflict on its cached revision, then re-read.
    await assert.rejects(t.putRun(old, run("queued"), "update"), notOwner);
    const s = await t.stored();
    assert.equal(s?.status, "succeeded");
    assert.equal(s?._e, 6);
  });

  it("update overwrites a record of an earlier epoch, stamping its own", async () => {
    const t = setup();
    await t.seed(run("queued"), 3);
    await t.putRun(t.ctx(5), run("running"), "update");
    const s = await t.stored();
    assert.equal(s?.status, "running");
    assert.equal(s?._e, 5);
  });

  it("terminal settles an orphaned non-terminal record", async () => {
    const t = setup();
    await t.seed(run("queued"), 3);
    await t.putRun(t.ctx(5), run("missed", { reason: "missed" }), "terminal");
    assert.equal((await t.stored())?.status, "missed");
  });

  it("terminal leaves a terminal record alone", async () => {
    const t = setup();
    await t.seed(run("succeeded"), 3);
    await t.putRun(t.ctx(5), run("missed", { reason: "missed" }), "terminal");
    const s = await t.stored();
    assert.equal(s?.status, "succeeded");
    assert.equal(s?._e, 3);
  });

  it("settle never creates a record, and tells the actor only when it settled one", async () => {
    const t = setup();
    assert.deepEqual(await t.putRun(t.ctx(5), run("cancelled"), "settle"), []);
    assert.equal(await t.stored(), null);
    await t.seed(run("queued"), 3);
    assert.deepEqual(await t.putRun(t.ctx(5), run("cancelled"), "settle"), [
      { kind: "run_settled", run_id: "r1" },
    ]);
    assert.equal((await t.stored())?.status, "cancelled");
  });
});

describe("job shell: dispatch", () => {
  const dispatchFx = (fence: number): JobEffect => ({
    kind: "dispatch",
    run_id: "r1",
    fence,
    attempt: 1,
    start_at_ms: 1_000_000,
    scheduled_for_ms: 1_000_000,
    task: { image: "i", args: ["true"], env: {}, timeout_s: 30 },
  });

  it("an accepted offer goes to one worker and comes back as `claimed` with that worker and fence", async () => {
    const t = setup();
    const told = t.nextTell();
    t.reg.performPost!([dispatchFx(11)], t.ctx(5));
    await told;
    assert.equal(t.requests.length, 1);
    const [r] = t.requests;
    assert.equal(r!.req.fence, 11);
    const worker = r!.subject.split(".")[3];
    assert.equal(r!.subject, workerSubject(CLUSTER, worker!, "start"));
    assert.deepEqual(t.told, [{ kind: "claimed", run_id: "r1", fence: 11, worker }]);
  });

  it("one fence is offered to exactly one worker, even when it refuses (several are free)", async () => {
    const t = setup(async () => ({ accepted: false, reason: "no free slot" }));
    const told = t.nextTell();
    t.reg.performPost!([dispatchFx(12)], t.ctx(5));
    await told;
    // Asked twice ("no free slot" is asked once more), both times the same worker and fence.
    assert.equal(
      new Set(t.requests.map((r) => r.subject)).size,
      1,
      `offered to ${t.requests.map((r) => r.subject).join(", ")}`,
    );
    assert.deepEqual(
      t.requests.map((r) => r.req.fence),
      [12, 12],
    );
    assert.equal(t.told.length, 1);
    assert.ok((t.told[0] as { kind: string }).kind === "dispatch_failed", JSON.stringify(t.told));
  });

  it("a worker with no free slot (its completion not yet acknowledged) is asked once more, same worker and fence", async () => {
    const slept: number[] = [];
    const sleep = async (ms: number) => void slept.push(ms);
    let n = 0;
    const t = setup(
      async () => (n++ === 0 ? { accepted: false, reason: "no free slot" } : { accepted: true }),
      sleep,
    );
    const told = t.nextTell();
    t.reg.performPost!([dispatchFx(15)], t.ctx(5));
    await told;
    assert.equal(t.requests.length, 2);
    assert.equal(t.requests[0]!.subject, t.requests[1]!.subject, "the same worker");
    assert.deepEqual(
      t.requests.map((r) => r.req.fence),
      [15, 15],
    );
    assert.equal(slept.length, 1);
    assert.equal((t.told[0] as { kind: string }).kind, "claimed");
    // refused twice: dispatch_failed, and no third offer
    const u = setup(async () => ({ accepted: false, reason: "no free slot" }), sleep);
    const failed = u.nextTell();
    u.reg.performPost!([dispatchFx(16)], u.ctx(5));
    await failed;
    assert.equal(u.requests.length, 2);
    assert.equal(u.requests[0]!.subject, u.requests[1]!.subject);
    assert.equal((u.told[0] as { kind: string }).kind, "dispatch_failed");
  });

  it("a refused offer is woken by the next advert with room: the actor is told redispatch under that fence, once", async () => {
    const t = setup(async () => ({ accepted: false, reason: "no free slot" }));
    const failed = t.nextTell();
    t.reg.performPost!([dispatchFx(17)], t.ctx(5));
    await failed;
    assert.equal((t.told[0] as { kind: string }).kind, "dispatch_failed");
    assert.equal(t.workers.roomWaiters, 1);
    t.workers.observe({ worker_id: "w2", slots: 4, free: 0, executor: "noop" });
    assert.equal(t.told.length, 1, "no room: not woken");
    t.workers.observe({ worker_id: "w2", slots: 4, free: 1, executor: "noop" });
    t.workers.observe({ worker_id: "w3", slots: 4, free: 3, executor: "noop" });
    assert.deepEqual(t.told.slice(1), [{ kind: "redispatch", run_id: "r1", fence: 17 }]);
  });

  it("a stale owner (stillOwner false) offers nothing", async () => {
    const t = setup();
    t.reg.performPost!(
      [dispatchFx(14)],
      t.ctx(5, () => false),
    );
    for (let i = 0; i < 3; i++) await new Promise<void>((r) => setImmediate(r));
    assert.deepEqual(t.requests, []);
    assert.deepEqual(t.told, []);
  });

  it("an offer that times out tells the actor dispatch_failed for that fence; no other worker gets the fence; the silent worker is benched and the run offered again at once", async () => {
    const t = setup(async () => {
      throw new Error("TIMEOUT");
    });
    const told = t.nextTell();
    t.reg.performPost!([dispatchFx(13)], t.ctx(5));
    await told;
    assert.equal(
      t.requests.length,
      1,
      `the fence went to ${t.requests.map((r) => r.subject).join(", ")}`,
    );
    const msgs = (t.told as { kind: string; run_id: string; fence: number }[]).map((m) => ({
      kind: m.kind,
      run_id: m.run_id,
      fence: m.fence,
    }));
    assert.deepEqual(msgs, [
      { kind: "dispatch_failed", run_id: "r1", fence: 13 },
      // Other workers have room: offered again now (a new fence), not at the redispatch timer.
      { kind: "redispatch", run_id: "r1", fence: 13 },
    ]);
    const silent = t.requests[0]!.subject.split(".")[3]!;
    assert.equal(t.workers.standing(silent).kind, "benched");
    for (let i = 0; i < 12; i++) assert.notEqual(t.workers.pick(), silent, "benched: never picked");
  });

  it("an unanswered offer with no other worker with room waits for an advert with room", async () => {
    const t = setup(async () => {
      throw new Error("TIMEOUT");
    });
    for (const w of ["w1", "w2", "w3", "w4"])
      t.workers.observe({ worker_id: w, slots: 4, free: w === "w1" ? 4 : 0, executor: "noop" });
    const told = t.nextTell();
    t.reg.performPost!([dispatchFx(14)], t.ctx(5));
    await told;
    assert.equal(t.requests[0]!.subject, workerSubject(CLUSTER, "w1", "start"));
    assert.deepEqual(
      (t.told as { kind: string }[]).map((m) => m.kind),
      ["dispatch_failed"],
    );
    assert.equal(t.workers.roomWaiters, 1);
    t.workers.observe({ worker_id: "w1", slots: 4, free: 4, executor: "noop" });
    assert.equal(t.workers.roomWaiters, 1, "the benched worker's advert wakes nobody");
    t.workers.observe({ worker_id: "w2", slots: 4, free: 1, executor: "noop" });
    assert.equal(t.workers.roomWaiters, 0);
    assert.deepEqual(
      (t.told as { kind: string }[]).map((m) => m.kind),
      ["dispatch_failed", "redispatch"],
    );
  });
});

describe("job shell: a probe of a silent lease", () => {
  const probeFx = (worker: string) =>
    ({ kind: "probe_worker", worker, run_id: "r1", attempt: 1, fence: 7 }) satisfies JobEffect;
  const noResponders = () => new Error("503: no responders available for request");
  type Told = {
    kind: string;
    reply: unknown;
    gone?: boolean;
    run_id: string;
    fence: number;
    worker: string;
  };
  const probe = async (t: ReturnType<typeof setup>, worker: string): Promise<Told> => {
    const told = t.nextTell();
    t.reg.performPost!([probeFx(worker)], t.ctx(5));
    await told;
    assert.equal(t.told.length, 1);
    return t.told[0] as Told;
  };
  /** The fleet advertising for a full expiry (60 s here), w1–w4 each round; `also` only in the first. */
  const hearFleet = (t: ReturnType<typeof setup>, also: string[] = []) => {
    for (const w of also) t.workers.observe({ worker_id: w, slots: 4, free: 4, executor: "noop" });
    for (let i = 0; i < 4; i++) {
      t.clock.advance(20_500);
      for (const w of ["w1", "w2", "w3", "w4"])
        t.workers.observe({ worker_id: w, slots: 4, free: 4, executor: "noop" });
    }
  };
  const gap = PROBE_TIMEOUT_MS / PROBE_NO_RESPONDER_ASKS; // the default TTL (10 s) allows the whole 5 s

  it("no responder from a worker known to have stopped advertising (the others heard all along): gone, asked once", async () => {
    const t = setup(async () => {
      throw noResponders();
    });
    hearFleet(t, ["w5"]);
    assert.equal(t.workers.advertises("w5"), false);
    const m = await probe(t, "w5");
    assert.deepEqual(m, {
      kind: "probe_answer",
      run_id: "r1",
      fence: 7,
      worker: "w5",
      reply: null,
      gone: true,
    });
    assert.equal(t.requests.length, 1);
    assert.equal(t.requests[0]!.subject, workerSubject(CLUSTER, "w5", "probe"));
  });

  it("no responder while this node has heard no advert for longer than the expiry (itself cut off): not gone — asked PROBE_NO_RESPONDER_ASKS times, then no answer", async () => {
    const t = setup(
      async () => {
        throw noResponders();
      },
      async () => undefined,
    );
    hearFleet(t, ["w5"]);
    t.clock.advance(61_000); // silence from everyone
    const m = await probe(t, "w5");
    assert.deepEqual(m, {
      kind: "probe_answer",
      run_id: "r1",
      fence: 7,
      worker: "w5",
      reply: null,
    });
    assert.equal(t.requests.length, PROBE_NO_RESPONDER_ASKS);
  });

  it("no responder from a worker still advertising (between two connections) is asked again shortly, and its answer counts — not taken for gone", async () => {
    const sleeps: number[] = [];
    let n = 0;
    const t = setup(
      async () => {
        if (++n < 3) throw noResponders();
        return { state: "running" } as unknown as StartReply;
      },
      async (ms) => void sleeps.push(ms),
    );
    hearFleet(t);
    const m = await probe(t, "w1");
    assert.deepEqual(m, {
      kind: "probe_answer",
      run_id: "r1",
      fence: 7,
      worker: "w1",
      reply: { state: "running" },
    });
    assert.equal(t.requests.length, 3);
    assert.deepEqual(sleeps, [gap, gap]);
    assert.deepEqual(
      t.requests.map((r) => r.timeout),
      [PROBE_TIMEOUT_MS, PROBE_TIMEOUT_MS - gap, PROBE_TIMEOUT_MS - 2 * gap],
      "every ask within the one budget",
    );
  });

  it("no responder all along from a worker still advertising: no answer after PROBE_NO_RESPONDER_ASKS (the actor asks again), not gone", async () => {
    const t = setup(
      async () => {
        throw noResponders();
      },
      async () => undefined,
    );
    hearFleet(t);
    const m = await probe(t, "w1");
    assert.deepEqual(m, {
      kind: "probe_answer",
      run_id: "r1",
      fence: 7,
      worker: "w1",
      reply: null,
    });
    assert.equal(t.requests.length, PROBE_NO_RESPONDER_ASKS);
  });

  it("a timeout from a worker not heard advertising is no answer, asked once (the actor asks again)", async () => {
    const t = setup(async () => {
      throw new Error("TIMEOUT");
    });
    assert.equal(t.workers.advertises("w9"), false);
    const m = await probe(t, "w9");
    assert.deepEqual(m, {
      kind: "probe_answer",
      run_id: "r1",
      fence: 7,
      worker: "w9",
      reply: null,
    });
    assert.equal(t.requests.length, 1);
  });

  it("a timeout from a worker still advertising is no answer from a live worker (`advertising`: the actor asks longer)", async () => {
    const t = setup(async () => {
      throw new Error("TIMEOUT");
    });
    hearFleet(t);
    assert.equal(t.workers.advertises("w1"), true);
    const m = await probe(t, "w1");
    assert.deepEqual(m, {
      kind: "probe_answer",
      run_id: "r1",
      fence: 7,
      worker: "w1",
      reply: null,
      advertising: true,
    });
    assert.equal(t.requests.length, 1);
  });
});

describe("job shell: reconcile a state read back (deferred ends)", () => {
  it("drops the active runs whose record ended or is gone (pruned after a deferred end), keeps the others, and reads one record per active run", async () => {
    const { runs, reg, ctx } = setup();
    const { emptyJobState } = await import("../../../src/job-state/job-state.ts");
    const { encodeRunRecord } = await import("../../../src/history/run-record.ts");
    const active = (run_id: string) => ({
      run_id,
      scheduled_for_ms: 0,
      start_at_ms: 0,
      trigger: "schedule" as const,
      status: "leased" as const,
      attempt: 1,
      fence: 5,
      worker: "w1",
      slot: true,
      created_at_ms: 0,
      started_at_ms: null,
      next_attempt_at_ms: null,
      attempts: [],
    });
    await runs.put(
      runKey(PARTITION, "t1", "j1", "ended"),
      encodeRunRecord(run("succeeded", { run_id: "ended" }), 1),
    );
    await runs.put(
      runKey(PARTITION, "t1", "j1", "live"),
      encodeRunRecord(run("queued", { run_id: "live" }), 1),
    );
    const state = {
      ...emptyJobState(),
      job: {
        tenant_id: "t1",
        job_id: "j1",
        spec: {} as never,
        version: 1,
        created_at_ms: 0,
        updated_at_ms: 0,
        request_hash: "h",
      },
      runs: [active("ended"), active("pruned"), active("live")],
    };
    let gets = 0;
    const get = runs.get.bind(runs);
    runs.get = async (k: string) => (gets++, get(k));
    const out = (await reg.reconcile!(state, ctx(3))) as typeof state;
    assert.deepEqual(
      out.runs.map((r) => r.run_id),
      ["live"],
    );
    assert.equal(
      (out as { ends_unwritten?: true }).ends_unwritten,
      undefined,
      "scheduled runs' ends need no write",
    );
    assert.equal(gets, 3);
    const none = { ...state, runs: [] };
    assert.equal(
      await reg.reconcile!(none, ctx(3)),
      none,
      "no active runs: no read, the same state",
    );
  });

  it("a run-now's run with no record yet (its state write landed unseen) is kept and its record written; one that ended is dropped", async () => {
    const { runs, reg, ctx } = setup();
    const { emptyJobState } = await import("../../../src/job-state/job-state.ts");
    const { decodeRunRecord, encodeRunRecord } = await import("../../../src/history/run-record.ts");
    const manual = (run_id: string) => ({
      run_id,
      scheduled_for_ms: 0,
      start_at_ms: 0,
      trigger: "manual" as const,
      status: "queued" as const,
      attempt: 0,
      fence: 0,
      worker: null,
      slot: false,
      created_at_ms: 0,
      started_at_ms: null,
      next_attempt_at_ms: null,
      attempts: [],
      recorded_after: true as const,
    });
    await runs.put(
      runKey(PARTITION, "t1", "j1", "j1-done-m1"),
      encodeRunRecord(run("succeeded", { run_id: "j1-done-m1" }), 1),
    );
    const state = {
      ...emptyJobState(),
      job: {
        tenant_id: "t1",
        job_id: "j1",
        spec: { task: { image: "x", command: [] } } as never,
        version: 1,
        created_at_ms: 0,
        updated_at_ms: 0,
        request_hash: "h",
      },
      runs: [manual("j1-new-m2"), manual("j1-done-m1")],
    };
    const out = (await reg.reconcile!(state, ctx(3))) as typeof state;
    assert.deepEqual(
      out.runs.map((r) => r.run_id),
      ["j1-new-m2"],
      "the unrecorded run is live; the ended one goes",
    );
    assert.equal(
      (out as { ends_unwritten?: true }).ends_unwritten,
      true,
      "the ended run-now's drop is to be written before its record can be pruned",
    );
    const written = await runs.get(runKey(PARTITION, "t1", "j1", "j1-new-m2"));
    assert.equal(written && decodeRunRecord(written.value).record.status, "queued");
    assert.equal(written && decodeRunRecord(written.value).epoch, 3, "under the loading epoch");
  });
});
