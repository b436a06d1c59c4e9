/** Run ids (runIdFor / jobIdOfRun) and retry backoff bounds, as examples and properties. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { retryDelayMs } from "../../../src/runs/backoff.ts";
import {
  isValidId,
  jobActorId,
  jobIdOfRun,
  newJobId,
  newTimedJobId,
  JOB_ID_TIME_CHARS,
  parseRunId,
  runIdFor,
  splitJobActorId,
} from "../../../src/protocol/ids.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import type { RetryPolicy } from "../../../src/protocol/model.ts";

const jobIdArb = fc
  .array(fc.integer({ min: 0, max: 35 }), { minLength: 16, maxLength: 16 })
  .map((ds) => `j${ds.map((x) => x.toString(36)).join("")}`);
const msArb = fc.integer({ min: 0, max: 253_402_300_799_000 });

describe("ids", () => {
  it("runIdFor / jobIdOfRun round-trip for scheduled and manual runs", () => {
    fc.assert(
      fc.property(
        jobIdArb,
        msArb,
        fc.option(fc.integer({ min: 1, max: 1e9 }), { nil: undefined }),
        (job, ms, seq) => {
          const id = runIdFor(job, ms, seq);
          assert.equal(jobIdOfRun(id), job);
          assert.ok(isValidId(id));
          assert.notEqual(
            runIdFor(job, ms, 1),
            runIdFor(job, ms),
            "manual differs from scheduled at the same instant",
          );
        },
      ),
      { seed: 7, numRuns: 500 },
    );
  });

  it("parseRunId gives back exactly the job, time and manual sequence runIdFor was given", () => {
    fc.assert(
      fc.property(
        jobIdArb,
        msArb,
        fc.option(fc.integer({ min: 1, max: 1e9 }), { nil: undefined }),
        (job, ms, seq) => {
          assert.deepEqual(parseRunId(runIdFor(job, ms, seq)), { jobId: job, ms, seq: seq ?? 0 });
        },
      ),
      { seed: 9, numRuns: 2000 },
    );
    // A time whose base-36 form ends in `m` and digits (2026-12-02T23:08:42Z is `mx6qm100`) is
    // a scheduled run's time, not a time plus a manual sequence: read so, retention deleted it.
    const at = Date.parse("2026-12-02T23:08:42Z");
    assert.equal(at.toString(36), "mx6qm100");
    assert.deepEqual(parseRunId(runIdFor("j0123456789abcdef", at)), {
      jobId: "j0123456789abcdef",
      ms: at,
      seq: 0,
    });
    assert.deepEqual(parseRunId(runIdFor("j0123456789abcdef", at, 3)), {
      jobId: "j0123456789abcdef",
      ms: at,
      seq: 3,
    });
  });

  it("distinct occurrences of one job get distinct run ids", () => {
    fc.assert(
      fc.property(jobIdArb, msArb, msArb, (job, a, b) => {
        fc.pre(a !== b);
        assert.notEqual(runIdFor(job, a), runIdFor(job, b));
      }),
      { seed: 8, numRuns: 500 },
    );
  });

  it("jobIdOfRun rejects malformed run ids", () => {
    for (const bad of [
      "",
      "x",
      "j0123456789abcdef",
      "j0123456789abcdef-",
      "j0123456789ABCDEF-abc",
      "j0123456789abcde-abc",
      "j0123456789abcdef0-abc",
      "j0123456789abcdef-ab-c",
      "j0123456789abcdef-AB",
      "k0123456789abcdef-abc",
      "j0123456789abcdef--1",
      "j0123456789abcdef-a.b",
    ]) {
      assert.equal(jobIdOfRun(bad), null, JSON.stringify(bad));
    }
  });

  it("newJobId makes well-formed ids from a seeded random; actor ids split back", () => {
    const r = seededRandom(1);
    const id = newJobId(() => r.next());
    assert.match(id, /^j[0-9a-z]{16}$/);
    assert.equal(jobIdOfRun(runIdFor(id, 1)), id);
    assert.deepEqual(splitJobActorId(jobActorId("t-1", id)), { tenantId: "t-1", jobId: id });
  });

  it("newTimedJobId makes well-formed ids that sort in the order of their times", () => {
    const r = seededRandom(2);
    const times = [0, 1, 35, 36, 1_796_000_000_000, 1_796_000_000_001, 1_796_000_001_000];
    const ids = times.map((t) => newTimedJobId(t, () => r.next()));
    for (const id of ids) {
      assert.match(id, /^j[0-9a-z]{16}$/);
      assert.equal(jobIdOfRun(runIdFor(id, 1)), id);
    }
    assert.deepEqual([...ids].sort(), ids);
    assert.equal(
      ids[4]!.slice(1, 1 + JOB_ID_TIME_CHARS),
      (1_796_000_000_000).toString(36).padStart(9, "0"),
    );
    // The same millisecond: the random part decides.
    const a = newTimedJobId(5, () => 0);
    const b = newTimedJobId(5, () => 0.99);
    assert.equal(a, "j000000005" + "0000000");
    assert.equal(b, "j000000005" + "zzzzzzz");
  });
});

const policyArb: fc.Arbitrary<RetryPolicy> = fc.record({
  max_attempts: fc.integer({ min: 1, max: 10 }),
  backoff: fc.constantFrom("exponential" as const, "fixed" as const),
  base_s: fc.integer({ min: 1, max: 600 }),
  max_s: fc.integer({ min: 1, max: 86_400 }),
});

describe("retry backoff", () => {
  it("attempt n+1 waits base × 2^(n−1) plus jitter below the same again, capped at max_s", () => {
    fc.assert(
      fc.property(
        policyArb,
        fc.integer({ min: 1, max: 40 }),
        fc.string({ minLength: 1, maxLength: 30 }),
        (p, n, run) => {
          const core =
            p.backoff === "fixed" ? p.base_s * 1000 : p.base_s * 1000 * 2 ** Math.min(n - 1, 30);
          const cap = p.max_s * 1000;
          const d = retryDelayMs(p, n, run);
          assert.ok(Number.isFinite(d));
          assert.ok(d >= Math.min(core, cap), `${d} >= min(${core}, ${cap})`);
          assert.ok(d <= cap, `${d} <= cap ${cap}`);
          if (core * 2 <= cap) assert.ok(d < core * 2, `${d} < 2 × ${core}`);
          assert.equal(retryDelayMs(p, n, run), d, "deterministic");
        },
      ),
      { seed: 9, numRuns: 1000 },
    );
  });

  it("exponential waits never shrink from one attempt to the next", () => {
    fc.assert(
      fc.property(
        policyArb,
        fc.integer({ min: 1, max: 35 }),
        fc.string({ minLength: 1, maxLength: 30 }),
        (p, n, run) => {
          const e = { ...p, backoff: "exponential" as const };
          assert.ok(retryDelayMs(e, n + 1, run) >= retryDelayMs(e, n, run));
        },
      ),
      { seed: 10, numRuns: 1000 },
    );
  });

  it("jitter spreads the retries of many runs", () => {
    const p: RetryPolicy = { max_attempts: 3, backoff: "exponential", base_s: 10, max_s: 3600 };
    const delays = new Set(
      Array.from({ length: 100 }, (_, i) => Math.floor(retryDelayMs(p, 1, `run-${i}`) / 100)),
    );
    assert.ok(delays.size > 50, `${delays.size} distinct 100 ms buckets of 100`);
  });
});
