/**
 * The noop executor on a fake clock, the bounded UTF-8 output tail, and the retry rule.
 * (Pure units; they live here because this folder is the sandbox's test home.)
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { FakeClock } from "../../../src/lib/clock.ts";
import {
  createExecutor,
  isRetryable,
  OutputTail,
  type ExecutionResult,
} from "../../../src/sandbox/index.ts";
import { isKairosError } from "../../../src/lib/errors.ts";
import { identity, task } from "./fixtures.ts";

describe("noop executor", () => {
  it("completes immediately with exit 0 and empty output", async () => {
    const ex = await createExecutor("noop", { workerId: "w-noop" });
    const r = await ex.start(task(["anything"]), identity("w-noop")).result;
    assert.deepEqual(
      { outcome: r.outcome, exitCode: r.exitCode, output: r.output },
      { outcome: "exited", exitCode: 0, output: "" },
    );
  });

  it("starts within one millisecond share one ended execution, its result frozen and given as `ended`; an invalid task still gets its own error; the next millisecond gets a new one", async () => {
    const clock = new FakeClock(1000);
    const ex = await createExecutor("noop", { workerId: "w-noop", clock });
    const a = ex.start(task(["x"]), identity("w-noop"));
    const b = ex.start(task(["y"]), identity("w-noop"));
    assert.equal(a, b, "one execution for the millisecond");
    assert.ok(a.ended && Object.isFrozen(a.ended), "its result is read-only");
    assert.equal(await a.result, a.ended, "`result` resolves to `ended`");
    assert.deepEqual(
      { ...a.ended },
      { outcome: "exited", exitCode: 0, output: "", startedAtMs: 1000, finishedAtMs: 1000 },
    );
    const bad = ex.start({ ...task(["x"]), timeoutS: 0 }, identity("w-noop"));
    assert.notEqual(bad, a);
    assert.equal(bad.ended?.outcome, "error");
    clock.advance(1);
    const c = ex.start(task(["x"]), identity("w-noop"));
    assert.notEqual(c, a);
    assert.equal(c.ended?.startedAtMs, 1001);
  });

  it("takes its configured duration on the clock, and kill() ends it as killed", async () => {
    const clock = new FakeClock(1000);
    const ex = await createExecutor("noop", {
      workerId: "w-noop",
      clock,
      noop: { durationMs: 500 },
    });
    const a = ex.start(task(["x"]), identity("w-noop"));
    const b = ex.start(task(["x"]), identity("w-noop"));
    await b.kill("lease lost");
    clock.advance(500);
    const ra = await a.result;
    assert.equal(ra.outcome, "exited");
    assert.equal(ra.finishedAtMs - ra.startedAtMs, 500);
    assert.equal((await b.result).outcome, "killed");
  });

  it("rejects invalid options with a KairosError naming the field", async () => {
    await assert.rejects(
      createExecutor("noop", { workerId: "" }),
      (e: unknown) => isKairosError(e, "invalid_argument") && e.field === "workerId",
    );
    await assert.rejects(
      createExecutor("docker", { workerId: "w", docker: { user: "0:0" } }),
      (e: unknown) => isKairosError(e, "invalid_argument") && e.field === "docker.user",
    );
  });
});

describe("OutputTail", () => {
  it("keeps the last bytes only and never splits a character", () => {
    const tail = new OutputTail(5);
    tail.write("hello ");
    tail.write(Buffer.from("wörld")); // ö is 2 bytes: 6 bytes total
    assert.equal(tail.totalBytes, 12);
    assert.equal(tail.text(), "örld"); // the last 5 bytes: ö (2) + rld
  });

  it("drops a cut leading character instead of rendering garbage", () => {
    const tail = new OutputTail(4);
    tail.write("€€"); // 3 bytes each; the last 4 bytes cut the first €
    assert.equal(tail.text(), "€");
  });
});

describe("isRetryable", () => {
  const base: ExecutionResult = {
    outcome: "exited",
    exitCode: 0,
    output: "",
    startedAtMs: 0,
    finishedAtMs: 0,
  };
  it("follows the design's retry rule", () => {
    assert.equal(isRetryable(base), false);
    assert.equal(isRetryable({ ...base, exitCode: 1 }), true);
    for (const outcome of ["timed_out", "oom", "killed"] as const)
      assert.equal(isRetryable({ ...base, outcome, exitCode: null }), true);
    assert.equal(
      isRetryable({
        ...base,
        outcome: "error",
        error: { class: "image_not_found", message: "", retryable: false },
      }),
      false,
    );
    assert.equal(
      isRetryable({
        ...base,
        outcome: "error",
        error: { class: "executor_failure", message: "", retryable: true },
      }),
      true,
    );
  });
});
