/**
 * KvTenantDirectory on a real nats-server: create / authenticate / revoke, the auth cache TTL
 * (fake clock), name uniqueness under a race of concurrent creates, the dev tenant helper, and
 * the `kairos admin` CLI end to end (spawned process, key authenticated afterwards).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { openBuckets } from "../../src/cluster/buckets.ts";
import { connectNats } from "../../src/cluster/nats.ts";
import type { KvStore } from "../../src/cluster/kv.ts";
import { FakeClock } from "../../src/lib/clock.ts";
import { isKairosError } from "../../src/lib/errors.ts";
import { KvTenantDirectory, ensureDevTenant } from "../../src/tenants/index.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";

let nats: NatsFixture;
let nc: NatsConnection;
let clusterSeq = 0;

async function freshBucket(): Promise<{ kv: KvStore; cluster: string }> {
  const cluster = `tenants${++clusterSeq}`;
  const b = await openBuckets(nc, { clusterName: cluster, replicas: 1 });
  return { kv: b.tenants, cluster };
}

before(async () => {
  nats = await startNats();
  nc = await connectNats({ url: nats.url, name: "tenants-test" });
});

after(async () => {
  await nc?.close();
  await nats?.stop();
});

describe("KvTenantDirectory on NATS", () => {
  it("creates a tenant with defaults and a key that authenticates; keys are stored hashed", async () => {
    const { kv } = await freshBucket();
    const dir = new KvTenantDirectory(kv, { clock: new FakeClock(Date.parse("2026-03-01T00:00:00Z")) });
    const { tenant, apiKey, keyId } = await dir.createTenant("Acme");
    assert.match(tenant.tenant_id, /^t[a-z2-7]{16}$/);
    assert.match(apiKey, /^kai_[A-Za-z0-9_-]{43}$/);
    assert.match(keyId, /^k[a-z2-7]{16}$/);
    assert.deepEqual(tenant, { tenant_id: tenant.tenant_id, name: "Acme", created_at: "2026-03-01T00:00:00Z", max_concurrent_runs: 100, max_jobs: 10000, weight: 1, webhook_url: null });
    assert.deepEqual(await dir.authenticate(apiKey), tenant);
    assert.deepEqual(await dir.getTenant(tenant.tenant_id), tenant);
    assert.deepEqual(await dir.findTenantByName("acme"), tenant, "names are case-insensitive");
    const stored = await kv.list(">");
    assert.ok(stored.every((e) => !e.key.includes(apiKey) && !Buffer.from(e.value).toString("latin1").includes(apiKey)), "the plain key is nowhere in KV");
    assert.ok(stored.some((e) => e.key.startsWith("k.")));
  });

  it("rejects junk keys, unknown tenants and bad names", async () => {
    const { kv } = await freshBucket();
    const dir = new KvTenantDirectory(kv, { clock: new FakeClock() });
    for (const k of ["", "kai_", "nope", `kai_${"A".repeat(43)}`, `kai_${"A".repeat(500)}`]) assert.equal(await dir.authenticate(k), null);
    await assert.rejects(dir.createKey("tzzzzzzzzzzzzzzzz"), (e) => isKairosError(e, "not_found"));
    await assert.rejects(dir.revokeKey("kzzzzzzzzzzzzzzzz"), (e) => isKairosError(e, "not_found"));
    await assert.rejects(dir.revokeKey("../x"), (e) => isKairosError(e, "not_found"));
    for (const n of ["", " x", "a b", "x".repeat(64), "ünï"]) await assert.rejects(dir.createTenant(n), (e) => isKairosError(e, "invalid_argument") && e.field === "name");
    assert.equal(await dir.getTenant("not-an-id"), null);
    assert.equal(await dir.findTenantByName("nobody"), null);
  });

  it("several keys per tenant; revocation works at once on this node and within the cache TTL elsewhere", async () => {
    const { kv } = await freshBucket();
    const clock = new FakeClock(1_000_000);
    const dir = new KvTenantDirectory(kv, { clock, authCacheTtlMs: 5000 });
    const other = new KvTenantDirectory(kv, { clock, authCacheTtlMs: 5000 });
    const { tenant, apiKey: k1, keyId: id1 } = await dir.createTenant("multi");
    const { apiKey: k2 } = await dir.createKey(tenant.tenant_id);
    assert.equal((await dir.authenticate(k2))?.tenant_id, tenant.tenant_id);
    assert.equal((await other.authenticate(k1))?.tenant_id, tenant.tenant_id, "cached on the other node");
    await dir.revokeKey(id1);
    await dir.revokeKey(id1); // idempotent
    assert.equal(await dir.authenticate(k1), null, "this node drops it at once");
    assert.equal((await other.authenticate(k1))?.tenant_id, tenant.tenant_id, "the other node trusts its cache until the TTL");
    clock.advance(5001);
    assert.equal(await other.authenticate(k1), null, "after the TTL the revocation is seen");
    assert.equal((await other.authenticate(k2))?.tenant_id, tenant.tenant_id, "the other key still works");
  });

  it("a race of concurrent creates of one name: exactly one wins, the rest are conflict, no orphan tenants", async () => {
    const { kv } = await freshBucket();
    const dirs = Array.from({ length: 4 }, () => new KvTenantDirectory(kv, { clock: new FakeClock() }));
    const results = await Promise.allSettled(Array.from({ length: 24 }, (_, i) => dirs[i % dirs.length]!.createTenant(i % 2 === 0 ? "race" : "RACE")));
    const won = results.filter((r) => r.status === "fulfilled");
    assert.equal(won.length, 1);
    for (const r of results) if (r.status === "rejected") assert.ok(isKairosError(r.reason, "conflict") && r.reason.field === "name", String(r.reason));
    const winner = (won[0] as PromiseFulfilledResult<Awaited<ReturnType<KvTenantDirectory["createTenant"]>>>).value;
    assert.equal((await dirs[0]!.findTenantByName("race"))?.tenant_id, winner.tenant.tenant_id);
    assert.deepEqual((await kv.list("t.*")).map((e) => e.key), [`t.${winner.tenant.tenant_id}`]);
    assert.equal((await dirs[1]!.authenticate(winner.apiKey))?.tenant_id, winner.tenant.tenant_id);
  });

  it("ensureDevTenant creates the dev tenant once, reuses a working key, and replaces a dead one", async () => {
    const { kv } = await freshBucket();
    const dir = new KvTenantDirectory(kv, { clock: new FakeClock(), authCacheTtlMs: 0 });
    const first = await ensureDevTenant(dir);
    assert.equal((await dir.authenticate(first.api_key))?.name, "dev");
    assert.deepEqual(await ensureDevTenant(dir, first.api_key), first);
    const fresh = await ensureDevTenant(dir, "kai_stale");
    assert.equal(fresh.tenant_id, first.tenant_id);
    assert.notEqual(fresh.api_key, first.api_key);
    assert.equal((await dir.authenticate(fresh.api_key))?.tenant_id, first.tenant_id);
    const other = await dir.createTenant("someone");
    const notDev = await ensureDevTenant(dir, other.apiKey);
    assert.equal(notDev.tenant_id, first.tenant_id, "a key of another tenant is not the dev key");
  });
});

interface CliResult { code: number | null; stdout: string; stderr: string }

function runCli(args: string[], stateDir: string): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const env: NodeJS.ProcessEnv = { ...process.env, KAIROS_STATE_DIR: stateDir };
    delete env["KAIROS_NATS_URL"];
    const child = spawn(process.execPath, ["--import", "tsx", "src/cli/main.ts", ...args], { env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("kairos admin CLI", () => {
  let stateDir: string;
  before(() => {
    stateDir = mkdtempSync(join(tmpdir(), "kairos-admin-"));
  });
  after(() => rmSync(stateDir, { recursive: true, force: true }));

  it("tenant create --json prints a key that authenticates; key create/revoke work; a duplicate name fails", async () => {
    const cluster = `cli${++clusterSeq}`;
    const flags = ["--nats", nats.url, "--cluster", cluster];
    const created = await runCli(["admin", "tenant", "create", "acme", "--json", ...flags], stateDir);
    assert.equal(created.code, 0, created.stderr);
    const out = JSON.parse(created.stdout) as { tenant_id: string; api_key: string; key_id: string };
    const b = await openBuckets(nc, { clusterName: cluster, replicas: 1 });
    const dir = new KvTenantDirectory(b.tenants, { clock: new FakeClock(), authCacheTtlMs: 0 });
    assert.equal((await dir.authenticate(out.api_key))?.tenant_id, out.tenant_id);
    assert.equal((await dir.authenticate(out.api_key))?.name, "acme");

    const second = await runCli(["admin", "key", "create", out.tenant_id, "--json", ...flags], stateDir);
    assert.equal(second.code, 0, second.stderr);
    const k2 = JSON.parse(second.stdout) as { tenant_id: string; api_key: string; key_id: string };
    assert.equal((await dir.authenticate(k2.api_key))?.tenant_id, out.tenant_id);

    const revoked = await runCli(["admin", "key", "revoke", out.key_id, ...flags], stateDir);
    assert.equal(revoked.code, 0, revoked.stderr);
    assert.equal(await dir.authenticate(out.api_key), null);
    assert.equal((await dir.authenticate(k2.api_key))?.tenant_id, out.tenant_id);

    const dup = await runCli(["admin", "tenant", "create", "ACME", ...flags], stateDir);
    assert.equal(dup.code, 2);
    assert.match(dup.stderr, /already exists/);

    const human = await runCli(["admin", "tenant", "create", "beta", ...flags], stateDir);
    assert.equal(human.code, 0, human.stderr);
    assert.match(human.stdout, /^tenant +t[a-z2-7]{16} \(beta\)\napi key +kai_\S+\nkey id +k[a-z2-7]{16}\n$/);
  });

  it("without --nats and no dev cluster it says how to find one", async () => {
    const r = await runCli(["admin", "key", "revoke", "kabc"], stateDir);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /no cluster found/);
  });
});
