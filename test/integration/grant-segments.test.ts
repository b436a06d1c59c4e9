/**
 * The tenant grant table's segments (src/slots/tenant-shell.ts) on a real nats-server's actors
 * bucket: the KV operations they rely on — create of the next segment, CAS update of the tail,
 * revision-checked deletes and compactions — behave as on MemoryKv; a reload sees the live set;
 * a stale incarnation's batch fails.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { openBuckets } from "../../src/cluster/buckets.ts";
import type { KvStore } from "../../src/cluster/kv.ts";
import { APPEND_MAX, GrantTable } from "../../src/slots/tenant-shell.ts";
import type { TenantEffect } from "../../src/slots/tenant-types.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";

let fx: NatsFixture;
let nc: NatsConnection;
let kv: KvStore;

before(async () => {
  fx = await startNats();
  nc = await fx.connect("grant-segments");
  kv = (await openBuckets(nc, { clusterName: "grants", replicas: 1 })).actors;
});

after(async () => {
  await nc?.close();
  await fx?.stop();
});

const ctx = {
  address: { type: "tenant", id: "t1" },
  partition: 3,
  epoch: 1,
  nodeId: "n",
  stillOwner: () => true,
  tell: () => undefined,
};
const puts = (ids: string[], exp = 1): TenantEffect[] =>
  ids.map((id) => ({ kind: "put_grant", run_id: id, expires_at_ms: exp }));
const dels = (ids: string[]): TenantEffect[] =>
  ids.map((id) => ({ kind: "del_grant", run_id: id }));
const range = (p: string, n: number) => Array.from({ length: n }, (_, i) => `${p}${i}`);
const reload = async (tenant: string) => {
  const running = new Map<string, number>();
  await new GrantTable(kv, 3, tenant).load(running);
  return running;
};

describe("grant segments on NATS KV", () => {
  it("batches create, append, delete and compact segments; a reload holds exactly what the table wrote", async () => {
    const t = new GrantTable(kv, 3, "t1");
    await t.load(new Map());
    const n = APPEND_MAX + 44;
    await t.apply(puts(range("a", n)), ctx); // s1 (full)
    await t.apply(puts(range("b", n)), ctx); // s2 (full)
    await t.apply(dels(range("a", n)), ctx); // s1 empty
    await t.apply(puts(["c"]), ctx); // s3; s1 deleted
    await t.apply(dels(range("b", n - 10)), ctx);
    await t.apply(puts(["d"]), ctx); // appended to s3; s2 compacted to 10
    await t.apply(puts(["c"], 7), ctx); // a refresh, in the tail
    const keys = (await kv.list("grants.3.t1.*")).map((e) => e.key).sort();
    assert.deepEqual(keys, ["grants.3.t1.s2", "grants.3.t1.s3"]);
    const back = await reload("t1");
    assert.deepEqual([...back.keys()].sort(), ["c", "d", ...range("b", n).slice(n - 10)].sort());
    assert.equal(back.get("c"), 7);
  });

  it("an incarnation that loaded before another's batch fails its own next batch (create of the next segment exists)", async () => {
    const first = new GrantTable(kv, 3, "t2");
    await first.load(new Map());
    await first.apply(puts(range("a", APPEND_MAX)), ctx);
    const old = new GrantTable(kv, 3, "t2");
    await old.load(new Map());
    const later = new GrantTable(kv, 3, "t2");
    await later.load(new Map());
    await old.apply(puts(["x"]), ctx);
    await assert.rejects(later.apply(puts(["y"]), ctx), /another incarnation/);
    const back = await reload("t2");
    assert.ok(back.has("x") && !back.has("y"));
  });
});
