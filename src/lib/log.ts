/**
 * Structured logging (pino, JSON lines on stdout). Node events are logged with an `evt` field so
 * tests that run real `kairos node` processes can wait for them by reading stdout.
 */
import { pino, type Logger } from "pino";

export type { Logger };

export function createLogger(name: string, level = process.env["KAIROS_LOG_LEVEL"] ?? "info"): Logger {
  return pino({ name, level, base: { node: name }, timestamp: pino.stdTimeFunctions.isoTime });
}
