/**
 * Every role against every subject family it must not reach (docs/security.md, "The bus"): on a
 * real nats-server, each identity — a tenant's service, `api`, `scheduler`, the shared `worker`
 * and a pinned `worker-w1` — with its real credentials publishes to and subscribes on the subjects
 * of the others and the KV subjects of buckets it may not write. Each attempt must be refused by
 * the server (a permission violation reported to the attacker) and have no effect: an admin
 * listener on the published subject receives nothing (and a KV write leaves no key), and a
 * refused subscription receives nothing of the marker the admin then publishes there. With a
 * permission widened, the attempt's effect is what the test reports.
 *
 * Forged reply subjects, consumer creation, stream info, direct gets and purges are in
 * attack-replies, attack-jetstream and attack-worker (each with the roles that hold those rights).
 *
 * The job catalogs (`jd.<tenant>`, `jl.<tenant>.<key>` of the tenants bucket: src/catalog) are
 * written by API nodes only. A worker (shared or pinned) and a tenant's service user, with their
 * real credentials, each try to put, delete (a `DEL` marker), purge (a `PURGE` marker) and
 * stream-purge existing catalog keys and to create new ones: every attempt must be refused by the
 * server and leave the tenants stream and the keys as they were. (Both identities also live in
 * accounts without JetStream: with their permissions widened alone, nothing lands but nothing is
 * refused either, and the test fails on that.)
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { openBuckets, type Buckets } from "../../../src/cluster/buckets.ts";
import { chunkKey, directoryKey } from "../../../src/catalog/job-catalog.ts";
import { connectNats } from "../../../src/cluster/nats.ts";
import type { Role } from "../../../src/cluster/config.ts";
import { startNats, type NatsFixture } from "../../support/nats.ts";
import {
  attackKvWrites,
  defenceOrEffect,
  nextPermissionError,
  outsiders,
} from "../../support/attack.ts";

const TA = "trolesaaaaaaaaaaa";
const TB = "trolesbbbbbbbbbbb";
const K = "kairos.kairos";

/** Subjects a role must neither publish to nor subscribe on (a subscription's marker is a concrete subject under it). */
interface Attacks {
  pub: string[];
  sub: { subject: string; marker: string }[];
}

const kvWrites = (buckets: string[]) => buckets.map((k) => `$KV.kairos_${k}`);

const ATTACKS: Record<
  "service" | "api" | "scheduler" | "shared worker" | "pinned worker w1",
  Attacks
