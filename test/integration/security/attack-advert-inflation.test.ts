/**
 * Slot inflation by a worker (docs/security.md, "Workers are believed only so far"): a pinned
 * worker may advertise only on its own subject, but what it advertises there is its own word. On
 * a real nats-server, worker-w1's credentials advertise a billion free slots every 20 ms and
 * never answer an offer, while an honest worker w2 (4 slots, 2 prefetch) is idle. A tenant's 12
 * runs — more than w2 has room for at once — must all start on w2, and w1 must be offered at most
 * one task per run (each offer carries the task, its secrets included). The defence
 * (src/slots/worker-trust.ts): the scheduler believes an advert only up to its per-worker limits,
 * and benches a worker that leaves an offer unanswered, offering the run to another worker at
 * once. With the bench removed (the limits kept), w1's adverts drew the waiting runs back: 18
 * offers for 12 runs; with both removed, no run had started on w2 when the test timed out.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { encode } from "../../../src/cluster/codec.ts";
import type { Role } from "../../../src/cluster/config.ts";
import { connectNats } from "../../../src/cluster/nats.ts";
import type { KairosProcess } from "../../../src/server/start.ts";
import { NatsApiClient } from "../../../src/client/nats-api-client.ts";
import { workerAdvertSubject, workerSubject } from "../../../src/protocol/worker.ts";
import { startNats, type NatsFixture } from "../../support/nats.ts";
import { eventually } from "../../support/kairos.ts";
import { putVictimTenant, startAttackNode } from "../../support/attack.ts";

const TA = "tadvertaaaaaaaaaa";

describe("a worker advertising a billion slots", { timeout: 120_000 }, () => {
  let nats: NatsFixture;
  let admin: NatsConnection;
  let svc: NatsConnection;
  let attacker: NatsConnection;
  const procs: KairosProcess[] = [];
  let timer: NodeJS.Timeout | undefined;

  before(async () => {
    nats = await startNats({ workers: ["w1", "w2"], services: [{ name: "alpha", tenantId: TA }] });
    admin = await nats.connect("attack-advert-admin");
    await putVictimTenant(admin, TA);
    const start = (nodeId: string, roles: Role[]) =>
      startAttackNode(
        nats,
        { nodeId, roles, partitions: 4 },
        { noopDurationMs: 100, workerSlots: 4 },
      );
    procs.push(await start("adv-sched", ["api", "scheduler"]));
    procs.push(await start("w2", ["worker"]));
    svc = await nats.connectService("alpha");
  });

  after(async () => {
    if (timer) clearInterval(timer);
    await attacker?.close();
    for (const p of procs.reverse()) await p.stop();
    await svc?.close();
    await admin?.close();
    await nats?.stop();
  });

  it("does not draw every offer: the runs start on the honest worker", async () => {
    const seen: string[] = [];
    let heard: () => void = () => undefined;
    const clamped = new Promise<void>((resolve) => (heard = resolve));
    procs[0]!.node.events.on((e) => {
      if (e.type === "worker_advert_clamped" || e.type === "worker_benched")
        seen.push(`${e.type}:${e.worker}`);
      if (e.type === "worker_advert_clamped" && e.worker === "w1") heard();
    });
    attacker = await connectNats({
      url: nats.url,
      name: "attacker-w1-adverts",
      credsFile: nats.auth.credsForWorker("w1"),
    });
    let offers = 0;
    // It takes the offers (and the tasks' secrets in them) and never answers.
    attacker.subscribe(workerSubject("kairos", "w1", "start"), {
      callback: (e) => void (e ? undefined : offers++),
    });
    const advertise = () =>
      attacker.publish(
        workerAdvertSubject("kairos", "w1"),
        encode({ worker_id: "w1", slots: 1_000_000_000, free: 1_000_000_000, executor: "docker" }),
      );
    advertise();
    // As often as it likes: each advert used to reset what the scheduler had reserved on it.
    timer = setInterval(advertise, 20);
    await attacker.flush();
    await clamped; // the scheduler has the inflated advert (believed up to its limits) before any run
    const api = new NatsApiClient(svc, { cluster: "kairos", tenantId: TA });
    const { job } = await api.createJob({
      schedule: { at: "2099-01-01T00:00:00Z" },
      task: { image: "busybox", args: ["true"], timeout_s: 10 },
    });
    const runs = [];
    // More runs than w2 has room for at once (4 slots, 2 prefetch): some must wait for room, and
    // the adverts of w1 must not draw them back.
    for (let i = 0; i < 12; i++) runs.push(await api.runNow(job.job_id));
    for (const r of runs) {
      await eventually(
        async () => {
          const v = await api.getRun(r.run_id);
          return v.status === "succeeded" ? v : undefined;
        },
        15_000,
        `run ${r.run_id} succeeded on w2 (w1 was offered ${offers} tasks)`,
      );
    }
    assert.ok(
      offers <= runs.length,
      `the inflated worker was offered ${offers} tasks for ${runs.length} runs`,
    );
    // Believed only up to the limits (told once), and benched for sitting on its offers.
    assert.deepEqual([...new Set(seen)].sort(), ["worker_advert_clamped:w1", "worker_benched:w1"]);
  });
});
