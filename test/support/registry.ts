/**
 * A private image registry for the pull tests: Debian's `docker-registry` (distribution 2.x)
 * serving on a free loopback port with htpasswd (bcrypt) authentication, its storage and config in
 * a temporary directory, stopped (and the directory removed) by `stop()`. The engine treats
 * 127.0.0.0/8 registries as insecure-allowed, so plain HTTP works without engine configuration.
 *
 * Needs `docker-registry` and `htpasswd` (apache2-utils): `scripts/bootstrap.sh --registry`
 * installs them as root (`npm test` passes it); without them `startRegistry` fails saying so.
 * Readiness is the registry's own "listening on" log line, not a poll.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { freePort } from "../../src/dev/nats-launcher.ts";
import { dockerClient } from "./docker-image.ts";

const run = promisify(execFile);

export const REGISTRY_BIN = "/usr/bin/docker-registry";
export const HTPASSWD_BIN = "/usr/bin/htpasswd";
const READY_TIMEOUT_MS = 20_000;

export interface RegistryFixture {
  /** `127.0.0.1:<port>`: the registry part of image references. */
  readonly host: string;
  /** Everything the registry logged so far (requests, with the user names it authenticated). */
  log(): string;
  stop(): Promise<void>;
}

/** Why the registry tests cannot run here, with the command that fixes it; undefined when they can. */
export function registryMissing(): string | undefined {
  const missing = [
    ...(existsSync(REGISTRY_BIN) ? [] : ["docker-registry"]),
    ...(existsSync(HTPASSWD_BIN) ? [] : ["apache2-utils"]),
  ];
  return missing.length === 0
    ? undefined
    : `the registry tests need ${missing.join(" and ")}: as root, run scripts/bootstrap.sh --registry (or apt-get install -y docker-registry apache2-utils)`;
}

/** Starts a registry accepting `users` (name → password). */
export async function startRegistry(
  users: Readonly<Record<string, string>>,
): Promise<RegistryFixture> {
  const missing = registryMissing();
  if (missing !== undefined) throw new Error(missing);
  const dir = await mkdtemp(join(tmpdir(), "kairos-registry-"));
  let child: ChildProcess | undefined;
  try {
    const lines: string[] = [];
    for (const [name, password] of Object.entries(users)) {
      const { stdout } = await run(HTPASSWD_BIN, ["-Bbn", name, password]);
      lines.push(stdout.trim());
    }
    await writeFile(join(dir, "htpasswd"), `${lines.join("\n")}\n`);
    const port = await freePort();
    const host = `127.0.0.1:${port}`;
    await writeFile(
      join(dir, "config.yml"),
      [
        "version: 0.1",
        "log:",
        "  level: info",
        "  formatter: text",
        "storage:",
        "  filesystem:",
        `    rootdirectory: ${join(dir, "data")}`,
        "http:",
        `  addr: ${host}`,
        "auth:",
        "  htpasswd:",
        "    realm: kairos-test",
        `    path: ${join(dir, "htpasswd")}`,
        "",
      ].join("\n"),
    );
    const proc = spawn(REGISTRY_BIN, ["serve", join(dir, "config.yml")], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    child = proc;
    let out = "";
    const ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new Error(
              `registry did not log "listening on ${host}" within ${READY_TIMEOUT_MS} ms:\n${out}`,
            ),
          ),
        READY_TIMEOUT_MS,
      );
      const onData = (d: Buffer): void => {
        out += d.toString();
        if (out.includes(`listening on ${host}`)) {
          clearTimeout(timer);
          resolve();
        }
      };
      proc.stdout.on("data", onData);
      proc.stderr.on("data", onData);
      proc.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`registry exited (${code}) before listening:\n${out}`));
      });
    });
    await ready;
    const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
    return {
      host,
      log: () => out,
      async stop() {
        proc.kill("SIGTERM");
        await exited;
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (e) {
    child?.kill("SIGKILL");
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
}

/**
 * Pushes local image `name` (tagged on the registry) with the given credentials; resolves to the
 * digest the registry stored (`sha256:…`).
 */
export async function pushImage(
  name: string,
  auth: { username: string; password: string; serveraddress: string },
): Promise<string> {
  const docker = dockerClient();
  const stream = await docker.getImage(name).push({ authconfig: auth });
  return new Promise<string>((resolve, reject) => {
    let digest: string | undefined;
    let error: string | undefined;
    docker.modem.followProgress(
      stream,
      (err: unknown) => {
        if (err) reject(err instanceof Error ? err : new Error(JSON.stringify(err)));
        else if (error !== undefined) reject(new Error(`push of ${name}: ${error}`));
        else if (digest === undefined) reject(new Error(`push of ${name}: no digest reported`));
        else resolve(digest);
      },
      (line: { error?: string; aux?: { Digest?: string } }) => {
        if (line.error !== undefined) error ??= line.error;
        if (typeof line.aux?.Digest === "string") digest = line.aux.Digest;
      },
    );
  });
}

/** Removes every local tag of the image `name` points at, and the image (test set-up). */
export async function removeImage(name: string): Promise<void> {
  const docker = dockerClient();
  let id: string;
  try {
    id = (await docker.getImage(name).inspect()).Id;
  } catch {
    return;
  }
  await docker.getImage(id).remove({ force: true });
}
