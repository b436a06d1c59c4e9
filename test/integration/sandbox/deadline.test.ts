/**
 * An attempt's deadline holds without its worker. A child process (worker-child.ts) plays the
 * worker; the tests kill it with SIGKILL or freeze it with SIGSTOP mid-task and watch the task:
 *
 * - process executor: the task's process group dies soon after its worker is killed, and at
 *   at once when the worker is frozen (SIGSTOP: it cannot fence itself);
 * - docker executor: the container exits by its own deadline (exit 137) after its worker was
 *   killed, and a sweep by any executor removes expired Kairos containers of any worker;
 *   empty args still run the image's Entrypoint + Cmd through the supervisor.
 *
 * Waits are polls or engine events with deadlines; nothing is left behind.
 */
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import {
  createExecutor,
  DOCKER_LABEL,
  type ExecutionResult,
  type Executor,
  type ExecutorOptions,
  type RunIdentity,
  type TaskSpec,
} from "../../../src/sandbox/index.ts";
import type { DockerExecutor } from "../../../src/sandbox/docker.ts";
import { PROCESS_SUPERVISOR } from "../../../src/sandbox/supervisor.ts";
import {
  armContainerEvent,
  containersOfRun,
  dockerClient,
  dockerSkip,
  ensureTestImage,
  removeWorkerContainers,
} from "../../support/docker-image.ts";
import { identity, task, uniqueWorkerId } from "./fixtures.ts";

const CHILD = fileURLToPath(new URL("./worker-child.ts", import.meta.url));

/** Live (not zombie) members of process group `pgid`, from /proc. */
async function groupMembers(pgid: number): Promise<number[]> {
  const live: number[] = [];
  for (const name of await readdir("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = await readFile(`/proc/${name}/stat`, "utf8");
    } catch {
      continue;
    }
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (Number(pgrp) === pgid && state !== "Z" && state !== "X") live.push(Number(name));
  }
  return live;
}

/** Polls `check` every 100 ms until it returns true; fails after `timeoutMs`. */
async function waitFor(
  what: string,
  timeoutMs: number,
  check: () => Promise<boolean>,
): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

interface Worker {
  child: ChildProcess;
  /** Resolves with the child's {"result"} line, or undefined if it died without one. */
  result: Promise<ExecutionResult | undefined>;
  started: Promise<void>;
}

