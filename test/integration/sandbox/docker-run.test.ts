/**
 * The docker executor against the real engine: output and identity, exit codes, timeout,
 * kill (lease loss), image not found, invalid tasks, and that no container is left behind.
 * Skipped unless KAIROS_DOCKER=1 or KAIROS_REQUIRE_DOCKER=1; with either, no engine = failure.
 */
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import {
  createExecutor,
  detectExecutor,
  isRetryable,
  type Executor,
  type TaskSpec,
} from "../../../src/sandbox/index.ts";
import { isKairosError } from "../../../src/lib/errors.ts";
import {
  armContainerEvent,
  containersOfRun,
  dockerSkip,
  ensureTestImage,
  removeWorkerContainers,
} from "../../support/docker-image.ts";
import { identity, uniqueWorkerId } from "./fixtures.ts";

const workerId = uniqueWorkerId("w-docker-run");

describe("docker executor: runs", { skip: dockerSkip() }, () => {
  let ex: Executor;
  let image: string;
  const t = (args: string[], extra: Partial<TaskSpec> = {}): TaskSpec => ({
    image,
    args,
    env: {},
    timeoutS: 30,
    ...extra,
  });

  before(async () => {
    image = await ensureTestImage();
    ex = await createExecutor("docker", { workerId, docker: { maxMemoryMb: 512, maxPids: 128 } });
  });
  after(async () => {
    await ex?.close();
    await removeWorkerContainers(workerId);
  });

  it("detects the engine", async () => {
    const d = await detectExecutor();
    assert.equal(d.kind, "docker");
    assert.match(d.reason, /Docker engine/);
  });

  it("runs a container with the run identity and returns its output; the container is removed", async () => {
    const id = identity(workerId, 3);
    const r = await ex.start(
      t(
        [
          "sh",
          "-c",
          'echo "run=$KAIROS_RUN_ID attempt=$KAIROS_ATTEMPT job=$KAIROS_JOB_ID at=$KAIROS_SCHEDULED_FOR x=$X"; echo oops >&2',
        ],
        { env: { X: "y" } },
      ),
      id,
    ).result;
    assert.equal(r.outcome, "exited", JSON.stringify(r));
    assert.equal(r.exitCode, 0);
    assert.match(
      r.output,
      new RegExp(`run=${id.runId} attempt=3 job=job-1 at=2026-03-08T07:00:00Z x=y`),
    );
    assert.match(r.output, /oops/);
    assert.equal(isRetryable(r), false);
    assert.deepEqual(await containersOfRun(id.runId), []);
  });

  it("reports a non-zero exit with its code, retryable", async () => {
    const id = identity(workerId);
    const r = await ex.start(t(["sh", "-c", "exit 3"]), id).result;
    assert.equal(r.outcome, "exited");
    assert.equal(r.exitCode, 3);
    assert.equal(isRetryable(r), true);
    assert.deepEqual(await containersOfRun(id.runId), []);
  });

  it("kills the container at the timeout; it is gone afterwards", async () => {
    const id = identity(workerId);
    const r = await ex.start(t(["sleep", "60"], { timeoutS: 1 }), id).result;
    assert.equal(r.outcome, "timed_out");
    assert.equal(isRetryable(r), true);
    assert.ok(r.finishedAtMs - r.startedAtMs < 10_000, `took ${r.finishedAtMs - r.startedAtMs} ms`);
    assert.match(r.output, /timeout of 1s/);
    assert.deepEqual(await containersOfRun(id.runId), []);
  });

  it("kill() (lease lost) kills the running container", async () => {
    const id = identity(workerId);
    const armed = await armContainerEvent(id.runId, "start");
    const e = ex.start(t(["sleep", "60"]), id);
    await armed.event;
    await e.kill("lease_lost");
    const r = await e.result;
    assert.equal(r.outcome, "killed");
    assert.equal(isRetryable(r), true);
    assert.deepEqual(await containersOfRun(id.runId), []);
  });

  it("kill() before the container starts ends the attempt without running it", async () => {
    const id = identity(workerId);
    const e = ex.start(t(["sh", "-c", "echo should-not-run"]), id);
    await e.kill("cancelled");
    const r = await e.result;
    assert.equal(r.outcome, "killed");
    assert.doesNotMatch(r.output, /should-not-run/);
    assert.deepEqual(await containersOfRun(id.runId), []);
  });

  it("reports a missing image as image_not_found, not retryable, naming the image", async () => {
    const id = identity(workerId);
    const r = await ex.start(t(["true"], { image: "kairos-test/does-not-exist:1" }), id).result;
    assert.equal(r.outcome, "error");
    assert.equal(r.error?.class, "image_not_found");
    assert.equal(r.error?.retryable, false);
    assert.equal(isRetryable(r), false);
    assert.match(r.error?.message ?? "", /kairos-test\/does-not-exist:1/);
    assert.deepEqual(await containersOfRun(id.runId), []);
  });

  it("reports a command missing from the image as invalid_task", async () => {
    const id = identity(workerId);
    const r = await ex.start(t(["/bin/no-such-program"]), id).result;
    assert.equal(r.outcome, "error", JSON.stringify(r));
    assert.equal(r.error?.class, "invalid_task");
    assert.equal(isRetryable(r), false);
    assert.deepEqual(await containersOfRun(id.runId), []);
  });

  it("rejects resources above the node maximums and reserved env keys as invalid_task", async () => {
    for (const bad of [
      t(["true"], { resources: { memoryMb: 4096 } }),
      t(["true"], { resources: { pids: 1000 } }),
      t(["true"], { resources: { cpus: 64 } }),
      t(["true"], { env: { KAIROS_ATTEMPT: "9" } }),
    ]) {
      const r = await ex.start(bad, identity(workerId)).result;
      assert.equal(r.error?.class, "invalid_task", JSON.stringify(bad));
      assert.equal(isRetryable(r), false);
    }
  });

  it('pull "if_missing" uses a present image and reports an unreachable registry as retryable', async () => {
    const pulling = await createExecutor("docker", { workerId, docker: { pull: "if_missing" } });
    try {
      const ok = await pulling.start(t(["true"]), identity(workerId)).result;
      assert.equal(ok.outcome, "exited", JSON.stringify(ok));
      const id = identity(workerId);
      const r = await pulling.start(t(["true"], { image: "127.0.0.1:1/kairos/missing:1" }), id)
        .result;
      assert.equal(r.outcome, "error");
      assert.equal(r.error?.class, "registry_unreachable", JSON.stringify(r));
      assert.equal(r.error?.retryable, true);
      assert.match(r.error?.message ?? "", /127\.0\.0\.1:1\/kairos\/missing:1/);
      assert.match(r.error?.message ?? "", /registry 127\.0\.0\.1:1 could not be reached/);
      assert.deepEqual(await containersOfRun(id.runId), []);
    } finally {
      await pulling.close();
    }
  });

  it("refuses to create a docker executor when no engine answers", async () => {
    await assert.rejects(
      createExecutor("docker", { workerId, docker: { socketPath: "/nonexistent/docker.sock" } }),
      (e: unknown) =>
        isKairosError(e, "unavailable") && /nonexistent\/docker\.sock/.test(e.message),
    );
    const d = await detectExecutor({ socketPath: "/nonexistent/docker.sock" });
    assert.equal(d.kind, "process");
    assert.match(d.reason, /no Docker engine answered/);
  });
});
