/**
 * Worker drain on the real Docker engine: SIGTERM on a worker stops it taking
 * attempts (offers go to another worker), lets the running attempt finish — a 20 s task survives
 * and succeeds exactly once, on the draining worker — and a worker whose drain timeout runs out
 * hands its attempt back: killed, recorded as a retryable error, retried on another worker.
 * Skipped unless KAIROS_DOCKER=1 or KAIROS_REQUIRE_DOCKER=1.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  apiClient,
  eventually,
  startKairosFixture,
  type Api,
  type KairosFixture,
} from "../support/kairos.ts";
import type { NodeProc } from "../support/nodes.ts";
import { dockerSkip, ensureTestImage, TEST_IMAGE } from "../support/docker-image.ts";

interface Attempt {
  attempt: number;
  worker: string | null;
  outcome: string | null;
  error: string | null;
}
interface Run {
  run_id: string;
  status: string;
  attempts: Attempt[];
  result: { exit_code: number | null; output: string } | null;
}
type Evt = {
  type: string;
  run_id?: string;
  running?: number;
  finished?: number;
  handed_back?: number;
};
/** Node events are typed for the cluster's own; worker and drain events come as plain records. */
const evt = (e: unknown): Evt => e as Evt;

describe("worker drain on SIGTERM (docker)", { skip: dockerSkip(), timeout: 240_000 }, () => {
  let fx: KairosFixture;
  let api: Api;
  before(async () => {
    await ensureTestImage();
    fx = await startKairosFixture();
    api = apiClient(
      await fx.apiUrl(fx.spawn("api", "api,scheduler")),
      (await fx.newTenant("drain")).api_key,
    );
  });
  after(async () => {
    await fx?.stop();
  });

  const worker = async (id: string, drainMs: number): Promise<NodeProc> => {
    const w = fx.spawn(id, "worker", [
      "--executor",
      "docker",
      "--drain-timeout-ms",
      String(drainMs),
    ]);
    await w.waitFor((e) => e.type === "node_started", 30_000, `${id} started`);
    return w;
  };
  const job = async (script: string): Promise<string> => {
    const r = await api.call<{ job_id: string }>("POST", "/v1/jobs", {
      schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
      task: { image: TEST_IMAGE, args: ["/bin/sh", "-c", script], timeout_s: 120 },
      retry: { max_attempts: 3, backoff: "fixed", base_s: 1, max_s: 1 },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.job_id;
  };
  const runNow = async (jobId: string): Promise<string> =>
    (await api.call<Run>("POST", `/v1/jobs/${jobId}/runs`)).body.run_id;
  const finished = (runId: string, timeoutMs: number): Promise<Run> =>
    eventually(
      async () => {
        const r = (await api.call<Run>("GET", `/v1/runs/${runId}`)).body;
        return ["succeeded", "failed", "timed_out", "cancelled"].includes(r.status) ? r : undefined;
      },
      timeoutMs,
      `run ${runId} finished`,
    );
  const startedOn = (w: NodeProc, runId: string) =>
    w.waitFor(
      (e) => evt(e).type === "worker_started" && evt(e).run_id === runId,
      60_000,
      `${runId} started on ${w.nodeId}`,
    );
  const starts = (nodes: NodeProc[], runId: string) =>
    nodes.flatMap((n) =>
      n.events.filter((e) => evt(e).type === "worker_started" && evt(e).run_id === runId),
    ).length;

  it("a 20 s task survives SIGTERM of its worker and succeeds once; new attempts go elsewhere", async () => {
    const w1 = await worker("w1", 60_000);
    const long = await runNow(await job("sleep 20; echo done"));
    await startedOn(w1, long);
    const w2 = await worker("w2", 0);
    const exited = w1.exited;
    w1.signal("SIGTERM");
    const draining = (await w1.waitFor(
      (e) => evt(e).type === "worker_draining",
      10_000,
      "w1 draining",
    )) as unknown as Evt;
    assert.equal(draining.running, 1);

    // While w1 drains it takes nothing new: another run goes to w2.
    const short = await runNow(await job("echo two"));
    const s = await finished(short, 60_000);
    assert.equal(s.status, "succeeded", JSON.stringify(s));
    assert.deepEqual(
      s.attempts.map((a) => a.worker),
      ["w2"],
    );

    const r = await finished(long, 60_000);
    assert.equal(r.status, "succeeded", JSON.stringify(r));
    assert.equal(r.result?.output, "done\n");
    assert.deepEqual(
      r.attempts.map((a) => [a.worker, a.outcome]),
      [["w1", "succeeded"]],
    );
    assert.equal(await exited, 0, "w1 exits cleanly after its drain");
    const drained = (await w1.waitFor(
      (e) => evt(e).type === "worker_drained",
      1_000,
      "w1 drained",
    )) as unknown as Evt;
    assert.deepEqual([drained.finished, drained.handed_back], [1, 0]);
    assert.equal(starts(fx.nodes, long), 1, "executed exactly once");
    await w2.stop();
  });

  it("at the drain timeout a running attempt is handed back and retried on another worker", async () => {
    const w3 = await worker("w3", 1_000);
    const run = await runNow(
      await job('[ "$KAIROS_ATTEMPT" = 1 ] && sleep 60; echo "attempt $KAIROS_ATTEMPT"'),
    );
    await startedOn(w3, run);
    await worker("w4", 0);
    const exited = w3.exited;
    w3.signal("SIGTERM");
    const drained = (await w3.waitFor(
      (e) => evt(e).type === "worker_drained",
      20_000,
      "w3 drained",
    )) as unknown as Evt;
    assert.deepEqual([drained.finished, drained.handed_back], [0, 1]);
    assert.equal(await exited, 0);
    const r = await finished(run, 60_000);
    assert.equal(r.status, "succeeded", JSON.stringify(r));
    assert.equal(r.result?.output, "attempt 2\n");
    assert.deepEqual(
      r.attempts.map((a) => [a.worker, a.outcome]),
      [
        ["w3", "error"],
        ["w4", "succeeded"],
      ],
    );
    assert.match(r.attempts[0]!.error ?? "", /drain/);
  });
});
