/** `kairos admin tenant quota` flag parsing and validation (no cluster needed). */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { parseQuotaFlags } from "../../src/cli/admin.ts";
import { isKairosError } from "../../src/lib/errors.ts";
import { validateQuota } from "../../src/tenants/directory.ts";

describe("kairos admin tenant quota flags", () => {
  it("parses each flag into its tenant field", () => {
    assert.deepEqual(parseQuotaFlags({ maxConcurrent: "8" }), { max_concurrent_runs: 8 });
    assert.deepEqual(parseQuotaFlags({ maxJobs: "250", weight: "2.5" }), {
      max_jobs: 250,
      weight: 2.5,
    });
    assert.deepEqual(parseQuotaFlags({ maxConcurrent: "1", maxJobs: "1", weight: "1000" }), {
      max_concurrent_runs: 1,
      max_jobs: 1,
      weight: 1000,
    });
    assert.deepEqual(parseQuotaFlags({ weight: "0.01" }), { weight: 0.01 });
  });

  it("refuses no flag at all", () => {
    assert.throws(
      () => parseQuotaFlags({}),
      (e) => isKairosError(e, "invalid_argument") && /nothing to change/.test(e.message),
    );
  });

  it("refuses non-positive, fractional, non-numeric and unsafe integers, naming the flag", () => {
    for (const raw of ["0", "-1", "1.5", "abc", "", "1e3", "0x10", "99999999999999999999", " "]) {
      assert.throws(
        () => parseQuotaFlags({ maxJobs: raw }),
        (e) => isKairosError(e, "invalid_argument") && e.field === "--max-jobs",
        raw,
      );
      assert.throws(
        () => parseQuotaFlags({ maxConcurrent: raw }),
        (e) => isKairosError(e, "invalid_argument") && e.field === "--max-concurrent",
        raw,
      );
    }
  });

  it("refuses a weight that is not a positive number at most 1000", () => {
    for (const raw of ["0", "-2", "1000.5", "1001", "NaN", "Infinity", "abc", "", "1e2"]) {
      assert.throws(
        () => parseQuotaFlags({ weight: raw }),
        (e) =>
          isKairosError(e, "invalid_argument") &&
          e.field === "--weight" &&
          /at most 1000/.test(e.message),
        raw,
      );
    }
  });

  it("--max-waiting: a positive integer at most 100000 into max_waiting_runs, else a precise error naming the flag", () => {
    assert.deepEqual(parseQuotaFlags({ maxWaiting: "25" }), { max_waiting_runs: 25 });
    assert.deepEqual(parseQuotaFlags({ maxWaiting: "100000" }), { max_waiting_runs: 100_000 });
    for (const raw of ["0", "-1", "1.5", "abc", "", "1e3", " ", "100001"]) {
      assert.throws(
        () => parseQuotaFlags({ maxWaiting: raw }),
        (e) =>
          isKairosError(e, "invalid_argument") &&
          e.field === "--max-waiting" &&
          /positive integer/.test(e.message),
        raw,
      );
    }
    assert.throws(
      () => validateQuota({ max_waiting_runs: 100_001 }),
      (e) =>
        isKairosError(e, "invalid_argument") &&
        e.field === "max_waiting_runs" &&
        /at most 100000/.test(e.message),
    );
  });

  it("validateQuota (the directory's own check) names the record field", () => {
    assert.throws(
      () => validateQuota({ max_jobs: 0 }),
      (e) => isKairosError(e, "invalid_argument") && e.field === "max_jobs",
    );
    assert.throws(
      () => validateQuota({ max_concurrent_runs: 2.5 }),
      (e) => isKairosError(e, "invalid_argument") && e.field === "max_concurrent_runs",
    );
    assert.throws(
      () => validateQuota({ weight: 0 }),
      (e) => isKairosError(e, "invalid_argument") && e.field === "weight",
    );
    validateQuota({ weight: 1000, max_jobs: 1 });
  });
});
