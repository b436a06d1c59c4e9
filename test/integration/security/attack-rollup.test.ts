/**
 * Rollup headers (docs/security.md, "JetStream rights"): a KV write carrying `Nats-Rollup: all`
 * purges every other key of the bucket's stream. So whoever may write one key of a bucket — a
 * worker its own `nodes` record, an API node `jc.*`, `sk.>` or `sub.>` of `tenants`, any key of `idem` —
 * could erase the whole bucket with that one write: every node record, every tenant, API key hash
 * and service identity. On a real nats-server, with each role's real credentials, that write is
 * made to the keys its permissions allow; the server must refuse it ("rollup not permitted": the
 * buckets' streams have rollup headers off, src/cluster/buckets.ts) and every other key must still
 * be there. And a bucket made before that (with rollups on) is named at start-up.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { headers } from "@nats-io/nats-core";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { openBuckets, type Buckets } from "../../../src/cluster/buckets.ts";
import { kvKeys, type KvStore } from "../../../src/cluster/kv.ts";
import { connectNats } from "../../../src/cluster/nats.ts";
import { startNats, type NatsFixture } from "../../support/nats.ts";
import { defended } from "../../support/attack.ts";
import { hardenClusterBuckets } from "../../../src/cli/cluster.ts";

const TA = "trollupaaaaaaaaaa";
const TB = "trollupbbbbbbbbbb";
const enc = (s: string) => new TextEncoder().encode(s);

describe("a write with a rollup header cannot purge a bucket", { timeout: 120_000 }, () => {
  let nats: NatsFixture;
  let admin: NatsConnection;
  let b: Buckets;

  before(async () => {
    nats = await startNats({ workers: ["w1", "w2"] });
    admin = await nats.connect("attack-rollup-admin");
    // The buckets as every node creates them (openBuckets), then the victims' keys.
    b = await openBuckets(admin, { clusterName: "kairos", replicas: 1 });
    await b.nodes.put("w2", enc("w2's node record"));
    await b.nodes.put("sched-1", enc("a scheduler's node record"));
    await b.tenants.put(`t.${TB}`, enc("tenant B"));
    await b.tenants.put("k.0123456789abcdef", enc("tenant B's API key hash"));
    await b.tenants.put("svc.beta", enc("tenant B's service identity"));
    await b.idempotency.put(`${TB}.feedface`, enc("tenant B's idempotency record"));
  });

  after(async () => {
    await admin?.close();
    await nats?.stop();
  });

  /** Describes which of `keys` are gone from `kv` (undefined while all are there). */
  const gone = (kv: KvStore, keys: string[]) => async () => {
    const have = new Set((await kvKeys(kv, ">")).map((k) => k.key));
    const missing = keys.filter((k) => !have.has(k));
    return missing.length > 0 ? `purged from ${kv.bucket}: ${missing.join(", ")}` : undefined;
  };

  /** Writes `subject` with `Nats-Rollup: all` as `nc`; resolves with the server's refusal text. */
  const rollup = async (nc: NatsConnection, subject: string): Promise<string> => {
    const h = headers();
    h.set("Nats-Rollup", "all");
    const answer = JSON.parse(
      new TextDecoder().decode(
        (await nc.request(subject, enc("rolled up"), { headers: h, timeout: 5000 })).data,
      ),
    ) as { error?: { description?: string }; seq?: number };
    return answer.error?.description ?? `stored at sequence ${answer.seq}`;
  };

  const attacks: {
    who: string;
    creds: () => string;
    subject: string;
    victims: () => { kv: KvStore; keys: string[] };
  }[] = [
    {
      who: "pinned worker w1 (its own node record)",
      creds: () => nats.auth.credsForWorker("w1"),
      subject: "$KV.kairos_nodes.w1",
      victims: () => ({ kv: b.nodes, keys: ["w2", "sched-1"] }),
    },
    {
      who: "the shared worker (a node record)",
      creds: () => nats.credsFor(["worker"]),
      subject: "$KV.kairos_nodes.w3",
      victims: () => ({ kv: b.nodes, keys: ["w2", "sched-1"] }),
    },
    {
      who: "api (a job count key of tenants)",
      creds: () => nats.credsFor(["api"]),
      subject: `$KV.kairos_tenants.jc.${TA}`,
      victims: () => ({ kv: b.tenants, keys: [`t.${TB}`, "k.0123456789abcdef", "svc.beta"] }),
    },
    {
      who: "api (a sealed-key record of tenants)",
      creds: () => nats.credsFor(["api"]),
      subject: `$KV.kairos_tenants.sk.${TA}.x`,
      victims: () => ({ kv: b.tenants, keys: [`t.${TB}`, "k.0123456789abcdef", "svc.beta"] }),
    },
    {
      who: "api (a run-event subscription of tenants)",
      creds: () => nats.credsFor(["api"]),
      subject: `$KV.kairos_tenants.sub.${TA}.sabcdefghijklmnop`,
      victims: () => ({ kv: b.tenants, keys: [`t.${TB}`, "k.0123456789abcdef", "svc.beta"] }),
    },
    {
      who: "api (its tenant's idempotency key)",
      creds: () => nats.credsFor(["api"]),
      subject: `$KV.kairos_idem.${TA}.abad1dea`,
      victims: () => ({ kv: b.idempotency, keys: [`${TB}.feedface`] }),
    },
  ];

  for (const a of attacks) {
    it(`${a.who}: Nats-Rollup: all is refused, every other key is still there`, async () => {
      const nc = await connectNats({
        url: nats.url,
        name: "attacker-rollup",
        credsFile: a.creds(),
      });
      try {
        const { kv, keys } = a.victims();
        const answer = rollup(nc, a.subject);
        const refusal = answer.then((text) =>
          /rollup not permitted/.test(text) ? text : new Promise<string>(() => undefined),
        );
        assert.match(
          await defended(refusal, gone(kv, keys), `${a.who}: rollup on ${a.subject}`),
          /rollup not permitted/,
        );
        assert.match(await answer, /rollup not permitted/);
      } finally {
        await nc.close();
      }
    });
  }

  it("a bucket whose stream allows rollup headers (made before they were turned off) is named at start-up", async () => {
    // The KV library's own create turns rollup headers on.
    await new Kvm(jetstream(admin)).create("legacy_tenants", { history: 1 });
    assert.equal(
      (await (await jetstreamManager(admin)).streams.info("KV_legacy_tenants")).config
        .allow_rollup_hdrs,
      true,
    );
    const warnings: string[] = [];
    await openBuckets(admin, { clusterName: "legacy", replicas: 1, warn: (m) => warnings.push(m) });
    assert.deepEqual(
      warnings.filter((w) => w.includes("rollup")),
      [
        "bucket legacy_tenants allows rollup headers: any identity that may write one of its keys can purge all of them; as admin, update stream KV_legacy_tenants with allow_rollup_hdrs false (kairos cluster harden-buckets)",
      ],
    );
  });

  it("`kairos cluster harden-buckets` turns them off as admin, keeps the keys, and the rollup is refused", async () => {
    const legacy = await new Kvm(jetstream(admin)).open("legacy_tenants");
    await legacy.put("t.kept", enc("a tenant made before"));
    const out = await hardenClusterBuckets(nats.url, "legacy", {
      credsFile: nats.credsFor("admin"),
    });
    assert.deepEqual(
      out.filter((b) => b.state !== "missing"),
      [
        { bucket: "legacy_cluster", state: "already" },
        { bucket: "legacy_leases", state: "already" },
        { bucket: "legacy_nodes", state: "already" },
        { bucket: "legacy_actors", state: "already" },
        { bucket: "legacy_runs", state: "already" },
        { bucket: "legacy_tenants", state: "hardened" },
        { bucket: "legacy_idem", state: "already" },
      ],
    );
    assert.equal(
      (await (await jetstreamManager(admin)).streams.info("KV_legacy_tenants")).config
        .allow_rollup_hdrs,
      false,
    );
    assert.match(await rollup(admin, "$KV.legacy_tenants.t.other"), /rollup not permitted/);
    assert.equal(
      new TextDecoder().decode((await legacy.get("t.kept"))?.value),
      "a tenant made before",
    );
    const again = await hardenClusterBuckets(nats.url, "legacy", {
      credsFile: nats.credsFor("admin"),
    });
    assert.ok(
      again.every((b) => b.state === "already"),
      "idempotent",
    );
    const warnings: string[] = [];
    await openBuckets(admin, { clusterName: "legacy", replicas: 1, warn: (m) => warnings.push(m) });
    assert.deepEqual(warnings, [], "no warning once hardened");
  });

  it("no node identity's write above was refused by its permissions", () => {
    assert.deepEqual(nats.violations(), []);
  });
});
