/**
 * The internal NATS API's identities on a real nats-server with authorization on
 * (docs/nats-api.md, docs/security.md): a tenant's service user reaches only its tenant's API
 * subjects — not another tenant's, not actor commands, not the buckets, not other identities'
 * replies — and a forged `tenant_id` is refused; API nodes share requests through the queue
 * group (one stops, another answers), and `natsApi.enabled: false` serves nothing.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { encode } from "../../../src/cluster/codec.ts";
import { makeNodeConfig, type Role } from "../../../src/cluster/config.ts";
import { partitionSubject } from "../../../src/cluster/router.ts";
import { startKairos, type KairosProcess } from "../../../src/server/start.ts";
import { NatsApiClient } from "../../../src/client/nats-api-client.ts";
import type { NatsFixture } from "../../support/nats.ts";
import { rejectsWith } from "../../support/errors.ts";
import { nextPermissionError, startTwoTenants } from "../../support/attack.ts";

const TA = "tsecaaaaaaaaaaaaa";
const TB = "tsecbbbbbbbbbbbbb";
const PARTITIONS = 4;
const spec = {
  schedule: { at: "2099-01-01T00:00:00Z" },
  task: { image: "busybox", args: ["true"], timeout_s: 5 },
};

describe("NATS API identities", { timeout: 120_000 }, () => {
  let nats: NatsFixture;
  let admin: NatsConnection;
  let sched: KairosProcess;
  const extra: KairosProcess[] = [];

  const start = (nodeId: string, roles: Role[], natsApi = true) =>
    startKairos(
      makeNodeConfig({
        natsUrl: nats.url,
        natsAuth: { credsFile: nats.credsFor(roles) },
        nodeId,
        roles,
        partitions: PARTITIONS,
      }),
      {
        executor: "noop",
        workerSlots: 1,
        apiHost: "127.0.0.1",
        apiPort: 0,
        natsApi: { enabled: natsApi },
      },
    );

  before(async () => {
    ({ nats, admin } = await startTwoTenants(TA, TB, "natsapi-sec-admin"));
    sched = await start("natsapi-sec-1", ["api", "scheduler"]);
    await new Promise<void>((resolve) => {
      const check = () => sched.node.heldPartitions().length === sched.node.partitions;
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
    for (const p of extra) await p.stop();
    await sched?.stop();
    await admin?.close();
    await nats?.stop();
  });

  it("tenant A's service reaches A's jobs and never B's: B's subjects are refused by the server", async () => {
    const ncA = await nats.connectService("alpha");
    const ncB = await nats.connectService("beta");
    try {
      const b = new NatsApiClient(ncB, { cluster: "kairos", tenantId: TB });
      const { job } = await b.createJob({ ...spec, name: "b's" });
      const aAsB = new NatsApiClient(ncA, { cluster: "kairos", tenantId: TB, timeoutMs: 3000 });
      const violation = nextPermissionError(ncA);
      await rejectsWith(aAsB.deleteJob(job.job_id), "permission_denied");
      const v = await violation;
      assert.equal(v.operation, "publish");
      assert.equal(v.subject, `kairos.kairos.api.${TB}.jobs.delete.${job.job_id}`);
      const a = new NatsApiClient(ncA, { cluster: "kairos", tenantId: TA });
      await rejectsWith(a.getJob(job.job_id), "not_found");
      await rejectsWith(a.deleteJob(job.job_id), "not_found");
      const still = await b.getJob(job.job_id);
      assert.equal(still.version, 1, "B's job untouched");
      await b.deleteJob(job.job_id);
    } finally {
      await ncA.close();
      await ncB.close();
    }
  });

  it("a forged tenant_id is rejected; the job is not created under either tenant", async () => {
    const ncA = await nats.connectService("alpha");
    try {
      const a = new NatsApiClient(ncA, { cluster: "kairos", tenantId: TA });
      await rejectsWith(a.createJob({ ...spec, tenant_id: TB }), "invalid_argument", "tenant_id");
      await rejectsWith(a.listJobs({ tenant_id: TB } as never), "invalid_argument", "tenant_id");
      assert.deepEqual((await a.listJobs()).jobs, []);
      const ncB = await nats.connectService("beta");
      assert.deepEqual(
        (await new NatsApiClient(ncB, { cluster: "kairos", tenantId: TB }).listJobs()).jobs,
        [],
      );
      await ncB.close();
    } finally {
      await ncA.close();
    }
  });

  it("a service user cannot send actor commands, touch the buckets, or read others' replies", async () => {
    const nc = await nats.connectService("alpha");
    try {
      let violation = nextPermissionError(nc);
      await assert.rejects(
        nc.request(
          partitionSubject("kairos", 0),
          encode({ t: "job", i: `${TB}.j1`, m: { kind: "delete" } }),
          { timeout: 2000 },
        ),
      );
      assert.equal((await violation).subject, partitionSubject("kairos", 0));
      violation = nextPermissionError(nc);
      nc.publish("$KV.kairos_tenants.k.forged", encode({ tenant_id: TB }));
      assert.equal((await violation).subject, "$KV.kairos_tenants.k.forged");
      await assert.rejects(
        (async () => (await new Kvm(nc).open("kairos_tenants")).get(`t.${TB}`))(),
      );
      for (const s of ["_INBOX.>", "_INBOX_api.>", "kairos.kairos.api.>"]) {
        violation = nextPermissionError(nc);
        nc.subscribe(s);
        const v = await violation;
        assert.equal(v.operation, "subscription", s);
      }
      assert.equal(
        await (await new Kvm(admin).open("kairos_tenants")).get("k.forged"),
        null,
        "nothing was written",
      );
    } finally {
      await nc.close();
    }
  });

  it("API nodes share requests in the queue group: with one stopped, another answers; --no-nats-api serves none", async () => {
    const off = await start("natsapi-sec-off", ["api"], false);
    extra.push(off);
    const second = await start("natsapi-sec-2", ["api"]);
    extra.push(second);
    const nc = await nats.connectService("alpha");
    try {
      const a = new NatsApiClient(nc, { cluster: "kairos", tenantId: TA, timeoutMs: 5000 });
      const { job } = await a.createJob(spec);
      const before = [sched.natsApi!.answered, second.natsApi!.answered];
      for (let i = 0; i < 20; i++) assert.equal((await a.getJob(job.job_id)).job_id, job.job_id);
      const served = [sched.natsApi!.answered - before[0]!, second.natsApi!.answered - before[1]!];
      assert.equal(served[0]! + served[1]!, 20, "each request answered once");
      assert.ok(served[0]! > 0 && served[1]! > 0, `both nodes served (${served.join(" + ")})`);
      assert.equal(off.natsApi, undefined, "the node with the NATS API off has no responder");
      await second.stop();
      extra.splice(extra.indexOf(second), 1);
      assert.equal((await a.getJob(job.job_id)).job_id, job.job_id, "the first node answers alone");
      await a.deleteJob(job.job_id);
    } finally {
      await nc.close();
    }
  });

  it("the nodes themselves, as api and api_scheduler users, caused no violation", () => {
    assert.deepEqual(
      nats.violations().filter((l) => !l.includes('"service-alpha"')),
      [],
    );
  });
});
