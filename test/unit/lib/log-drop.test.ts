/**
 * The stdout logger never blocks on a slow reader: beyond its buffer (KAIROS_LOG_BUFFER_MB) it
 * drops lines, counts every one (droppedLogLines, kairos_log_lines_dropped_total) and says how
 * many on stderr at exit — lines read + lines dropped = lines logged. And the buffer setting is
 * validated.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { MAX_LOG_BUFFER_MB, STDOUT_BUFFER_BYTES, logBufferBytes } from "../../../src/lib/log.ts";

const CHILD = fileURLToPath(new URL("./log-drop-child.ts", import.meta.url));

describe("the stdout logger's buffer", () => {
  it("reads KAIROS_LOG_BUFFER_MB, and refuses anything but an integer 1…4096", () => {
    assert.equal(logBufferBytes(undefined), STDOUT_BUFFER_BYTES);
    assert.equal(logBufferBytes(""), STDOUT_BUFFER_BYTES);
    assert.equal(logBufferBytes("1"), 1024 * 1024);
    assert.equal(logBufferBytes(String(MAX_LOG_BUFFER_MB)), MAX_LOG_BUFFER_MB * 1024 * 1024);
    for (const bad of ["0", "-1", "1.5", "4097", "16MB", " 16", "1e3"]) {
      assert.throws(
        () => logBufferBytes(bad),
        /KAIROS_LOG_BUFFER_MB must be an integer from 1 to 4096 \(MiB\)/,
        bad,
      );
    }
  });

  it("drops beyond it without blocking, counts each line dropped and says so at exit", async () => {
    const logged = 20_000; // ~4.4 MB of lines against a 1 MiB buffer and a reader that waits
    const child = spawn(process.execPath, ["--import", "tsx", CHILD, String(logged)], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, KAIROS_LOG_BUFFER_MB: "1" },
    });
    child.stdout.pause();
    let stderr = "";
    child.stderr.setEncoding("utf8");
    const report = await new Promise<{ dropped: number; metric: number }>((resolve, reject) => {
      child.stderr.on("data", (d: string) => {
        stderr += d;
        const line = stderr.split("\n").find((l) => l.startsWith("{"));
        if (line) resolve(JSON.parse(line) as { dropped: number; metric: number });
      });
      child.once("exit", (code) =>
        reject(new Error(`child exited ${code} before its report: ${stderr}`)),
      );
    });
    // Only now is stdout read: every line the logger kept arrives, the rest were counted.
    let read = 0;
    const closed = new Promise<void>((resolve) => child.stdout.once("close", resolve));
    createInterface({ input: child.stdout }).on("line", () => read++);
    const code = await new Promise<number | null>((resolve) =>
      child.exitCode !== null ? resolve(child.exitCode) : child.once("exit", resolve),
    );
    await closed;
    assert.equal(code, 0, stderr);
    assert.ok(report.dropped > 0, `nothing dropped: ${JSON.stringify(report)}`);
    assert.equal(report.metric, report.dropped, "the metric counts each dropped line");
    assert.equal(read + report.dropped, logged, `read ${read} + dropped ${report.dropped}`);
    assert.match(
      stderr,
      new RegExp(
        `kairos: ${report.dropped} log lines dropped: stdout's reader fell behind \\(buffer 1 MiB, KAIROS_LOG_BUFFER_MB\\)`,
      ),
    );
  });
});
