/**
 * How many catalog chunks a filtered page reads ahead (src/catalog/job-catalog.ts `readAhead`):
 * what the rest of the page needs at the rate matched so far, one to spare, never more than the
 * cap; the cap while nothing has matched; never more than the read's examination bound allows.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readAhead } from "../../../src/catalog/job-catalog.ts";

describe("readAhead", () => {
  it("reads the cap while nothing has matched", () => {
    assert.equal(readAhead(51, 0, 1, 100), 16);
    assert.equal(readAhead(51, 0, 0, 100), 16);
  });

  it("reads what the rest of the page needs at the rate seen, with one to spare", () => {
    // 22 matches in one chunk (a name part matching 1 job in 9): 29 more need 2 chunks, + 1.
    assert.equal(readAhead(29, 22, 1, 100), 3);
    // 1 match in 4 chunks: 50 more would need 200: the cap.
    assert.equal(readAhead(50, 1, 4, 100), 16);
    // Many matches a chunk: one more chunk and one to spare.
    assert.equal(readAhead(1, 150, 1, 100), 2);
  });

  it("reads no more than the examination bound leaves", () => {
    // 1 match in 17 chunks of a read that may examine 9 more: 9, not the cap.
    assert.equal(readAhead(50, 1, 17, 9), 9);
    assert.equal(readAhead(51, 0, 1, 3), 3);
    // The bound reached within the next chunk: still one (the read stops after it).
    assert.equal(readAhead(50, 1, 17, 0), 1);
  });
});
