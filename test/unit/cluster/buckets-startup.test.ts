import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { isTransientStartupError } from "../../../src/cluster/buckets.ts";

describe("start-up against a NATS cluster in flux", () => {
  it("waits out timeouts, no responders and placement while a cluster settles; fails fast on anything else", () => {
    const named = (name: string, message: string) => Object.assign(new Error(message), { name });
    for (const e of [
      named("TimeoutError", "timeout"),
      new Error("wrapped", { cause: named("NoRespondersError", "503") }),
      new Error("no suitable peers for placement"),
      new Error("insufficient resources"),
      new Error("JetStream cluster not available"),
      new Error("stream leader not found"),
      new Error("JetStream system temporarily unavailable"),
      new Error("stream is offline"),
    ])
      assert.equal(isTransientStartupError(e), true, e.message);
    for (const e of [
      new Error("Permissions Violation for Publish"),
      new Error("Authorization Violation"),
      "timeout",
      null,
    ]) {
      assert.equal(isTransientStartupError(e), false, String(e));
    }
  });
});
