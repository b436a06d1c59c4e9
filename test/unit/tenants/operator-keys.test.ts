/**
 * Operator keys (src/tenants/operator-keys.ts) over the in-memory KV: made, checked, listed
 * (never the key), revoked; a tenant key's shape is never one; a revoked key is refused at once
 * on the node that revoked it and within the cache TTL elsewhere.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { isKairosError } from "../../../src/lib/errors.ts";
import { KvOperatorKeys, OPERATOR_KEY } from "../../../src/tenants/operator-keys.ts";
import { KvTenantDirectory } from "../../../src/tenants/directory.ts";

describe("operator keys", () => {
  it("are made, checked, listed without the key, and revoked", async () => {
    const kv = new MemoryKv("tenants");
    const clock = new FakeClock(Date.parse("2026-12-06T10:00:00Z"));
    const keys = new KvOperatorKeys(kv, clock);
    const other = new KvOperatorKeys(kv, clock); // another API node, with its own cache
    const a = await keys.create("alice");
    assert.match(a.key, OPERATOR_KEY);
    assert.match(a.keyId, /^o[a-z2-7]{16}$/);
    assert.deepEqual(await keys.authenticate(a.key), { keyId: a.keyId, name: "alice" });
    assert.deepEqual(await other.authenticate(a.key), { keyId: a.keyId, name: "alice" });
    const list = await keys.list();
    assert.deepEqual(
      list.map((k) => [k.key_id, k.name, k.revoked]),
      [[a.keyId, "alice", false]],
    );
    assert.ok(!JSON.stringify(list).includes(a.key), "the list never holds a key");
    await keys.revoke(a.keyId);
    await keys.revoke(a.keyId); // again: no change, no error
    assert.equal(await keys.authenticate(a.key), null, "at once where it was revoked");
    assert.ok(await other.authenticate(a.key), "cached elsewhere up to the TTL");
    clock.advance(5_001);
    assert.equal(await other.authenticate(a.key), null);
    assert.equal((await keys.list())[0]!.revoked, true);
  });

  it("a tenant's key, a made-up one or a bad id is none; names are checked", async () => {
    const kv = new MemoryKv("tenants");
    const clock = new FakeClock(0);
    const keys = new KvOperatorKeys(kv, clock);
    const tenant = await new KvTenantDirectory(kv, { clock }).createTenant("acme");
    assert.equal(await keys.authenticate(tenant.apiKey), null);
    assert.equal(await keys.authenticate(`kop_${"x".repeat(43)}`), null);
    assert.equal(await keys.authenticate("kop_short"), null);
    await assert.rejects(keys.revoke("o-nope"), (e) => isKairosError(e, "not_found"));
    await assert.rejects(keys.revoke("oaaaaaaaaaaaaaaaa"), (e) => isKairosError(e, "not_found"));
    for (const bad of ["", "-x", "a b", "x".repeat(64), "a*"])
      await assert.rejects(
        keys.create(bad),
        (e) => isKairosError(e, "invalid_argument") && e.field === "name",
        bad,
      );
  });
});
