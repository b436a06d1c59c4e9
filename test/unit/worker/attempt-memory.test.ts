/**
 * The worker's memory of completions kept for probes (src/worker/attempt-memory.ts): those of
 * reports given up and those handed over to an owner's mailbox are bounded apart, so a burst's
 * handed-over outputs never take the budget of the given-up ones, whose probes still need them.
 */
import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import {
  AttemptMemory,
  HANDED_OVER_OUTPUT_CHARS,
  KeptCompletions,
  OUTPUT_NOT_KEPT,
  OUTPUT_NOT_KEPT_HANDED_OVER,
} from "../../../src/worker/attempt-memory.ts";
import type { Completion } from "../../../src/protocol/worker.ts";

const done = (output: string): Completion => ({
  outcome: "exited",
  exit_code: 0,
  output,
  error: null,
  started_at_ms: 1,
  finished_at_ms: 2,
});

describe("worker: completions kept for probes", () => {
  it("handed-over completions past their own output budget lose their output, oldest first; a given-up one keeps its own", () => {
    const m = new AttemptMemory();
    m.remember("given#1", done("the given-up output"));
    const MIB = 1024 * 1024;
    const n = HANDED_OVER_OUTPUT_CHARS / MIB + 2;
    for (let i = 0; i < n; i++) m.handedOver.set(`h${i}#1`, done("x".repeat(MIB)));
    assert.equal(m.completion("given#1")?.output, "the given-up output");
    assert.equal(m.completion("h0#1")?.output, OUTPUT_NOT_KEPT_HANDED_OVER, "oldest first");
    assert.equal(m.completion("h1#1")?.output, OUTPUT_NOT_KEPT_HANDED_OVER);
    assert.equal(m.completion(`h${n - 1}#1`)?.output.length, MIB, "the newest keep theirs");
    assert.notEqual(OUTPUT_NOT_KEPT, OUTPUT_NOT_KEPT_HANDED_OVER, "the record says which");
  });

  it("is bounded in entries, oldest out first; a key kept again moves to the end", () => {
    const k = new KeptCompletions(3, 1_000, "[not kept]");
    for (const key of ["a", "b", "c"]) k.set(key, done(key));
    k.set("a", done("a again"));
    k.set("d", done("d"));
    assert.equal(k.size, 3);
    assert.equal(k.has("b"), false, "the oldest went");
    assert.equal(k.get("a")?.output, "a again");
  });

  it("a probe's lookup prefers a given-up completion over a handed-over one of the same attempt", () => {
    const m = new AttemptMemory();
    m.handedOver.set("r#1", done("queued"));
    m.remember("r#1", done("given up later"));
    assert.equal(m.completion("r#1")?.output, "given up later");
  });
});
