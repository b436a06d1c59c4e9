/**
 * A test process ended by a signal (a test runner cancelling a file) takes the nats-servers it
 * launched with it: `killServersOnSignal` (src/dev/nats-launcher.ts). Without it, the servers
 * are re-parented to init and keep running.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const launcher = fileURLToPath(new URL("../../../src/dev/nats-launcher.ts", import.meta.url));

/** True while a process with this pid runs (a zombie, killed and not yet reaped, does not). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

for (const sig of ["SIGTERM", "SIGINT"] as const)
  test(`a ${sig} to the launching process kills its nats-server`, async () => {
    const script = `
      import { killServersOnSignal, launchNatsServer } from ${JSON.stringify(launcher)};
      import { mkdtempSync } from "node:fs";
      import { tmpdir } from "node:os";
      import { join } from "node:path";
      killServersOnSignal();
      const s = await launchNatsServer({ storeDir: join(mkdtempSync(join(tmpdir(), "kairos-sig-")), "s") });
      console.log("pid " + s.pid);
      setInterval(() => {}, 1000); // stay alive until the signal
    `;
    const child = spawn(
      process.execPath,
      ["--import", "tsx", "--input-type=module", "-e", script],
      {
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    let serverPid = 0;
    try {
      const lines = createInterface({ input: child.stdout });
      for await (const line of lines) {
        const m = /^pid (\d+)$/.exec(line);
        if (m) {
          serverPid = Number(m[1]);
          break;
        }
      }
      assert.ok(serverPid > 0 && alive(serverPid), "the nats-server runs");
      const exited = once(child, "exit");
      child.kill(sig);
      const [code, signal] = (await exited) as [number | null, NodeJS.Signals | null];
      assert.equal(signal, sig, `the process ended by ${sig} (code ${code})`);
      // SIGKILL was sent before the process ended; no event tells of a non-child's end: poll
      // /proc, bounded.
      for (let i = 0; i < 250 && alive(serverPid); i++) await new Promise((r) => setTimeout(r, 20));
      assert.equal(alive(serverPid), false, "its nats-server is gone");
    } finally {
      if (serverPid > 0 && alive(serverPid)) process.kill(serverPid, "SIGKILL");
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    }
  });
