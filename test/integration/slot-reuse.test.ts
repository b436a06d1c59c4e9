/**
 * A freed slot is reused at once, on a real nats-server: one node (scheduler + worker, noop
 * executor) whose worker has ONE slot and a prefetch of one, default lease TTL and heartbeat
 * (2.5 s). Three runs of 300 ms are asked for at once: the second waits in the worker's prefetch
 * queue and starts the moment the first ends; the third, granted too (the fleet shares the slot
 * and both prefetch queues: 3 places) but refused while the worker's places are taken, is offered
 * again once the worker advertises its freed place and starts the moment the second ends. Each
 * start follows the previous end within 20 ms — far less than the completion report, grant and
 * offer path (two 20 ms gathering timers alone) or a heartbeat — and the worker counts both
 * turnarounds in `kairos_slot_idle_seconds`.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { systemClock } from "../../src/lib/clock.ts";
import { decode } from "../../src/cluster/codec.ts";
import { metricsText } from "../../src/metrics/index.ts";
import type { JobSpec, RunView } from "../../src/protocol/model.ts";
import { FLEET_ACTOR, FLEET_ID, type FleetStatus } from "../../src/slots/fleet-actor.ts";
import { eventually } from "../support/kairos.ts";
import { startOneNode, type OneNode } from "../support/one-node.ts";

let fx: OneNode;

before(async () => {
  fx = await startOneNode("reuse", { workerSlots: 1, workerPrefetch: 1 });
});

after(async () => {
  await fx?.stop();
});

/** `kairos_slot_idle_seconds`: its count, and how many were at most 25 ms. */
async function slotIdle(): Promise<{ count: number; fast: number }> {
  const { body } = await metricsText();
  const read = (re: RegExp) => Number(re.exec(body)?.[1] ?? 0);
  return {
    count: read(/^kairos_slot_idle_seconds_count (\d+)$/m),
    fast: read(/^kairos_slot_idle_seconds_bucket\{le="0.025"\} (\d+)$/m),
  };
}

describe("a freed slot is reused at once (real nats-server)", () => {
  it("three runs on one slot: each starts within 20 ms of the previous end, with no heartbeat between", async () => {
    const { proc, tenants, jobs: svc } = fx;
    await eventually(
      async () => {
        if (proc.node.heldPartitions().length !== proc.node.partitions) return undefined;
        const s = await proc.node.router.request<FleetStatus>(
          { type: FLEET_ACTOR, id: FLEET_ID },
          { kind: "status" },
        );
        return s.capacity === 3 ? true : undefined;
      },
      20_000,
      "all partitions held, and the worker's slot and prefetch (1 + 2 × 1 places) advertised",
    );
    const tenant = (await tenants.createTenant("reuse")).tenant.tenant_id;
    const spec: JobSpec = {
      name: null,
      schedule: { at: new Date(systemClock.now() + 86_400_000).toISOString() },
      task: { image: "noop", args: ["sleep", "0.3"], env: {}, timeout_s: 60 },
      retry: { max_attempts: 1, backoff: "exponential", base_s: 10, max_s: 3600 },
      overlap: "allow",
      misfire: { policy: "run_once", starting_deadline_s: null },
      flex_window_s: 0,
      enabled: true,
    };
    const jobs = await Promise.all(
      [0, 1, 2].map(async () => (await svc.createJob(tenant, spec)).job.job_id),
    );
    const before = await slotIdle();
    await Promise.all(jobs.map((j) => svc.runNow(tenant, j)));
    let seen = "";
    const runs = await eventually(
      async () => {
        const rs = (await proc.node.buckets.runs.list(">"))
          .map((e) => decode<RunView>(e.value))
          .filter((r) => r.tenant_id === tenant && typeof r.run_id === "string");
        seen = JSON.stringify(rs.map((r) => r.status));
        return rs.length === 3 && rs.every((r) => r.status === "succeeded") ? rs : undefined;
      },
      30_000,
      "three runs succeeded",
    ).catch((e: unknown) => {
      throw new Error(`${String(e)}; runs: ${seen}`);
    });
    const spans = runs
      .map((r) => r.attempts[0]!)
      .map((a) => [Date.parse(a.started_at!), Date.parse(a.finished_at!)] as const)
      .sort((x, y) => x[0] - y[0]);
    const gaps = spans.slice(1).map(([s], i) => s - spans[i]![1]);
    assert.ok(
      gaps.every((g) => g >= 0 && g <= 20),
      `each start within 20 ms of the previous end on the one slot: gaps ${gaps.join(", ")} ms`,
    );
    const after = await slotIdle();
    assert.equal(after.count - before.count, 2, "two turnarounds counted by the worker");
    assert.equal(after.fast - before.fast, 2, "both within 25 ms");
  });
});
