/**
 * Orphan clean-up: a worker that restarts (a NEW executor instance with the same worker id)
 * finds its containers by label and removes those whose lease is gone, leaving live runs and
 * other workers' containers alone.
 */
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { createExecutor, type Executor, type TaskSpec } from "../../../src/sandbox/index.ts";
import {
  armContainerEvent,
  containersOfRun,
  dockerSkip,
  ensureTestImage,
  removeWorkerContainers,
} from "../../support/docker-image.ts";
import { identity, uniqueWorkerId } from "./fixtures.ts";

const workerId = uniqueWorkerId("w-docker-orphan");
const otherWorkerId = uniqueWorkerId("w-docker-other");

describe("docker executor: orphans", { skip: dockerSkip() }, () => {
  let image: string;
  const executors: Executor[] = [];
  const make = async (wid: string): Promise<Executor> => {
    const ex = await createExecutor("docker", { workerId: wid });
    executors.push(ex);
    return ex;
  };
  const long = (): TaskSpec => ({ image, args: ["sleep", "300"], env: {}, timeoutS: 600 });

  before(async () => {
    image = await ensureTestImage();
  });
  after(async () => {
    await Promise.all(executors.map((e) => e.close()));
    await removeWorkerContainers(workerId);
    await removeWorkerContainers(otherWorkerId);
  });

  it("a restarted worker reaps its own dead-lease containers only", async () => {
    const before = await make(workerId);
    const other = await make(otherWorkerId);
    const orphan = identity(workerId);
    const live = identity(workerId);
    const foreign = identity(otherWorkerId);
    const armed = await Promise.all(
      [orphan, live, foreign].map((id) => armContainerEvent(id.runId, "start")),
    );
    const runs = [
      before.start(long(), orphan),
      before.start(long(), live),
      other.start(long(), foreign),
    ];
    await Promise.all(armed.map((a) => a.event));

    // "Restart": a new executor instance with the same worker id, knowing nothing in memory.
    const restarted = await make(workerId);
    const reaped = await restarted.reapOrphans((runId) => runId === live.runId);
    assert.equal(reaped, 1);
    assert.deepEqual(await containersOfRun(orphan.runId), []);
    assert.equal((await containersOfRun(live.runId)).length, 1, "the live run keeps its container");
    assert.equal(
      (await containersOfRun(foreign.runId)).length,
      1,
      "another worker's container is untouched",
    );

    // The old instance's view of the reaped run ends (not hangs) with the SIGKILL status,
    // without crashing (in production that instance died before the restart anyway).
    const r0 = await runs[0]!.result;
    assert.equal(r0.exitCode, 137, JSON.stringify(r0));

    // A live run reaped later through the instance that owns it ends as killed.
    assert.equal(await before.reapOrphans(() => false), 1);
    assert.equal((await runs[1]!.result).outcome, "killed");
    await runs[2]!.kill("test done");
    assert.deepEqual(await containersOfRun(foreign.runId), []);
  });
});