> = {
  service: {
    pub: [
      `${K}.api.${TB}.jobs.list`,
      `${K}.p.0`,
      `${K}.w.0.w1`,
      `${K}.adverts.w1`,
      `${K}.worker.w1.start`,
      `${K}.node.hb.s`,
      `${K}.node.hb.n`,
      ...kvWrites(["tenants.k.forged", "idem.x", "nodes.x"]),
      "$JS.API.STREAM.PURGE.KV_kairos_idem",
      "$JS.API.INFO",
    ],
    sub: [
      { subject: `${K}.>`, marker: `${K}.worker.w1.start` },
      { subject: "_INBOX.>", marker: "_INBOX.x.1" },
      { subject: "_INBOX_api.>", marker: "_INBOX_api.x.1" },
      { subject: `${K}.api.${TA}.>`, marker: `${K}.api.${TA}.jobs.list` },
    ],
  },
  api: {
    pub: [
      `${K}.worker.w1.start`,
      `${K}.worker.w1.cancel`,
      `${K}.w.0.w1`,
      `${K}.adverts.w1`,
      `${K}.node.hb.s`,
      ...kvWrites([
        "tenants.t.forged",
        "tenants.k.forged",
        "actors.job.0.t.j",
        "runs.0.t.j.r",
        "leases.p.0",
        "cluster.config",
      ]),
      "$JS.API.STREAM.PURGE.KV_kairos_tenants",
      "$JS.API.STREAM.DELETE.KV_kairos_tenants",
      "$JS.API.CONSUMER.CREATE.KV_kairos_leases",
    ],
    sub: [
      { subject: `${K}.p.*`, marker: `${K}.p.0` },
      { subject: `${K}.worker.*.start`, marker: `${K}.worker.w1.start` },
      { subject: `${K}.w.*.*`, marker: `${K}.w.0.w1` },
      { subject: "_INBOX.>", marker: "_INBOX.x.1" },
      { subject: "_INBOX_scheduler.>", marker: "_INBOX_scheduler.x.1" },
      { subject: "$KV.kairos_tenants.>", marker: "$KV.kairos_tenants.marker" },
    ],
  },
  scheduler: {
    pub: [
      `${K}.api.${TA}.jobs.list`,
      `${K}.w.0.w1`,
      `${K}.adverts.w1`,
      ...kvWrites(["tenants.t.forged", "tenants.k.forged", "idem.x"]),
      "$JS.API.STREAM.PURGE.KV_kairos_tenants",
      "$JS.API.STREAM.DELETE.KV_kairos_runs",
      "$JS.API.CONSUMER.CREATE.KV_kairos_idem",
    ],
    sub: [
      { subject: `${K}.api.*.>`, marker: `${K}.api.${TA}.jobs.list` },
      { subject: `${K}.worker.w1.start`, marker: `${K}.worker.w1.start` },
      { subject: "_INBOX.>", marker: "_INBOX.x.1" },
      { subject: "_INBOX_api.>", marker: "_INBOX_api.x.1" },
    ],
  },
  "shared worker": {
    pub: [
      `${K}.p.0`,
      `${K}.api.${TA}.jobs.list`,
      `${K}.node.hb.s`,
      `${K}.worker.w2.start`,
      `${K}.worker.w2.cancel`,
      ...kvWrites([
        "tenants.k.forged",
        "actors.job.0.t.j",
        "runs.0.t.j.r",
        "idem.x",
        "cluster.config",
        "leases.p.0",
      ]),
    ],
    sub: [
      { subject: `${K}.p.*`, marker: `${K}.p.0` },
      { subject: `${K}.api.*.>`, marker: `${K}.api.${TA}.jobs.list` },
      { subject: `${K}.adverts.*`, marker: `${K}.adverts.w2` },
      { subject: `${K}.w.*.*`, marker: `${K}.w.0.w2` },
      { subject: "_INBOX.>", marker: "_INBOX.x.1" },
    ],
  },
  "pinned worker w1": {
    pub: [
      `${K}.p.0`,
      `${K}.w.0.w2`,
      `${K}.adverts.w2`,
      `${K}.worker.w2.start`,
      `${K}.node.hb.s`,
      ...kvWrites(["tenants.k.forged", "nodes.w2", "actors.job.0.t.j"]),
    ],
    sub: [
      { subject: `${K}.worker.w2.start`, marker: `${K}.worker.w2.start` },
      { subject: `${K}.worker.*.probe`, marker: `${K}.worker.w2.probe` },
      { subject: `${K}.w.*.*`, marker: `${K}.w.0.w2` },
      { subject: "_INBOX_worker-w2.>", marker: "_INBOX_worker-w2.x.1" },
    ],
  },
};

