/**
 * The image the README's quick start uses (`busybox`, i.e. `busybox:latest`), made available on
 * the dev machine without a registry: imported from Debian's static busybox (`/bin/busybox`,
 * package busybox-static) plus a symlink per applet, the way the test image is built
 * (test/support/docker-image.ts). Only when the tag is missing: a real busybox image that is
 * already there is kept.
 */
import { execFile } from "node:child_process";
import { chmod, copyFile, mkdir, mkdtemp, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import type Dockerode from "dockerode";
import { statusOf } from "../sandbox/docker-errors.ts";
import { staticBusyboxProblem } from "../sandbox/supervisor.ts";

export const QUICK_START_IMAGE = { repo: "busybox", tag: "latest" } as const;

const run = promisify(execFile);

/**
 * Ensures `busybox:latest` (or `image`: a test imports under its own name) exists; resolves to a
 * sentence saying what was found or done.
 */
export async function ensureQuickStartImage(
  docker: Dockerode,
  busybox = "/bin/busybox",
  image: { repo: string; tag: string } = QUICK_START_IMAGE,
): Promise<string> {
  const ref = `${image.repo}:${image.tag}`;
  try {
    await docker.getImage(ref).inspect();
    return `image ${ref} present`;
  } catch (e) {
    if (statusOf(e) !== 404) throw e;
  }
  const problem = await staticBusyboxProblem(busybox);
  if (problem !== undefined) return `image ${ref} missing and not imported: ${problem}`;
  const applets = (await run(busybox, ["--list"])).stdout
    .split("\n")
    .map((s) => s.trim())
    .filter((s) => /^[a-z0-9_.[-]+$/i.test(s) && s !== "busybox");
  const dir = await mkdtemp(join(tmpdir(), "kairos-busybox-"));
  try {
    const root = join(dir, "root");
    for (const d of ["bin", "etc", "tmp"]) await mkdir(join(root, d), { recursive: true });
    await chmod(root, 0o755);
    await chmod(join(root, "tmp"), 0o1777);
    await copyFile(busybox, join(root, "bin", "busybox"));
    await chmod(join(root, "bin", "busybox"), 0o755);
    for (const a of applets) await symlink("busybox", join(root, "bin", a));
    const tar = join(dir, "rootfs.tar");
    await run("tar", ["-C", root, "--numeric-owner", "--owner=0", "--group=0", "-cf", tar, "."]);
    const stream = await docker.importImage(tar, { repo: image.repo, tag: image.tag });
    await new Promise<void>((resolve, reject) => {
      docker.modem.followProgress(stream, (err: unknown) =>
        err ? reject(err instanceof Error ? err : new Error("image import failed")) : resolve(),
      );
    });
    await docker.getImage(ref).inspect();
    return `image ${ref} imported from ${busybox} (${applets.length} applets)`;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
