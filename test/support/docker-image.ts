/**
 * Test support for the Docker suites: whether they run, and the local test image.
 *
 * - `dockerSkip()`: Docker tests are skipped only when neither KAIROS_DOCKER=1 nor
 *   KAIROS_REQUIRE_DOCKER=1 is set; with either set and no engine they fail (CI).
 * - `ensureTestImage()`: no registry is reachable, so the image `kairos-test/busybox:1` is
 *   built locally by importing a tarball of Debian's busybox-static (/bin/busybox) plus
 *   applet symlinks. Idempotent (skips when the tag exists) and memoized per process; two
 *   processes racing both import identical content under the same tag, which is harmless.
 */
import { execFile } from "node:child_process";
import { chmod, mkdir, mkdtemp, copyFile, rm, symlink, access, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import Dockerode from "dockerode";

export const TEST_IMAGE = "kairos-test/busybox:1";
const BUSYBOX = "/bin/busybox";
const APPLETS = [
  "sh",
  "echo",
  "sleep",
  "cat",
  "yes",
  "head",
  "tail",
  "dd",
  "wget",
  "nc",
  "touch",
  "id",
  "ls",
  "seq",
  "true",
  "false",
  "env",
  "ip",
  "ps",
  "wc",
  "printf",
  "test",
  "mkdir",
  "rm",
  "grep",
  "tr",
  "kill",
  "cp",
  "chmod",
] as const;

const run = promisify(execFile);

/** A reason to skip Docker tests, or false when they must run. */
export function dockerSkip(): string | false {
  const on = process.env["KAIROS_DOCKER"] === "1" || process.env["KAIROS_REQUIRE_DOCKER"] === "1";
  return on ? false : "Docker tests need KAIROS_DOCKER=1 (or KAIROS_REQUIRE_DOCKER=1)";
}

export function dockerClient(): Dockerode {
  return new Dockerode();
}

let building: Promise<string> | undefined;

/** Builds the busybox test image once; resolves to its tag. */
export function ensureTestImage(): Promise<string> {
  building ??= build().catch((e: unknown) => {
    building = undefined;
    throw e;
  });
  return building;
}

async function build(): Promise<string> {
  const docker = dockerClient();
  try {
    await docker.getImage(TEST_IMAGE).inspect();
    return TEST_IMAGE;
  } catch (e) {
    if ((e as { statusCode?: number }).statusCode !== 404) throw e;
  }
  await importBusyboxImage("kairos-test/busybox", "1");
  return TEST_IMAGE;
}

/**
 * Imports a busybox image as `repo:tag` (Debian's busybox-static and its applet links), with
 * `files` (path under / → content, mode 0644) added: a distinct image per distinct content.
 */
export async function importBusyboxImage(
  repo: string,
  tag: string,
  files: Readonly<Record<string, string>> = {},
): Promise<void> {
  const docker = dockerClient();
  await access(BUSYBOX).catch(() => {
    throw new Error(`${BUSYBOX} is missing: apt-get install -y busybox-static`);
  });
  const dir = await mkdtemp(join(tmpdir(), "kairos-img-"));
  try {
    const root = join(dir, "root");
    await mkdir(join(root, "bin"), { recursive: true });
    await mkdir(join(root, "tmp"));
    await mkdir(join(root, "etc"));
    await chmod(root, 0o755);
    await chmod(join(root, "tmp"), 0o1777); // the tmpfs copies the image's /tmp mode
    await copyFile(BUSYBOX, join(root, "bin", "busybox"));
    await chmod(join(root, "bin", "busybox"), 0o755);
    for (const a of APPLETS) await symlink("busybox", join(root, "bin", a));
    for (const [path, content] of Object.entries(files)) {
      const file = join(root, path);
      await mkdir(dirname(file), { recursive: true });
      await writeFile(file, content, { mode: 0o644 });
    }
    const tar = join(dir, "rootfs.tar");
    await run("tar", ["-C", root, "--numeric-owner", "--owner=0", "--group=0", "-cf", tar, "."]);
    const stream = await docker.importImage(tar, { repo, tag });
    await new Promise<void>((resolve, reject) => {
      docker.modem.followProgress(stream, (err: unknown) =>
        err ? reject(err instanceof Error ? err : new Error("import failed")) : resolve(),
      );
    });
    await docker.getImage(`${repo}:${tag}`).inspect();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Containers (any state) carrying `kairos.run_id=<runId>`. */
export async function containersOfRun(runId: string): Promise<Dockerode.ContainerInfo[]> {
  return dockerClient().listContainers({
    all: true,
    filters: { label: [`kairos.run_id=${runId}`] },
  });
}

/** Removes every container of the given worker id (test clean-up). */
export async function removeWorkerContainers(workerId: string): Promise<void> {
  const docker = dockerClient();
  const list = await docker.listContainers({
    all: true,
    filters: { label: [`kairos.worker_id=${workerId}`] },
  });
  await Promise.all(
    list.map((c) =>
      docker
        .getContainer(c.Id)
        .remove({ force: true })
        .catch(() => undefined),
    ),
  );
}

/**
 * Arms a waiter for a container event (e.g. "start") of the given run, before acting.
 * `await` the returned arm call first; then await `.event` after starting the run.
 */
export async function armContainerEvent(
  runId: string,
  event: string,
  timeoutMs = 30_000,
): Promise<{ event: Promise<void>; cancel: () => void }> {
  const stream = (await dockerClient().getEvents({
    filters: { type: ["container"], event: [event], label: [`kairos.run_id=${runId}`] },
  })) as NodeJS.ReadableStream & { destroy?: () => void };
  let timer: NodeJS.Timeout | undefined;
  const cancel = (): void => {
    if (timer) clearTimeout(timer);
    stream.destroy?.();
  };
  const seen = new Promise<void>((resolve, reject) => {
    timer = setTimeout(
      () =>
        reject(new Error(`no container ${event} event for run ${runId} within ${timeoutMs} ms`)),
      timeoutMs,
    );
    stream.on("data", () => {
      cancel();
      resolve();
    });
    stream.on("error", (e: Error) => {
      cancel();
      reject(e);
    });
  });
  return { event: seen, cancel };
}
