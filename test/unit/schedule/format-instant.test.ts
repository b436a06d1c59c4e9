/** Instants shown with the precision they have: an `at` with milliseconds keeps them in its runs. */
import { it } from "node:test";
import assert from "node:assert/strict";
import { formatInstant, formatUtc } from "../../../src/schedule/index.ts";
import { parseAt } from "../../../src/schedule/at.ts";
import { activeRunView } from "../../../src/job-state/job-state.ts";
import type { ActiveRun, JobRecord } from "../../../src/job-state/job-state.ts";

it("formatInstant keeps milliseconds when there are any, and is formatUtc's form on whole seconds", () => {
  const whole = parseAt("2026-03-08T07:00:00Z");
  assert.equal(formatInstant(whole), "2026-03-08T07:00:00Z");
  assert.equal(formatInstant(whole), formatUtc(whole));
  assert.equal(formatInstant(whole + 250), "2026-03-08T07:00:00.250Z");
  assert.equal(formatUtc(whole + 250), "2026-03-08T07:00:00Z", "formatUtc still cuts (timestamps)");
  assert.equal(parseAt(formatInstant(whole + 7)), whole + 7, "round trip");
});

it("a run of an `at` with milliseconds shows scheduled_for with them (it was cut to the second)", () => {
  const at = parseAt("2026-03-08T07:00:00.250Z");
  const j = { job_id: "j1", tenant_id: "t1" } as unknown as JobRecord;
  const r = {
    run_id: "r1",
    scheduled_for_ms: at,
    created_at_ms: at - 60_000,
    started_at_ms: null,
    next_attempt_at_ms: null,
    trigger: "schedule",
    status: "queued",
    attempt: 0,
    attempts: [],
  } as unknown as ActiveRun;
  assert.equal(activeRunView(j, r).scheduled_for, "2026-03-08T07:00:00.250Z");
});

it("formatUtc keeps the last second's text and never answers another second with it", () => {
  const a = parseAt("2026-03-08T07:00:00Z");
  const seq = [a, a + 999, a + 1000, a, a - 1, a - 1000, a + 86_400_000, a + 86_400_000 + 1];
  const want = [
    "2026-03-08T07:00:00Z",
    "2026-03-08T07:00:00Z",
    "2026-03-08T07:00:01Z",
    "2026-03-08T07:00:00Z",
    "2026-03-08T06:59:59Z",
    "2026-03-08T06:59:59Z",
    "2026-03-09T07:00:00Z",
    "2026-03-09T07:00:00Z",
  ];
  assert.deepEqual(seq.map(formatUtc), want);
  assert.throws(
    () => formatUtc(Number.NaN),
    RangeError,
    "an invalid instant still throws, as before",
  );
  assert.equal(formatUtc(a), "2026-03-08T07:00:00Z", "and the next valid one is right");
});
