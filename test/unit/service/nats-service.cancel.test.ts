/**
 * A run's cancel through NatsJobsService with a fake router standing in for the job actor: the
 * actor is addressed with the caller's tenant; its answer for an active run is returned; for a run
 * it does not hold (or a job it does not have) the record decides — cancelled 200, ended otherwise
 * 409 (not retryable), none 404 — read under the caller's tenant only, so another tenant's run is
 * 404 exactly like a run that does not exist.
 */
import { memoryBuckets } from "../../support/memory-buckets.ts";
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { ActorRouter } from "../../../src/cluster/router.ts";
import { partitionOf } from "../../../src/cluster/placement.ts";
import { encodeRunRecord } from "../../../src/history/run-record.ts";
import { NatsJobsService } from "../../../src/service/nats-service.ts";
import { KairosError, isKairosError } from "../../../src/lib/errors.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import { JOB_ACTOR, jobActorId, runIdFor, runKey } from "../../../src/protocol/ids.ts";
import type { RunStatus, RunView } from "../../../src/protocol/model.ts";

const PARTITIONS = 4;
const JOB = "j0123456789abcdef";
const RUN = runIdFor(JOB, 1_767_614_400_000);

function record(tenantId: string, status: RunStatus): RunView {
  return {
    run_id: RUN,
    job_id: JOB,
    tenant_id: tenantId,
    scheduled_for: "2026-01-05T12:00:00Z",
    trigger: "schedule",
    status,
    attempt: 1,
    attempts: [],
    created_at: "2026-01-05T12:00:00Z",
    started_at: null,
    finished_at: status === "running" ? null : "2026-01-05T12:00:01Z",
    next_attempt_at: null,
    result: null,
    reason: status === "cancelled" ? "cancelled by request of API key kx" : null,
  };
}

/** `answer`: what the job actor answers (a reply, or a thrown error). */
function setup(answer: (addr: { type: string; id: string }) => unknown) {
  const buckets = memoryBuckets();
  const asked: { addr: { type: string; id: string }; msg: Record<string, unknown> }[] = [];
  const router = {
    now: () => 0,
    async request(addr: { type: string; id: string }, msg: Record<string, unknown>) {
      asked.push({ addr, msg });
      const a = answer(addr);
      if (a instanceof Error) throw a;
      return a;
    },
  } as unknown as ActorRouter;
  const put = async (tenantId: string, status: RunStatus) => {
    const p = partitionOf({ type: JOB_ACTOR, id: jobActorId(tenantId, JOB) }, PARTITIONS);
    await buckets.runs.put(
      runKey(p, tenantId, JOB, RUN),
      encodeRunRecord(record(tenantId, status), 1),
    );
  };
  return { service: new NatsJobsService(router, buckets, PARTITIONS, seededRandom(3)), asked, put };
}

const notFound = () => new KairosError("not_found", "job not found");

describe("NatsJobsService: cancel a run", () => {
  it("asks the job actor of the caller's tenant, with who asks and why; an active run's answer is returned", async () => {
    const h = setup(() => ({ run: record("ta", "cancelled") }));
    const run = await h.service.cancelRun("ta", RUN, "API key kx", "why");
    assert.equal(run.status, "cancelled");
    assert.deepEqual(h.asked, [
      {
        addr: { type: JOB_ACTOR, id: jobActorId("ta", JOB) },
        msg: { kind: "cancel", run_id: RUN, by: "API key kx", note: "why" },
      },
    ]);
  });

  it("a run the actor does not hold: its record decides — cancelled 200, another end 409, none 404", async () => {
    const h = setup(() => ({ ok: true }));
    await assert.rejects(h.service.cancelRun("ta", RUN, "x"), (e) => isKairosError(e, "not_found"));
    await h.put("ta", "succeeded");
    await assert.rejects(h.service.cancelRun("ta", RUN, "x"), (e: unknown) => {
      assert.ok(isKairosError(e, "conflict"), String(e));
      assert.equal(e.retryable, false, "a finished run does not become cancellable");
      assert.match(e.message, /already ended \(succeeded\)/);
      return true;
    });
    await h.put("ta", "cancelled");
    assert.equal((await h.service.cancelRun("ta", RUN, "x")).status, "cancelled", "idempotent");
  });

  it("another tenant's run is 404, like a run that does not exist: its record is never read", async () => {
    // Tenant ta's job has the run; tb asks. tb's job actor does not exist.
    const h = setup((addr) => (addr.id.startsWith("tb.") ? notFound() : { ok: true }));
    await h.put("ta", "running");
    const theirs = await h.service.cancelRun("tb", RUN, "x").catch((e: unknown) => e);
    const none = await h.service
      .cancelRun("tb", runIdFor(JOB, 1_767_614_401_000), "x")
      .catch((e: unknown) => e);
    assert.ok(isKairosError(theirs, "not_found"));
    assert.ok(isKairosError(none, "not_found"));
    assert.equal(theirs.message, none.message);
    assert.deepEqual(
      h.asked.map((a) => a.addr.id),
      [jobActorId("tb", JOB), jobActorId("tb", JOB)],
      "only tb's own job actor is asked",
    );
  });

  it("a malformed run id is 404 without asking anyone; an actor's other failure is passed on", async () => {
    const h = setup(() => new KairosError("timeout", "no answer"));
    for (const id of ["nope", `${JOB}-`, "a.b"]) {
      await assert.rejects(h.service.cancelRun("ta", id, "x"), (e) =>
        isKairosError(e, "not_found"),
      );
    }
    assert.equal(h.asked.length, 0);
    await assert.rejects(h.service.cancelRun("ta", RUN, "x"), (e) => isKairosError(e, "timeout"));
  });
});
