/** `kairos node` flag validation for the health and metrics listener (`--metrics-port`). */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { portFlag } from "../../src/cli/node.ts";
import { isKairosError } from "../../src/lib/errors.ts";

describe("--metrics-port", () => {
  it("accepts 0-65535 and leaves an absent flag unset", () => {
    assert.equal(portFlag(undefined, "metrics-port"), undefined);
    assert.equal(portFlag("0", "metrics-port"), 0);
    assert.equal(portFlag("9102", "metrics-port"), 9102);
    assert.equal(portFlag("65535", "metrics-port"), 65535);
  });

  it("refuses anything else with a message naming the flag", () => {
    for (const bad of ["65536", "-1", "9.5", "abc", ""]) {
      assert.throws(() => portFlag(bad, "metrics-port"), (e: unknown) => isKairosError(e, "invalid_argument") && e.message.startsWith("--metrics-port:"), bad);
    }
  });
});
