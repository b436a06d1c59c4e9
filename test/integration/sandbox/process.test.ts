/**
 * The process executor against real child processes: output and identity, exit codes,
 * timeout and kill reaching the whole process group, spawn failures, bounded output.
 */
import { describe, it, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readdirSync, readFileSync } from "node:fs";
import { createExecutor, isRetryable, type Executor } from "../../../src/sandbox/index.ts";
import { endedBeforeKill } from "../../../src/worker/worker.ts";
import { identity, task } from "./fixtures.ts";

/** True while `pid` is a running (not zombie) process. */
async function alive(pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    return !/^\d+ \(.*\) [ZX] /.test(stat);
  } catch {
    return false;
  }
}

describe("process executor", async () => {
  const ex: Executor = await createExecutor("process", {
    workerId: "w-proc",
    process: { killGraceMs: 500 },
  });
  after(() => ex.close());

  it("runs a program with the run identity in its env and returns the output tail", async () => {
    const id = identity("w-proc", 2);
    const r = await ex.start(
      task(
        [
          "sh",
          "-c",
          'echo "$KAIROS_RUN_ID $KAIROS_ATTEMPT $KAIROS_JOB_ID $KAIROS_SCHEDULED_FOR $GREETING"; echo err >&2',
        ],
        { env: { GREETING: "hi" } },
      ),
      id,
    ).result;
    assert.equal(r.outcome, "exited");
    assert.equal(r.exitCode, 0);
    assert.equal(r.output, `${id.runId} 2 job-1 2026-03-08T07:00:00Z hi\nerr\n`);
    assert.equal(isRetryable(r), false);
    assert.ok(r.finishedAtMs >= r.startedAtMs);
  });

  it("reports a non-zero exit as retryable", async () => {
    const r = await ex.start(task(["sh", "-c", "exit 3"]), identity("w-proc")).result;
    assert.equal(r.outcome, "exited");
    assert.equal(r.exitCode, 3);
    assert.equal(isRetryable(r), true);
  });

  it("rejects task env keys with the reserved KAIROS_ prefix", async () => {
    const r = await ex.start(
      task(["true"], { env: { KAIROS_RUN_ID: "forged" } }),
      identity("w-proc"),
    ).result;
    assert.equal(r.outcome, "error");
    assert.equal(r.error?.class, "invalid_task");
    assert.equal(isRetryable(r), false);
  });

  it("kills the whole process group at the timeout", async () => {
    const e = ex.start(
      task(["sh", "-c", "sleep 60 & echo $!; wait"], { timeoutS: 0.5 }),
      identity("w-proc"),
    );
    const r = await e.result;
    assert.equal(r.outcome, "timed_out");
    assert.equal(isRetryable(r), true);
    const childPid = Number(r.output.trim());
    assert.ok(childPid > 0, `child pid in output: ${JSON.stringify(r.output)}`);
    assert.equal(await alive(childPid), false, "the background sleep died with its group");
  });

  it("escalates to SIGKILL when the task ignores SIGTERM", async () => {
    const r = await ex.start(
      task(["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"], {
        timeoutS: 0.3,
      }),
      identity("w-proc"),
    ).result;
    assert.equal(r.outcome, "timed_out");
    assert.equal(r.exitCode, 137);
  });

  it("kill() stops the task and reports killed", async () => {
    const e = ex.start(task(["sh", "-c", "echo started; sleep 60"]), identity("w-proc"));
    await e.kill("lease lost");
    const r = await e.result;
    assert.equal(r.outcome, "killed");
    assert.equal(isRetryable(r), true);
  });

  it("a task that exited by itself just before an immediate kill (its exit not yet seen) reports exit code 0: the worker can tell it ended before the kill", async () => {
    // A child of this process that has exited and is not reaped yet: libuv reaps in the event
    // loop, so waiting here without yielding keeps it a zombie — the state a self-fencing timer
    // meets when it fires between a task's exit and the worker's hearing of it.
    const zombieChild = (): boolean =>
      readdirSync("/proc").some((d) => {
        if (!/^\d+$/.test(d)) return false;
        try {
          const st = readFileSync(`/proc/${d}/stat`, "utf8");
          const rest = st.slice(st.lastIndexOf(")") + 2).split(" ");
          return rest[0] === "Z" && Number(rest[1]) === process.pid;
        } catch {
          return false;
        }
      });
    const e = ex.start(task(["true"]), identity("w-proc"));
    const pause = new Int32Array(new SharedArrayBuffer(4));
    const deadline = Date.now() + 5_000;
    while (!zombieChild() && Date.now() < deadline) Atomics.wait(pause, 0, 0, 5);
    assert.ok(zombieChild(), "the task's supervisor exited (a zombie) while the loop was held");
    void e.kill("self-fenced: no acknowledged heartbeat within the lease", { immediate: true });
    const r = await e.result;
    assert.equal(r.exitCode, 0);
    assert.ok(endedBeforeKill(r), `ended before the kill: ${JSON.stringify(r)}`);
    // A task that would exit 0 on SIGTERM: an immediate kill is SIGKILL alone, so it cannot. (Before,
    // SIGTERM and SIGKILL went out in the same tick: the trap could win only if the worker was
    // preempted in between — this check rarely tells the two apart; it guards the outcome.)
    const killed = ex.start(
      task(["sh", "-c", "trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done"]),
      identity("w-proc"),
    );
    await new Promise((res) => setTimeout(res, 200));
    await killed.kill("self-fenced", { immediate: true });
    const k = await killed.result;
    assert.equal(k.exitCode, 137);
    assert.equal(
      endedBeforeKill(k),
      false,
      "a task the kill ended is not taken for one that ended by itself",
    );
  });

  it("reports a missing program as invalid_task, not retryable", async () => {
    const r = await ex.start(task(["/nonexistent/prog"]), identity("w-proc")).result;
    assert.equal(r.outcome, "error");
    assert.equal(r.error?.class, "invalid_task");
    assert.match(r.error?.message ?? "", /program not found: \/nonexistent\/prog/);
    assert.equal(isRetryable(r), false);
  });

  it("reports a non-executable program as permission_denied", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kairos-noexec-"));
    const file = join(dir, "script");
    await writeFile(file, "#!/bin/sh\necho hi\n", { mode: 0o644 });
    const r = await ex.start(task([file]), identity("w-proc")).result;
    await rm(dir, { recursive: true, force: true });
    assert.equal(r.error?.class, "permission_denied");
    assert.equal(isRetryable(r), false);
  });

  it("keeps only a bounded, UTF-8 safe tail of a large output", async () => {
    const small = await createExecutor("process", { workerId: "w-proc", outputTailBytes: 101 });
    const r = await small.start(
      task(["sh", "-c", "i=0; while [ $i -lt 2000 ]; do printf 'é'; i=$((i+1)); done; echo END"]),
      identity("w-proc"),
    ).result;
    await small.close();
    assert.equal(r.exitCode, 0);
    assert.ok(Buffer.byteLength(r.output) <= 101);
    assert.ok(r.output.endsWith("END\n"));
    assert.ok(!r.output.includes("\uFFFD"), "no replacement characters from a cut character");
  });

  it("reapOrphans kills its own children that are no longer leased", async () => {
    const keep = identity("w-proc");
    const drop = identity("w-proc");
    const a = ex.start(task(["sleep", "60"]), keep);
    const b = ex.start(task(["sleep", "60"]), drop);
    const n = await ex.reapOrphans((runId) => runId === keep.runId);
    assert.equal(n, 1);
    assert.equal((await b.result).outcome, "killed");
    await a.kill("test done");
  });
});
