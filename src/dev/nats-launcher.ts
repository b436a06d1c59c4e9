/**
 * Starts `nats-server` child processes on free loopback ports: used by `kairos dev` (one server
 * with JetStream, data in a local folder) and by the test harness (single servers and 3-server
 * clusters). Readiness is an event ("Server is ready" on stderr), never a sleep.
 *
 * With `auth` (the default of `kairos dev` and of every test harness) the server requires a user:
 * `authorization` comes from a generated config file (src/dev/nats-auth-files.ts) and each role's
 * credentials file is on the handle. Monitoring is never enabled here.
 */
import { spawn, type ChildProcess, type ChildProcessByStdio } from "node:child_process";
import { mkdirSync } from "node:fs";
import { createServer } from "node:net";
import type { Readable } from "node:stream";
import { KairosError } from "../lib/errors.ts";
import { writeNatsAuthFiles, type NatsAuthFiles } from "./nats-auth-files.ts";

export interface NatsServerHandle {
  readonly url: string;
  readonly port: number;
  readonly pid: number;
  readonly storeDir: string;
  /** The users and their credentials files when the server was launched with `auth`. */
  readonly auth: NatsAuthFiles | undefined;
  /** Sends SIGTERM and waits for exit (SIGKILL after `graceMs`). */
  stop(graceMs?: number): Promise<void>;
  /** Sends a signal without waiting (chaos tests: SIGKILL, SIGSTOP, SIGCONT). */
  signal(sig: NodeJS.Signals): void;
  readonly exited: Promise<number | null>;
}

/** Asks the OS for a free TCP port on 127.0.0.1. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

export interface LaunchOptions {
  storeDir: string;
  port?: number;
  serverName?: string;
  /**
   * Cluster routing: this server's route port and every member's route URL. `noAdvertise`: the
   * server does not tell clients the other members' client URLs (a client then uses only the URLs
   * it was given — a test that reaches the cluster through proxies keeps every connection on them).
   */
  cluster?: { name: string; port: number; routes: string[]; noAdvertise?: boolean };
  /** Wait for this stderr pattern too (e.g. a JetStream meta leader in a cluster). */
  readyPattern?: RegExp;
  readyTimeoutMs?: number;
  /** Called with every stderr line (logs). */
  onLog?: (line: string) => void;
  /**
   * Own process group (`kairos dev`): a terminal's Ctrl-C then reaches only the parent, which
   * stops its node before this server instead of both dying at once.
   */
  detached?: boolean;
  /**
   * Require authentication: generate users per role for these Kairos cluster names (their
   * subjects and buckets), with config and credentials under `dir`; or reuse files already
   * written (a cluster's servers share one set).
   */
  auth?: { dir: string; clusters?: readonly string[]; workers?: readonly string[] } | NatsAuthFiles;
  /** Serve clients over TLS only, with this certificate and key (PEM files). */
  tls?: { certFile: string; keyFile: string };
}

const live = new Set<ChildProcess>();
let exitHookInstalled = false;
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on("exit", () => {
    for (const c of live) c.kill("SIGKILL");
  });
}

/**
 * For test processes: a terminating signal (a test runner cancelling a file) first kills every
 * server this process launched, then ends the process as the signal would have. The `exit` hook
 * alone does not run when a signal ends a process. Not for `kairos dev`, which stops its servers
 * itself on a signal.
 */
export function killServersOnSignal(): void {
  for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"] as const)
    process.once(sig, () => {
      for (const c of live) c.kill("SIGKILL");
      process.kill(process.pid, sig); // the listener is gone: the default action now
    });
}

export async function launchNatsServer(opts: LaunchOptions): Promise<NatsServerHandle> {
  installExitHook();
  mkdirSync(opts.storeDir, { recursive: true });
  const port = opts.port ?? (await freePort());
  const auth =
    opts.auth === undefined
      ? undefined
      : "configFile" in opts.auth
        ? opts.auth
        : writeNatsAuthFiles(opts.auth.dir, opts.auth.clusters, opts.auth.workers);
  const child = spawn("nats-server", natsServerArgs(opts, port, auth), {
    stdio: ["ignore", "ignore", "pipe"],
    detached: opts.detached ?? false,
  });
  live.add(child);
  const exited = new Promise<number | null>((resolve) => {
    child.on("exit", (code) => {
      live.delete(child);
      resolve(code);
    });
  });
  await awaitReady(child, opts, port);
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    pid: child.pid!,
    storeDir: opts.storeDir,
    auth,
    exited,
    signal: (sig) => {
      child.kill(sig);
    },
    async stop(graceMs = 5000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGCONT");
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), graceMs);
      await exited;
      clearTimeout(t);
    },
  };
}

/** The command line: the config file holds only `authorization`; these flags win over the rest. */
function natsServerArgs(
  opts: LaunchOptions,
  port: number,
  auth: NatsAuthFiles | undefined,
): string[] {
  const args = [
    ...(auth ? ["-c", auth.configFile] : []),
    "-a",
    "127.0.0.1",
    "-p",
    String(port),
    "-js",
    "-sd",
    opts.storeDir,
  ];
  if (opts.serverName) args.push("--name", opts.serverName);
  if (opts.tls) args.push("--tls", "--tlscert", opts.tls.certFile, "--tlskey", opts.tls.keyFile);
  if (opts.cluster) {
    args.push(
      "--cluster_name",
      opts.cluster.name,
      "--cluster",
      `nats://127.0.0.1:${opts.cluster.port}`,
      "--routes",
      opts.cluster.routes.join(","),
    );
    if (opts.cluster.noAdvertise) args.push("--no_advertise");
  }
  return args;
}

/**
 * Resolves once the server logged "Server is ready" (and a line matched `readyPattern`, if
 * given); rejects, with the log's last 20 lines, on a spawn error, an early exit or the timeout
 * (which kills the server).
 */
function awaitReady(
  child: ChildProcessByStdio<null, null, Readable>,
  opts: LaunchOptions,
  port: number,
): Promise<void> {
  const timeoutMs = opts.readyTimeoutMs ?? 20_000;
  return new Promise<void>((resolve, reject) => {
    let buf = "";
    let serverReady = false;
    let patternSeen = opts.readyPattern === undefined;
    let tail: string[] = [];
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      const unmet = [
        serverReady ? "" : "'Server is ready' not logged",
        patternSeen ? "" : `no line matched ${String(opts.readyPattern)}`,
      ]
        .filter(Boolean)
        .join("; ");
      reject(
        new KairosError(
          "unavailable",
          `nats-server on port ${port} not ready in ${timeoutMs} ms (${unmet}):\n${tail.join("\n")}`,
        ),
      );
    }, timeoutMs);
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(
        new KairosError(
          "unavailable",
          `cannot start nats-server: ${e.message} (run scripts/bootstrap.sh)`,
          { cause: e },
        ),
      );
    });
    let settled = false;
    child.on("exit", (code) => {
      if (settled) return;
      clearTimeout(timer);
      reject(
        new KairosError("unavailable", `nats-server exited with ${code}:\n${tail.join("\n")}`),
      );
    });
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk: string) => {
      buf += chunk;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        opts.onLog?.(line);
        tail = [...tail.slice(-19), line];
        if (line.includes("Server is ready")) serverReady = true;
        if (opts.readyPattern?.test(line)) patternSeen = true;
        if (serverReady && patternSeen && !settled) {
          settled = true;
          clearTimeout(timer);
          resolve();
        }
      }
    });
  });
}
