/** The noop executor: ends at once, after its configured duration, or after a `sleep` task's own length. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { FakeClock } from "../../../src/lib/clock.ts";
import { NoopExecutor, sleepMsOf } from "../../../src/sandbox/noop.ts";
import { resolveExecutorOptions } from "../../../src/sandbox/options.ts";
import type { TaskSpec } from "../../../src/sandbox/types.ts";

const task = (args: string[]): TaskSpec => ({ image: "noop", args, env: {}, timeoutS: 60 });
const id = { runId: "r1", attempt: 1, fence: 1, jobId: "j1", tenantId: "t1" } as never;

describe("noop executor", () => {
  it("a [sleep, seconds] task takes that long on the clock; others the configured duration", async () => {
    const clock = new FakeClock(1_000);
    const ex = new NoopExecutor(
      resolveExecutorOptions({ workerId: "w1", clock, noop: { durationMs: 50 } }),
    );
    let slept: number | undefined;
    let plain: number | undefined;
    void ex
      .start(task(["sleep", "2.5"]), id)
      .result.then((r) => (slept = r.finishedAtMs - r.startedAtMs));
    void ex.start(task(["noop"]), id).result.then((r) => (plain = r.finishedAtMs - r.startedAtMs));
    clock.advance(60);
    await new Promise((r) => setImmediate(r));
    assert.equal(plain, 50);
    assert.equal(slept, undefined, "still sleeping");
    clock.advance(2_500);
    await new Promise((r) => setImmediate(r));
    assert.equal(slept, 2_500);
  });

  it("reads only a well-formed, bounded sleep", () => {
    assert.equal(sleepMsOf(task(["sleep", "0.2"])), 200);
    assert.equal(sleepMsOf(task(["sleep", "20"])), 20_000);
    for (const args of [
      ["sleep"],
      ["sleep", "-1"],
      ["sleep", "1e3"],
      ["sleep", "1", "2"],
      ["nap", "1"],
      ["sleep", "86401"],
    ])
      assert.equal(sleepMsOf(task(args)), undefined, args.join(" "));
  });
});
