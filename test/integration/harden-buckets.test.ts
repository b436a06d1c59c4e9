/** `kairos cluster harden-buckets` on legacy buckets of every shape (TTL, history 4): rollups off, keys and limits kept. */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { hardenBuckets } from "../../src/cluster/buckets.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";

describe("harden-buckets on TTL and history buckets", { timeout: 60_000 }, () => {
  let nats: NatsFixture;
  let admin: NatsConnection;
  before(async () => {
    nats = await startNats({ clusters: ["legacy"] });
    admin = await nats.connect("harden-admin");
  });
  after(async () => {
    await admin.close();
    await nats.stop();
  });
  it("hardens each legacy bucket the KV library made, keys and limits kept", async () => {
    const kvm = new Kvm(jetstream(admin));
    const shapes: Record<string, { ttl?: number; history?: number }> = {
      cluster: {},
      leases: {},
      nodes: { ttl: 30_000 },
      actors: { history: 4 },
      runs: {},
      tenants: {},
      idem: { ttl: 24 * 3600_000 },
    };
    for (const [sfx, o] of Object.entries(shapes)) {
      const kv = await kvm.create(`legacy_${sfx}`, { replicas: 1, ...o });
      await kv.put("k", new TextEncoder().encode(sfx));
    }
    const jsm = await jetstreamManager(admin);
    const before = new Map<string, unknown>();
    for (const sfx of Object.keys(shapes)) {
      const c = (await jsm.streams.info(`KV_legacy_${sfx}`)).config;
      assert.equal(c.allow_rollup_hdrs, true);
      before.set(sfx, { ...c, allow_rollup_hdrs: false });
    }
    const out = await hardenBuckets(jsm, "legacy");
    assert.ok(
      out.every((b) => b.state === "hardened"),
      JSON.stringify(out),
    );
    for (const sfx of Object.keys(shapes)) {
      const c = (await jsm.streams.info(`KV_legacy_${sfx}`)).config;
      assert.deepEqual(c, before.get(sfx), sfx);
      const e = await (await kvm.open(`legacy_${sfx}`)).get("k");
      assert.equal(new TextDecoder().decode(e?.value), sfx);
    }
  });
});
