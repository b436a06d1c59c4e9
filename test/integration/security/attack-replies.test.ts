/**
 * Attacks through reply subjects (docs/security.md, "Replies go only to the asker's inbox"): on a
 * real nats-server with each role's real credentials, a requester names as its reply subject a
 * JetStream API or KV subject, hoping the responder — whose `allow_responses` lets it publish to
 * any reply subject it was given — does the write for it. Each responder in the cluster account
 * (the partition owner on the actor plane, a worker answering offers) drops such a request
 * unanswered (reply-guard.ts) and nothing in the cluster changes; with the guard removed, each of
 * these tests sees the effect and fails. A tenant's service and a worker are in accounts of their
 * own: their forged reply never reaches KAIROS (the answer goes back into their account through
 * the import; accounts.test.ts and this file's worker case show that defence).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { encode } from "../../../src/cluster/codec.ts";
import { makeNodeConfig, type Role } from "../../../src/cluster/config.ts";
import { partitionOf } from "../../../src/cluster/placement.ts";
import { partitionSubject, workerPlaneSubject } from "../../../src/cluster/router.ts";
import { startKairos, type KairosProcess } from "../../../src/server/start.ts";
import { TENANT_DEFAULTS } from "../../../src/tenants/directory.ts";
import type { Tenant } from "../../../src/protocol/service.ts";
import { JOB_ACTOR, jobActorId } from "../../../src/protocol/ids.ts";
import { apiSubject } from "../../../src/nats-api/subjects.ts";
import { NatsApiClient } from "../../../src/client/nats-api-client.ts";
import { workerSubject, type StartRequest } from "../../../src/protocol/worker.ts";
import { connectNats } from "../../../src/cluster/nats.ts";
import { startNats, type NatsFixture } from "../../support/nats.ts";
import { defended, nextReplyRefusal } from "../../support/attack.ts";

const TA = "tattackaaaaaaaaaa";
const TB = "tattackbbbbbbbbbb";
const PARTITIONS = 4;

describe("attacks through reply subjects", { timeout: 120_000 }, () => {
  let nats: NatsFixture;
  let admin: NatsConnection;
  let tenantsKv: KV;
  let idemKv: KV;
  const procs: KairosProcess[] = [];
  let api: KairosProcess;
  let sched: KairosProcess;
  let worker: KairosProcess;

  const start = (nodeId: string, roles: Role[]) =>
    startKairos(
      makeNodeConfig({
        natsUrl: nats.url,
        natsAuth: { credsFile: nats.credsFor(roles) },
        nodeId,
        roles,
        partitions: PARTITIONS,
      }),
      { executor: "noop", workerSlots: 1, apiHost: "127.0.0.1", apiPort: 0 },
    );
  const idemMessages = async () =>
    (await (await jetstreamManager(admin)).streams.info("KV_kairos_idem")).state.messages;
  /** What became of key `k` of the tenants bucket since `revision` (undefined: unchanged). */
  const tenantsKeyChanged = (k: string, revision: number) => async () => {
    const e = await tenantsKv.get(k);
    const now = e?.revision ?? 0;
    return now === revision
      ? undefined
      : `${k} is at revision ${now} (was ${revision}), ${e?.length ?? 0} bytes: "${e ? e.string().slice(0, 80) : ""}"`;
  };

  before(async () => {
    nats = await startNats({
      services: [
        { name: "alpha", tenantId: TA },
        { name: "beta", tenantId: TB },
      ],
      wideOpenWorkers: ["w9"],
    });
    admin = await nats.connect("attack-replies-admin");
    sched = await start("attack-sched", ["scheduler"]);
    procs.push(sched);
    api = await start("attack-api", ["api"]);
    procs.push(api);
    worker = await start("attack-worker", ["worker"]);
    procs.push(worker);
    const kvm = new Kvm(admin);
    tenantsKv = await kvm.open("kairos_tenants");
    idemKv = await kvm.open("kairos_idem");
    for (const [id, name] of [
      [TA, "alpha"],
      [TB, "beta"],
    ] as const) {
      const t: Tenant = {
        tenant_id: id,
        name,
        created_at: "2026-01-01T00:00:00Z",
        ...TENANT_DEFAULTS,
      };
      await tenantsKv.create(`t.${id}`, encode(t));
    }
    await idemKv.put(`${TB}.somekey`, encode({ job_id: "jidem", request_hash: "h" }));
    await new Promise<void>((resolve) => {
      const check = () => sched.node.heldPartitions().length === PARTITIONS;
      if (check()) return resolve();
      const off = sched.node.events.on(() => {
        if (check()) {
          off();
          resolve();
        }
      });
    });
  });

  after(async () => {
    for (const p of procs.reverse()) await p.stop();
    await admin?.close();
    await nats?.stop();
  });

  /**
   * A tenant's service lives in the SERVICES account (nats-accounts.ts): its forged reply subject
   * stays there, and the API node sees — and answers — a reply subject nats-server made for the
   * import (`_R_.…`), which leads back into SERVICES, where no JetStream exists. So the request is
   * answered (not refused), and the answer changes nothing. Ordering: once the API node has
   * answered it, a proper request of the same service is answered after it on the same API
   * connection; only then is the state read.
   */
  const forgedThroughImport = async (nc: NatsConnection, reply: string): Promise<void> => {
    const base = api.natsApi!.answered;
    nc.publish(apiSubject("kairos", TA, "jobs.list"), new Uint8Array(0), { reply });
    const deadline = Date.now() + 10_000;
    while (api.natsApi!.answered <= base) {
      if (Date.now() > deadline)
        throw new Error(`the API node did not answer the request with reply ${reply}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.deepEqual(
      (await new NatsApiClient(nc, { cluster: "kairos", tenantId: TA }).listJobs()).jobs,
      [],
    );
  };

  it("a tenant's service cannot have the API node purge a stream: reply $JS.API.STREAM.PURGE.KV_kairos_idem", async () => {
    const nc = await nats.connectService("alpha");
    try {
      const before = await idemMessages();
      assert.ok(before > 0);
      await forgedThroughImport(nc, "$JS.API.STREAM.PURGE.KV_kairos_idem");
      assert.equal(await idemMessages(), before, "the idempotency stream was not purged");
    } finally {
      await nc.close();
    }
  });

  it("a tenant's service cannot have the API node overwrite another tenant's record: reply $KV.kairos_tenants.t.<other>", async () => {
    const nc = await nats.connectService("alpha");
    try {
      const before = (await tenantsKv.get(`t.${TB}`))!.revision;
      await forgedThroughImport(nc, `$KV.kairos_tenants.t.${TB}`);
      assert.equal(await tenantsKeyChanged(`t.${TB}`, before)(), undefined);
      // Nor into a node's inbox: that subject too stays in SERVICES, where no node listens.
      await forgedThroughImport(nc, "_INBOX_scheduler.x.1");
    } finally {
      await nc.close();
    }
  });

  it("a worker cannot have the scheduler write the tenants bucket, nor another worker's node record: worker-plane heartbeat with reply $KV.…", async () => {
    // A worker-only identity is in WORKERS: its request crosses a service import, so the scheduler
    // sees a reply subject of the server's making (`_R_.…`) and its answer goes back to the
    // worker's reply subject in WORKERS — no JetStream there, and an answer is not passed on
    // through WORKERS's own import of `$KV.kairos_nodes.*`. A listener in WORKERS (worker-w9,
    // every permission) sees the answer arrive there: that defence's signal. A worker role in
    // KAIROS (`scheduler_worker`) asks inside the account: the reply guard refuses its request.
    const nodesKv = await new Kvm(admin).open("kairos_nodes");
    const listener = await connectNats({
      url: nats.url,
      name: "attack-replies-w9",
      credsFile: nats.auth.credsForWorker("w9"),
    });
    try {
      for (const who of [["worker"], ["scheduler", "worker"]] as const) {
        const nc = await nats.connect(`attack-replies-${who.join("-")}`, [...who]);
        const inWorkers = who.length === 1;
        try {
          for (const [reply, changed] of [
            ["$KV.kairos_tenants.k.forged-by-worker", tenantsKeyChanged("k.forged-by-worker", 0)],
            [
              "$KV.kairos_nodes.w2",
              async () =>
                (await nodesKv.get("w2")) ? "a node record of w2 was written" : undefined,
            ],
          ] as const) {
            const job = { type: JOB_ACTOR, id: jobActorId(TA, "jattack0000000000") };
            const landed = new Promise<string>((resolve) =>
              listener.subscribe(reply, {
                max: 1,
                callback: (_e, m) => resolve(`answered into WORKERS on ${m.subject}`),
              }),
            );
            await listener.flush();
            const refused = nextReplyRefusal(sched.node.events, "worker_plane").then(
              (e) => `refused: ${e.reason}`,
            );
            const batch = {
              b: [
                {
                  t: job.type,
                  i: job.id,
                  m: {
                    kind: "heartbeat",
                    run_id: "jattack0000000000-1",
                    fence: 1,
                    worker: "attack-worker",
                  },
                },
              ],
            };
            nc.publish(
              workerPlaneSubject("kairos", partitionOf(job, PARTITIONS), "attack-worker"),
              encode(batch),
              { reply },
            );
            const how = await defended(
              Promise.race([refused, landed]),
              changed,
              `${who.join(",")}: a write through the scheduler's reply ${reply}`,
            );
            assert.equal(
              how,
              inWorkers ? `answered into WORKERS on ${reply}` : "refused: not_an_inbox",
              who.join(","),
            );
          }
        } finally {
          await nc.close();
        }
      }
    } finally {
      await listener.close();
    }
  });

  it("an api identity cannot have the scheduler write the tenants bucket: actor command with reply $KV.kairos_tenants.<key>", async () => {
    const nc = await nats.connect("attack-replies-api", ["api"]);
    try {
      const job = { type: JOB_ACTOR, id: jobActorId(TA, "jattack0000000001") };
      const refused = nextReplyRefusal(sched.node.events, "actors");
      nc.publish(
        partitionSubject("kairos", partitionOf(job, PARTITIONS)),
        encode({ t: job.type, i: job.id, m: { kind: "get" } }),
        { reply: "$KV.kairos_tenants.k.forged-by-api" },
      );
      await defended(
        refused,
        tenantsKeyChanged("k.forged-by-api", 0),
        "tenants write through the owner's reply",
      );
    } finally {
      await nc.close();
    }
  });

  it("a scheduler identity cannot have a worker write the tenants bucket: offer with reply $KV.kairos_tenants.<key>; the offer is not taken", async () => {
    const nc = await nats.connect("attack-replies-sched", ["scheduler"]);
    try {
      const req: StartRequest = {
        job_actor: jobActorId(TA, "jattack0000000002"),
        tenant_id: TA,
        job_id: "jattack0000000002",
        run_id: "jattack0000000002-1",
        attempt: 1,
        fence: 1,
        scheduled_for_ms: Date.now(),
        start_at_ms: Date.now(),
        task: { image: "busybox", args: ["true"], env: {}, timeout_s: 5 },
        lease_ttl_ms: 5_000,
      };
      const refused = nextReplyRefusal(worker.node.events, "worker");
      nc.publish(workerSubject("kairos", "attack-worker", "start"), encode(req), {
        reply: "$KV.kairos_tenants.k.forged-by-scheduler",
      });
      await defended(
        refused,
        tenantsKeyChanged("k.forged-by-scheduler", 0),
        "tenants write through the worker's reply",
      );
      assert.equal(worker.worker!.leaseCounts.held, 0, "the offer was not taken");
    } finally {
      await nc.close();
    }
  });
});
