/**
 * Run-now through NatsJobsService with a fake router standing in for the job actor: an unknown
 * outcome answered by the owner (a KV write that timed out) is sent again as the same message —
 * its request id and the time of its first send, which names the run (job-commands.ts `runNow`) —
 * so a try whose record landed and whose state did not is met by the retry, not left `queued`.
 */
import { memoryBuckets } from "../../support/memory-buckets.ts";
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { ActorRouter } from "../../../src/cluster/router.ts";
import { NatsJobsService, RUN_NOW_TRIES } from "../../../src/service/nats-service.ts";
import { KairosError, isKairosError } from "../../../src/lib/errors.ts";
import { seededRandom } from "../../../src/lib/random.ts";

const T = 1_767_614_400_000;

function setup(failures: KairosError[]) {
  const buckets = memoryBuckets();
  const sent: { kind: string; request_id?: string; requested_at_ms?: number }[] = [];
  let now = T;
  const router = {
    now: () => now,
    async request(
      _addr: unknown,
      msg: { kind: string; request_id?: string; requested_at_ms?: number },
    ) {
      sent.push(msg);
      now += 500; // the clock moves on between tries: the message must not
      const e = failures.shift();
      if (e) throw e;
      return { run: { run_id: `jrunrunrunrunrunr-${msg.requested_at_ms!.toString(36)}-m1` } };
    },
  } as unknown as ActorRouter;
  return { service: new NatsJobsService(router, buckets, 4, seededRandom(3)), sent };
}

describe("NatsJobsService: run-now", () => {
  it("an owner's timeout is an unknown outcome: the same message goes again, and names the same run", async () => {
    const h = setup([new KairosError("timeout", "kv sim_runs: create timed out")]);
    const run = await h.service.runNow("ta", "j0123456789abcdef");
    assert.equal(h.sent.length, 2);
    assert.deepEqual(
      h.sent[1],
      h.sent[0],
      "the retry is the same message: request id and first-send time",
    );
    assert.equal(h.sent[0]!.requested_at_ms, T);
    assert.equal(run.run_id, `jrunrunrunrunrunr-${T.toString(36)}-m1`);
  });

  it("gives up after RUN_NOW_TRIES unknown outcomes, and at once on a definite refusal", async () => {
    const h = setup(
      Array.from({ length: RUN_NOW_TRIES }, () => new KairosError("unavailable", "kv unreachable")),
    );
    await assert.rejects(h.service.runNow("ta", "j0123456789abcdef"), (e) =>
      isKairosError(e, "unavailable"),
    );
    assert.equal(h.sent.length, RUN_NOW_TRIES);
    const g = setup([new KairosError("not_found", "job not found")]);
    await assert.rejects(g.service.runNow("ta", "j0123456789abcdef"), (e) =>
      isKairosError(e, "not_found"),
    );
    assert.equal(g.sent.length, 1);
  });
});

describe("NatsJobsService: a run whose record is not written yet", () => {
  it("is read from its job's owner (a run-now's record follows the state write); unknown to it, 404", async () => {
    const buckets = memoryBuckets();
    const runId = `j0123456789abcdef-${T.toString(36)}-m1`;
    const asked: string[] = [];
    const router = {
      now: () => T,
      async request(_addr: unknown, msg: { kind: string }) {
        asked.push(msg.kind);
        return { runs: [{ run_id: runId, status: "queued" }] };
      },
    } as unknown as ActorRouter;
    const service = new NatsJobsService(router, buckets, 4, seededRandom(3));
    assert.equal((await service.getRun("ta", runId)).run_id, runId);
    assert.deepEqual(asked, ["active_runs"]);
    await assert.rejects(service.getRun("ta", `j0123456789abcdef-${T.toString(36)}-m2`), (e) =>
      isKairosError(e, "not_found"),
    );
    assert.deepEqual(asked, ["active_runs", "active_runs"]);
    // A scheduled run's record is written before the state: none is a 404 without asking the
    // owner, so a stream of made-up run ids costs one KV read each, not an actor request.
    await assert.rejects(service.getRun("ta", `j0123456789abcdef-${T.toString(36)}`), (e) =>
      isKairosError(e, "not_found"),
    );
    assert.deepEqual(asked, ["active_runs", "active_runs"], "the owner is not asked");
  });
});
