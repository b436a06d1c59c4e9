/**
 * A task a worker would refuse is refused at create, on a real cluster (one node with every role,
 * process executor, `--task-max-memory-mb 512`): an environment name with the reserved prefix in
 * lower or mixed case, a NUL byte in an argument or an environment value (400, field named), and
 * resources above the cluster's maxima (422 `policy_denied`) — nothing is created. A task at the
 * edge of every rule (`kairosx` and `KAIROS` as names, memory at the maximum) is created, and its
 * run succeeds on the worker with those variables: the API and the worker draw the line in the
 * same place.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { eventually, type Api, type KairosFixture } from "../support/kairos.ts";
import { spawnOneNode } from "../support/one-node.ts";

interface Run {
  run_id: string;
  status: string;
  result: { exit_code: number | null; output: string } | null;
  attempts: { error: unknown }[];
}
interface ErrorBody {
  error?: { code: string; field: string; message: string };
}
const inAnHour = () => ({ at: new Date(Date.now() + 3600_000).toISOString() });

describe("the API refuses what the worker would refuse", { timeout: 120_000 }, () => {
  let fx: KairosFixture;
  let api: Api;
  before(async () => {
    ({ fx, api } = await spawnOneNode({
      nodeId: "tr1",
      roles: "api,scheduler,worker",
      flags: ["--task-max-memory-mb", "512"],
      tenant: "task-rules",
    }));
  });
  after(async () => {
    await fx?.stop();
  });

  const create = (task: Record<string, unknown>) =>
    api.call<ErrorBody & { job_id?: string }>("POST", "/v1/jobs", {
      schedule: inAnHour(),
      task: { image: "busybox", timeout_s: 30, ...task },
    });

  it("400 for reserved names in any case and NUL bytes, 422 above the maxima; nothing is created", async () => {
    const refused: [Record<string, unknown>, number, string][] = [
      [{ args: ["true"], env: { kairos_run_id: "forged" } }, 400, "task.env.kairos_run_id"],
      [{ args: ["true"], env: { Kairos_Attempt: "9" } }, 400, "task.env.Kairos_Attempt"],
      [{ args: ["/bin/sh", "-c", "echo a\u0000b"] }, 400, "task.args[2]"],
      [{ args: ["true"], env: { A: "x\u0000y" } }, 400, "task.env.A"],
      [{ args: ["true"], resources: { memory_mb: 1024 } }, 422, "task.resources.memory_mb"],
      [{ args: ["true"], resources: { cpus: 4 } }, 422, "task.resources.cpus"],
      [{ args: ["true"], resources: { pids: 1024 } }, 422, "task.resources.pids"],
    ];
    for (const [task, status, field] of refused) {
      const r = await create(task);
      assert.equal(r.status, status, `${JSON.stringify(task)}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error?.field, field, JSON.stringify(r.body));
    }
    assert.deepEqual(
      (await api.call<{ jobs: unknown[] }>("GET", "/v1/jobs")).body.jobs,
      [],
      "nothing was created",
    );
  });

  it("a task at the edge of every rule is created and runs on the worker", async () => {
    const job = await create({
      args: ["/bin/sh", "-c", 'echo "$kairosx-$KAIROS-$KAIROS_ATTEMPT"'],
      env: { kairosx: "a", KAIROS: "b" },
      resources: { memory_mb: 512, cpus: 2, pids: 512 },
    });
    assert.equal(job.status, 201, JSON.stringify(job.body));
    const now = await api.call<Run>("POST", `/v1/jobs/${job.body.job_id!}/runs`);
    assert.equal(now.status, 202, JSON.stringify(now.body));
    const done = await eventually(
      async () => {
        const r = (await api.call<Run>("GET", `/v1/runs/${now.body.run_id}`)).body;
        return ["succeeded", "failed", "timed_out"].includes(r.status) ? r : undefined;
      },
      60_000,
      "run finished",
    );
    assert.equal(done.status, "succeeded", JSON.stringify(done));
    assert.equal(done.result?.output, "a-b-1\n");
  });
});
