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
import type { KvStore } from "../../src/cluster/kv.ts";
import { FakeClock, systemClock } from "../../src/lib/clock.ts";
import { isKairosError } from "../../src/lib/errors.ts";
import { seededRandom } from "../../src/lib/random.ts";
import { KvTenantDirectory, ensureDevTenant } from "../../src/tenants/index.ts";
import { KvOperatorKeys } from "../../src/tenants/operator-keys.ts";
import { TenantJobCounter, jobCountKey, readJobCount } from "../../src/slots/job-quota.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";

/** The pause between CAS retries of the job counter runs on the real clock (real NATS). */
const pace = { clock: systemClock, random: seededRandom(36) };

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
  nc = await nats.connect("tenants-test");
});

after(async () => {
  await nc?.close();
  await nats?.stop();
});

describe("KvTenantDirectory on NATS", () => {
  it("creates a tenant with defaults and a key that authenticates; keys are stored hashed", async () => {
    const { kv } = await freshBucket();
    const dir = new KvTenantDirectory(kv, {
      clock: new FakeClock(Date.parse("2026-03-01T00:00:00Z")),
    });
    const { tenant, apiKey, keyId } = await dir.createTenant("Acme");
    assert.match(tenant.tenant_id, /^t[a-z2-7]{16}$/);
    assert.match(apiKey, /^kai_[A-Za-z0-9_-]{43}$/);
    assert.match(keyId, /^k[a-z2-7]{16}$/);
    assert.deepEqual(tenant, {
      tenant_id: tenant.tenant_id,
      name: "Acme",
      created_at: "2026-03-01T00:00:00Z",
      max_concurrent_runs: 100,
      max_jobs: 10000,
      max_waiting_runs: 1000,
      weight: 1,
      webhook_url: null,
    });
    assert.deepEqual(await dir.authenticate(apiKey), tenant);
    assert.deepEqual(await dir.getTenant(tenant.tenant_id), tenant);
    assert.deepEqual(await dir.findTenantByName("acme"), tenant, "names are case-insensitive");
    const stored = await kv.list(">");
    assert.ok(
      stored.every(
        (e) => !e.key.includes(apiKey) && !Buffer.from(e.value).toString("latin1").includes(apiKey),
      ),
      "the plain key is nowhere in KV",
    );
    assert.ok(stored.some((e) => e.key.startsWith("k.")));
  });

  it("rejects junk keys, unknown tenants and bad names", async () => {
    const { kv } = await freshBucket();
    const dir = new KvTenantDirectory(kv, { clock: new FakeClock() });
    for (const k of ["", "kai_", "nope", `kai_${"A".repeat(43)}`, `kai_${"A".repeat(500)}`])
      assert.equal(await dir.authenticate(k), null);
    await assert.rejects(dir.createKey("tzzzzzzzzzzzzzzzz"), (e) => isKairosError(e, "not_found"));
    await assert.rejects(dir.revokeKey("kzzzzzzzzzzzzzzzz"), (e) => isKairosError(e, "not_found"));
    await assert.rejects(dir.revokeKey("../x"), (e) => isKairosError(e, "not_found"));
    for (const n of ["", " x", "a b", "x".repeat(64), "ünï"])
      await assert.rejects(
        dir.createTenant(n),
        (e) => isKairosError(e, "invalid_argument") && e.field === "name",
      );
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
    assert.equal(
      (await other.authenticate(k1))?.tenant_id,
      tenant.tenant_id,
      "cached on the other node",
    );
    await dir.revokeKey(id1);
    await dir.revokeKey(id1); // idempotent
    assert.equal(await dir.authenticate(k1), null, "this node drops it at once");
    assert.equal(
      (await other.authenticate(k1))?.tenant_id,
      tenant.tenant_id,
      "the other node trusts its cache until the TTL",
    );
    clock.advance(5001);
    assert.equal(await other.authenticate(k1), null, "after the TTL the revocation is seen");
    assert.equal(
      (await other.authenticate(k2))?.tenant_id,
      tenant.tenant_id,
      "the other key still works",
    );
  });

  it("a race of concurrent creates of one name: exactly one wins, the rest are conflict, no orphan tenants", async () => {
    const { kv } = await freshBucket();
    const dirs = Array.from(
      { length: 4 },
      () => new KvTenantDirectory(kv, { clock: new FakeClock() }),
    );
    const results = await Promise.allSettled(
      Array.from({ length: 24 }, (_, i) =>
        dirs[i % dirs.length]!.createTenant(i % 2 === 0 ? "race" : "RACE"),
      ),
    );
    const won = results.filter((r) => r.status === "fulfilled");
    assert.equal(won.length, 1);
    for (const r of results)
      if (r.status === "rejected")
        assert.ok(
          isKairosError(r.reason, "conflict") && r.reason.field === "name",
          String(r.reason),
        );
    const winner = (
      won[0] as PromiseFulfilledResult<Awaited<ReturnType<KvTenantDirectory["createTenant"]>>>
    ).value;
    assert.equal((await dirs[0]!.findTenantByName("race"))?.tenant_id, winner.tenant.tenant_id);
    assert.deepEqual(
      (await kv.list("t.*")).map((e) => e.key),
      [`t.${winner.tenant.tenant_id}`],
    );
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

describe("tenant quotas on NATS", () => {
  it("setQuota writes only the given fields; concurrent updates of different fields all land (CAS retry)", async () => {
    const { kv } = await freshBucket();
    const dirs = Array.from(
      { length: 3 },
      () => new KvTenantDirectory(kv, { clock: new FakeClock() }),
    );
    const { tenant } = await dirs[0]!.createTenant("quota");
    await dirs[0]!.setWebhook(tenant.tenant_id, "https://example.com/hook");
    const updated = await dirs[0]!.setQuota(tenant.tenant_id, { max_jobs: 5 });
    assert.equal(updated.max_jobs, 5);
    assert.equal(updated.max_concurrent_runs, 100);
    await Promise.all([
      dirs[0]!.setQuota(tenant.tenant_id, { max_concurrent_runs: 7 }),
      dirs[1]!.setQuota(tenant.tenant_id, { weight: 2.5 }),
      dirs[2]!.setQuota(tenant.tenant_id, { max_jobs: 9 }),
      dirs[0]!.setQuota(tenant.tenant_id, { max_waiting_runs: 40 }),
    ]);
    const t = (await dirs[0]!.getTenant(tenant.tenant_id))!;
    assert.equal(t.max_concurrent_runs, 7);
    assert.equal(t.max_waiting_runs, 40);
    assert.equal(t.weight, 2.5);
    assert.equal(t.max_jobs, 9);
    assert.equal(t.webhook_url, "https://example.com/hook");
    assert.match(t.webhook_secret ?? "", /^whsec_/, "the quota update keeps the webhook secret");
  });

  it("setQuota: unknown tenant is not_found, bad values are invalid_argument and change nothing", async () => {
    const { kv } = await freshBucket();
    const dir = new KvTenantDirectory(kv, { clock: new FakeClock() });
    await assert.rejects(
      dir.setQuota("tzzzzzzzzzzzzzzzz", { max_jobs: 3 }),
      (e) => isKairosError(e, "not_found") && /tenant tzzzzzzzzzzzzzzzz not found/.test(e.message),
    );
    await assert.rejects(dir.setQuota("../x", { max_jobs: 3 }), (e) =>
      isKairosError(e, "not_found"),
    );
    const { tenant } = await dir.createTenant("bad-values");
    for (const q of [
      {},
      { max_jobs: 0 },
      { max_concurrent_runs: -1 },
      { max_jobs: 1.5 },
      { weight: 0 },
      { weight: 1001 },
      { weight: Number.NaN },
      { max_waiting_runs: 0 },
      { max_waiting_runs: 100_001 },
    ]) {
      await assert.rejects(
        dir.setQuota(tenant.tenant_id, q),
        (e) => isKairosError(e, "invalid_argument"),
        JSON.stringify(q),
      );
    }
    assert.deepEqual(await dir.getTenant(tenant.tenant_id), tenant);
  });

  it("the max_jobs counter: reserve up to the quota, then quota_exceeded; release frees a place; concurrent reserves never exceed", async () => {
    const { kv } = await freshBucket();
    const dir = new KvTenantDirectory(kv, { clock: new FakeClock() });
    const { tenant } = await dir.createTenant("counted");
    await dir.setQuota(tenant.tenant_id, { max_jobs: 5 });
    let seeds = 0;
    const counter = new TenantJobCounter(
      kv,
      async () => {
        seeds++;
        return 2; // two jobs existed before the counter
      },
      pace,
    );
    const results = await Promise.allSettled(
      Array.from({ length: 8 }, () => counter.reserve(tenant.tenant_id)),
    );
    assert.equal(
      results.filter((r) => r.status === "fulfilled").length,
      3,
      "2 existing + 3 = max_jobs 5",
    );
    for (const r of results) {
      if (r.status === "rejected")
        assert.ok(
          isKairosError(r.reason, "quota_exceeded") &&
            /has 5 jobs and its max_jobs quota is 5/.test(r.reason.message),
          String(r.reason),
        );
    }
    assert.ok(seeds >= 1);
    assert.equal(await readJobCount(kv, tenant.tenant_id), 5);
    await counter.release(tenant.tenant_id);
    assert.equal(await readJobCount(kv, tenant.tenant_id), 4);
    assert.equal(await counter.reserve(tenant.tenant_id), true);
    await assert.rejects(counter.reserve(tenant.tenant_id), (e) =>
      isKairosError(e, "quota_exceeded"),
    );
    await dir.setQuota(tenant.tenant_id, { max_jobs: 6 });
    assert.equal(
      await counter.reserve(tenant.tenant_id),
      true,
      "raising the quota lets the next create in",
    );
    for (let i = 0; i < 10; i++) await counter.release(tenant.tenant_id);
    assert.equal(await readJobCount(kv, tenant.tenant_id), 0, "never below zero");
    assert.equal(
      await counter.reserve("tnotarecordxxxxxx"),
      false,
      "no tenant record: no quota, nothing counted",
    );
    assert.equal(await kv.get(jobCountKey("tnotarecordxxxxxx")), null);
  });

  it("the max_jobs counter under a burst: 200 concurrent creates of one tenant (and a second process) all count, none fails with conflict", async () => {
    const { kv } = await freshBucket();
    const dir = new KvTenantDirectory(kv, { clock: new FakeClock() });
    const { tenant } = await dir.createTenant("burst");
    await dir.setQuota(tenant.tenant_id, { max_jobs: 1_000 });
    // Two counters on one bucket stand for two API processes racing on the same CAS key.
    const a = new TenantJobCounter(kv, async () => 0, pace);
    const b = new TenantJobCounter(kv, async () => 0, pace);
    const results = await Promise.allSettled(
      Array.from({ length: 200 }, (_, i) => (i % 2 ? a : b).reserve(tenant.tenant_id)),
    );
    assert.deepEqual(
      results.filter((r) => r.status === "rejected").map((r) => String(r.reason)),
      [],
    );
    assert.equal(await readJobCount(kv, tenant.tenant_id), 200);
  });
});

describe("the max_jobs counter groups a process's updates", () => {
  it("reserves and releases that arrive during one CAS share the next write; the cap holds", async () => {
    const { kv } = await freshBucket();
    const dir = new KvTenantDirectory(kv, { clock: new FakeClock() });
    const { tenant } = await dir.createTenant("grouped");
    await dir.setQuota(tenant.tenant_id, { max_jobs: 150 });
    let writes = 0;
    const counted = new Proxy(kv, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (typeof v !== "function") return v;
        return (...args: unknown[]) => {
          if (prop === "update" || prop === "create") writes++;
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    });
    const counter = new TenantJobCounter(counted, async () => 0, pace);
    const results = await Promise.allSettled(
      Array.from({ length: 200 }, () => counter.reserve(tenant.tenant_id)),
    );
    assert.equal(results.filter((r) => r.status === "fulfilled").length, 150);
    assert.equal(await readJobCount(kv, tenant.tenant_id), 150);
    // One write for the first reserve, one for the 199 that queued behind it.
    assert.ok(writes <= 3, `${writes} counter writes for 200 reserves`);
    // Releases and reserves in one group: the releases first, then the reserves that fit.
    writes = 0;
    const mixed = await Promise.allSettled([
      counter.reserve(tenant.tenant_id), // alone: at the cap, refused
      ...Array.from({ length: 10 }, () => counter.release(tenant.tenant_id)),
      ...Array.from({ length: 12 }, () => counter.reserve(tenant.tenant_id)),
    ]);
    assert.equal(mixed[0].status, "rejected");
    const reserved = mixed.slice(11).filter((r) => r.status === "fulfilled").length;
    assert.equal(reserved, 10, "the ten places freed in the group are taken");
    assert.equal(await readJobCount(kv, tenant.tenant_id), 150);
    assert.ok(writes <= 2, `${writes} counter writes for the mixed group`);
  });
});

interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

function runCli(args: string[], stateDir: string): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const env: NodeJS.ProcessEnv = { ...process.env, KAIROS_STATE_DIR: stateDir };
    delete env["KAIROS_NATS_URL"];
    const child = spawn(process.execPath, ["--import", "tsx", "src/cli/main.ts", ...args], {
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

/** The CLI's flags for the test server's cluster `cluster`, as the admin (or `creds`). */
const adminFlags = (cluster: string, creds = nats.credsFor("admin")): string[] => [
  "--nats",
  nats.url,
  "--nats-creds",
  creds,
  "--cluster",
  cluster,
];

describe("kairos admin CLI", () => {
  let stateDir: string;
  before(() => {
    stateDir = mkdtempSync(join(tmpdir(), "kairos-admin-"));
  });
  after(() => rmSync(stateDir, { recursive: true, force: true }));

  it("tenant create --json prints a key that authenticates; key create/revoke work; a duplicate name fails", async () => {
    const cluster = `cli${++clusterSeq}`;
    const flags = adminFlags(cluster);
    const created = await runCli(
      ["admin", "tenant", "create", "acme", "--json", ...flags],
      stateDir,
    );
    assert.equal(created.code, 0, created.stderr);
    const out = JSON.parse(created.stdout) as {
      tenant_id: string;
      api_key: string;
      key_id: string;
    };
    const b = await openBuckets(nc, { clusterName: cluster, replicas: 1 });
    const dir = new KvTenantDirectory(b.tenants, { clock: new FakeClock(), authCacheTtlMs: 0 });
    assert.equal((await dir.authenticate(out.api_key))?.tenant_id, out.tenant_id);
    assert.equal((await dir.authenticate(out.api_key))?.name, "acme");

    const second = await runCli(
      ["admin", "key", "create", out.tenant_id, "--json", ...flags],
      stateDir,
    );
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
    assert.match(
      human.stdout,
      /^tenant +t[a-z2-7]{16} \(beta\)\napi key +kai_\S+\nkey id +k[a-z2-7]{16}\n$/,
    );
  });

  it("tenant quota sets the record with validation; tenant get --json shows it without secrets", async () => {
    const cluster = `cli${++clusterSeq}`;
    const flags = adminFlags(cluster);
    const created = await runCli(
      ["admin", "tenant", "create", "quota-cli", "--json", ...flags],
      stateDir,
    );
    assert.equal(created.code, 0, created.stderr);
    const { tenant_id } = JSON.parse(created.stdout) as { tenant_id: string };
    const hook = await runCli(
      ["admin", "tenant", "webhook", tenant_id, "https://example.com/h", "--json", ...flags],
      stateDir,
    );
    assert.equal(hook.code, 0, hook.stderr);
    const { webhook_secret } = JSON.parse(hook.stdout) as { webhook_secret: string };

    const set = await runCli(
      [
        "admin",
        "tenant",
        "quota",
        tenant_id,
        "--max-concurrent",
        "4",
        "--max-jobs",
        "20",
        "--max-waiting",
        "30",
        "--weight",
        "2",
        ...flags,
      ],
      stateDir,
    );
    assert.equal(set.code, 0, set.stderr);
    assert.match(set.stdout, /max_concurrent_runs 4, max_jobs 20, max_waiting_runs 30, weight 2/);

    const got = await runCli(["admin", "tenant", "get", tenant_id, "--json", ...flags], stateDir);
    assert.equal(got.code, 0, got.stderr);
    const rec = JSON.parse(got.stdout) as Record<string, unknown>;
    assert.deepEqual(Object.keys(rec).sort(), [
      "created_at",
      "job_count",
      "max_concurrent_runs",
      "max_jobs",
      "max_waiting_runs",
      "name",
      "registries",
      "tenant_id",
      "webhook_url",
      "weight",
    ]);
    assert.deepEqual(
      { ...rec, created_at: null },
      {
        tenant_id,
        name: "quota-cli",
        created_at: null,
        max_concurrent_runs: 4,
        max_jobs: 20,
        max_waiting_runs: 30,
        weight: 2,
        registries: [],
        webhook_url: "https://example.com/h",
        job_count: null,
      },
    );
    assert.ok(!got.stdout.includes(webhook_secret), "the webhook secret is never printed");

    const bad = await runCli(
      ["admin", "tenant", "quota", tenant_id, "--max-jobs", "0", ...flags],
      stateDir,
    );
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--max-jobs: must be a positive integer, got "0"/);
    const heavy = await runCli(
      ["admin", "tenant", "quota", tenant_id, "--weight", "1001", ...flags],
      stateDir,
    );
    assert.equal(heavy.code, 2);
    assert.match(heavy.stderr, /--weight: must be a positive number at most 1000/);
    const deep = await runCli(
      ["admin", "tenant", "quota", tenant_id, "--max-waiting", "100001", ...flags],
      stateDir,
    );
    assert.equal(deep.code, 2);
    assert.match(
      deep.stderr,
      /--max-waiting: must be a positive integer at most 100000, got "100001"/,
    );
    const none = await runCli(["admin", "tenant", "quota", tenant_id, ...flags], stateDir);
    assert.equal(none.code, 2);
    assert.match(none.stderr, /nothing to change/);
    const unknown = await runCli(
      ["admin", "tenant", "quota", "tzzzzzzzzzzzzzzzz", "--max-jobs", "3", ...flags],
      stateDir,
    );
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /tenant tzzzzzzzzzzzzzzzz not found/);
    const unknownGet = await runCli(
      ["admin", "tenant", "get", "tzzzzzzzzzzzzzzzz", "--json", ...flags],
      stateDir,
    );
    assert.equal(unknownGet.code, 2);
    assert.match(unknownGet.stderr, /not found/);
  });

  it("tenant egress sets, shows and clears the egress policy; bad destinations change nothing", async () => {
    const cluster = `cli${++clusterSeq}`;
    const flags = adminFlags(cluster);
    const created = await runCli(
      ["admin", "tenant", "create", "egress-cli", "--json", ...flags],
      stateDir,
    );
    assert.equal(created.code, 0, created.stderr);
    const { tenant_id } = JSON.parse(created.stdout) as { tenant_id: string };
    const set = await runCli(
      [
        "admin",
        "tenant",
        "egress",
        tenant_id,
        "api.example.com:8443",
        "*.example.org",
        "--json",
      ].concat(flags),
      stateDir,
    );
    assert.equal(set.code, 0, set.stderr);
    assert.deepEqual((JSON.parse(set.stdout) as { egress_policy: string[] }).egress_policy, [
      "api.example.com:8443",
      "*.example.org",
    ]);
    const shown = await runCli(["admin", "tenant", "get", tenant_id, ...flags], stateDir);
    assert.match(shown.stdout, /egress policy {7}api\.example\.com:8443 \*\.example\.org/);
    for (const bad of [["*"], ["http://example.com"], ["example.com:0"], []]) {
      const r = await runCli(["admin", "tenant", "egress", tenant_id, ...bad, ...flags], stateDir);
      assert.equal(r.code, 2, JSON.stringify(bad));
    }
    const both = await runCli(
      ["admin", "tenant", "egress", tenant_id, "example.com", "--clear", ...flags],
      stateDir,
    );
    assert.equal(both.code, 2);
    const still = await runCli(["admin", "tenant", "get", tenant_id, "--json", ...flags], stateDir);
    assert.equal((JSON.parse(still.stdout) as { egress_policy: string[] }).egress_policy.length, 2);
    const cleared = await runCli(
      ["admin", "tenant", "egress", tenant_id, "--clear", "--json", ...flags],
      stateDir,
    );
    assert.equal(cleared.code, 0, cleared.stderr);
    assert.ok(!("egress_policy" in (JSON.parse(cleared.stdout) as object)));
  });

  it("operator-key create/list/revoke: the key authenticates until revoked; list never shows a key; bad input and a non-admin refused", async () => {
    // The cluster name the harness's role users are made for (only this test uses it here).
    const cluster = "kairos";
    const flags = adminFlags(cluster);
    const created = await runCli(
      ["admin", "operator-key", "create", "ops@example", "--json", ...flags],
      stateDir,
    );
    assert.equal(created.code, 0, created.stderr);
    const out = JSON.parse(created.stdout) as {
      key_id: string;
      name: string;
      operator_key: string;
    };
    assert.match(out.operator_key, /^kop_[A-Za-z0-9_-]{43}$/);
    assert.match(out.key_id, /^o[a-z2-7]{16}$/);
    assert.equal(out.name, "ops@example");
    const b = await openBuckets(nc, { clusterName: cluster, replicas: 1 });
    const keys = new KvOperatorKeys(b.tenants, new FakeClock(), 0);
    assert.deepEqual(await keys.authenticate(out.operator_key), {
      keyId: out.key_id,
      name: "ops@example",
    });

    const human = await runCli(["admin", "operator-key", "create", "second", ...flags], stateDir);
    assert.equal(human.code, 0, human.stderr);
    assert.match(human.stdout, /^operator key +kop_\S+\nkey id +o[a-z2-7]{16}\n$/);
    assert.match(human.stderr, /shown only once/);

    const listed = await runCli(["admin", "operator-key", "list", "--json", ...flags], stateDir);
    assert.equal(listed.code, 0, listed.stderr);
    const list = JSON.parse(listed.stdout) as { key_id: string; name: string; revoked: boolean }[];
    assert.deepEqual(
      list.map((k) => [k.name, k.revoked]),
      [
        ["ops@example", false],
        ["second", false],
      ],
    );
    assert.ok(!listed.stdout.includes("kop_"), "list never shows a key");

    const revoked = await runCli(
      ["admin", "operator-key", "revoke", out.key_id, ...flags],
      stateDir,
    );
    assert.equal(revoked.code, 0, revoked.stderr);
    assert.equal(await keys.authenticate(out.operator_key), null);
    const after = await runCli(["admin", "operator-key", "list", ...flags], stateDir);
    assert.match(after.stdout, new RegExp(`^${out.key_id}  ops@example .*  revoked$`, "m"));

    // Bad input: a name outside the alphabet, an unknown key id — refused, naming what is wrong.
    const badName = await runCli(
      ["admin", "operator-key", "create", "two words", ...flags],
      stateDir,
    );
    assert.equal(badName.code, 2);
    assert.match(badName.stderr, /name: 1-63 letters/);
    const unknown = await runCli(
      ["admin", "operator-key", "revoke", "oaaaaaaaaaaaaaaaa", ...flags],
      stateDir,
    );
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /operator key oaaaaaaaaaaaaaaaa not found/);

    // An API node's credentials read operator keys but cannot make one.
    const apiCreds = adminFlags(cluster, nats.credsFor(["api"]));
    const forged = await runCli(
      ["admin", "operator-key", "create", "mallory", ...apiCreds],
      stateDir,
    );
    assert.equal(forged.code, 2, "an api node's credentials must not create an operator key");
    assert.match(
      forged.stderr,
      /Permissions Violation for Publish to "\$KV\.kairos_tenants\.opid\./,
    );
    assert.deepEqual(
      (await keys.list()).map((k) => k.name),
      ["ops@example", "second"],
    );
  });

  it("service create/get/list through the CLI: the secret shown once, never listed; bad input refused", async () => {
    const cluster = `cli${++clusterSeq}`;
    const flags = adminFlags(cluster);
    const tenant = await runCli(
      ["admin", "tenant", "create", "svc-owner", "--json", ...flags],
      stateDir,
    );
    assert.equal(tenant.code, 0, tenant.stderr);
    const { tenant_id } = JSON.parse(tenant.stdout) as { tenant_id: string };
    const created = await runCli(
      ["admin", "service", "create", "billing", "--tenant", tenant_id, "--json", ...flags],
      stateDir,
    );
    assert.equal(created.code, 0, created.stderr);
    const creds = JSON.parse(created.stdout) as {
      user: string;
      password: string;
      tenant_id: string;
    };
    assert.equal(creds.user, "service-billing");
    assert.equal(creds.tenant_id, tenant_id);
    assert.ok(creds.password.length >= 32, "a long secret");

    const got = await runCli(["admin", "service", "get", "billing", "--json", ...flags], stateDir);
    assert.equal(got.code, 0, got.stderr);
    assert.ok(!got.stdout.includes(creds.password), "get never shows the secret");
    assert.equal((JSON.parse(got.stdout) as { tenant_id: string }).tenant_id, tenant_id);
    const listed = await runCli(
      ["admin", "service", "list", "--tenant", tenant_id, "--json", ...flags],
      stateDir,
    );
    assert.equal(listed.code, 0, listed.stderr);
    const list = JSON.parse(listed.stdout) as { services: { user: string }[]; truncated: boolean };
    assert.deepEqual(
      list.services.map((v) => v.user),
      ["service-billing"],
    );
    assert.ok(!listed.stdout.includes(creds.password), "list never shows the secret");

    const again = await runCli(
      ["admin", "service", "create", "billing", "--tenant", tenant_id, ...flags],
      stateDir,
    );
    assert.equal(again.code, 2, "a second identity of the same name is refused");
    const noTenant = await runCli(
      ["admin", "service", "create", "other", "--tenant", "tnosuchtenant00000", ...flags],
      stateDir,
    );
    assert.equal(noTenant.code, 2);
    assert.match(noTenant.stderr, /tenant/);
    const unknown = await runCli(["admin", "service", "get", "nosuch", ...flags], stateDir);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /service nosuch not found/);
  });

  it("without --nats and no dev cluster it says how to find one", async () => {
    const r = await runCli(["admin", "key", "revoke", "kabc"], stateDir);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /no cluster found/);
  });
});
