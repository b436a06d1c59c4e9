/**
 * The dispatcher gives an offer of an egress task its tenant's egress policy as read for that
 * offer (src/runs/dispatcher.ts): a narrowed or cleared policy holds from the next offer on; a
 * task without egress carries none and reads nothing; an unreadable policy is not guessed.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { ShellContext } from "../../../src/actors/host.ts";
import type { Bus } from "../../../src/cluster/bus.ts";
import { decode, encode } from "../../../src/cluster/codec.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { DEFAULT_JOB_CONFIG, type JobEffect } from "../../../src/job-state/job-types.ts";
import { jobRegistration } from "../../../src/jobs/job-shell.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import { WorkerDirectory } from "../../../src/slots/worker-directory.ts";
import type { StartRequest, TaskInput } from "../../../src/protocol/worker.ts";

const NOW = 1_000_000_000;

/** Performs one dispatch; answers the offer made (if any), what the actor was told, and the reads. */
async function dispatch(
  task: TaskInput,
  egressPolicy?: (tenantId: string) => Promise<readonly string[] | null>,
): Promise<{ req: StartRequest | undefined; told: string; reads: string[] }> {
  const clock = new FakeClock(NOW);
  const requests: StartRequest[] = [];
  const reads: string[] = [];
  const bus: Bus = {
    publish: () => undefined,
    async request(_subject, data) {
      requests.push(decode<StartRequest>(data));
      return { data: encode({ accepted: true }) };
    },
    subscribe: () => ({ unsubscribe: () => undefined }),
    flush: async () => undefined,
    isClosed: () => false,
  };
  const directory = new WorkerDirectory(clock, seededRandom(1), 60_000);
  directory.observe({ worker_id: "w1", slots: 4, free: 4, executor: "docker" });
  const reg = jobRegistration(DEFAULT_JOB_CONFIG, {
    log: () => undefined,
    clock,
    workers: { nc: bus, clusterName: "c", directory },
    history: { runs: new MemoryKv("runs") },
    slots: {
      router: () => {
        throw new Error("no router in this test");
      },
    },
    ...(egressPolicy
      ? {
          egressPolicy: (t: string) => {
            reads.push(t);
            return egressPolicy(t);
          },
        }
      : {}),
  });
  let told: (kind: string) => void = () => undefined;
  const done = new Promise<string>((r) => (told = r));
  const ctx: ShellContext = {
    address: { type: "job", id: "t1.j1" },
    partition: 1,
    epoch: 1,
    nodeId: "n1",
    stillOwner: () => true,
    tell: (m) => told((m as { kind: string }).kind),
  };
  const fx: JobEffect = {
    kind: "dispatch",
    run_id: "r1",
    fence: 17,
    attempt: 1,
    start_at_ms: NOW + 60_000,
    scheduled_for_ms: NOW + 60_000,
    task,
  };
  reg.performPost!([fx], ctx);
  const kind = await done;
  return { req: requests[0], told: kind, reads };
}

const task: TaskInput = { image: "i", args: ["true"], env: {}, timeout_s: 30 };

describe("dispatch: egress", () => {
  it("an egress task's offer carries its tenant's policy as read now", async () => {
    const r = await dispatch({ ...task, network: "egress" }, async () => ["example.com:443"]);
    assert.equal(r.told, "claimed");
    assert.deepEqual(r.req?.egress, ["example.com:443"]);
    assert.deepEqual(r.reads, ["t1"]);
  });

  it("a cleared policy, or no reader, gives an empty one: the attempt reaches nothing", async () => {
    assert.deepEqual(
      (await dispatch({ ...task, network: "egress" }, async () => null)).req?.egress,
      [],
    );
    assert.deepEqual((await dispatch({ ...task, network: "egress" })).req?.egress, []);
  });

  it("a task without egress carries none and reads nothing", async () => {
    const r = await dispatch(task, async () => ["example.com"]);
    assert.equal(r.told, "claimed");
    assert.ok(r.req !== undefined && !("egress" in r.req));
    assert.deepEqual(r.reads, []);
  });

  it("an unreadable policy is not guessed: no offer, dispatch_failed", async () => {
    const r = await dispatch({ ...task, network: "egress" }, async () => {
      throw new Error("kv down");
    });
    assert.equal(r.req, undefined);
    assert.equal(r.told, "dispatch_failed");
  });
});
