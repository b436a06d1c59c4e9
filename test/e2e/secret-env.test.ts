/**
 * Write-only task secrets through real nodes on a real nats-server (with authorization on): a
 * job created with `task.secret_env` shows only the names (create, get, list), its task sees the
 * values in its environment, the plaintext is nowhere in KV (job state, sealed store, runs), a
 * patch replaces the stored version, and a delete purges it at once. An API node without the
 * cluster key refuses secrets.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openBuckets, type Buckets } from "../../src/cluster/buckets.ts";
import {
  apiClient,
  eventually,
  startKairosFixture,
  type Api,
  type KairosFixture,
} from "../support/kairos.ts";

const SECRET = "hunter2-e2e-secret-value";

describe("secret_env", { timeout: 120_000 }, () => {
  let fx: KairosFixture;
  let buckets: Buckets;
  let api: Api;
  let noKey: Api;
  let tenantId: string;

  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), "kairos-secret-"));
    const keyFile = join(dir, "secret.key");
    writeFileSync(keyFile, randomBytes(32).toString("base64"), { mode: 0o600 });
    fx = await startKairosFixture();
    buckets = await openBuckets(fx.nc, { clusterName: "kairos", replicas: 1 });
    const node = fx.spawn("se-1", "api,scheduler,worker", ["--secret-key-file", keyFile]);
    const bare = fx.spawn("se-nokey", "api");
    const t = await fx.newTenant("secrets");
    tenantId = t.tenant_id;
    api = apiClient(await fx.apiUrl(node), t.api_key);
    noKey = apiClient(await fx.apiUrl(bare), t.api_key);
  });
  after(async () => {
    await fx?.stop();
  });

  const everywhereInKv = async (): Promise<string> => {
    const all = [
      ...(await buckets.actors.list(`job.*.${tenantId}.*`)),
      ...(await buckets.tenants.list(">")),
      ...(await buckets.runs.list(">")),
    ];
    return all.map((e) => Buffer.from(e.value).toString("utf8")).join("\n");
  };

  it("names only in responses, values in the task's env, no plaintext in KV, replaced by a patch, purged on delete", async () => {
    const created = await api.call<{ job_id: string; task: Record<string, unknown> }>(
      "POST",
      "/v1/jobs",
      {
        schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
        task: {
          image: "busybox",
          timeout_s: 10,
          env: { PLAIN: "p" },
          secret_env: { DB_PASSWORD: SECRET },
          // Prints the secret's length and first 7 characters only: the args must not carry it.
          args: [
            "/bin/sh",
            "-c",
            'echo "len=${#DB_PASSWORD} head=$(printf %s "$DB_PASSWORD" | cut -c1-7) plain=$PLAIN"',
          ],
        },
      },
    );
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const jobId = created.body.job_id;
    for (const body of [
      created.body,
      (await api.call("GET", `/v1/jobs/${jobId}`)).body,
      (await api.call("GET", "/v1/jobs")).body,
    ]) {
      const text = JSON.stringify(body);
      assert.ok(!text.includes(SECRET), `no secret value in ${text}`);
      assert.ok(text.includes(`"secret_env_names":["DB_PASSWORD"]`), `names shown in ${text}`);
      assert.ok(
        !text.includes("sealed_env") && !text.includes(`"secret_env"`),
        `no sealed reference in ${text}`,
      );
    }
    const run = await api.call<{ run_id: string }>("POST", `/v1/jobs/${jobId}/runs`);
    assert.equal(run.status, 202);
    const done = await eventually(
      async () => {
        const r = await api.call<{
          status: string;
          result: { output: string } | null;
          attempts: unknown[];
        }>("GET", `/v1/runs/${run.body.run_id}`);
        return r.body.status === "succeeded" || r.body.status === "failed" ? r.body : undefined;
      },
      60_000,
      "the run ends",
    );
    assert.equal(done.status, "succeeded", JSON.stringify(done));
    assert.match(
      done.result!.output,
      new RegExp(`len=${SECRET.length} head=${SECRET.slice(0, 7)} plain=p`),
    );

    const kv = await everywhereInKv();
    assert.ok(!kv.includes(SECRET), "the plaintext is nowhere in KV");
    const versions = await buckets.tenants.list(`sk.${tenantId}.${jobId}.*`);
    assert.equal(versions.length, 1);

    const patched = await api.call<{ task: Record<string, unknown> }>(
      "PATCH",
      `/v1/jobs/${jobId}`,
      {
        task: { image: "busybox", args: ["/bin/true"], timeout_s: 10, secret_env: { OTHER: "x" } },
      },
    );
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.deepEqual(patched.body.task.secret_env_names, ["OTHER"]);
    const after = await buckets.tenants.list(`sk.${tenantId}.${jobId}.*`);
    assert.equal(after.length, 1);
    assert.notEqual(after[0]!.key, versions[0]!.key, "the earlier version is gone");

    // A task without secret_env drops them (write-only: a patch of task must send them again).
    const plain = await api.call<{ task: Record<string, unknown> }>("PATCH", `/v1/jobs/${jobId}`, {
      task: { image: "busybox", args: ["/bin/true"], timeout_s: 10 },
    });
    assert.equal(plain.status, 200, JSON.stringify(plain.body));
    assert.equal(plain.body.task.secret_env_names, undefined);
    assert.deepEqual(
      await buckets.tenants.list(`sk.${tenantId}.${jobId}.*`),
      [],
      "no version left once the job has none",
    );
    await api.call("PATCH", `/v1/jobs/${jobId}`, {
      task: { image: "busybox", args: ["/bin/true"], timeout_s: 10, secret_env: { AGAIN: "y" } },
    });
    assert.equal((await buckets.tenants.list(`sk.${tenantId}.${jobId}.*`)).length, 1);

    assert.equal((await api.call("DELETE", `/v1/jobs/${jobId}`)).status, 204);
    assert.deepEqual(
      await buckets.tenants.list(`sk.${tenantId}.${jobId}.*`),
      [],
      "purged with the job",
    );
    assert.equal((await api.call("DELETE", `/v1/jobs/${jobId}`)).status, 404);
  });

  it("an API node without the cluster key refuses secret_env (and a name both plain and secret is refused)", async () => {
    const task = {
      image: "busybox",
      args: ["/bin/true"],
      timeout_s: 10,
      secret_env: { TOKEN: "t" },
    };
    const schedule = { at: new Date(Date.now() + 3600_000).toISOString() };
    const r = await noKey.call<{ error: { code: string; field?: string } }>("POST", "/v1/jobs", {
      schedule,
      task,
    });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.error.field, "task.secret_env");
    const both = await api.call<{ error: { code: string; field?: string } }>("POST", "/v1/jobs", {
      schedule,
      task: { ...task, env: { TOKEN: "plain" } },
    });
    assert.equal(both.status, 400, JSON.stringify(both.body));
    assert.equal(both.body.error.field, "task.secret_env.TOKEN");
  });
});
