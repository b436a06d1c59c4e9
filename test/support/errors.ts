/** Assertions on Kairos errors shared by tests. */
import assert from "node:assert/strict";
import { isKairosError } from "../../src/lib/errors.ts";

/** Awaits `p` and asserts it rejects with a KairosError of `code` (and `field`, when given). */
export async function rejectsWith(
  p: Promise<unknown>,
  code: string,
  field?: string,
): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(isKairosError(e), String(e));
    assert.equal(e.code, code, e.message);
    if (field !== undefined) assert.equal(e.field, field);
    return true;
  });
}
