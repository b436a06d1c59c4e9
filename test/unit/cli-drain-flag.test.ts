/** `--drain-timeout-ms` (kairos node / dev): whole milliseconds 0-3600000, else invalid_argument naming the flag. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { drainTimeoutFlag, MAX_DRAIN_TIMEOUT_MS } from "../../src/cli/node-flags.ts";
import { isKairosError } from "../../src/lib/errors.ts";

describe("--drain-timeout-ms", () => {
  it("accepts whole milliseconds 0 to one hour; absent stays absent", () => {
    assert.equal(drainTimeoutFlag(undefined), undefined);
    assert.equal(drainTimeoutFlag("0"), 0);
    assert.equal(drainTimeoutFlag("60000"), 60_000);
    assert.equal(drainTimeoutFlag(String(MAX_DRAIN_TIMEOUT_MS)), 3_600_000);
  });
  it("refuses anything else, naming the flag", () => {
    for (const bad of ["", " ", "-1", "1.5", "1e3", "abc", "3600001", "99999999", "0x10"]) {
      assert.throws(
        () => drainTimeoutFlag(bad),
        (e: unknown) =>
          isKairosError(e, "invalid_argument") && /--drain-timeout-ms/.test((e as Error).message),
        bad,
      );
    }
  });
});
