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

/** Process-wide: loggers created after this call write to `d` (undefined: stdout again). */
export function setLogDestination(d: LogDestination | undefined): void {
  destination = d;
}

export function createLogger(name: string, level = process.env["KAIROS_LOG_LEVEL"] ?? "info"): Logger {
  const opts = { name, level, base: { node: name }, timestamp: pino.stdTimeFunctions.isoTime };
  return destination ? pino(opts, destination) : pino(opts);
}
