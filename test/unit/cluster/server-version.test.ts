/** nats-server version rules: replicated buckets refused below 2.9.21 (#4320), warning below 2.10.23. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { checkServerVersion, compareVersions } from "../../../src/cluster/server-version.ts";
import { isKairosError } from "../../../src/lib/errors.ts";

describe("compareVersions", () => {
  const cases: [string, string, number][] = [
    ["2.10.1", "2.9.30", 1],
    ["2.9.21", "2.9.21", 0],
    ["2.9.20", "2.9.21", -1],
    ["2.10.23", "2.10.27", -1],
    ["3.0.0", "2.99.99", 1],
    ["2.10", "2.10.0", 0],
    ["2.11.0-beta", "2.11.0", 0],
    ["2.10.23-RC.1", "2.10.22", 1],
  ];
  for (const [a, b, want] of cases) {
    it(`${a} vs ${b} → ${want}`, () => {
      assert.equal(compareVersions(a, b), want);
      assert.equal(compareVersions(b, a), -want || 0);
    });
  }
});

describe("checkServerVersion", () => {
  it("refuses replicated buckets below 2.9.21 with an `unsupported` error naming the issue", () => {
    for (const v of ["2.9.10", "2.9.20", "2.8.4"]) {
      for (const replicas of [3, 5]) {
        assert.throws(
          () => checkServerVersion(v, replicas),
          (e: unknown) =>
            isKairosError(e, "unsupported") && e.message.includes(v) && e.message.includes("#4320"),
        );
      }
    }
  });

  it("accepts replicated buckets from 2.9.21 on, warning below 2.10.23", () => {
    assert.match(checkServerVersion("2.9.21", 3) ?? "", /older than 2\.10\.23/);
    assert.match(checkServerVersion("2.10.22", 3) ?? "", /2\.10\.22/);
    assert.equal(checkServerVersion("2.10.23", 3), null);
    assert.equal(checkServerVersion("2.10.27", 5), null);
  });

  it("with one replica never refuses, but still warns on an old server", () => {
    assert.match(checkServerVersion("2.9.10", 1) ?? "", /acknowledged writes may be lost/);
    assert.equal(checkServerVersion("2.11.0", 1), null);
  });
});
