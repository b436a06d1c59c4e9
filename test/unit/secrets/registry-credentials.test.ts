/**
 * Tenants' registry credentials (src/secrets/registry-credentials.ts) on the in-memory KV: sealed
 * at rest (no plaintext), bound to tenant and registry (moved elsewhere they do not open),
 * validated and bounded, removable; the scheduler's lookup picks by the image's registry and
 * answers from its cache without a read.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { decode, encode } from "../../../src/cluster/codec.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { isKairosError } from "../../../src/lib/errors.ts";
import {
  AUTH_CACHE_TTL_MS,
  MAX_REGISTRIES_PER_TENANT,
  RegistryAuthLookup,
  RegistryCredentialStore,
  registryCredentialsKey,
  registryNames,
} from "../../../src/secrets/registry-credentials.ts";

const KEY = randomBytes(32);
const code = (c: string) => (e: unknown) => isKairosError(e) && e.code === c;

function fixture() {
  const kv = new MemoryKv("tenants");
  const clock = new FakeClock(1_000_000);
  return { kv, clock, store: new RegistryCredentialStore(KEY, () => kv, clock) };
}

describe("registry credentials", () => {
  it("are sealed at rest and open back; names are listed without a key", async () => {
    const { kv, store } = fixture();
    assert.equal(await store.set("t1", "index.docker.io", "alice", "s3cret-pw"), "docker.io");
    await store.set("t1", "127.0.0.1:5000", "bob", "other-pw");
    const raw = Buffer.from((await kv.get(registryCredentialsKey("t1")))!.value).toString("utf8");
    assert.ok(!raw.includes("s3cret-pw") && !raw.includes("alice"), "no plaintext at rest");
    assert.deepEqual(await registryNames(kv, "t1"), ["127.0.0.1:5000", "docker.io"]);
    const all = await store.openAll("t1");
    assert.deepEqual(all.get("docker.io"), {
      registry: "docker.io",
      username: "alice",
      password: "s3cret-pw",
    });
    assert.equal(all.get("127.0.0.1:5000")?.username, "bob");
    assert.equal(await store.remove("t1", "docker.io"), true);
    assert.equal(await store.remove("t1", "docker.io"), false);
    assert.deepEqual(await registryNames(kv, "t1"), ["127.0.0.1:5000"]);
  });

  it("a sealed credential moved to another tenant or registry does not open", async () => {
    const { kv, store } = fixture();
    await store.set("t1", "r.example.com", "alice", "pw");
    const e = await kv.get(registryCredentialsKey("t1"));
    await kv.create(registryCredentialsKey("t2"), e!.value);
    await assert.rejects(store.openAll("t2"), /does not decrypt/);
    const rec = decode<{ registries: Record<string, unknown> }>(
      (await kv.get(registryCredentialsKey("t1")))!.value,
    );
    rec.registries["other.example.com"] = rec.registries["r.example.com"];
    delete rec.registries["r.example.com"];
    await kv.put(registryCredentialsKey("t1"), encode(rec));
    await assert.rejects(store.openAll("t1"), /does not decrypt/);
  });

  it("refuses bad input, naming it, and bounds the registries per tenant", async () => {
    const { store } = fixture();
    await assert.rejects(
      store.set("t1", "https://r.example.com", "u", "p"),
      code("invalid_argument"),
    );
    await assert.rejects(store.set("t1", "r.example.com/path", "u", "p"), code("invalid_argument"));
    await assert.rejects(store.set("t1", "r.example.com", "with space", "p"), /username/);
    await assert.rejects(store.set("t1", "r.example.com", "u", ""), /password/);
    await assert.rejects(store.set("t1", "r.example.com", "u", "two\nlines"), /one line/);
    for (let i = 0; i < MAX_REGISTRIES_PER_TENANT; i++)
      await store.set("t1", `r${i}.example.com`, "u", "p");
    await store.set("t1", "r0.example.com", "u", "replaced"); // a replacement is not one more
    await assert.rejects(store.set("t1", "one-more.example.com", "u", "p"), /already holds/);
  });

  it("the lookup picks by the image's registry and answers from its cache at once", async () => {
    const { clock, store } = fixture();
    await store.set("t1", "r.example.com:5000", "alice", "pw");
    const lookup = new RegistryAuthLookup(store, clock);
    const first = lookup.lookup("t1", "r.example.com:5000/team/app@sha256:" + "a".repeat(64));
    assert.ok(first instanceof Promise, "the first lookup reads");
    assert.equal((await first)?.username, "alice");
    const cached = lookup.lookup("t1", "r.example.com:5000/team/other:2");
    assert.ok(!(cached instanceof Promise), "a cached tenant answers at once");
    assert.equal(cached?.password, "pw");
    assert.equal(lookup.lookup("t1", "busybox"), undefined, "none for docker.io");
    // A change is seen once the cache entry lapses.
    await store.remove("t1", "r.example.com:5000");
    assert.equal(lookup.lookup("t1", "r.example.com:5000/team/app:1") !== undefined, true);
    clock.advance(AUTH_CACHE_TTL_MS);
    assert.equal(await lookup.lookup("t1", "r.example.com:5000/team/app:1"), undefined);
  });

  it("concurrent lookups of one tenant share one read", async () => {
    const { kv, clock, store } = fixture();
    await store.set("t1", "r.example.com", "alice", "pw");
    let gets = 0;
    const counted = new RegistryCredentialStore(
      KEY,
      () => {
        gets++;
        return kv;
      },
      clock,
    );
    const lookup = new RegistryAuthLookup(counted, clock);
    const all = await Promise.all(
      Array.from({ length: 50 }, () =>
        Promise.resolve(lookup.lookup("t1", "r.example.com/team/app:1")),
      ),
    );
    assert.equal(gets, 1, "one read for 50 concurrent offers");
    assert.ok(all.every((a) => a?.username === "alice"));
  });
});