describe("every role against the subjects it must not reach", { timeout: 180_000 }, () => {
  let nats: NatsFixture;
  let admin: NatsConnection;

  const connectAs = (who: keyof typeof ATTACKS): Promise<NatsConnection> => {
    const roles: Record<string, Role[]> = {
      api: ["api"],
      scheduler: ["scheduler"],
      "shared worker": ["worker"],
    };
    if (who === "service") return nats.connectService("alpha");
    if (who === "pinned worker w1")
      return connectNats({
        url: nats.url,
        name: "roles-w1",
        credsFile: nats.auth.credsForWorker("w1"),
      });
    return nats.connect(`roles-${who}`, roles[who]);
  };
  const tenantsMessages = async () =>
    (await (await jetstreamManager(admin)).streams.info("KV_kairos_tenants")).state.messages;

  before(async () => {
    nats = await startNats({ services: [{ name: "alpha", tenantId: TA }] });
    admin = await nats.connect("roles-admin");
    await openBuckets(admin, { clusterName: "kairos", replicas: 1 });
  });

  after(async () => {
    await admin?.close();
    await nats?.stop();
  });

  for (const who of Object.keys(ATTACKS) as (keyof typeof ATTACKS)[]) {
    it(`${who}: every forbidden publish and subscription is refused and has no effect`, async () => {
      const attacks = ATTACKS[who];
      const nc = await connectAs(who);
      const through: string[] = [];
      const tenantsBefore = await tenantsMessages();
      try {
        for (const subject of attacks.pub) {
          let heard = 0;
          const witness = admin.subscribe(subject, {
            callback: (e) => void (e ? undefined : heard++),
          });
          await admin.flush();
          const v = nextPermissionError(nc);
          nc.publish(subject, new TextEncoder().encode(`{"forged":"by ${who}"}`));
          await nc.flush().catch(() => undefined);
          const o = await defenceOrEffect(
            v,
            async () => (heard > 0 ? "published: the admin's listener received it" : undefined),
            `${who} publish ${subject}`,
          );
          witness.unsubscribe();
          if (o.kind === "effect") through.push(`publish ${subject}: ${o.what}`);
          else assert.deepEqual([o.value.operation, o.value.subject], ["publish", subject]);
        }
        for (const { subject, marker } of attacks.sub) {
          let got = 0;
          const v = nextPermissionError(nc);
          nc.subscribe(subject, { callback: (e) => void (e ? undefined : got++) });
          await nc.flush().catch(() => undefined);
          admin.publish(marker, new TextEncoder().encode("marker"));
          await admin.flush();
          const o = await defenceOrEffect(
            v,
            async () => (got > 0 ? `subscribed: received ${marker}` : undefined),
            `${who} subscribe ${subject}`,
          );
          if (o.kind === "effect") through.push(`subscribe ${subject}: ${o.what}`);
          else assert.deepEqual([o.value.operation, o.value.subject], ["subscription", subject]);
        }
      } finally {
        await nc.close();
      }
      assert.deepEqual(through, [], `what ${who} got through`);
      assert.equal(
        await tenantsMessages(),
        tenantsBefore + (who === "api" ? 1 : 0),
        "the tenants bucket holds no forged record (only the admin's marker)",
      );
    });
  }
});

describe("the job catalog keys against the identities that must not write them", () => {
  let nats: NatsFixture;
  let admin: NatsConnection;
  let b: Buckets;
  const enc = (x: string) => new TextEncoder().encode(x);
  /** The catalog keys written by the admin, with their values: each must stay as it is. */
  const victims = [
    { key: directoryKey(TA), value: "tenant A's job directory" },
    { key: chunkKey(TA, "0000"), value: "tenant A's first chunk" },
  ];
  /** Keys no one holds: a forged catalog of tenant B, and a chunk of tenant A. */
  const fresh = [directoryKey(TB), chunkKey(TB, "0000"), chunkKey(TA, "ffff")];

  /** The tenants stream's messages and last sequence: any write or purge changes them. */
  const tenantsState = async () => {
    const s = (await (await jetstreamManager(admin)).streams.info("KV_kairos_tenants")).state;
    return `${s.messages} messages, last sequence ${s.last_seq}`;
  };
  /** How the catalog keys read unlike the set-up (undefined: as they were). */
  const catalogChanged = async (): Promise<string | undefined> => {
    for (const v of victims) {
      const e = await b.tenants.get(v.key);
      const got = e === null ? "nothing" : new TextDecoder().decode(e.value);
      if (got !== v.value) return `${v.key} reads ${got}`;
    }
    for (const k of fresh) if ((await b.tenants.get(k)) !== null) return `${k} was written`;
    return undefined;
  };

  const attackers = outsiders(
    () => nats,
    [{ who: "tenant A's service user", name: "alpha" }],
    "catalog",
  );

  before(async () => {
    nats = await startNats({ services: [{ name: "alpha", tenantId: TA }] });
    admin = await nats.connect("catalog-admin");
    b = await openBuckets(admin, { clusterName: "kairos", replicas: 1 });
    for (const v of victims) await b.tenants.put(v.key, enc(v.value));
  });

  after(async () => {
    await admin?.close();
    await nats?.stop();
  });

  for (const a of attackers) {
    it(
      `${a.who}: cannot put, delete or purge a job catalog key`,
      { timeout: 180_000 },
      async () => {
        const nc = await a.connect();
        let through: string[];
        try {
          through = await attackKvWrites(nc, {
            who: a.who,
            bucket: "tenants",
            keys: [...victims.map((v) => v.key), ...fresh],
            value: enc('{"forged":true}'),
            state: tenantsState,
            label: "the tenants stream",
          });
        } finally {
          await nc.close();
        }
        assert.deepEqual(through, [], `what ${a.who} got through`);
        assert.equal(await catalogChanged(), undefined, "the catalog keys are as they were");
      },
    );
  }
});
