/**
 * Live views of runs not ended (src/server/live-runs.ts): a scheduler node answers from the job
 * actors it holds in memory, only for the asking tenant's runs; the stats responder answers
 * `{kind: "runs"}` and refuses a malformed one; an API node merges every scheduler's answer
 * (only what it asked, never a terminal view, the further along of two owners) and leaves a node
 * that does not answer out.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Bus, BusMsg } from "../../../src/cluster/bus.ts";
import { decode, encode } from "../../../src/cluster/codec.ts";
import { EventBus } from "../../../src/cluster/events.ts";
import {
  activeRunView,
  emptyJobState,
  type ActiveRun,
  type JobState,
} from "../../../src/job-state/job-state.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { JOB_ACTOR, jobActorId, runIdFor } from "../../../src/protocol/ids.ts";
import { MAX_LIVE_RUN_IDS } from "../../../src/protocol/live-runs.ts";
import type { RunView } from "../../../src/protocol/model.ts";
import { LiveRunsGatherer, nodeLiveRuns } from "../../../src/server/live-runs.ts";
import {
  MAX_LIVE_RUNS_BYTES,
  StatsResponder,
  statsSubject,
} from "../../../src/server/stats-responder.ts";
import { TenantSeries } from "../../../src/history/tenant-series.ts";

const T = "tabcdefghijklmnop";
const OTHER = "tqrstuvwxyz234567";
const J1 = "j0000000000000001";
const J2 = "j0000000000000002";

const active = (run_id: string, status: ActiveRun["status"], attempt = 1): ActiveRun => ({
  run_id,
  scheduled_for_ms: 0,
  start_at_ms: 0,
  trigger: "schedule",
  status,
  attempt,
  fence: 5,
  worker: "w1",
  slot: true,
  created_at_ms: 0,
  started_at_ms: status === "running" ? 1_000 : null,
  next_attempt_at_ms: null,
  attempts: [],
});

const state = (tenant: string, job: string, runs: ActiveRun[]): JobState => ({
  ...emptyJobState(),
  job: {
    tenant_id: tenant,
    job_id: job,
    spec: {} as never,
    version: 1,
    created_at_ms: 0,
    updated_at_ms: 0,
    request_hash: "h",
  },
  runs,
});

const r1 = runIdFor(J1, 1_000);
const r2 = runIdFor(J1, 2_000);
const r3 = runIdFor(J2, 3_000);

/** A node's loaded actors: T's J1 with two runs active, J2 deleted. */
function peekOf(states: Map<string, JobState>) {
  return (type: string, id: string): unknown => (type === JOB_ACTOR ? states.get(id) : undefined);
}

/** An in-memory bus: requests reach the subscriber of their subject, or time out. */
function memoryBus(): Bus {
  const subs = new Map<string, (err: Error | null, m: BusMsg) => void>();
  return {
    publish: () => undefined,
    request: (subject, data) =>
      new Promise<{ readonly data: Uint8Array }>((resolve, reject) => {
        const cb = subs.get(subject);
        if (!cb) return reject(new Error("503 no responders"));
        cb(null, {
          subject,
          data,
          reply: "_INBOX.abc.1",
          respond: (d: Uint8Array) => resolve({ data: d }),
        });
        // Dropped unanswered: a timeout.
        setImmediate(() => reject(new Error("timeout")));
      }),
    subscribe: (subject, opts) => {
      subs.set(subject, opts.callback);
      return { unsubscribe: () => subs.delete(subject) };
    },
    flush: async () => undefined,
    isClosed: () => false,
  };
}

function responder(node: string, states: Map<string, JobState>, bus: Bus): StatsResponder {
  const clock = new FakeClock(0);
  const r = new StatsResponder({
    clusterName: "k",
    nodeId: node,
    inboxes: "shared",
    series: new TenantSeries(),
    forecast: () => undefined,
    clock,
    events: new EventBus(),
    liveRuns: (tenantId, runIds) => nodeLiveRuns(peekOf(states), tenantId, runIds),
  });
  r.start(bus);
  return r;
}

