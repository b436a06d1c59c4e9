/**
 * A private image through a real cluster: a local registry (Debian's docker-registry on loopback,
 * htpasswd auth), a real nats-server and a `kairos node` with the docker executor (`--pull
 * if_missing`). The operator gives tenant A a credential with `kairos admin tenant registry …
 * --password-stdin` (the real CLI process); A's job pulls and runs the private image and its
 * attempt records the registry digest. Tenant B naming the same image — by then on the worker
 * host — fails at once with a clear error, not retried. The password appears in no API answer,
 * no admin output and no node log. Skipped unless KAIROS_DOCKER=1 or KAIROS_REQUIRE_DOCKER=1; then
 * a missing docker-registry fails, saying how to install it (test/support/registry.ts).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  apiClient,
  eventually,
  startKairosFixture,
  type Api,
  type KairosFixture,
} from "../support/kairos.ts";
import type { NodeProc } from "../support/nodes.ts";
import {
  dockerClient,
  dockerSkip,
  importBusyboxImage,
  removeWorkerContainers,
} from "../support/docker-image.ts";
import {
  pushImage,
  removeImage,
  startRegistry,
  type RegistryFixture,
} from "../support/registry.ts";

interface Run {
  run_id: string;
  status: string;
  reason: string | null;
  result: { exit_code: number | null; output: string } | null;
  attempts: { attempt: number; error: string | null; image_digest?: string }[];
}

const USER = "team-a";
const PASSWORD = `pw-${randomUUID()}`;

/** `kairos admin …` as its own process, `stdin` piped in. */
function admin(
  args: string[],
  stdin: string,
  env: Record<string, string>,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ["--import", "tsx", "src/cli/main.ts", "admin", ...args],
      {
        env: { ...process.env, ...env },
        stdio: ["pipe", "pipe", "pipe"],
      },
    );
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(stdin);
  });
}

