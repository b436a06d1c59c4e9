/**
 * Structured logging (pino, JSON lines on stdout). Node events are logged with an `evt` field so
 * tests that run real `kairos node` processes can wait for them by reading stdout.
 *
 * An entry point may send every logger of the process elsewhere with `setLogDestination` (before
 * the loggers are created): `kairos dev` on a terminal condenses the lines for a person
 * (src/dev/console.ts). Everything else keeps JSON lines.
 */
import { pino, type Logger } from "pino";

export type { Logger };

/** Receives one serialised JSON log line per call. */
export interface LogDestination {
  write(line: string): void;
}

let destination: LogDestination | undefined;

/** Most bytes of log lines buffered for stdout; beyond it lines are dropped, not waited for. */
export const STDOUT_BUFFER_BYTES = 16 * 1024 * 1024;

/**
 * stdout, written asynchronously (flushed at exit by pino). pino's default writes synchronously
 * and, when the reader of a pipe falls behind, sleeps 100 ms per retry on EAGAIN — blocking the
 * event loop: a benchmark's worker (three info lines per run) froze at the due second of a
 * 200,000-run burst while its reader was busy. A slow log reader now costs log lines (beyond
 * STDOUT_BUFFER_BYTES), never the node.
 */
let stdout: ReturnType<typeof pino.destination> | undefined;
function stdoutDestination(): ReturnType<typeof pino.destination> {
  stdout ??= pino.destination({ dest: 1, sync: false, maxLength: STDOUT_BUFFER_BYTES });
  return stdout;
}

/** Process-wide: loggers created after this call write to `d` (undefined: stdout again). */
export function setLogDestination(d: LogDestination | undefined): void {
  destination = d;
}

export function createLogger(name: string, level = process.env["KAIROS_LOG_LEVEL"] ?? "info"): Logger {
  const opts = { name, level, base: { node: name }, timestamp: pino.stdTimeFunctions.isoTime };
  return pino(opts, destination ?? stdoutDestination());
}
