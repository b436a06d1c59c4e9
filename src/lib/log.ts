/**
 * Structured logging (pino, JSON lines on stdout). Node events are logged with an `evt` field so
 * tests that run real `kairos node` processes can wait for them by reading stdout.
 *
 * An entry point may send every logger of the process elsewhere with `setLogDestination` (before
 * the loggers are created): `kairos dev` on a terminal condenses the lines for a person
 * (src/dev/console.ts). Everything else keeps JSON lines.
 */
import { writeSync } from "node:fs";
import { pino, type Logger } from "pino";

export type { Logger };

/** Receives one serialised JSON log line per call. */
export interface LogDestination {
  write(line: string): void;
}

let destination: LogDestination | undefined;

/** Most bytes of log lines buffered for stdout by default; beyond it lines are dropped, not waited for. */
export const STDOUT_BUFFER_BYTES = 16 * 1024 * 1024;
/** The bound on `KAIROS_LOG_BUFFER_MB`. */
export const MAX_LOG_BUFFER_MB = 4096;

/**
 * The stdout buffer from `KAIROS_LOG_BUFFER_MB` (an integer 1…4096; unset: 16 MiB). A benchmark
 * whose reader falls behind a worker's three lines per run sets it high so that no line is lost.
 */
export function logBufferBytes(env: string | undefined): number {
  if (env === undefined || env === "") return STDOUT_BUFFER_BYTES;
  const mb = Number(env);
  if (!/^\d+$/.test(env) || !Number.isSafeInteger(mb) || mb < 1 || mb > MAX_LOG_BUFFER_MB) {
    throw new Error(
      `KAIROS_LOG_BUFFER_MB must be an integer from 1 to ${MAX_LOG_BUFFER_MB} (MiB), got ${JSON.stringify(env)}`,
    );
  }
  return mb * 1024 * 1024;
}

let dropped = 0;
/** Log lines this process dropped because its stdout buffer was full (kairos_log_lines_dropped_total). */
export function droppedLogLines(): number {
  return dropped;
}

/**
 * stdout, written asynchronously (flushed at exit by pino). pino's default writes synchronously
 * and, when the reader of a pipe falls behind, sleeps 100 ms per retry on EAGAIN — blocking the
 * event loop: a worker logging three lines per run freezes at the due second of a burst while
 * its reader is busy. Here a slow log reader costs log lines (beyond
 * STDOUT_BUFFER_BYTES, or KAIROS_LOG_BUFFER_MB), never the node; the lines dropped are counted
 * (`droppedLogLines`, a metric) and their number said on stderr at exit.
 */
let stdout: ReturnType<typeof pino.destination> | undefined;
function stdoutDestination(): ReturnType<typeof pino.destination> {
  if (stdout === undefined) {
    const bytes = logBufferBytes(process.env["KAIROS_LOG_BUFFER_MB"]);
    const d = pino.destination({ dest: 1, sync: false, maxLength: bytes });
    d.on("drop", () => dropped++);
    // Said once at exit, on stderr (synchronously: stdout is the thing that fell behind).
    process.once("exit", () => {
      if (dropped > 0)
        writeSync(
          2,
          `kairos: ${dropped} log lines dropped: stdout's reader fell behind (buffer ${bytes / 1024 / 1024} MiB, KAIROS_LOG_BUFFER_MB)\n`,
        );
    });
    stdout = d;
  }
  return stdout;
}

/** Process-wide: loggers created after this call write to `d` (undefined: stdout again). */
export function setLogDestination(d: LogDestination | undefined): void {
  destination = d;
}

export function createLogger(
  name: string,
  level = process.env["KAIROS_LOG_LEVEL"] ?? "info",
): Logger {
  const opts = { name, level, base: { node: name }, timestamp: pino.stdTimeFunctions.isoTime };
  return pino(opts, destination ?? stdoutDestination());
}
