/** Shared helpers of the schedule tests: ISO-in, ISO-out wrappers around the engine. */
import assert from "node:assert/strict";
import { compileSchedule } from "../../../src/schedule/index.ts";
import { isKairosError, type ErrorCode, type KairosError } from "../../../src/lib/errors.ts";

export { compileSchedule };

/** True when `e` is a KairosError with `code`. */
export function isKairosErrorCode(e: unknown, code: ErrorCode): e is KairosError {
  return isKairosError(e, code);
}

/** Next `count` occurrences of a cron in a zone after an ISO instant, as ISO strings. */
export function nextIso(cron: string, tz: string, from: string, count = 3): string[] {
  return compileSchedule({ cron, time_zone: tz })
    .next(Date.parse(from), count)
    .map((ms) => new Date(ms).toISOString().replace(".000Z", "Z"));
}

/** Asserts that `fn` throws invalid_schedule with `field` and a message matching `message`. */
export function assertScheduleError(
  fn: () => unknown,
  field: string,
  message: string | RegExp,
): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(isKairosError(e, "invalid_schedule"), `expected invalid_schedule, got ${String(e)}`);
    assert.equal(e.field, field);
    if (typeof message === "string") assert.equal(e.message, message);
    else assert.match(e.message, message);
    return true;
  });
}
