/**
 * A batch's grouped create (src/app/job-batch.ts `createGrouped`): every item checked first, only
 * the valid ones handed to the service together, each outcome put back at its item's place with
 * its place in the error — whether the item failed its check, its envelope or its create.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createGrouped, parseBatchBody } from "../../../src/app/job-batch.ts";
import { KairosError, isKairosError, type ErrorCode } from "../../../src/lib/errors.ts";
import type { JobSpec, JobView } from "../../../src/protocol/model.ts";
import type { CreateOutcome } from "../../../src/protocol/service.ts";

const check = (job: unknown): JobSpec => {
  const name = (job as { name?: unknown }).name;
  if (typeof name !== "string")
    throw new KairosError("invalid_argument", "name: required", { field: "name" });
  return { name } as unknown as JobSpec;
};
const view = (name: string) => ({ job_id: `id-${name}`, name }) as unknown as JobView;

describe("createGrouped", () => {
  it("hands the valid items over together and puts each outcome at its item's place", async () => {
    const items = parseBatchBody({
      jobs: [
        { job: { name: "a" } },
        { job: {} },
        { job: { name: "c" }, idempotency_key: "k-c" },
        { job: { name: "d" }, nope: 1 },
        { job: { name: "e" } },
      ],
    });
    const asked: { spec: JobSpec; idempotencyKey?: string }[][] = [];
    const out = await createGrouped(items, check, async (specs) => {
      asked.push(specs);
      return specs.map(({ spec }): CreateOutcome =>
        spec.name === "e"
          ? { ok: false, error: new KairosError("quota_exceeded", "max_jobs: full") }
          : { ok: true, created: spec.name !== "c", job: view(spec.name!) },
      );
    });
    assert.equal(asked.length, 1, "one call for the whole batch");
    assert.deepEqual(
      asked[0]!.map((s) => [s.spec.name, s.idempotencyKey]),
      [
        ["a", undefined],
        ["c", "k-c"],
        ["e", undefined],
      ],
    );
    assert.deepEqual(
      out.map((o) => o.index),
      [0, 1, 2, 3, 4],
    );
    const made = (i: number) => {
      const o = out[i];
      assert.ok(o?.ok, `item ${i} made`);
      return o;
    };
    const refused = (i: number, code: ErrorCode): KairosError => {
      const o = out[i];
      assert.ok(o !== undefined && !o.ok && isKairosError(o.error, code), `item ${i}: ${code}`);
      return o.error;
    };
    assert.ok(made(0).created && made(0).job.name === "a");
    assert.equal(refused(1, "invalid_argument").field, "jobs[1].job.name");
    assert.match(refused(1, "invalid_argument").message, /^jobs\[1\]: /);
    assert.equal(made(2).created, false, "a replay keeps created false");
    assert.equal(refused(3, "invalid_argument").field, "jobs[3].nope");
    assert.match(refused(4, "quota_exceeded").message, /^jobs\[4\]: max_jobs/);
  });

  it("asks nothing when no item is valid, and refuses a service answering the wrong count", async () => {
    let calls = 0;
    const none = await createGrouped(parseBatchBody({ jobs: [{ job: {} }] }), check, async () => {
      calls++;
      return [];
    });
    assert.equal(calls, 0);
    assert.equal(none.length, 1);
    await assert.rejects(
      createGrouped(parseBatchBody({ jobs: [{ job: { name: "a" } }] }), check, async () => []),
      (e) => isKairosError(e, "internal"),
    );
  });
});