function startWorker(
  kind: "process" | "docker",
  options: ExecutorOptions,
  t: TaskSpec,
  id: RunIdentity,
): Worker {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", CHILD, JSON.stringify({ kind, options, task: t, identity: id })],
    {
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  const lines = createInterface({ input: child.stdout });
  let onStarted: () => void = () => {};
  const started = new Promise<void>((resolve, reject) => {
    onStarted = resolve;
    child.once("exit", () => reject(new Error("worker child exited before starting the task")));
  });
  started.catch(() => {}); // observed by the tests that await it
  const result = new Promise<ExecutionResult | undefined>((resolve) => {
    lines.on("line", (line) => {
      const msg = JSON.parse(line) as { started?: boolean; result?: ExecutionResult };
      if (msg.started) onStarted();
      if (msg.result) resolve(msg.result);
    });
    lines.once("close", () => resolve(undefined));
  });
  return { child, result, started };
}

async function killWorker(w: Worker): Promise<void> {
  if (w.child.exitCode !== null || w.child.signalCode !== null) return;
  const exited = once(w.child, "exit");
  w.child.kill("SIGKILL");
  await exited;
}

describe("process executor: the deadline holds without the worker", () => {
  let dir: string;
  const workers: Worker[] = [];
  const pgids: number[] = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "kairos-deadline-"));
  });
  after(async () => {
    await Promise.all(workers.map(killWorker));
    for (const pgid of pgids) {
      try {
        process.kill(-pgid, "SIGKILL");
      } catch {
        // gone, as it should be
      }
    }
    await rm(dir, { recursive: true, force: true });
  });

  /** Starts a worker child running a long task that records its pid (= its group) in a marker file. */
  async function longTask(
    name: string,
    extra: Partial<TaskSpec>,
    killGraceMs = 200,
  ): Promise<{ w: Worker; pgid: number }> {
    const marker = join(dir, name);
    const t = task(
      ["sh", "-c", 'echo $$ > "$MARK.tmp" && mv "$MARK.tmp" "$MARK"; sleep 300 & sleep 300'],
      { env: { MARK: marker }, ...extra },
    );
    const w = startWorker(
      "process",
      { workerId: "w-deadline", process: { killGraceMs } },
      t,
      identity("w-deadline"),
    );
    workers.push(w);
    await w.started;
    let pgid = 0;
    await waitFor("the task's marker", 10_000, async () => {
      pgid = Number(await readFile(marker, "utf8").catch(() => "0"));
      return pgid > 0;
    });
    pgids.push(pgid);
    await waitFor(
      "the task's group to hold the task and its sleeps",
      5_000,
      async () => (await groupMembers(pgid)).length >= 3,
    );
    return { w, pgid };
  }

  it("kills the task's whole process group soon after its worker is killed with SIGKILL", async () => {
    const { w, pgid } = await longTask("killed", { timeoutS: 600 });
    await killWorker(w);
    const t0 = Date.now();
    await waitFor(
      `process group ${pgid} to be gone`,
      5_000,
      async () => (await groupMembers(pgid)).length === 0,
    );
    assert.ok(Date.now() - t0 < 5_000);
    assert.equal(await w.result, undefined, "the killed worker reported nothing");
  });

  it("kills a task at once whose worker was gone before its supervisor started (the worker's pid is passed, not read from $PPID)", async () => {
    // A worker killed between the spawn and the shell's start: the shell's $PPID already named the
    // process the task was reparented to, a live one, and the task ran on to its deadline (the
    // ledger chaos test, seed 7321). Here the given worker pid is one that has exited.
    const gone = spawn("true");
    await once(gone, "exit");
    const task = spawn(
      "/bin/sh",
      [
        "-c",
        PROCESS_SUPERVISOR,
        "kairos-supervisor",
        process.env["PATH"] ?? "/usr/bin:/bin",
        String(gone.pid),
        "60",
        "sleep",
        "300",
      ],
      { detached: true, stdio: "ignore" },
    );
    if (task.pid !== undefined) pgids.push(task.pid);
    const t0 = Date.now();
    const [, signal] = (await once(task, "exit")) as [number | null, NodeJS.Signals | null];
    assert.equal(signal, "SIGKILL", "killed by its watchdog");
    assert.ok(Date.now() - t0 < 5_000, `killed ${Date.now() - t0} ms after it started`);
  });

  it("kills the task as soon as its worker is frozen (SIGSTOP: it can no longer fence itself)", async () => {
    const { w, pgid } = await longTask("frozen", { timeoutS: 30 }, 200);
    const t0 = Date.now();
    w.child.kill("SIGSTOP");
    try {
      // The watchdog polls every 250 ms; a frozen worker's task must not outlive the lease.
      await waitFor(
        `process group ${pgid} to be gone`,
        5_000,
        async () => (await groupMembers(pgid)).length === 0,
      );
      const elapsed = Date.now() - t0;
      assert.ok(elapsed < 2_000, `died ${elapsed} ms after its worker froze`);
    } finally {
      w.child.kill("SIGCONT");
    }
    const r = await w.result;
    assert.ok(r !== undefined, "the resumed worker reports the killed task");
  });
});

