/**
 * Attacks through the JetStream API (docs/security.md, "JetStream rights"): on a real nats-server
 * with the roles' real credentials.
 *
 * - A worker identity (pinned, and the shared one) has exactly two JetStream rights — the direct
 *   get of the cluster's partition count and writes of its own `nodes` record — so it cannot
 *   create a consumer (the push consumer that delivers, as the account, a bucket's writes to an
 *   actor command subject), ask stream info (with a subject filter: every key of a bucket), read
 *   the JetStream account info, direct-get any other key, write another record or purge a stream.
 *   The server refuses each; nothing is created, read or written.
 * - An api identity reads buckets through KV watches, which are push consumers whose deliver
 *   subject the creator chooses (nats.js `kv.watch`): it can still create one that delivers to a
 *   Kairos subject. A delivered message keeps its own subject (`$KV.<bucket>.<key>`), so every
 *   Kairos subscriber accepts only its exact subject: the delivery is dropped (counted) and
 *   nothing happens — here an actor command (a job's delete) and a worker's cancel. (Membership
 *   and the advert directory check their subjects too — unit tests with such a delivery: the
 *   nats-server of these tests removed push consumers aimed at subjects that nodes read on their
 *   control connection before anything was delivered, so those cases are not made here.)
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { AckPolicy, DeliverPolicy, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { encode } from "../../../src/cluster/codec.ts";
import { makeNodeConfig } from "../../../src/cluster/config.ts";
import { connectNats } from "../../../src/cluster/nats.ts";
import { partitionOf } from "../../../src/cluster/placement.ts";
import { partitionSubject } from "../../../src/cluster/router.ts";
import { startKairos, type KairosProcess } from "../../../src/server/start.ts";
import { TENANT_DEFAULTS } from "../../../src/tenants/directory.ts";
import type { Tenant } from "../../../src/protocol/service.ts";
import { JOB_ACTOR, jobActorId } from "../../../src/protocol/ids.ts";
import { NatsApiClient } from "../../../src/client/nats-api-client.ts";
import { workerSubject } from "../../../src/protocol/worker.ts";
import { apiSubject } from "../../../src/nats-api/subjects.ts";
import { startNats, type NatsFixture } from "../../support/nats.ts";
import {
  armBusRefusal,
  defenceOrEffect,
  defended,
  nextPermissionError,
} from "../../support/attack.ts";

const TA = "tjsattackaaaaaaaa";
const PARTITIONS = 4;
const BUCKETS = ["cluster", "leases", "nodes", "actors", "runs", "tenants", "idem"] as const;

describe("attacks through the JetStream API", { timeout: 180_000 }, () => {
  let nats: NatsFixture;
  let admin: NatsConnection;
  let sched: KairosProcess;
  let worker: KairosProcess;
  let jobId: string;
  let svc: NatsConnection;
  let api: NatsApiClient;

  /** Every consumer of every bucket but the nodes' own KV watches (delivering to their inboxes). */
  const consumers = async (): Promise<string[]> => {
    const jsm = await jetstreamManager(admin);
    const out: string[] = [];
    for (const b of BUCKETS) {
      for await (const c of jsm.consumers.list(`KV_kairos_${b}`)) {
        if (!c.config.deliver_subject?.startsWith("_INBOX_"))
          out.push(`${b}:${c.name}:${c.config.deliver_subject ?? "(pull)"}`);
      }
    }
    return out;
  };
  const messages = async (b: (typeof BUCKETS)[number]) =>
    (await (await jetstreamManager(admin)).streams.info(`KV_kairos_${b}`)).state.messages;

  before(async () => {
    nats = await startNats({
      services: [{ name: "alpha", tenantId: TA }],
      wideOpenWorkers: ["w9"],
    });
    admin = await nats.connect("attack-js-admin");
    const start = (nodeId: string, roles: ("api" | "scheduler" | "worker")[], credsFile: string) =>
      startKairos(
        makeNodeConfig({
          natsUrl: nats.url,
          natsAuth: { credsFile },
          nodeId,
          roles,
          partitions: PARTITIONS,
        }),
        { executor: "noop", workerSlots: 1, apiHost: "127.0.0.1", apiPort: 0, drainTimeoutMs: 0 },
      );
    sched = await start("js-sched", ["api", "scheduler"], nats.credsFor(["api", "scheduler"]));
    worker = await start("w1", ["worker"], nats.credsForNode("w1", ["worker"]));
    const t: Tenant = {
      tenant_id: TA,
      name: "alpha",
      created_at: "2026-01-01T00:00:00Z",
      ...TENANT_DEFAULTS,
    };
    await (await new Kvm(admin).open("kairos_tenants")).create(`t.${TA}`, encode(t));
    svc = await nats.connectService("alpha");
    api = new NatsApiClient(svc, { cluster: "kairos", tenantId: TA });
    jobId = (
      await api.createJob({
        schedule: { at: "2099-01-01T00:00:00Z" },
        task: { image: "busybox", args: ["true"], timeout_s: 5 },
      })
    ).job.job_id;
  });

  after(async () => {
    await worker?.stop();
    await sched?.stop();
    await svc?.close();
    await admin?.close();
    await nats?.stop();
  });

  for (const who of ["pinned worker w2", "shared worker"] as const) {
    it(`${who}: no consumer, no stream info, no account info, no other key, no other record, no purge`, async () => {
      const nc = await connectNats({
        url: nats.url,
        name: `attack-js-${who}`,
        credsFile:
          who === "shared worker" ? nats.credsFor(["worker"]) : nats.auth.credsForWorker("w2"),
      });
      try {
        const before = {
          consumers: await consumers(),
          tenants: await messages("tenants"),
          nodes: await messages("nodes"),
          cluster: await messages("cluster"),
        };
        const consumer = JSON.stringify({
          stream_name: "KV_kairos_nodes",
          config: {
            deliver_subject: partitionSubject("kairos", 0),
            ack_policy: "none",
            deliver_policy: "new",
          },
        });
        const attempts: { what: string; subject: string; body?: string }[] = [
          {
            what: "a push consumer on nodes delivering to an actor command subject",
            subject: "$JS.API.CONSUMER.CREATE.KV_kairos_nodes",
            body: consumer,
          },
          {
            what: "the same, named, with a filter",
            subject: "$JS.API.CONSUMER.CREATE.KV_kairos_nodes.evil.$KV.kairos_nodes.>",
            body: consumer,
          },
          {
            what: "a durable consumer",
            subject: "$JS.API.CONSUMER.DURABLE.CREATE.KV_kairos_nodes.evil",
            body: consumer,
          },
          ...BUCKETS.map((b) => ({
            what: `stream info of ${b} with a subject filter (its keys)`,
            subject: `$JS.API.STREAM.INFO.KV_kairos_${b}`,
            body: JSON.stringify({ subjects_filter: ">" }),
          })),
          { what: "the JetStream account info", subject: "$JS.API.INFO" },
          { what: "the list of streams", subject: "$JS.API.STREAM.LIST" },
          {
            what: "a direct get of a tenant record",
            subject: `$JS.API.DIRECT.GET.KV_kairos_tenants.$KV.kairos_tenants.t.${TA}`,
          },
          {
            what: "a direct get by body (any key, wildcards)",
            subject: "$JS.API.DIRECT.GET.KV_kairos_cluster",
            body: JSON.stringify({ last_by_subj: "$KV.kairos_cluster.>" }),
          },
          {
            what: "a direct get of another key of the cluster bucket",
            subject: "$JS.API.DIRECT.GET.KV_kairos_cluster.$KV.kairos_cluster.other",
          },
          {
            what: "a message get of the tenants stream",
            subject: "$JS.API.STREAM.MSG.GET.KV_kairos_tenants",
            body: JSON.stringify({ seq: 1 }),
          },
          {
            what: "a purge of the tenants stream",
            subject: "$JS.API.STREAM.PURGE.KV_kairos_tenants",
            body: "{}",
          },
          {
            what: "a write of an API key record (minting a key)",
            subject: "$KV.kairos_tenants.k.forged",
            body: "x",
          },
          {
            what: "a write of the cluster config",
            subject: "$KV.kairos_cluster.config",
            body: "x",
          },
          ...(who === "pinned worker w2"
            ? [
                {
                  what: "a write of another worker's node record",
                  subject: "$KV.kairos_nodes.w1",
                  body: "x",
                },
              ]
            : []),
        ];
        const succeeded: string[] = [];
        for (const a of attempts) {
          const v = nextPermissionError(nc);
          const answered = nc
            .request(
              a.subject,
              a.body === undefined ? new Uint8Array(0) : new TextEncoder().encode(a.body),
              { timeout: 3000 },
            )
            .then(
              (m) => `answered: ${new TextDecoder().decode(m.data).slice(0, 120)}`,
              () => undefined,
            );
          const o = await defenceOrEffect(v, () => answered, a.what);
          if (o.kind === "effect") succeeded.push(`${a.what}: ${o.what}`);
          else
            assert.deepEqual([o.value.operation, o.value.subject], ["publish", a.subject], a.what);
        }
        assert.deepEqual(succeeded, [], "attacks the server let through");
        assert.deepEqual(await consumers(), before.consumers, "no consumer was created");
        assert.equal(await messages("tenants"), before.tenants, "the tenants bucket is untouched");
        assert.equal(await messages("cluster"), before.cluster);
      } finally {
        await nc.close();
      }
    });
  }

  it("the WORKERS account alone: a worker identity with every permission widened reaches no bucket, actor, API or reply of KAIROS", async () => {
    // worker-w9 may publish and subscribe anything (a misconfiguration on purpose): what it cannot
    // reach now, only the account keeps from it. Each request must be refused — "no responders",
    // the server's "JetStream not enabled for account" (10039), or no answer at all (a KV write
    // nobody stores) — and the state must not change; any other answer is the attack's success.
    const nc = await connectNats({
      url: nats.url,
      name: "attack-js-wide-open",
      credsFile: nats.auth.credsForWorker("w9"),
    });
    const watch = await connectNats({
      url: nats.url,
      name: "attack-js-wide-watch",
      credsFile: nats.auth.credsForWorker("w9"),
    });
    try {
      const before = {
        consumers: await consumers(),
        tenants: await messages("tenants"),
        cluster: await messages("cluster"),
        actors: await messages("actors"),
        idem: await messages("idem"),
      };
      const job = { type: JOB_ACTOR, id: jobActorId(TA, jobId) };
      const consumer = JSON.stringify({
        stream_name: "KV_kairos_nodes",
        config: {
          deliver_subject: partitionSubject("kairos", 0),
          ack_policy: "none",
          deliver_policy: "new",
        },
      });
      const attempts: { what: string; subject: string; body?: Uint8Array | string }[] = [
        {
          what: "a push consumer on nodes delivering to an actor command subject",
          subject: "$JS.API.CONSUMER.CREATE.KV_kairos_nodes",
          body: consumer,
        },
        {
          what: "a durable consumer on tenants",
          subject: "$JS.API.CONSUMER.DURABLE.CREATE.KV_kairos_tenants.evil",
          body: consumer,
        },
        ...BUCKETS.map((b) => ({
          what: `stream info of ${b} with a subject filter`,
          subject: `$JS.API.STREAM.INFO.KV_kairos_${b}`,
          body: JSON.stringify({ subjects_filter: ">" }),
        })),
        { what: "the JetStream account info", subject: "$JS.API.INFO" },
        { what: "the list of streams", subject: "$JS.API.STREAM.LIST" },
        {
          what: "a direct get of a tenant record",
          subject: `$JS.API.DIRECT.GET.KV_kairos_tenants.$KV.kairos_tenants.t.${TA}`,
        },
        {
          what: "a direct get by body of the cluster bucket",
          subject: "$JS.API.DIRECT.GET.KV_kairos_cluster",
          body: JSON.stringify({ last_by_subj: "$KV.kairos_cluster.>" }),
        },
        {
          what: "a message get of the tenants stream",
          subject: "$JS.API.STREAM.MSG.GET.KV_kairos_tenants",
          body: JSON.stringify({ seq: 1 }),
        },
        ...BUCKETS.map((b) => ({
          what: `a purge of ${b}`,
          subject: `$JS.API.STREAM.PURGE.KV_kairos_${b}`,
          body: "{}",
        })),
        {
          what: "a delete of the tenants stream",
          subject: "$JS.API.STREAM.DELETE.KV_kairos_tenants",
        },
        { what: "a write of an API key record", subject: "$KV.kairos_tenants.k.forged", body: "x" },
        { what: "a write of the cluster config", subject: "$KV.kairos_cluster.config", body: "x" },
        { what: "a write of actor state", subject: `$KV.kairos_actors.forged`, body: "x" },
        {
          what: "an actor command deleting the job",
          subject: partitionSubject("kairos", partitionOf(job, PARTITIONS)),
          body: encode({ t: job.type, i: job.id, m: { kind: "delete" } }),
        },
        {
          what: "the NATS API of the tenant",
          subject: apiSubject("kairos", TA, "jobs.delete", jobId),
        },
        { what: "the auth callout", subject: "$SYS.REQ.USER.AUTH", body: "x" },
      ];
      const succeeded: string[] = [];
      for (const a of attempts) {
        const data =
          a.body === undefined
            ? new Uint8Array(0)
            : typeof a.body === "string"
              ? new TextEncoder().encode(a.body)
              : a.body;
        const outcome = await nc.request(a.subject, data, { timeout: 2000 }).then(
          (m) => {
            const text = new TextDecoder().decode(m.data);
            return /"err_code":10039\b/.test(text) ? undefined : `answered: ${text.slice(0, 120)}`;
          },
          (e: unknown) =>
            /no responders|timeout/i.test(String(e)) ? undefined : `failed otherwise: ${String(e)}`,
        );
        if (outcome !== undefined) succeeded.push(`${a.what}: ${outcome}`);
      }
      assert.deepEqual(succeeded, [], "attacks that reached KAIROS");
      // What it might overhear of KAIROS (subscribed after its own attacks, which it would hear in
      // WORKERS): actor commands, the NATS API, the API node's replies, KV writes and JetStream.
      const overheard: string[] = [];
      for (const subject of [
        "kairos.kairos.p.*",
        "kairos.kairos.api.>",
        "_INBOX_api.>",
        "_INBOX_api_scheduler.>",
        "_INBOX_admin.>",
        "$KV.kairos_tenants.>",
        "$KV.kairos_runs.>",
        "$KV.kairos_actors.>",
        "$JS.API.>",
      ]) {
        watch.subscribe(subject, {
          callback: (e, m) => void (e ? undefined : overheard.push(m.subject)),
        });
      }
      await watch.flush();
      await api.listJobs();
      await api.getJob(jobId);
      admin.publish(partitionSubject("kairos", 0), encode({ marker: true }));
      admin.publish("_INBOX_api.marker", encode({ marker: true }));
      await (await new Kvm(admin).open("kairos_runs")).put("marker", encode({ marker: true }));
      await admin.flush();
      await watch.flush();
      assert.deepEqual(overheard, [], "KAIROS messages heard in WORKERS");
      assert.deepEqual(await consumers(), before.consumers, "no consumer was created");
      for (const b of ["tenants", "cluster", "actors", "idem"] as const)
        assert.equal(await messages(b), before[b], `the ${b} bucket is untouched`);
      assert.equal((await api.getJob(jobId)).job_id, jobId, "the job is still there");
    } finally {
      await watch.close();
      await nc.close();
    }
  });

  it("a worker node needs no more than its two rights: the pinned node w1 ran without a violation", () => {
    assert.deepEqual(
      nats.violations().filter((l) => l.includes('"worker-w1"')),
      [],
    );
  });

  it("an api identity's push consumer delivering to Kairos subjects is inert: each subscriber takes only its own subject", async () => {
    const nc = await nats.connect("attack-js-api", ["api"]);
    try {
      const jsm = await jetstreamManager(nc, { checkAPI: false });
      const idem = await new Kvm(nc).open("kairos_idem");
      const job = { type: JOB_ACTOR, id: jobActorId(TA, jobId) };
      const deliveries = [
        // The partition owners subscribe in queue group `owners`: a push consumer names it to reach them.
        {
          to: partitionSubject("kairos", partitionOf(job, PARTITIONS)),
          group: "owners",
          responder: "actors",
          key: "del",
          value: { t: job.type, i: job.id, m: { kind: "delete" } },
        },
        {
          to: workerSubject("kairos", "w1", "cancel"),
          responder: "worker",
          key: "c",
          value: { run_id: "any", fence: 1 },
        },
      ] as const;
      for (const d of deliveries) {
        const ci = await jsm.consumers.add("KV_kairos_idem", {
          deliver_subject: d.to,
          ack_policy: AckPolicy.None,
          deliver_policy: DeliverPolicy.New,
          filter_subject: `$KV.kairos_idem.${d.key}`,
          ...("group" in d ? { deliver_group: d.group } : {}),
        });
        try {
          // The server delivers only once it has seen interest on the deliver subject.
          const bound = Date.now() + 10_000;
          while (!(await jsm.consumers.info("KV_kairos_idem", ci.name)).push_bound) {
            if (Date.now() > bound)
              throw new Error(`the consumer delivering to ${d.to} never saw its subscribers`);
            await new Promise((r) => setTimeout(r, 50));
          }
          const { refused } = await armBusRefusal(d.responder, "subject");
          await idem.put(d.key, encode(d.value));
          const effect = () =>
            api.getJob(jobId).then(
              () => undefined,
              (e: unknown) => `the job is gone: ${String(e)}`,
            );
          assert.ok((await defended(refused, effect, `delivery to ${d.to}`)) >= 1);
        } finally {
          // (An ephemeral push consumer may be gone already: the server drops it without interest.)
          await jsm.consumers.delete("KV_kairos_idem", ci.name).catch(() => undefined);
        }
      }
      assert.equal((await api.getJob(jobId)).job_id, jobId, "the job is still there");
    } finally {
      await nc.close();
    }
  });
});
