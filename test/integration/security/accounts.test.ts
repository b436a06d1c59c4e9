/**
 * NATS accounts and service identities, attacked with the tenant service's real credentials on a
 * real nats-server (docs/security.md, "Accounts"):
 *
 * - a service identity issued through the admin path (`kairos admin service create`) connects at
 *   once — no reload, no other credential changed — lands in the SERVICES account and can call
 *   only its tenant's API; another tenant's API subject is refused by the server;
 * - the forged-reply attack: a request to its own API subject with the reply subject set to
 *   `$JS.API.STREAM.PURGE.KV_<c>_idem` or `$KV.<c>_tenants.t.<other tenant>` does nothing (the
 *   reply crosses the import as `_R_.…` and comes back to SERVICES, which has no JetStream), for
 *   an identity admitted by the callout and for a static one (`kairos nats-auth --service`);
 * - a wrong secret is refused; revocation closes the live connection at once and it cannot
 *   reconnect; the server's config and every other credential are unchanged throughout.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { openBuckets, type Buckets } from "../../../src/cluster/buckets.ts";
import { connectNats, type NatsCredentials } from "../../../src/cluster/nats.ts";
import { encode } from "../../../src/cluster/codec.ts";
import { makeNodeConfig } from "../../../src/cluster/config.ts";
import { AUTH_CALLOUT_SUBJECT, SERVICES_ACCOUNT } from "../../../src/cluster/nats-accounts.ts";
import { startKairos, type KairosProcess } from "../../../src/server/start.ts";
import { KvTenantDirectory, TENANT_DEFAULTS } from "../../../src/tenants/directory.ts";
import type { Tenant } from "../../../src/protocol/service.ts";
import { systemClock } from "../../../src/lib/clock.ts";
import { NatsApiClient } from "../../../src/client/nats-api-client.ts";
import { apiSubject } from "../../../src/nats-api/subjects.ts";
import { createService, revokeService } from "../../../src/cli/service-admin.ts";
import { KvServiceDirectory } from "../../../src/tenants/services.ts";
import { startNats, type NatsFixture } from "../../support/nats.ts";
import { rejectsWith } from "../../support/errors.ts";

const C = "kairos";
const TA = "taccaaaaaaaaaaaaa";
const TB = "taccbbbbbbbbbbbbb";
const spec = {
  schedule: { at: "2099-01-01T00:00:00Z" },
  task: { image: "busybox", args: ["true"], timeout_s: 5 },
};

describe(
  "NATS accounts: tenant services cannot reach the cluster's state",
  { timeout: 180_000 },
  () => {
    let nats: NatsFixture;
    let admin: NatsConnection;
    let sys: NatsConnection;
    let buckets: Buckets;
    let tenants: KvTenantDirectory;
    let api: KairosProcess;
    let dir: string;
    /** The server's config and every credentials file, as written at start. */
    let filesAtStart: Map<string, string>;
    const open: NatsConnection[] = [];

    const files = (): Map<string, string> =>
      new Map(
        [nats.auth.configFile, ...Object.values(nats.auth.creds)].map((f) => [
          f,
          readFileSync(f, "utf8"),
        ]),
      );
    const credsFile = (c: NatsCredentials): string => {
      const f = join(dir, `${c.user}.json`);
      writeFileSync(f, JSON.stringify(c), { mode: 0o600 });
      return f;
    };
    const connectAs = async (
      c: NatsCredentials,
      opts: { reconnect?: boolean } = {},
    ): Promise<NatsConnection> => {
      const nc = await connectNats({
        url: nats.url,
        name: `attacker-${c.user}`,
        credsFile: credsFile(c),
        connectTimeoutMs: 5000,
      });
      if (opts.reconnect === false) void nc; // the default client reconnects forever, as a real service would
      open.push(nc);
      return nc;
    };
    /** The live connections of `user` in the SERVICES account, as the server's CONNZ lists them. */
    const connsOf = async (user: string): Promise<number> => {
      const r = (
        await sys.request(
          "$SYS.REQ.SERVER.PING.CONNZ",
          JSON.stringify({ acc: SERVICES_ACCOUNT, user }),
          { timeout: 2000 },
        )
      ).json<{ data: { num_connections: number } }>();
      return r.data.num_connections;
    };
    /** Waits until the API node has answered `n` requests in all (bounded). */
    const answered = async (n: number): Promise<void> => {
      const deadline = Date.now() + 10_000;
      while (api.natsApi!.answered < n) {
        if (Date.now() > deadline)
          throw new Error(`API node answered ${api.natsApi!.answered} requests, expected ${n}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    };

    before(async () => {
      nats = await startNats({ services: [{ name: "static-a", tenantId: TA }] });
      dir = join(nats.auth.configFile, "..");
      filesAtStart = files();
      admin = await nats.connect("accounts-admin");
      sys = await connectNats({
        url: nats.url,
        name: "accounts-sys",
        credsFile: nats.auth.sysCreds,
      });
      buckets = await openBuckets(admin, { clusterName: C, replicas: 1 });
      for (const [id, name] of [
        [TA, "a"],
        [TB, "b"],
      ] as const) {
        const t: Tenant = {
          tenant_id: id,
          name,
          created_at: "2026-01-01T00:00:00Z",
          ...TENANT_DEFAULTS,
        };
        await buckets.tenants.create(`t.${id}`, encode(t));
      }
      tenants = new KvTenantDirectory(buckets.tenants, { clock: systemClock });
      api = await startKairos(
        makeNodeConfig({
          natsUrl: nats.url,
          natsAuth: { credsFile: nats.credsFor(["api", "scheduler"]) },
          nodeId: "acc-1",
          roles: ["api", "scheduler"],
          partitions: 4,
        }),
        { executor: "noop", workerSlots: 1, apiHost: "127.0.0.1", apiPort: 0 },
      );
      await new Promise<void>((resolve) => {
        const held = () => api.node.heldPartitions().length === api.node.partitions;
        if (held()) return resolve();
        const off = api.node.events.on(() => held() && (off(), resolve()));
      });
    });

    after(async () => {
      for (const nc of open) if (!nc.isClosed()) await nc.close();
      await api?.stop();
      await sys?.close();
      await admin?.close();
      await nats?.stop();
    });

    it("a service created through the admin path connects at once, in SERVICES, and calls only its tenant's API", async () => {
      const { creds } = await createService(buckets.tenants, tenants, "alpha", TA);
      const nc = await connectAs(creds);
      assert.equal(
        await connsOf("service-alpha"),
        1,
        "the server placed it in the SERVICES account",
      );
      const listed = await new KvServiceDirectory(buckets.tenants, systemClock).list(TA);
      assert.ok(
        listed.services.some(
          (r) => r.name === "alpha" && !r.revoked && !JSON.stringify(r).includes(creds.password),
        ),
        "listed, without its secret",
      );
      const a = new NatsApiClient(nc, { cluster: C, tenantId: TA });
      const { job } = await a.createJob({ ...spec, name: "alpha's" });
      assert.equal((await a.getJob(job.job_id)).job_id, job.job_id);
      const asB = new NatsApiClient(nc, { cluster: C, tenantId: TB, timeoutMs: 3000 });
      await rejectsWith(asB.listJobs(), "permission_denied");
      const { creds: betaCreds } = await createService(buckets.tenants, tenants, "beta", TB);
      const b = new NatsApiClient(await connectAs(betaCreds), { cluster: C, tenantId: TB });
      await rejectsWith(b.getJob(job.job_id), "not_found");
    });

    it("the callout request carrying a service's secret is sealed: a listener on the bus cannot read it", async () => {
      const seen: Uint8Array[] = [];
      const sub = admin.subscribe(AUTH_CALLOUT_SUBJECT, {
        callback: (_e, m) => void seen.push(m.data),
      });
      await admin.flush();
      const { creds } = await createService(buckets.tenants, tenants, "sealed", TA);
      await connectAs(creds);
      sub.unsubscribe();
      assert.ok(seen.length >= 1, "the listener saw the request");
      for (const d of seen) {
        const text = Buffer.from(d).toString("latin1");
        assert.ok(
          !text.includes(creds.password) && !text.startsWith("eyJ"),
          "neither the secret nor a readable JWT on the bus",
        );
      }
    });

    it("a wrong secret and an unknown service are refused", async () => {
      await createService(buckets.tenants, tenants, "gamma", TA);
      await assert.rejects(
        connectAs({ user: "service-gamma", password: `ksvc_${"x".repeat(43)}` }),
        /Authorization Violation/i,
      );
      await assert.rejects(
        connectAs({ user: "service-nobody", password: `ksvc_${"x".repeat(43)}` }),
        /Authorization Violation|TIMEOUT/i,
      );
      assert.equal(await connsOf("service-gamma"), 0);
    });

    /** Each forged reply subject and how to tell that the API node's reply did nothing there. */
    const attacks = [
      {
        what: "$JS.API.STREAM.PURGE of the idempotency stream",
        reply: `$JS.API.STREAM.PURGE.KV_${C}_idem`,
        state: async () =>
          (await (await jetstreamManager(admin)).streams.info(`KV_${C}_idem`)).state.messages,
      },
      {
        what: "$KV put over another tenant's record",
        reply: `$KV.${C}_tenants.t.${TB}`,
        state: async () => (await buckets.tenants.get(`t.${TB}`))?.revision,
      },
      {
        what: "$JS.API.STREAM.DELETE of the tenants stream",
        reply: `$JS.API.STREAM.DELETE.KV_${C}_tenants`,
        state: async () =>
          (await (await jetstreamManager(admin)).streams.info(`KV_${C}_tenants`)).config.name,
      },
    ] as const;

    for (const who of ["callout", "static"] as const) {
      for (const attack of attacks) {
        it(`a forged reply subject (${attack.what}) makes the API node's reply do nothing (${who} identity)`, async () => {
          const nc =
            who === "callout"
              ? await connectAs(
                  (
                    await createService(
                      buckets.tenants,
                      tenants,
                      `forger-${who}-${attacks.indexOf(attack)}`,
                      TA,
                    )
                  ).creds,
                )
              : await nats.connectService("static-a");
          if (who === "static") open.push(nc);
          await buckets.idempotency.put(`forged-${who}`, encode({ keep: true }));
          const before = await attack.state();
          assert.ok(before !== undefined && before !== 0, `state before: ${String(before)}`);
          const base = api.natsApi!.answered;
          nc.publish(apiSubject(C, TA, "jobs.list"), "{}", { reply: attack.reply });
          await nc.flush();
          await answered(base + 1);
          // Ordering: a proper request of the same service, answered after the forged one on the
          // API node's connection, before the state is read.
          assert.ok(
            Array.isArray(
              (await new NatsApiClient(nc, { cluster: C, tenantId: TA }).listJobs()).jobs,
            ),
          );
          assert.equal(await attack.state(), before, `${attack.what}: state unchanged`);
          const b = new NatsApiClient(
            await connectAs(
              (
                await createService(
                  buckets.tenants,
                  tenants,
                  `b-${who}-${attacks.indexOf(attack)}`,
                  TB,
                )
              ).creds,
            ),
            { cluster: C, tenantId: TB },
          );
          assert.ok(Array.isArray((await b.listJobs()).jobs), "tenant B's API still answers");
        });
      }
    }

    it("revoke closes the live connection at once and it cannot reconnect; other identities stay connected", async () => {
      const { creds } = await createService(buckets.tenants, tenants, "delta", TA);
      const nc = await connectAs(creds);
      const other = await connectAs(
        (await createService(buckets.tenants, tenants, "epsilon", TA)).creds,
      );
      let at: number | undefined;
      void (async () => {
        for await (const s of nc.status())
          if (s.type === "disconnect" && at === undefined) at = Date.now();
      })();
      const t0 = Date.now();
      const r = await revokeService(buckets.tenants, sys, "delta");
      assert.ok(
        at !== undefined,
        "the live connection was closed by the time the revocation returned",
      );
      assert.ok(
        at - t0 < 3000,
        `disconnected ${at - t0} ms after the revocation began (the first kick round)`,
      );
      assert.ok(r.kicked >= 1, `kicked ${r.kicked}`);
      assert.equal(
        await connsOf("service-delta"),
        0,
        "no connection of the revoked identity is left (its reconnects are refused)",
      );
      await nc.close();
      await assert.rejects(
        connectAs(creds),
        /Authorization Violation/i,
        "a new connection is refused",
      );
      const a = new NatsApiClient(other, { cluster: C, tenantId: TA });
      assert.ok(
        Array.isArray((await a.listJobs()).jobs),
        "another identity of the same tenant still works",
      );
      assert.ok(!admin.isClosed(), "the admin connection is untouched");
    });

    it("nothing else changed: the server's config and every credentials file are as written at start", () => {
      assert.deepEqual(files(), filesAtStart);
    });
  },
);