describe("docker executor: the deadline holds without the worker", { skip: dockerSkip() }, () => {
  const workerId = uniqueWorkerId("w-docker-deadline");
  const otherWorkerId = uniqueWorkerId("w-docker-deadline-other");
  let image: string;
  const workers: Worker[] = [];
  const executors: Executor[] = [];
  const images: string[] = [];

  before(async () => {
    image = await ensureTestImage();
  });
  after(async () => {
    await Promise.all(workers.map(killWorker));
    await Promise.all(executors.map((e) => e.close()));
    await removeWorkerContainers(workerId);
    await removeWorkerContainers(otherWorkerId);
    for (const tag of images)
      await dockerClient()
        .getImage(tag)
        .remove()
        .catch(() => undefined);
  });

  it("a container whose worker was killed exits by its own deadline", async () => {
    const id = identity(workerId);
    const timeoutS = 2;
    const started = await armContainerEvent(id.runId, "start");
    const died = await armContainerEvent(id.runId, "die", 30_000);
    const w = startWorker(
      "docker",
      { workerId, docker: { sweepIntervalMs: 0 } },
      { image, args: ["sleep", "300"], env: {}, timeoutS },
      id,
    );
    workers.push(w);
    await started.event;
    await killWorker(w);
    await died.event;
    const [c] = await containersOfRun(id.runId);
    assert.ok(c, "the dead worker could not remove its container");
    const info = await dockerClient().getContainer(c.Id).inspect();
    assert.equal(info.State.Status, "exited");
    assert.equal(info.State.ExitCode, 137);
    const ranMs = Date.parse(info.State.FinishedAt) - Date.parse(info.State.StartedAt);
    assert.ok(ranMs >= timeoutS * 1000, `ran ${ranMs} ms`);
    assert.ok(ranMs < (timeoutS + 2) * 1000 + 3_000, `ran ${ranMs} ms`);
    const logs = (
      await dockerClient().getContainer(c.Id).logs({ stdout: true, stderr: true })
    ).toString("utf8");
    assert.match(logs, /container killed by its own deadline/);
    assert.ok(
      Number(info.Config.Labels[DOCKER_LABEL.deadlineMs]) >=
        Date.parse(info.State.StartedAt) + timeoutS * 1000,
    );
  });

  it("a container's lease: renewed, it keeps running; unrenewed (worker killed, frozen or cut off), it dies when the lease runs out — long before its timeout", async () => {
    const executor = await createExecutor("docker", { workerId, docker: { sweepIntervalMs: 0 } });
    executors.push(executor);
    const id = identity(workerId);
    const started = await armContainerEvent(id.runId, "start");
    const died = await armContainerEvent(id.runId, "die", 30_000);
    const leaseMs = 1_500;
    const exec = executor.start(
      { image, args: ["sleep", "300"], env: {}, timeoutS: 120, leaseMs },
      id,
    );
    await started.event;
    const startedAt = Date.now();
    // Renewed every 400 ms for 4 s (well past the first lease): still running.
    const renew = setInterval(() => exec.renewLease?.(leaseMs), 400);
    try {
      await new Promise((r) => setTimeout(r, 4_000));
      const [c] = await containersOfRun(id.runId);
      assert.ok(c, "container exists");
      assert.equal(
        (await dockerClient().getContainer(c.Id).inspect()).State.Status,
        "running",
        "a renewed lease keeps the container alive",
      );
    } finally {
      clearInterval(renew);
    }
    const lastRenewal = Date.now();
    await died.event;
    const diedAfterMs = Date.now() - lastRenewal;
    assert.ok(
      diedAfterMs <= leaseMs + 1_000,
      `died ${diedAfterMs} ms after the last renewal (lease ${leaseMs} ms)`,
    );
    assert.ok(Date.now() - startedAt >= 4_000);
    const r = await exec.result;
    assert.notEqual(r.outcome, "timed_out");
    const [c] = await containersOfRun(id.runId);
    if (c) {
      const logs = (
        await dockerClient().getContainer(c.Id).logs({ stdout: true, stderr: true })
      ).toString("utf8");
      assert.match(logs, /its worker stopped renewing the lease/);
    } else {
      assert.match(r.output, /its worker stopped renewing the lease/);
    }
  });

  it("a container whose worker was frozen (SIGSTOP) dies when the lease it last saw runs out", async () => {
    const id = identity(workerId);
    const started = await armContainerEvent(id.runId, "start");
    const died = await armContainerEvent(id.runId, "die", 30_000);
    const w = startWorker(
      "docker",
      { workerId, docker: { sweepIntervalMs: 0 } },
      { image, args: ["sleep", "300"], env: {}, timeoutS: 120, leaseMs: 2_000 },
      id,
    );
    workers.push(w);
    await started.event;
    const frozenAt = Date.now();
    w.child.kill("SIGSTOP");
    try {
      await died.event;
      assert.ok(
        Date.now() - frozenAt < 2_000 + 1_000,
        `died ${Date.now() - frozenAt} ms after the freeze`,
      );
    } finally {
      w.child.kill("SIGCONT");
    }
  });

  it("any worker's sweep removes expired containers of other workers, and only those", async () => {
    const docker = dockerClient();
    const labels = (runId: string, deadlineMs: number): Record<string, string> => ({
      [DOCKER_LABEL.managed]: "true",
      [DOCKER_LABEL.runId]: runId,
      [DOCKER_LABEL.workerId]: otherWorkerId,
      [DOCKER_LABEL.deadlineMs]: String(deadlineMs),
    });
    const expired = identity(otherWorkerId).runId;
    const current = identity(otherWorkerId).runId;
    const destroyed = await armContainerEvent(expired, "destroy", 30_000);
    for (const [runId, deadline] of [
      [expired, Date.now() - 120_000],
      [current, Date.now() + 600_000],
    ] as const) {
      const c = await docker.createContainer({
        Image: image,
        Cmd: ["sleep", "300"],
        Labels: labels(runId, deadline),
        HostConfig: { NetworkMode: "none" },
      });
      // The expired one may already be taken by another worker's sweep on this engine between its
      // create and its start (409 "marked for removal", or 404): that is the behaviour under test,
      // and its destroy event below still says it went.
      const taken = (e: unknown) =>
        runId === expired && [404, 409].includes((e as { statusCode?: number }).statusCode ?? 0);
      await c.start().catch((e: unknown) => {
        if (!taken(e)) throw e;
      });
    }
    const sweeper = (await createExecutor("docker", {
      workerId,
      docker: { sweepIntervalMs: 0 },
    })) as DockerExecutor;
    executors.push(sweeper);
    // Another worker's sweep on this engine (the full suite runs several) may get there first: its
    // removal then still runs when ours is refused ("already in progress"), so the container's
    // destroy event (armed before the container exists), not the listing right after our sweep,
    // says it went.
    await sweeper.sweepExpired();
    await destroyed.event;
    assert.deepEqual(await containersOfRun(expired), []);
    assert.equal(
      (await containersOfRun(current)).length,
      1,
      "a container within its deadline is left alone",
    );
  });

  it("runs the image's Entrypoint + Cmd under the supervisor when args are empty, and Entrypoint + args otherwise", async () => {
    const docker = dockerClient();
    const tag = `kairos-test/busybox-ep:${workerId}`;
    const base = await docker.createContainer({ Image: image, Cmd: ["true"] });
    try {
      await base.commit({
        repo: "kairos-test/busybox-ep",
        tag: workerId,
        changes: ['ENTRYPOINT ["echo", "ep"]', 'CMD ["default-cmd"]'],
      });
      images.push(tag);
    } finally {
      await base.remove({ force: true });
    }
    const ex = await createExecutor("docker", { workerId, docker: { sweepIntervalMs: 0 } });
    executors.push(ex);
    const r1 = await ex.start({ image: tag, args: [], env: {}, timeoutS: 30 }, identity(workerId))
      .result;
    assert.equal(r1.outcome, "exited", JSON.stringify(r1));
    assert.equal(r1.output, "ep default-cmd\n");
    const r2 = await ex.start(
      { image: tag, args: ["mine"], env: {}, timeoutS: 30 },
      identity(workerId),
    ).result;
    assert.equal(r2.output, "ep mine\n");
    const r3 = await ex.start({ image, args: ["/bin"], env: {}, timeoutS: 30 }, identity(workerId))
      .result;
    assert.equal(r3.error?.class, "permission_denied", JSON.stringify(r3));
  });
});
