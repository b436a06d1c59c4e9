/**
 * Cancelling a run end to end, on a real nats-server and real `kairos node` processes (an API +
 * scheduler node, a worker node): over REST (`POST /v1/runs/{run_id}/cancel`) and over the
 * internal NATS API (`NatsApiClient.cancelRun`, with the tenant's service credentials).
 *
 * - A running run is killed — SIGTERM, then SIGKILL after the executor's grace (its task traps
 *   SIGTERM and keeps going) — and ends `cancelled`, its reason naming the API key that asked.
 * - A run waiting for its slot (the tenant's cap is 1) and a run prepared on the worker ahead of
 *   its due time end `cancelled` and never start, shown after a later run went through the same
 *   worker. Pausing or deleting a job cancels its prepared run the same way.
 * - A cancel racing with the run's completion leaves one end: the answer (200 cancelled or 409)
 *   is what the run shows after its worker has reported.
 * - Another tenant cannot cancel (REST with its own real key, NATS with its own credentials):
 *   404, the same answer as for a run that does not exist, and the run goes on.
 *
 * Process executor by default (marker files show what ran); with KAIROS_DOCKER=1 the worker
 * runs the Docker executor (the kill is SIGKILL there: the markers are not checked).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { NatsApiClient } from "../../src/client/nats-api-client.ts";
import type { NodeEvent } from "../../src/cluster/events.ts";
import {
  eventually,
  startKairosFixture,
  tenantAccess,
  type Api,
  type KairosFixture,
} from "../support/kairos.ts";
import type { NodeProc } from "../support/nodes.ts";
import { rejectsWith } from "../support/errors.ts";
import { ensureTestImage, TEST_IMAGE } from "../support/docker-image.ts";

const TA = "tcancelaaaaaaaaaa";
const TB = "tcancelbbbbbbbbbb";
const ALPHA = { name: "alpha", tenantId: TA };
const BETA = { name: "beta", tenantId: TB };
const DOCKER = process.env["KAIROS_DOCKER"] === "1" || process.env["KAIROS_REQUIRE_DOCKER"] === "1";
const IMAGE = DOCKER ? TEST_IMAGE : "busybox";

interface Run {
  run_id: string;
  status: string;
  attempt: number;
  reason: string | null;
  started_at: string | null;
  attempts: { started_at: string | null }[];
}
type Evt = { type: string; run_id?: string };
const evt = (e: NodeEvent): Evt => e;

describe("cancel a run end to end", { timeout: 300_000 }, () => {
  let fx: KairosFixture;
  let restA: Api;
  let restB: Api;
  let worker: NodeProc;
  let ncA: NatsConnection;
  let ncB: NatsConnection;
  let natsA: NatsApiClient;
  let natsB: NatsApiClient;
  const dir = mkdtempSync(join(tmpdir(), "kairos-cancel-"));

  before(async () => {
    if (DOCKER) await ensureTestImage();
    fx = await startKairosFixture({ nats: { services: [ALPHA, BETA] } });
    const node = fx.spawn("api-1", "api,scheduler");
    const url = await fx.apiUrl(node);
    await node.waitFor(
      (e) => (e as { type: string }).type === "nats_api_listening",
      30_000,
      "nats api listening",
    );
    ({ rest: restA, nc: ncA, nats: natsA } = await tenantAccess(fx, url, ALPHA));
    ({ rest: restB, nc: ncB, nats: natsB } = await tenantAccess(fx, url, BETA));
    // One run at a time for A: a second one waits for its slot.
    await fx.tenants.setQuota(TA, { max_concurrent_runs: 1 });
    worker = fx.spawn("w1", "worker", [
      "--slots",
      "4",
      ...(DOCKER ? ["--executor", "docker"] : []),
    ]);
    await worker.waitFor((e) => e.type === "node_started", 30_000, "w1 started");
  });
  after(async () => {
    await ncA?.close();
    await ncB?.close();
    await fx?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const job = async (script: string, over: Record<string, unknown> = {}): Promise<string> => {
    const r = await restA.call<{ job_id: string }>("POST", "/v1/jobs", {
      schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
      task: { image: IMAGE, args: ["/bin/sh", "-c", script], timeout_s: 120 },
      overlap: "allow",
      ...over,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.job_id;
  };
  const runNow = async (jobId: string): Promise<string> => {
    const r = await restA.call<Run>("POST", `/v1/jobs/${jobId}/runs`);
    assert.equal(r.status, 202, JSON.stringify(r.body));
    return r.body.run_id;
  };
  const get = async (runId: string, api: Api = restA): Promise<Run> => {
    const r = await api.call<Run>("GET", `/v1/runs/${runId}`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body;
  };
  const cancel = (runId: string, body?: unknown, api: Api = restA) =>
    api.call<Run & { error?: { code: string; message: string } }>(
      "POST",
      `/v1/runs/${runId}/cancel`,
      body,
    );
  const status = (runId: string, want: string, phase: string) =>
    eventually(
      async () => {
        const r = await get(runId);
        return r.status === want ? r : undefined;
      },
      60_000,
      `${phase}: run ${runId} ${want}`,
    );
  const workerSaw = (type: string, runId: string) =>
    worker.waitFor(
      (e) => evt(e).type === `worker_${type}` && evt(e).run_id === runId,
      60_000,
      `worker_${type} for ${runId}`,
    );
  const workerSaid = (type: string, runId: string): boolean =>
    worker.events.some((e) => evt(e).type === `worker_${type}` && evt(e).run_id === runId);
  const marker = (name: string) => join(dir, name);
  /** A task that appends its run id to `name` (process executor: a file on this host). */
  const note = (name: string) => (DOCKER ? "true" : `echo "$KAIROS_RUN_ID" >> ${marker(name)}`);
  const noted = (name: string): string[] =>
    existsSync(marker(name)) ? readFileSync(marker(name), "utf8").trim().split("\n") : [];

  it("a running run is killed (SIGTERM, then SIGKILL after the grace) and ends cancelled, named by the API key; another tenant gets 404", async () => {
    const long = await job(
      DOCKER
        ? "while :; do sleep 1; done"
        : `echo $$ > ${marker("$KAIROS_RUN_ID.pid")}; trap 'echo term >> ${marker("$KAIROS_RUN_ID.term")}' TERM; while :; do sleep 0.1; done`,
    );
    const id = await runNow(long);
    await status(id, "running", "started");
    // Tenant B, with its own real key and its own NATS credentials: exactly "not found".
    const unknown = await cancel(`${long}-zzzzzz`, undefined, restB);
    const theirs = await cancel(id, undefined, restB);
    assert.equal(theirs.status, 404, JSON.stringify(theirs.body));
    assert.deepEqual(theirs.body, unknown.body, "the same answer as for a run that does not exist");
    await rejectsWith(natsB.cancelRun(id), "not_found");
    const crossed = new NatsApiClient(ncB, { cluster: "kairos", tenantId: TA, timeoutMs: 5000 });
    await rejectsWith(crossed.cancelRun(id), "permission_denied");
    assert.equal((await get(id)).status, "running", "B changed nothing");

    const t0 = Date.now();
    const res = await cancel(id, { reason: "wrong parameters" });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.status, "cancelled");
    assert.match(
      res.body.reason ?? "",
      /^cancelled by request of API key k[a-z2-7]{16}: wrong parameters$/,
    );
    assert.notEqual(res.body.started_at, null);
    await workerSaw("cancelled", id); // its task is gone
    const again = await cancel(id);
    assert.equal(again.status, 200, "idempotent");
    assert.deepEqual(again.body, res.body);
    assert.equal((await get(id)).status, "cancelled");
    if (!DOCKER) {
      const pid = Number(readFileSync(marker(`${id}.pid`), "utf8"));
      assert.ok(readFileSync(marker(`${id}.term`), "utf8").includes("term"), "SIGTERM first");
      assert.ok(Date.now() - t0 >= 1_500, "SIGKILL only after the grace (2 s)");
      assert.throws(() => process.kill(pid, 0), "the task's process is gone");
    }
  });

  it("a run waiting for its slot is dropped (NATS API) and never starts", async () => {
    const long = await job("while :; do sleep 1; done");
    const busy = await runNow(long);
    await status(busy, "running", "the tenant's one slot is taken");
    const quick = await job(note("queued"));
    const waiting = await runNow(quick);
    const w = await get(waiting);
    assert.equal(w.status, "queued");
    assert.equal(w.attempt, 0);
    const c = await natsA.cancelRun(waiting, { reason: "not today" });
    assert.equal(c.status, "cancelled");
    assert.equal(c.reason, "cancelled by request of the NATS API: not today");
    assert.equal((await natsA.cancelRun(waiting)).status, "cancelled", "idempotent");
    assert.equal((await cancel(busy)).status, 200);
    await workerSaw("cancelled", busy);
    // The slot is free: a later run of the same job goes through the same worker.
    const later = await runNow(quick);
    await status(later, "succeeded", "a later run");
    const r = await get(waiting);
    assert.equal(r.status, "cancelled");
    assert.deepEqual(r.attempts, [], "never offered");
    assert.equal(workerSaid("accepted", waiting), false);
    if (!DOCKER) assert.deepEqual(noted("queued"), [later]);
  });

  it("a run prepared on the worker ahead of its due time is dropped there and never starts", async () => {
    const due = Date.now() + 20_000;
    const ahead = await job(note("ahead"), {
      schedule: { at: new Date(due).toISOString() },
      overlap: "skip",
    });
    const runs = await eventually(
      async () => {
        const r = await restA.call<{ runs: Run[] }>("GET", `/v1/jobs/${ahead}/runs`);
        return r.body.runs.find((x) => x.status === "leased");
      },
      15_000,
      "the run prepared on the worker",
    );
    await workerSaw("accepted", runs.run_id);
    const res = await cancel(runs.run_id);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.status, "cancelled");
    assert.equal(res.body.started_at, null);
    await workerSaw("cancelled", runs.run_id);
    // A run due a second after it, on the same worker, runs: by then the cancelled one would have.
    const next = await job(note("ahead"), {
      schedule: { at: new Date(due + 1_000).toISOString() },
    });
    const nextRun = await eventually(
      async () => {
        const r = await restA.call<{ runs: Run[] }>("GET", `/v1/jobs/${next}/runs`);
        return r.body.runs.find((x) => x.status === "succeeded");
      },
      60_000,
      "the run due after it succeeded",
    );
    assert.equal(workerSaid("started", runs.run_id), false, "never started");
    const r = await get(runs.run_id);
    assert.equal(r.status, "cancelled");
    assert.ok(r.attempts.every((a) => a.started_at === null));
    if (!DOCKER) assert.deepEqual(noted("ahead"), [nextRun.run_id]);
  });

  it("pausing or deleting a job cancels its run prepared on the worker", async () => {
    for (const how of ["pause", "delete"] as const) {
      const jobId = await job(note(how), {
        schedule: { at: new Date(Date.now() + 60_000).toISOString() },
      });
      const prepared = await eventually(
        async () => {
          const r = await restA.call<{ runs: Run[] }>("GET", `/v1/jobs/${jobId}/runs`);
          return r.body.runs.find((x) => x.status === "leased");
        },
        20_000,
        `${how}: the run prepared on the worker`,
      );
      const r =
        how === "pause"
          ? await restA.call("PATCH", `/v1/jobs/${jobId}`, { enabled: false })
          : await restA.call("DELETE", `/v1/jobs/${jobId}`);
      assert.ok(r.status === 200 || r.status === 204, JSON.stringify(r.body));
      await workerSaw("cancelled", prepared.run_id);
      // A pause's stop of a leased run ends with the worker's report (its event comes first).
      const ended = await eventually(
        async () => {
          const x = await get(prepared.run_id);
          return x.status === "leased" ? undefined : x;
        },
        10_000,
        `${how}: the run's end recorded`,
      );
      assert.equal(ended.status, "cancelled");
      assert.equal(ended.reason, how === "pause" ? "job paused before it started" : "job deleted");
      assert.equal(workerSaid("started", prepared.run_id), false);
    }
  });

  it("a cancel racing with the completion leaves one end: what it answered is what the run shows", async () => {
    const quick = await job("true");
    const moments = ["at once", "accepted", "started", "completed"] as const;
    const answers: string[] = [];
    for (const when of moments) {
      const id = await runNow(quick);
      if (when !== "at once") await workerSaw(when, id);
      const res = await cancel(id);
      assert.ok(res.status === 200 || res.status === 409, `${when}: ${JSON.stringify(res.body)}`);
      if (res.status === 409) assert.equal(res.body.error?.code, "conflict");
      // Wait for the worker's last word on the run, if it ever had it.
      const lastWords = ["completed", "cancelled", "lease_lost", "offer_expired", "stale_fence"];
      if (workerSaid("accepted", id))
        await eventually(
          async () => (lastWords.some((w) => workerSaid(w, id)) ? true : undefined),
          60_000,
          `${when}: the worker's last word on ${id}`,
        );
      const end = await eventually(
        async () => {
          const r = await get(id);
          return ["cancelled", "succeeded"].includes(r.status) ? r : undefined;
        },
        60_000,
        `${when}: ${id} ended`,
      );
      assert.equal(end.status, res.status === 200 ? "cancelled" : "succeeded", when);
      const again = await cancel(id);
      assert.equal(again.status, res.status, `${when}: asked again, the same answer`);
      assert.equal((await get(id)).status, end.status, `${when}: it stays ${end.status}`);
      answers.push(`${when}: ${end.status}`);
    }
    assert.equal(answers.at(-1), "completed: succeeded", "after the report, a cancel is 409");
  });

  it("bad input: unknown or malformed run ids are 404; a bad body is 400 naming the field", async () => {
    const quick = await job("true");
    const id = await runNow(quick);
    for (const bad of ["nope", `${quick}-`, "a.b"]) {
      const r = await cancel(bad);
      assert.equal(r.status, 404, `${bad}: ${JSON.stringify(r.body)}`);
    }
    for (const [body, field] of [
      [{ reason: "x".repeat(201) }, "reason"],
      [{ reason: 1 }, "reason"],
      [{ why: "x" }, "why"],
      [[], "body"],
    ] as const) {
      const r = await cancel(id, body);
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.equal((r.body as unknown as { error: { field: string } }).error.field, field);
    }
    await rejectsWith(natsA.cancelRun(id, { reason: "" }), "invalid_argument", "reason");
  });
});
