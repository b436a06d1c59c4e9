/**
 * Accounts on a 3-server NATS cluster (the production shape): a worker in WORKERS on one server
 * runs a job the scheduler on another offered, every message of the run crossing the imports over
 * the routes; a service connection to any server is admitted by the one API node (its callout
 * request crosses the routes), lands in SERVICES and reaches its tenant's API; `revoke` closes the
 * identity's connections on every server at once and none can come back (docs/security.md,
 * "Accounts").
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { openBuckets, type Buckets } from "../../../src/cluster/buckets.ts";
import { connectNats } from "../../../src/cluster/nats.ts";
import { encode } from "../../../src/cluster/codec.ts";
import { makeNodeConfig } from "../../../src/cluster/config.ts";
import { SERVICES_ACCOUNT, WORKERS_ACCOUNT } from "../../../src/cluster/nats-accounts.ts";
import { startKairos, type KairosProcess } from "../../../src/server/start.ts";
import { KvTenantDirectory, TENANT_DEFAULTS } from "../../../src/tenants/directory.ts";
import type { Tenant } from "../../../src/protocol/service.ts";
import { systemClock } from "../../../src/lib/clock.ts";
import { NatsApiClient } from "../../../src/client/nats-api-client.ts";
import { createService, revokeService } from "../../../src/cli/service-admin.ts";
import { startNatsCluster, type NatsFixture } from "../../support/nats.ts";
import { eventually } from "../../support/kairos.ts";

const C = "kairos";
const TA = "tclusteraaaaaaaaa";

describe("service identities on a 3-server NATS cluster", { timeout: 240_000 }, () => {
  let nats: NatsFixture;
  let admin: NatsConnection;
  let sys: NatsConnection;
  let buckets: Buckets;
  let api: KairosProcess;
  let worker: KairosProcess | undefined;
  const open: NatsConnection[] = [];

  before(async () => {
    nats = await startNatsCluster(3);
    admin = await nats.connect("accounts-cluster-admin");
    sys = await connectNats({
      url: nats.url,
      name: "accounts-cluster-sys",
      credsFile: nats.auth.sysCreds,
    });
    buckets = await openBuckets(admin, { clusterName: C, replicas: 3 });
    const t: Tenant = {
      tenant_id: TA,
      name: "a",
      created_at: "2026-01-01T00:00:00Z",
      ...TENANT_DEFAULTS,
    };
    await buckets.tenants.create(`t.${TA}`, encode(t));
    // The API node talks to the first server only: callouts from the others cross the routes.
    api = await startKairos(
      makeNodeConfig({
        natsUrl: nats.servers[0]!.url,
        natsAuth: { credsFile: nats.credsFor(["api", "scheduler"]) },
        nodeId: "accc-1",
        roles: ["api", "scheduler"],
        partitions: 4,
        replicas: 3,
      }),
      { executor: "noop", workerSlots: 1, apiHost: "127.0.0.1", apiPort: 0 },
    );
  });

  after(async () => {
    for (const nc of open) if (!nc.isClosed()) await nc.close();
    await worker?.stop();
    await api?.stop();
    await sys?.close();
    await admin?.close();
    await nats?.stop();
  });

  it("a worker in WORKERS on another server runs a tenant's job: offers, heartbeats, completions and its node record cross the imports over the routes", async () => {
    // The scheduler talks to server 0, the worker (its pinned user, in WORKERS) to server 2.
    worker = await startKairos(
      makeNodeConfig({
        natsUrl: nats.servers[2]!.url,
        natsAuth: { credsFile: nats.credsForNode("w1", ["worker"]) },
        nodeId: "w1",
        roles: ["worker"],
        partitions: 4,
        replicas: 3,
      }),
      { executor: "noop", noopDurationMs: 200, workerSlots: 2, apiHost: "127.0.0.1", apiPort: 0 },
    );
    let inWorkers = 0;
    for await (const m of await sys.requestMany(
      "$SYS.REQ.SERVER.PING.CONNZ",
      JSON.stringify({ acc: WORKERS_ACCOUNT, user: "worker-w1" }),
      { strategy: "count", maxMessages: 3, maxWait: 5000 },
    )) {
      inWorkers += m.json<{ data: { num_connections: number } }>().data.num_connections;
    }
    assert.ok(inWorkers >= 1, "the worker's connections are in WORKERS");
    const { creds } = await createService(
      buckets.tenants,
      new KvTenantDirectory(buckets.tenants, { clock: systemClock }),
      "runner",
      TA,
    );
    const file = join(nats.auth.configFile, "..", "service-runner.json");
    writeFileSync(file, JSON.stringify(creds), { mode: 0o600 });
    const svc = await connectNats({ url: nats.servers[1]!.url, name: "runner", credsFile: file });
    open.push(svc);
    const client = new NatsApiClient(svc, { cluster: C, tenantId: TA });
    const { job } = await client.createJob({
      schedule: { at: "2099-01-01T00:00:00Z" },
      task: { image: "busybox", args: ["true"], timeout_s: 30 },
    });
    const run = await client.runNow(job.job_id);
    const done = await eventually(
      async () => {
        const r = await client.getRun(run.run_id);
        return r.status === "succeeded" ? r : undefined;
      },
      60_000,
      "the run succeeded on w1",
    );
    assert.equal(done.attempts.at(-1)?.worker, "w1");
    // Its node record (a JetStream publish through the import) is in the cluster's bucket.
    assert.ok(
      await eventually(
        async () => (await buckets.nodes.get("w1")) ?? undefined,
        30_000,
        "w1's node record",
      ),
    );
    assert.deepEqual(nats.violations(), [], "no permission violation on any server");
  });

  it("a connection to each server is admitted and served; revoke closes every one of them at once", async () => {
    const { creds } = await createService(
      buckets.tenants,
      new KvTenantDirectory(buckets.tenants, { clock: systemClock }),
      "spread",
      TA,
    );
    const file = join(nats.auth.configFile, "..", "service-spread.json");
    writeFileSync(file, JSON.stringify(creds), { mode: 0o600 });
    const conns = await Promise.all(
      nats.servers.map((s, i) => connectNats({ url: s.url, name: `spread-${i}`, credsFile: file })),
    );
    open.push(...conns);
    for (const nc of conns)
      assert.ok(
        Array.isArray((await new NatsApiClient(nc, { cluster: C, tenantId: TA }).listJobs()).jobs),
      );
    const closed = new Set<number>();
    conns.forEach(
      (nc, i) =>
        void (async () => {
          for await (const s of nc.status()) if (s.type === "disconnect") closed.add(i);
        })(),
    );
    const r = await revokeService(buckets.tenants, sys, "spread");
    assert.deepEqual(
      [...closed].sort(),
      [0, 1, 2],
      "every server closed its connection before the revocation returned",
    );
    assert.equal(r.servers, 3, "all three servers answered");
    assert.ok(r.kicked >= 3, `kicked ${r.kicked}`);
    let left = 0;
    let answered = 0;
    for await (const m of await sys.requestMany(
      "$SYS.REQ.SERVER.PING.CONNZ",
      JSON.stringify({ acc: SERVICES_ACCOUNT, user: "service-spread" }),
      { strategy: "count", maxMessages: 3, maxWait: 5000 },
    )) {
      answered++;
      left += m.json<{ data: { num_connections: number } }>().data.num_connections;
    }
    assert.equal(answered, 3);
    assert.equal(left, 0, "no server keeps a connection of the revoked identity");
    for (const s of nats.servers)
      await assert.rejects(
        connectNats({ url: s.url, name: "spread-again", credsFile: file }),
        /Authorization Violation/i,
      );
  });
});
