/**
 * Attacks with a worker's own credentials (docs/security.md, "Workers speak only for
 * themselves"): on a real nats-server, worker w2 runs an attempt; worker w1 — its pinned user
 * `worker-w1`, as every worker has by default — tries to read w2's offers, to complete w2's
 * attempt (on w2's subject, and on its own subject naming w2, with every fence up to 2,048), and
 * to advertise for w2. The server refuses what the permissions forbid; the scheduler refuses what
 * reaches it naming another worker than its subject's; the run is untouched. And a worker whose
 * permissions were widened (worker-w9, in WORKERS like every worker-only identity) reaches w2's
 * subject, but not as w2: the header nats-server adds at the account boundary names worker-w9,
 * and the scheduler drops its request.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { systemClock } from "../../../src/lib/clock.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import { isKairosError } from "../../../src/lib/errors.ts";
import { decode, encode } from "../../../src/cluster/codec.ts";
import type { Role } from "../../../src/cluster/config.ts";
import { connectNats } from "../../../src/cluster/nats.ts";
import { partitionOf } from "../../../src/cluster/placement.ts";
import { ActorRouter, workerPlaneSubject } from "../../../src/cluster/router.ts";
import type { KairosProcess } from "../../../src/server/start.ts";
import { JOB_ACTOR, jobActorId } from "../../../src/protocol/ids.ts";
import type { RunView } from "../../../src/protocol/model.ts";
import { NatsApiClient } from "../../../src/client/nats-api-client.ts";
import { workerAdvertSubject } from "../../../src/protocol/worker.ts";
import { headers } from "@nats-io/nats-core";
import { REQUEST_INFO_HEADER } from "../../../src/cluster/reply-guard.ts";
import { WORKERS_ACCOUNT } from "../../../src/cluster/nats-accounts.ts";
import { inboxPrefixFor, pinnedWorkerUser } from "../../../src/cluster/nats-permissions.ts";
import { startNats, type NatsFixture } from "../../support/nats.ts";
import { eventually } from "../../support/kairos.ts";
import {
  defended,
  nextEvent,
  nextPermissionError,
  putVictimTenant,
  startAttackNode,
} from "../../support/attack.ts";

const TA = "tworkattackaaaaaa";
const PARTITIONS = 4;
const FORGED = "forged by another worker";

describe("attacks with a worker's credentials", { timeout: 180_000 }, () => {
  let nats: NatsFixture;
  let admin: NatsConnection;
  let svc: NatsConnection;
  let api: NatsApiClient;
  const procs: KairosProcess[] = [];
  let sched: KairosProcess;
  let run: RunView;

  /** The victim's run as the API shows it. */
  const victim = () => api.getRun(run.run_id);

  before(async () => {
    nats = await startNats({
      workers: ["w1", "w2"],
      services: [{ name: "alpha", tenantId: TA }],
      wideOpenWorkers: ["w9"],
    });
    admin = await nats.connect("attack-worker-admin");
    await putVictimTenant(admin, TA);
    // The victim's attempt runs ten minutes: it is running throughout the attacks.
    const start = (nodeId: string, roles: Role[]) =>
      startAttackNode(nats, { nodeId, roles, partitions: PARTITIONS }, { noopDurationMs: 600_000 });
    sched = await start("wa-sched", ["api", "scheduler"]);
    procs.push(sched);
    procs.push(await start("w2", ["worker"]));
    svc = await nats.connectService("alpha");
    api = new NatsApiClient(svc, { cluster: "kairos", tenantId: TA });
    const { job } = await api.createJob({
      schedule: { at: "2099-01-01T00:00:00Z" },
      task: { image: "busybox", args: ["sleep", "600"], timeout_s: 900 },
    });
    run = await api.runNow(job.job_id);
    run = await eventually(
      async () => {
        const r = await victim();
        return r.status === "running" && r.attempts.at(-1)?.worker === "w2" ? r : undefined;
      },
      30_000,
      "the victim's run running on w2",
    );
  });

  after(async () => {
    for (const p of procs.reverse()) await p.stop();
    await svc?.close();
    await admin?.close();
    await nats?.stop();
  });

  it("a worker cannot read another worker's offers: subscriptions to w2's or every worker's offers are refused", async () => {
    const nc = await connectNats({
      url: nats.url,
      name: "attacker-w1-sub",
      credsFile: nats.auth.credsForWorker("w1"),
    });
    try {
      for (const subject of [
        "kairos.kairos.worker.w2.cancel",
        "kairos.kairos.worker.*.cancel",
        "kairos.kairos.worker.>",
        "kairos.kairos.>",
        ">",
      ]) {
        const v = nextPermissionError(nc);
        let got = 0;
        // (A refused subscription's callback is called once with the error and an empty message.)
        nc.subscribe(subject, { callback: (err) => void (err ? undefined : got++) });
        await nc.flush();
        // A message to w2 (a cancel of no attempt: w2 ignores it) that the attacker must not see.
        admin.publish("kairos.kairos.worker.w2.cancel", encode({ run_id: "none", fence: 0 }));
        await admin.flush();
        const e = await defended(
          v,
          async () =>
            got > 0
              ? `subscribed to ${subject}: received ${got} message(s) meant for w2`
              : undefined,
          `subscribe ${subject}`,
        );
        assert.equal(e.operation, "subscription");
        assert.equal(e.subject, subject);
      }
    } finally {
      await nc.close();
    }
  });

  it("a worker cannot complete another worker's attempt: not on its subject, nor naming it on its own, whatever the fence", async () => {
    const nc = await connectNats({
      url: nats.url,
      name: "attacker-w1-complete",
      credsFile: nats.auth.credsForWorker("w1"),
    });
    try {
      const job = { type: JOB_ACTOR, id: jobActorId(TA, run.job_id) };
      const completion = (worker: string, fence: number) => ({
        kind: "complete",
        run_id: run.run_id,
        fence,
        worker,
        outcome: "exited",
        exit_code: 0,
        output: FORGED,
        error: null,
        started_at_ms: Date.now() - 1000,
        finished_at_ms: Date.now(),
      });
      const fences = Array.from({ length: 2048 }, (_, i) => i + 1);
      const forge = (as: string) =>
        new ActorRouter({
          nc,
          clusterName: "kairos",
          clock: systemClock,
          random: seededRandom(7),
          partitions: PARTITIONS,
          plane: "workers",
          workerId: as,
          deadlineMs: 10_000,
        }).requestMany(
          fences.map((f) => ({ to: job, msg: completion("w2", f) })),
          { deadlineMs: 10_000 },
        );
      // On w2's own worker-plane subject: the server refuses the publish.
      const v = nextPermissionError(nc);
      const asW2 = await forge("w2");
      assert.equal(
        asW2.filter((r) => r.ok).length,
        0,
        "forged completions on w2's subject were accepted",
      );
      const runChanged = async () => {
        const r = await victim();
        return r.status === "running"
          ? undefined
          : `the victim's run is ${r.status}: ${JSON.stringify(r.attempts.at(-1))}`;
      };
      assert.equal(
        (await defended(v, runChanged, "completions on w2's subject")).subject,
        workerPlaneSubject("kairos", partitionOf(job, PARTITIONS), "w2"),
      );
      // On its own subject, naming w2, every fence up to 2,048: each item refused by the owner.
      const results = await forge("w1");
      const accepted = results.filter((r) => r.ok).length;
      assert.equal(accepted, 0, `${accepted} forged completions naming w2 were accepted`);
      assert.ok(
        results.every((r) => !r.ok && r.e.code === "permission_denied"),
        JSON.stringify(results.find((r) => r.ok || r.e.code !== "permission_denied")),
      );
      // Naming itself, it is not the attempt's lease holder: the job actor refuses (fence check).
      const own = new ActorRouter({
        nc,
        clusterName: "kairos",
        clock: systemClock,
        random: seededRandom(8),
        partitions: PARTITIONS,
        plane: "workers",
        workerId: "w1",
        deadlineMs: 10_000,
      });
      await assert.rejects(
        own.request(job, completion("w1", run.attempt)),
        (e: unknown) => isKairosError(e) && e.code !== "permission_denied",
      );
      const after = await victim();
      assert.equal(after.status, "running", "the victim's run is untouched");
      assert.equal(after.attempts.length, run.attempts.length);
      assert.equal(after.attempts.at(-1)?.worker, "w2");
    } finally {
      await nc.close();
    }
  });

  it("across the account boundary the scheduler knows the sender: a worker whose permissions allow w2's subject still cannot complete w2's attempt", async () => {
    // worker-w9 may publish anything in WORKERS (a misconfiguration on purpose), so the server
    // lets its completions naming w2 onto w2's worker-plane subject. The request crosses the
    // service import with the `Nats-Request-Info` header nats-server writes — user worker-w9 —
    // and the partition owner drops it unanswered (reply-guard.ts): that user may not speak for w2.
    // A header of the client's own naming worker-w2 is overwritten by the server.
    const nc = await connectNats({
      url: nats.url,
      name: "attacker-w9-complete",
      credsFile: nats.auth.credsForWorker("w9"),
    });
    try {
      const job = { type: JOB_ACTOR, id: jobActorId(TA, run.job_id) };
      const fences = Array.from({ length: 2048 }, (_, i) => i + 1);
      const completion = (fence: number) => ({
        kind: "complete",
        run_id: run.run_id,
        fence,
        worker: "w2",
        outcome: "exited",
        exit_code: 0,
        output: FORGED,
        error: null,
        started_at_ms: Date.now() - 1000,
        finished_at_ms: Date.now(),
      });
      const refused = nextEvent(
        sched.node.events,
        (e) =>
          e.type === "reply_refused" &&
          e.responder === "worker_plane" &&
          e.reason === "not_the_asker",
      );
      const forged = new ActorRouter({
        nc,
        clusterName: "kairos",
        clock: systemClock,
        random: seededRandom(9),
        partitions: PARTITIONS,
        plane: "workers",
        workerId: "w2",
        deadlineMs: 3000,
      }).requestMany(
        fences.map((f) => ({ to: job, msg: completion(f) })),
        { deadlineMs: 3000 },
      );
      const runChanged = async () => {
        const r = await victim();
        return r.status === "running"
          ? undefined
          : `the victim's run is ${r.status}: ${JSON.stringify(r.attempts.at(-1))}`;
      };
      await defended(refused, runChanged, "completions naming w2 from worker-w9 on w2's subject");
      assert.equal(
        (await forged).filter((r) => r.ok).length,
        0,
        "forged completions were accepted",
      );
      // With a `Nats-Request-Info` header of its own naming worker-w2: the server overwrites it.
      const h = headers();
      h.set(
        REQUEST_INFO_HEADER,
        JSON.stringify({ acc: WORKERS_ACCOUNT, user: pinnedWorkerUser("w2") }),
      );
      const refusedAgain = nextEvent(
        sched.node.events,
        (e) =>
          e.type === "reply_refused" &&
          e.responder === "worker_plane" &&
          e.reason === "not_the_asker",
      );
      const subject = workerPlaneSubject("kairos", partitionOf(job, PARTITIONS), "w2");
      for (const f of fences)
        nc.publish(subject, encode({ t: job.type, i: job.id, m: completion(f) }), {
          reply: `${inboxPrefixFor(pinnedWorkerUser("w9"))}.forged.${f}`,
          headers: h,
        });
      await defended(
        refusedAgain,
        runChanged,
        "completions naming w2 with a forged Nats-Request-Info header",
      );
      assert.equal((await victim()).status, "running", "the victim's run is untouched");
    } finally {
      await nc.close();
    }
  });

  it("a worker cannot advertise for another: w2's advert subject is refused, an advert naming w2 on its own is ignored", async () => {
    const nc = await connectNats({
      url: nats.url,
      name: "attacker-w1-advert",
      credsFile: nats.auth.credsForWorker("w1"),
    });
    let delivered = 0;
    const watch = admin.subscribe(workerAdvertSubject("kairos", "w2"), {
      callback: (_e, m) => {
        if (decode<{ slots: number }>(m.data).slots === 1000) delivered++;
      },
    });
    try {
      await admin.flush();
      const advert = { worker_id: "w2", slots: 1000, free: 1000, executor: "docker" };
      const v = nextPermissionError(nc);
      nc.publish(workerAdvertSubject("kairos", "w2"), encode(advert));
      const e = await defended(
        v,
        async () =>
          delivered > 0 ? "a forged advert for w2 reached w2's advert subject" : undefined,
        "advert on w2's subject",
      );
      assert.equal(e.subject, workerAdvertSubject("kairos", "w2"));
      const refused = nextEvent(
        sched.node.events,
        (ev) => ev.type === "message_refused" && ev.actor === "worker/w1",
      );
      nc.publish(workerAdvertSubject("kairos", "w1"), encode(advert));
      const r = await defended(refused, async () => undefined, "advert naming w2 on w1's subject");
      assert.equal(r.type === "message_refused" && r.reason, 'advert names worker "w2"');
    } finally {
      watch.unsubscribe();
      await nc.close();
    }
  });

  it("the nodes themselves, each with its own identity, caused no violation", () => {
    assert.deepEqual(
      nats.violations().filter((l) => !l.includes('"worker-w1"') && !l.includes('"worker-w9"')),
      [],
    );
  });
});
