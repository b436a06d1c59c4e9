/**
 * `kairos dev`'s Docker engine: if no engine answers and `dockerd` is installed and we are root,
 * start one as scripts/docker-up.sh does for `npm test` (`dockerd --bridge=none --iptables=false
 * --ip-masq=false`: no default bridge, task containers run with network none), and stop it again
 * on exit. An engine that was already running is left alone.
 *
 * Gotchas: dockerd is spawned in its own process group (detached), so the terminal's Ctrl-C
 * reaches only `kairos dev`, which then stops the node (and its containers) before the engine.
 * Its output goes to `<state dir>/dockerd.log`. Readiness is polled (the engine has no event we
 * could wait on before its socket answers), bounded at 30 s.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, openSync, closeSync } from "node:fs";
import { join } from "node:path";
import Dockerode from "dockerode";
import { systemClock } from "../lib/clock.ts";
import { withTimeout } from "../sandbox/docker-errors.ts";

export interface DockerEngine {
  /** True when this process started dockerd (and will stop it). */
  readonly started: boolean;
  readonly pid: number | undefined;
  /** One sentence for the operator: what was found or done. */
  readonly note: string;
  /** Stops dockerd if we started it (SIGTERM, SIGKILL after `graceMs`); a no-op otherwise. */
  stop(graceMs?: number): Promise<void>;
}

const READY_TIMEOUT_MS = 30_000;
const POLL_MS = 200;

async function answers(docker: Dockerode): Promise<boolean> {
  try {
    await withTimeout(docker.ping(), 2000, "ping", systemClock);
    return true;
  } catch {
    return false;
  }
}

function onPath(cmd: string): boolean {
  const dirs = (process.env["PATH"] ?? "").split(":").filter(Boolean);
  return dirs.some((d) => {
    try {
      closeSync(openSync(join(d, cmd), "r"));
      return true;
    } catch {
      return false;
    }
  });
}

const none = (note: string): DockerEngine => ({
  started: false,
  pid: undefined,
  note,
  stop: async () => undefined,
});

/** Makes sure an engine answers when one can be had; never throws (the dev node then uses `process`). */
export async function ensureDockerEngine(opts: { stateDir: string }): Promise<DockerEngine> {
  const docker = new Dockerode();
  if (await answers(docker)) return none("a Docker engine was already running");
  if (!onPath("dockerd")) return none("dockerd is not installed (apt-get install -y docker.io)");
  if (process.getuid?.() !== 0)
    return none("no Docker engine answers and starting dockerd needs root");
  mkdirSync(opts.stateDir, { recursive: true });
  const logPath = join(opts.stateDir, "dockerd.log");
  const logFd = openSync(logPath, "a");
  let child: ChildProcess;
  try {
    child = spawn("dockerd", ["--bridge=none", "--iptables=false", "--ip-masq=false"], {
      detached: true,
      stdio: ["ignore", logFd, logFd],
    });
  } finally {
    closeSync(logFd);
  }
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  let gone = false;
  void exited.then(() => (gone = true));
  child.once("error", () => (gone = true));
  const stop = async (graceMs = 20_000): Promise<void> => {
    if (gone) return;
    child.kill("SIGTERM");
    const t = setTimeout(() => child.kill("SIGKILL"), graceMs);
    await exited;
    clearTimeout(t);
  };
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline && !gone) {
    if (await answers(docker)) {
      return {
        started: true,
        pid: child.pid,
        note: `started dockerd (pid ${child.pid}, log ${logPath}); stopped again on exit`,
        stop,
      };
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
  await stop(5000);
  return none(`dockerd did not answer within ${READY_TIMEOUT_MS / 1000} s (see ${logPath})`);
}
