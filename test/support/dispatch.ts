/**
 * One offer of one run through the job shell's real dispatcher, to a worker that accepts it: the
 * set-up the dispatch unit tests share (a recording bus, a directory with one worker, the
 * registration with the options under test). Resolves with the first offer sent (if any), how
 * many were sent, and the message the shell then told the actor.
 */
import type { ShellContext } from "../../src/actors/host.ts";
import type { Bus } from "../../src/cluster/bus.ts";
import { decode, encode } from "../../src/cluster/codec.ts";
import { MemoryKv } from "../../src/cluster/kv-memory.ts";
import { DEFAULT_JOB_CONFIG, type JobEffect, type JobMsg } from "../../src/job-state/job-types.ts";
import { jobRegistration, type JobShellDeps } from "../../src/jobs/job-shell.ts";
import { FakeClock } from "../../src/lib/clock.ts";
import { seededRandom } from "../../src/lib/random.ts";
import type { StartRequest, TaskInput } from "../../src/protocol/worker.ts";
import { WorkerDirectory } from "../../src/slots/worker-directory.ts";

export const DISPATCH_NOW = 1_000_000_000;

export async function dispatchOnce(o: {
  task: TaskInput;
  /** What the registration gets beside the bus, clock, directory and runs bucket. */
  deps?: Partial<JobShellDeps>;
  executor?: string;
  actorId?: string;
  attempt?: number;
}): Promise<{ req: StartRequest | undefined; offers: number; told: JobMsg }> {
  const clock = new FakeClock(DISPATCH_NOW);
  const requests: StartRequest[] = [];
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
  directory.observe({ worker_id: "w1", slots: 4, free: 4, executor: o.executor ?? "noop" });
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
    ...o.deps,
  });
  let told: (m: JobMsg) => void = () => undefined;
  const done = new Promise<JobMsg>((r) => (told = r));
  const ctx: ShellContext = {
    address: { type: "job", id: o.actorId ?? "t1.j1" },
    partition: 1,
    epoch: 1,
    nodeId: "n1",
    stillOwner: () => true,
    tell: (m) => told(m as JobMsg),
  };
  const fx: JobEffect = {
    kind: "dispatch",
    run_id: "r1",
    fence: 17,
    attempt: o.attempt ?? 1,
    start_at_ms: DISPATCH_NOW + 60_000,
    scheduled_for_ms: DISPATCH_NOW + 60_000,
    task: o.task,
  };
  reg.performPost!([fx], ctx);
  const msg = await done;
  return { req: requests[0], offers: requests.length, told: msg };
}