describe("live runs", () => {
  it("a node answers from its loaded job actors, only the tenant's runs it was asked for", () => {
    const states = new Map([
      [jobActorId(T, J1), state(T, J1, [active(r1, "running"), active(r2, "leased")])],
      [jobActorId(T, J2), { ...state(T, J2, [active(r3, "running")]), deleted: true }],
    ]);
    const got = nodeLiveRuns(peekOf(states), T, [r1, r3, "nope", runIdFor(J1, 9_000)]);
    assert.deepEqual(
      got.map((r) => [r.run_id, r.status, r.tenant_id, r.job_id]),
      [[r1, "running", T, J1]],
    );
    // Another tenant asking for the same ids reaches other actors (its own address): nothing.
    assert.deepEqual(nodeLiveRuns(peekOf(states), OTHER, [r1, r2]), []);
    // At most MAX_LIVE_RUN_IDS ids are looked at.
    const many = [...Array.from({ length: MAX_LIVE_RUN_IDS }, () => "x"), r1];
    assert.deepEqual(nodeLiveRuns(peekOf(states), T, many), []);
  });

  it("an API node merges every scheduler's answer; a silent or malformed request is left out", async () => {
    const bus = memoryBus();
    const a = responder(
      "s1",
      new Map([[jobActorId(T, J1), state(T, J1, [active(r1, "leased"), active(r2, "leased")])]]),
      bus,
    );
    // s2 holds J1 too (a hand-over), further along for r1; and J2.
    const b = responder(
      "s2",
      new Map([
        [jobActorId(T, J1), state(T, J1, [active(r1, "running")])],
        [jobActorId(T, J2), state(T, J2, [active(r3, "retry_wait", 2)])],
      ]),
      bus,
    );
    const g = new LiveRunsGatherer({
      clusterName: "k",
      bus: () => bus,
      schedulers: () => ["s1", "s2", "s3"], // s3 is gone: no answer
    });
    const got = await g.liveRuns(T, [r1, r3]);
    assert.deepEqual(
      [...got].map(([id, r]) => [id, r.status]),
      [
        [r1, "running"],
        [r3, "retry_wait"],
      ],
      "only what was asked (not r2), the further along of two owners",
    );
    assert.equal((await g.liveRuns(OTHER, [r1, r3])).size, 0, "another tenant: nothing");
    // Malformed requests are dropped unanswered.
    for (const body of [
      { kind: "runs", tenant_id: T, run_ids: "r1" },
      { kind: "runs", tenant_id: T, run_ids: [1] },
      {
        kind: "runs",
        tenant_id: T,
        run_ids: Array.from({ length: MAX_LIVE_RUN_IDS + 1 }, () => r1),
      },
      { kind: "runs", tenant_id: "nope", run_ids: [r1] },
    ])
      await assert.rejects(
        bus.request(statsSubject("k", "s1"), encode(body), { timeout: 100 }),
        /timeout/,
        JSON.stringify(body).slice(0, 80),
      );
    // The answer's shape.
    const raw = await bus.request(
      statsSubject("k", "s1"),
      encode({ kind: "runs", tenant_id: T, run_ids: [r2] }),
      { timeout: 100 },
    );
    const answer = decode<{ v: number; node: string; runs: RunView[] }>(raw.data);
    assert.equal(answer.v, 1);
    assert.equal(answer.node, "s1");
    assert.deepEqual(
      answer.runs.map((r) => r.run_id),
      [r2],
    );
    a.stop();
    b.stop();
  });

  it("an answer stays within MAX_LIVE_RUNS_BYTES: runs past it are left out (shown as recorded)", async () => {
    const bus = memoryBus();
    // Ten runs of 100 KB each (a run's attempts may carry long errors): 1 MB unbounded.
    const big = (runId: string): RunView => ({
      ...activeRunView(state(T, J1, []).job!, active(runId, "running")),
      reason: "e".repeat(100_000),
    });
    const ids = Array.from({ length: 10 }, (_, i) => runIdFor(J1, 100 + i));
    const r = new StatsResponder({
      clusterName: "k",
      nodeId: "s1",
      inboxes: "shared",
      series: new TenantSeries(),
      forecast: () => undefined,
      clock: new FakeClock(0),
      events: new EventBus(),
      liveRuns: (_t, runIds) => runIds.map(big),
    });
    r.start(bus);
    const raw = await bus.request(
      statsSubject("k", "s1"),
      encode({ kind: "runs", tenant_id: T, run_ids: ids }),
      { timeout: 100 },
    );
    assert.ok(raw.data.length <= MAX_LIVE_RUNS_BYTES, `${raw.data.length} bytes`);
    const answer = decode<{ runs: RunView[] }>(raw.data);
    assert.ok(answer.runs.length >= 1 && answer.runs.length < ids.length);
    assert.deepEqual(
      answer.runs.map((x) => x.run_id),
      ids.slice(0, answer.runs.length),
    );
    r.stop();
  });
});