describe(
  "registry credentials end to end (docker)",
  { skip: dockerSkip(), timeout: 240_000 },
  () => {
    let registry: RegistryFixture;
    let fx: KairosFixture;
    let node: NodeProc;
    let dir: string;
    let keyFile: string;
    let image: string;
    let digest: string;
    let a: Api;
    let b: Api;
    let tenantA: string;
    const marker = `private-${randomUUID()}`;
    const adminFlags = () => [
      "--nats",
      fx.nats.url,
      "--nats-creds",
      fx.nats.credsFor("admin"),
      "--cluster",
      "kairos",
    ];
    const adminEnv = () => ({ KAIROS_STATE_DIR: join(dir, "state") });

    before(async () => {
      registry = await startRegistry({ [USER]: PASSWORD });
      await importBusyboxImage("kairos-test/private-e2e", marker, { "etc/kairos-marker": marker });
      image = `${registry.host}/team-a/app:1`;
      await dockerClient()
        .getImage(`kairos-test/private-e2e:${marker}`)
        .tag({ repo: `${registry.host}/team-a/app`, tag: "1" });
      digest = await pushImage(image, {
        username: USER,
        password: PASSWORD,
        serveraddress: registry.host,
      });
      await removeImage(image); // the worker must pull it
      dir = mkdtempSync(join(tmpdir(), "kairos-registry-e2e-"));
      keyFile = join(mkdtempSync(join(dir, "key-")), "secret.key"); // not in the state dir (the dev key)
      writeFileSync(keyFile, randomBytes(32).toString("base64"), { mode: 0o600 });
      fx = await startKairosFixture();
      node = fx.spawn("rc1", "api,scheduler,worker", [
        "--executor",
        "docker",
        "--pull",
        "if_missing",
        "--secret-key-file",
        keyFile,
        // A loopback registry is allowed only by a policy entry naming it.
        "--image-policy",
        `kairos-test/,${registry.host}/`,
      ]);
      const url = await fx.apiUrl(node);
      const ta = await fx.newTenant("registry-a");
      tenantA = ta.tenant_id;
      a = apiClient(url, ta.api_key);
      b = apiClient(url, (await fx.newTenant("registry-b")).api_key);
    });
    after(async () => {
      await fx?.stop();
      await removeWorkerContainers("rc1");
      if (image !== undefined) await removeImage(image);
      await registry?.stop();
      if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
    });

    /** Creates a job running `cat` of the marker in `image`, triggers it, returns the ended run. */
    async function runOnce(api: Api, phase: string): Promise<Run> {
      const job = await api.call<{ job_id: string }>("POST", "/v1/jobs", {
        schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
        task: { image, args: ["cat", "/etc/kairos-marker"], timeout_s: 30 },
        retry: { max_attempts: 3, backoff: "fixed", base_s: 1, max_s: 1 },
      });
      assert.equal(job.status, 201, JSON.stringify(job.body));
      const now = await api.call<Run>("POST", `/v1/jobs/${job.body.job_id}/runs`);
      assert.equal(now.status, 202, JSON.stringify(now.body));
      return eventually(
        async () => {
          const r = (await api.call<Run>("GET", `/v1/runs/${now.body.run_id}`)).body;
          return r.status === "succeeded" || r.status === "failed" ? r : undefined;
        },
        90_000,
        phase,
      );
    }

    it("the operator stores tenant A's credential from stdin; `tenant get` shows the registry only", async () => {
      const set = await admin(
        [
          "tenant",
          "registry",
          tenantA,
          registry.host,
          "--username",
          USER,
          "--password-stdin",
          "--secret-key-file",
          keyFile,
          "--json",
          ...adminFlags(),
        ],
        `${PASSWORD}\n`,
        adminEnv(),
      );
      assert.equal(set.code, 0, set.stderr);
      assert.deepEqual(JSON.parse(set.stdout), {
        tenant_id: tenantA,
        registry: registry.host,
        registries: [registry.host],
      });
      const got = await admin(
        ["tenant", "get", tenantA, "--json", ...adminFlags()],
        "",
        adminEnv(),
      );
      assert.equal(got.code, 0, got.stderr);
      assert.deepEqual((JSON.parse(got.stdout) as { registries: string[] }).registries, [
        registry.host,
      ]);
      for (const out of [set.stdout, set.stderr, got.stdout, got.stderr])
        assert.ok(!out.includes(PASSWORD), "no password in the admin output");

      // Without the cluster key nothing is stored, and the error says what to pass.
      const noKey = await admin(
        [
          "tenant",
          "registry",
          tenantA,
          registry.host,
          "--username",
          USER,
          "--password-stdin",
          ...adminFlags(),
        ],
        `${PASSWORD}\n`,
        adminEnv(),
      );
      assert.equal(noKey.code, 2, noKey.stderr);
      assert.match(noKey.stderr, /--secret-key-file/);
    });

    it("tenant A's job pulls the private image with A's credential and records its digest", async () => {
      const run = await runOnce(a, "tenant A's run ended");
      assert.equal(run.status, "succeeded", JSON.stringify(run));
      assert.equal(run.result?.output, marker);
      assert.equal(run.attempts.length, 1);
      assert.equal(run.attempts[0]!.image_digest, digest);
      assert.match(registry.log(), new RegExp(`auth\\.user\\.name="?${USER}`), "pulled as team-a");
    });

    it("tenant B naming the same image (now on the worker) fails at once with a clear error", async () => {
      await dockerClient().getImage(image).inspect(); // on the host since A's pull
      const run = await runOnce(b, "tenant B's run ended");
      assert.equal(run.status, "failed", JSON.stringify(run));
      assert.equal(run.attempts.length, 1, "not retried");
      assert.match(run.reason ?? "", /^not retryable: /);
      assert.match(
        run.attempts[0]!.error ?? "",
        new RegExp(
          `registry ${registry.host.replace(/\./g, "\\.")} refused to serve image .*team-a/app:1 without credentials, and this tenant has none for it`,
        ),
      );
      assert.notEqual(run.result?.output, marker);
      assert.equal(run.attempts[0]!.image_digest, undefined);
    });

    it("the password is in no API answer and no node log", async () => {
      const seen = [
        JSON.stringify((await a.call("GET", "/v1/jobs")).body),
        JSON.stringify((await a.call("GET", "/v1/runs")).body),
        JSON.stringify(node.events),
        node.stderr(),
      ];
      for (const text of seen) assert.ok(!text.includes(PASSWORD), "no password");
    });

    it("--clear removes the credential; `tenant get` then shows none", async () => {
      const clear = await admin(
        ["tenant", "registry", tenantA, registry.host, "--clear", "--json", ...adminFlags()],
        "",
        adminEnv(),
      );
      assert.equal(clear.code, 0, clear.stderr);
      assert.deepEqual(JSON.parse(clear.stdout), {
        tenant_id: tenantA,
        registry: registry.host,
        registries: [],
      });
      const got = await admin(
        ["tenant", "get", tenantA, "--json", ...adminFlags()],
        "",
        adminEnv(),
      );
      assert.deepEqual((JSON.parse(got.stdout) as { registries: string[] }).registries, []);
      // (Schedulers see it within 5 s: test/unit/secrets/registry-credentials.test.ts.)
    });
  },
);
