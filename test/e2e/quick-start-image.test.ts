/**
 * `npm start` makes the quick start's image available without a registry (src/dev/busybox-image.ts):
 * when the engine lacks it, it is imported from the host's static busybox. The fresh-clone check
 * cannot show that path on a machine whose engine already has `busybox:latest` (it is kept, and
 * not deleted for a test), so this test imports under a name of its own: the image is made, a
 * container of it runs the quick start's command with no network, and a second call finds it.
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { ensureQuickStartImage } from "../../src/dev/busybox-image.ts";
import { dockerClient, dockerSkip } from "../support/docker-image.ts";

const skip = dockerSkip();

describe("quick-start image imported from the static busybox (docker)", { skip }, () => {
  const docker = dockerClient();
  const image = { repo: "kairos-test/quick-start-busybox", tag: `t${process.pid}` };
  const ref = `${image.repo}:${image.tag}`;
  after(async () => {
    await docker
      .getImage(ref)
      .remove({ force: true })
      .catch(() => undefined);
  });

  it("imports the image when missing, runs the quick start's command in it, and keeps it the next time", async () => {
    const made = await ensureQuickStartImage(docker, "/bin/busybox", image);
    assert.match(made, new RegExp(`^image ${ref} imported from /bin/busybox \\(\\d+ applets\\)$`));
    const container = await docker.createContainer({
      Image: ref,
      Cmd: ["/bin/sh", "-c", "echo hello from $KAIROS_RUN_ID"],
      Env: ["KAIROS_RUN_ID=r1"],
      HostConfig: { NetworkMode: "none", AutoRemove: false },
    });
    try {
      await container.start();
      const { StatusCode } = (await container.wait()) as { StatusCode: number };
      const logs = (await container.logs({ stdout: true, stderr: true })).toString("utf8");
      assert.equal(StatusCode, 0);
      assert.match(logs, /hello from r1/);
    } finally {
      await container.remove({ force: true });
    }
    assert.equal(
      await ensureQuickStartImage(docker, "/bin/busybox", image),
      `image ${ref} present`,
    );
  });
});
