/**
 * Weighted max-min fairness on a real nats-server: one node (scheduler + worker, noop executor,
 * 8 slots, each run 200 ms) and two tenants of weights 1 and 3, both with more runs waiting than
 * the fleet has slots. The fleet actor answers shares of 2 and 6, and while both tenants have
 * runs waiting, the runs that start split about 1:3.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { systemClock } from "../../src/lib/clock.ts";
import { decode } from "../../src/cluster/codec.ts";
import { FLEET_ACTOR, FLEET_ID, type FleetStatus } from "../../src/slots/fleet-actor.ts";
import type { JobSpec, RunView } from "../../src/protocol/model.ts";
import { eventually } from "../support/kairos.ts";
import { startOneNode, type OneNode } from "../support/one-node.ts";

let fx: OneNode;

before(async () => {
  // Workers advertise free slots by heartbeat and a scheduler offers no more than that between
  // two: a short heartbeat keeps 200 ms runs from idling their slots (this test is about shares).
  fx = await startOneNode("fair", {
    workerSlots: 8,
    // Shares of the 8 slots alone (a prefetch would add its places to the capacity shared).
    workerPrefetch: 0,
    noopDurationMs: 200,
    workerHeartbeatMs: 100,
  });
});

after(async () => {
  await fx?.stop();
});

const spec = (): JobSpec => ({
  name: null,
  schedule: { at: new Date(systemClock.now() + 86_400_000).toISOString() },
  task: { image: "noop", args: ["noop"], env: {}, timeout_s: 60 },
  retry: { max_attempts: 1, backoff: "exponential", base_s: 10, max_s: 3600 },
  overlap: "allow",
  misfire: { policy: "run_once", starting_deadline_s: null },
  flex_window_s: 0,
  enabled: true,
});

describe("fair shares between tenants (real nats-server)", () => {
  it("weights 1 and 3 with more demand than 8 slots: shares 2 and 6, runs start about 1:3", async () => {
    await fx.ready();
    const { proc, tenants, jobs: svc } = fx;
    const light = (await tenants.createTenant("light")).tenant.tenant_id;
    const heavy = (await tenants.createTenant("heavy")).tenant.tenant_id;
    await tenants.setQuota(heavy, { weight: 3 });
    const runs = { [light]: 120, [heavy]: 180 };
    await Promise.all(
      Object.entries(runs).map(async ([tenant, n]) => {
        const jobs = await Promise.all(
          Array.from({ length: 6 }, async () => (await svc.createJob(tenant, spec())).job.job_id),
        );
        for (let i = 0; i < n; i++) await svc.runNow(tenant, jobs[i % jobs.length]!);
      }),
    );
    // The fleet actor's answer once both tenants report: 8 slots split 1:3.
    const status = await eventually(
      async () => {
        const s = await proc.node.router.request<FleetStatus>(
          { type: FLEET_ACTOR, id: FLEET_ID },
          { kind: "status" },
        );
        const shares = Object.fromEntries(s.tenants.map((t) => [t.tenant, t.share]));
        return shares[light] === 2 && shares[heavy] === 6 ? s : undefined;
      },
      20_000,
      "fleet shares light 2, heavy 6",
    );
    assert.equal(status.capacity, 8);
    const convergedMs = systemClock.now() + 500; // grants taken before the shares settle have ended
    let seen = "";
    const all = await eventually(
      async () => {
        const rs = (await proc.node.buckets.runs.list(">")).map((e) => decode<RunView>(e.value));
        const by = new Map<string, number>();
        for (const r of rs)
          by.set(
            `${r.tenant_id === heavy ? "heavy" : "light"}:${r.status}`,
            (by.get(`${r.tenant_id === heavy ? "heavy" : "light"}:${r.status}`) ?? 0) + 1,
          );
        const ts = await Promise.all(
          [light, heavy].map((id) =>
            proc.node.router.request({ type: "tenant", id }, { kind: "status" }),
          ),
        );
        seen = `${JSON.stringify([...by])} tenants ${JSON.stringify(ts)}`;
        return rs.filter((r) => r.status === "succeeded").length === 300 ? rs : undefined;
      },
      30_000,
      "all 300 runs succeeded",
    ).catch((e: unknown) => {
      throw new Error(`${String(e)}; runs and tenants: ${seen}`);
    });
    // While both had runs waiting (until the heavy tenant's last start), count the starts.
    const starts = (t: string) =>
      all.filter((r) => r.tenant_id === t).map((r) => Date.parse(r.attempts[0]!.started_at!));
    const untilMs = Math.max(...starts(heavy));
    const inWindow = (t: string) =>
      starts(t).filter((ms) => ms >= convergedMs && ms <= untilMs).length;
    const l = inWindow(light);
    const h = inWindow(heavy);
    assert.ok(
      l > 10 && h > 30,
      `enough starts to compare: light ${l}, heavy ${h} (window ${untilMs - convergedMs} ms)`,
    );
    const ratio = h / l;
    console.log(
      `fairness: heavy:light starts ${h}:${l} = ${ratio.toFixed(2)} over ${untilMs - convergedMs} ms`,
    );
    assert.ok(
      ratio > 2.2 && ratio < 4.2,
      `heavy:light starts ${h}:${l} = ${ratio.toFixed(2)}, expected about 3`,
    );
  });
});
