/**
 * The docker supervisor's OOM marker, read back by the executor: an OOM kill counts only when the
 * marker is the last line (the supervisor prints it after the task has exited), whatever came before.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { MARK_OOM, oomMarked } from "../../../src/sandbox/supervisor.ts";

describe("oomMarked", () => {
  it("reads the marker as the last line, with or without a trailing newline", () => {
    assert.equal(oomMarked(`working\nKilled\n\n${MARK_OOM}1\n`), true);
    assert.equal(oomMarked(`${MARK_OOM}3`), true);
  });

  it("ignores output without the marker, or with it anywhere but last", () => {
    assert.equal(oomMarked(""), false);
    assert.equal(oomMarked("Killed\n"), false);
    assert.equal(oomMarked(`${MARK_OOM}1\nthe task went on\n`), false);
  });
});
