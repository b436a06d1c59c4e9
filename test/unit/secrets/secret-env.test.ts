/**
 * Task secrets (src/secrets/secret-env.ts) on the in-memory KV: sealed values round-trip, are bound
 * to their key (a value copied to another tenant's or job's key does not open), need the same
 * cluster key, never contain the plaintext, and are purged; the API view shows names only.
 * The path through real nodes is test/e2e/secret-env.test.ts.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import {
  SecretEnvStore,
  parseSecretKey,
  publicJob,
  purgeSecretEnv,
} from "../../../src/secrets/secret-env.ts";
import type { JobView } from "../../../src/protocol/model.ts";
import { isKairosError } from "../../../src/lib/errors.ts";

const KEY = randomBytes(32);
const SECRETS = { DB_PASSWORD: "hunter2-very-secret", API_TOKEN: "tok_abc" };

describe("secret_env", () => {
  it("seals into the tenants bucket without the plaintext and opens back to the same map", async () => {
    const kv = new MemoryKv("tenants");
    const store = new SecretEnvStore(KEY, () => kv);
    const ref = await store.seal("t1", "j1", SECRETS);
    assert.deepEqual(ref.names, ["API_TOKEN", "DB_PASSWORD"]);
    const stored = await kv.list("sk.>");
    assert.equal(stored.length, 1);
    assert.equal(stored[0]!.key, `sk.t1.j1.${ref.ref}`);
    const raw = Buffer.from(stored[0]!.value).toString("utf8");
    assert.ok(
      !raw.includes("hunter2") && !raw.includes("tok_abc") && !raw.includes("DB_PASSWORD"),
      "no plaintext at rest",
    );
    assert.deepEqual(await store.open("t1", "j1", ref), SECRETS);
  });

  it("a sealed value copied to another job's or tenant's key does not open; nor with another cluster key", async () => {
    const kv = new MemoryKv("tenants");
    const store = new SecretEnvStore(KEY, () => kv);
    const ref = await store.seal("t1", "j1", SECRETS);
    const value = (await kv.get(`sk.t1.j1.${ref.ref}`))!.value;
    await kv.put(`sk.t2.j1.${ref.ref}`, value);
    await kv.put(`sk.t1.j2.${ref.ref}`, value);
    for (const [t, j] of [
      ["t2", "j1"],
      ["t1", "j2"],
    ] as const) {
      await assert.rejects(store.open(t, j, ref), (e) => isKairosError(e, "internal"));
    }
    const other = new SecretEnvStore(randomBytes(32), () => kv);
    await assert.rejects(other.open("t1", "j1", ref), (e) => isKairosError(e, "internal"));
  });

  it("purge deletes every version of a job's secrets, or all but one, or just one; other jobs keep theirs", async () => {
    const kv = new MemoryKv("tenants");
    const store = new SecretEnvStore(KEY, () => kv);
    const a = await store.seal("t1", "j1", SECRETS);
    const b = await store.seal("t1", "j1", { X: "1" });
    const c = await store.seal("t1", "j1", { Y: "2" });
    const other = await store.seal("t1", "j10", { Z: "3" });
    await purgeSecretEnv(kv, "t1", "j1", { only: a.ref });
    assert.deepEqual(
      (await kv.list("sk.t1.j1.*")).map((e) => e.key).sort(),
      [`sk.t1.j1.${b.ref}`, `sk.t1.j1.${c.ref}`].sort(),
    );
    await purgeSecretEnv(kv, "t1", "j1", { keep: c.ref });
    assert.deepEqual(
      (await kv.list("sk.t1.j1.*")).map((e) => e.key),
      [`sk.t1.j1.${c.ref}`],
    );
    await purgeSecretEnv(kv, "t1", "j1");
    assert.deepEqual(await kv.list("sk.t1.j1.*"), []);
    await assert.rejects(store.open("t1", "j1", c), (e) => isKairosError(e, "not_found"));
    assert.deepEqual(await store.open("t1", "j10", other), { Z: "3" });
  });

  it("the digest is keyed and stable", () => {
    const s1 = new SecretEnvStore(KEY, () => new MemoryKv());
    const s2 = new SecretEnvStore(randomBytes(32), () => new MemoryKv());
    assert.equal(s1.digest({ A: "1", B: "2" }), s1.digest({ B: "2", A: "1" }));
    assert.notEqual(s1.digest({ A: "1" }), s1.digest({ A: "2" }));
    assert.notEqual(s1.digest({ A: "1" }), s2.digest({ A: "1" }));
  });

  it("the API view shows names only", () => {
    const job = {
      job_id: "j1",
      task: {
        image: "busybox",
        args: ["true"],
        env: { A: "1" },
        timeout_s: 5,
        sealed_env: { names: ["DB_PASSWORD"], ref: "r1" },
      },
    } as unknown as JobView;
    const v = publicJob(job);
    assert.deepEqual(v.task, {
      image: "busybox",
      args: ["true"],
      env: { A: "1" },
      timeout_s: 5,
      secret_env_names: ["DB_PASSWORD"],
    });
    const plain = publicJob({
      ...job,
      task: { ...job.task, sealed_env: undefined, secret_env: { X: "leak" } },
    } as unknown as JobView);
    assert.ok(!JSON.stringify(plain).includes("leak"));
    assert.equal(plain.task.secret_env_names, undefined);
  });

  it("the cluster key is 32 bytes, base64 or hex", () => {
    const k = randomBytes(32);
    assert.deepEqual(parseSecretKey(`${k.toString("base64")}\n`), k);
    assert.deepEqual(parseSecretKey(k.toString("hex")), k);
    for (const bad of [
      "",
      "short",
      randomBytes(16).toString("base64"),
      `${k.toString("base64")}x`,
    ]) {
      assert.throws(
        () => parseSecretKey(bad),
        (e) => isKairosError(e, "invalid_argument"),
        JSON.stringify(bad),
      );
    }
  });
});
