/**
 * The docker executor's hardening, on the real engine: an image's VOLUME path is a bounded
 * tmpfs (a task cannot write more than the bound, and no anonymous volume lands on the host's
 * disk), ulimits (nofile, core 0) are visible inside the container, an image named by ID is
 * refused, engine messages stay out of what the tenant sees, and an engine without seccomp is
 * refused at start-up (a fake engine on a unix socket answers `docker info`).
 */
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, copyFile, mkdir, mkdtemp, rm, symlink } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { createExecutor, type Executor, type TaskSpec } from "../../../src/sandbox/index.ts";
import { isKairosError } from "../../../src/lib/errors.ts";
import {
  dockerClient,
  dockerSkip,
  ensureTestImage,
  removeWorkerContainers,
} from "../../support/docker-image.ts";
import { identity, uniqueWorkerId } from "./fixtures.ts";

const run = promisify(execFile);
const workerId = uniqueWorkerId("w-docker-hard");
const VOLUME_IMAGE = "kairos-test/volume:1";

/** Busybox with `VOLUME /data` (world-writable, so the task's user could fill it). */
async function buildVolumeImage(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "kairos-volimg-"));
  try {
    const root = join(dir, "root");
    for (const d of ["bin", "tmp", "data"]) await mkdir(join(root, d), { recursive: true });
    await chmod(root, 0o755);
    await chmod(join(root, "tmp"), 0o1777);
    await chmod(join(root, "data"), 0o1777);
    await copyFile("/bin/busybox", join(root, "bin", "busybox"));
    await chmod(join(root, "bin", "busybox"), 0o755);
    for (const a of ["sh", "dd", "grep", "cat", "wc", "ls", "echo", "du"])
      await symlink("busybox", join(root, "bin", a));
    const tar = join(dir, "rootfs.tar");
    await run("tar", ["-C", root, "--numeric-owner", "--owner=0", "--group=0", "-cf", tar, "."]);
    await run("docker", ["import", "--change", "VOLUME /data", tar, VOLUME_IMAGE]);
    return VOLUME_IMAGE;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe("docker executor: hardening", { skip: dockerSkip() }, () => {
  let ex: Executor;
  let image: string;
  const logs: { msg: string; extra?: Record<string, unknown> }[] = [];
  const t = (args: string[], extra: Partial<TaskSpec> = {}): TaskSpec => ({
    image,
    args,
    env: {},
    timeoutS: 30,
    ...extra,
  });

  before(async () => {
    image = await ensureTestImage();
    await buildVolumeImage();
    ex = await createExecutor("docker", {
      workerId,
      docker: { volumeTmpfsSizeMb: 2, nofileLimit: 512 },
      log: (_level, msg, extra) => logs.push(extra === undefined ? { msg } : { msg, extra }),
    });
  });
  after(async () => {
    await ex?.close();
    await removeWorkerContainers(workerId);
  });

  it("a VOLUME path is a tmpfs bounded at volumeTmpfsSizeMb: writing 8 MiB stops at 2 MiB", async () => {
    const volumesBefore = (await dockerClient().listVolumes()).Volumes?.length ?? 0;
    const r = await ex.start(
      t(
        [
          "/bin/sh",
          "-c",
          "grep ' /data ' /proc/mounts; dd if=/dev/zero of=/data/fill bs=1024 count=8192 2>&1; echo bytes=$(wc -c < /data/fill)",
        ],
        { image: VOLUME_IMAGE },
      ),
      identity(workerId),
    ).result;
    assert.equal(r.outcome, "exited", JSON.stringify(r));
    assert.match(r.output, /^tmpfs \/data tmpfs [^\n]*size=2048k/m, r.output);
    assert.match(r.output, /No space left on device/);
    const bytes = Number(/bytes=(\d+)/.exec(r.output)?.[1]);
    assert.ok(bytes > 0 && bytes <= 2 * 1024 * 1024, `wrote ${bytes} bytes`);
    assert.equal(
      (await dockerClient().listVolumes()).Volumes?.length ?? 0,
      volumesBefore,
      "no anonymous volume was created",
    );
  });

  it("ulimits are visible inside the container: nofile 512 (soft and hard), core 0", async () => {
    const r = await ex.start(
      t([
        "/bin/sh",
        "-c",
        "echo nofile=$(ulimit -n)/$(ulimit -Hn) core=$(ulimit -c)/$(ulimit -Hc)",
      ]),
      identity(workerId),
    ).result;
    assert.equal(r.outcome, "exited", JSON.stringify(r));
    assert.match(r.output, /nofile=512\/512 core=0\/0/);
  });

  it("refuses an image named by ID (it could be another tenant's image)", async () => {
    const id = (await dockerClient().getImage(image).inspect()).Id.replace(/^sha256:/, "").slice(
      0,
      12,
    );
    const r = await ex.start(t(["true"], { image: id }), identity(workerId)).result;
    assert.equal(r.outcome, "error", JSON.stringify(r));
    assert.equal(r.error?.class, "image_not_found");
    assert.match(r.error?.message ?? "", /not by ID/);
  });

  it("tells the tenant what failed, not what the engine said; the operator's log has the engine's words", async () => {
    const id = identity(workerId);
    const r = await ex.start(t(["true"], { image: "kairos-test/does-not-exist:1" }), id).result;
    assert.equal(
      r.error?.message,
      "image kairos-test/does-not-exist:1 is not available on this worker",
    );
    const logged = logs.find((l) => l.extra?.["run_id"] === id.runId);
    assert.ok(logged, JSON.stringify(logs));
    assert.match(String(logged.extra?.["engine_message"]), /No such image/i);
  });

  it("refuses an engine that runs containers without seccomp", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kairos-fake-engine-"));
    const socketPath = join(dir, "docker.sock");
    const server: Server = createServer((req, res) => {
      res.setHeader("content-type", "application/json");
      if (req.url?.endsWith("/version"))
        res.end(JSON.stringify({ Version: "fake", ApiVersion: "1.41" }));
      else if (req.url?.endsWith("/info"))
        res.end(JSON.stringify({ SecurityOptions: ["name=seccomp,profile=unconfined"] }));
      else res.writeHead(404).end("{}");
    });
    await new Promise<void>((r) => server.listen(socketPath, r));
    try {
      await assert.rejects(
        createExecutor("docker", { workerId, docker: { socketPath, sweepIntervalMs: 0 } }),
        (e: unknown) =>
          isKairosError(e, "unavailable") && /seccomp profile is unconfined/.test(e.message),
      );
    } finally {
      await new Promise((r) => server.close(r));
      await rm(dir, { recursive: true, force: true });
    }
  });
});
