/**
 * The docker executor pulling from a real private registry (Debian's docker-registry on loopback,
 * htpasswd auth, test/support/registry.ts), under the `if_missing` and `always` policies: a
 * tenant's credential pulls the private image and the attempt reports its registry digest; a
 * tenant without credentials is refused with a clear error — also once the image sits on the host
 * (pulled by the first tenant); a wrong password, an unknown image and an unreachable registry
 * are classified; a credential is never sent to another registry. Skipped unless KAIROS_DOCKER=1
 * or KAIROS_REQUIRE_DOCKER=1; then a missing docker-registry fails, saying how to install it.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import {
  createExecutor,
  isRetryable,
  type Executor,
  type TaskSpec,
} from "../../../src/sandbox/index.ts";
import {
  dockerClient,
  dockerSkip,
  importBusyboxImage,
  removeWorkerContainers,
} from "../../support/docker-image.ts";
import {
  pushImage,
  removeImage,
  startRegistry,
  type RegistryFixture,
} from "../../support/registry.ts";
import { identity, uniqueWorkerId } from "./fixtures.ts";

const workerId = uniqueWorkerId("w-registry");
const ALICE = { username: "alice", password: `alice-${randomUUID()}` };

describe(
  "docker executor: pulls from a private registry",
  { skip: dockerSkip(), timeout: 180_000 },
  () => {
    let registry: RegistryFixture;
    let ifMissing: Executor;
    let always: Executor;
    let image: string;
    let digest: string;
    const marker = `private-${randomUUID()}`;
    const auth = () => ({ registry: registry.host, ...ALICE });
    const task = (extra: Partial<TaskSpec> = {}): TaskSpec => ({
      image,
      args: ["cat", "/etc/kairos-marker"],
      env: {},
      timeoutS: 30,
      ...extra,
    });
    const asTenant = (tenantId: string) => ({ ...identity(workerId), tenantId });

    before(async () => {
      registry = await startRegistry({ [ALICE.username]: ALICE.password });
      // A distinct image (its marker), pushed, then removed from the host: the executor must pull it.
      const local = `kairos-test/private-src:${marker}`;
      await importBusyboxImage("kairos-test/private-src", marker, { "etc/kairos-marker": marker });
      image = `${registry.host}/team/private:1`;
      const [repo, tag] = [`${registry.host}/team/private`, "1"];
      await dockerClient().getImage(local).tag({ repo, tag });
      digest = await pushImage(image, { ...ALICE, serveraddress: registry.host });
      await removeImage(image);
      await assert.rejects(dockerClient().getImage(image).inspect(), "removed from the host");
      ifMissing = await createExecutor("docker", { workerId, docker: { pull: "if_missing" } });
      always = await createExecutor("docker", { workerId, docker: { pull: "always" } });
    });
    after(async () => {
      await ifMissing?.close();
      await always?.close();
      await removeWorkerContainers(workerId);
      if (image !== undefined) await removeImage(image);
      await registry?.stop();
    });

    it("pulls with the tenant's credential and reports the digest that ran", async () => {
      const r = await ifMissing.start(task({ registryAuth: auth() }), asTenant("t-alice")).result;
      assert.equal(r.outcome, "exited", JSON.stringify(r));
      assert.equal(r.exitCode, 0);
      assert.equal(r.output, marker);
      assert.equal(r.imageDigest, digest);
      assert.match(
        registry.log(),
        /auth\.user\.name="?alice/,
        "the registry saw alice's credential",
      );
    });

    it("refuses another tenant without credentials, although the image is now on the host", async () => {
      await dockerClient().getImage(image).inspect(); // present: pulled by the first tenant
      const r = await ifMissing.start(task(), asTenant("t-bob")).result;
      assert.equal(r.outcome, "error", JSON.stringify(r));
      assert.equal(r.error?.class, "image_unauthorized");
      assert.equal(isRetryable(r), false);
      assert.match(
        r.error?.message ?? "",
        /refused to serve image .*team\/private:1 without credentials/,
      );
      assert.match(r.error?.message ?? "", /this tenant has none/);
      assert.ok(!r.output.includes(marker), "the private image did not run");
      // The same under `always`, which pulls for every attempt.
      const a = await always.start(task(), asTenant("t-bob")).result;
      assert.equal(a.error?.class, "image_unauthorized", JSON.stringify(a));
    });

    it("the tenant that pulled runs the present image without pulling again (if_missing)", async () => {
      const before = registry.log().length;
      const r = await ifMissing.start(task({ registryAuth: auth() }), asTenant("t-alice")).result;
      assert.equal(r.output, marker, JSON.stringify(r));
      assert.equal(r.imageDigest, digest);
      assert.doesNotMatch(registry.log().slice(before), /team\/private\/manifests/, "no pull");
      // `always` asks the registry again, with the credential.
      const a = await always.start(task({ registryAuth: auth() }), asTenant("t-alice")).result;
      assert.equal(a.output, marker, JSON.stringify(a));
      assert.match(registry.log().slice(before), /team\/private\/manifests/, "pulled again");
    });

    it("classifies a wrong password, an unknown image and an unreachable registry", async () => {
      const wrong = await always.start(
        task({ registryAuth: { ...auth(), password: "not-the-password" } }),
        asTenant("t-mallory"),
      ).result;
      assert.equal(wrong.error?.class, "image_unauthorized", JSON.stringify(wrong));
      assert.match(wrong.error?.message ?? "", /refused this tenant's credentials/);
      assert.ok(!JSON.stringify(wrong).includes("not-the-password"), "no password in the result");

      const missing = await ifMissing.start(
        task({ image: `${registry.host}/team/missing:1`, registryAuth: auth() }),
        asTenant("t-alice"),
      ).result;
      assert.equal(missing.error?.class, "image_not_found", JSON.stringify(missing));
      assert.equal(isRetryable(missing), false);
      assert.match(missing.error?.message ?? "", /team\/missing:1 was not found in registry/);

      const down = await ifMissing.start(
        task({ image: "127.0.0.1:1/team/private:1" }),
        asTenant("t-alice"),
      ).result;
      assert.equal(down.error?.class, "registry_unreachable", JSON.stringify(down));
      assert.equal(isRetryable(down), true);
    });

    it("sends a credential only to the registry it was given for", async () => {
      const r = await always.start(
        task({ registryAuth: { ...auth(), registry: "127.0.0.1:1" } }),
        asTenant("t-alice"),
      ).result;
      assert.equal(r.error?.class, "image_unauthorized", JSON.stringify(r));
      assert.match(r.error?.message ?? "", /this tenant has none/);
    });
  },
);
