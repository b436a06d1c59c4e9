/**
 * Where a customer command writes and what it reads of its surroundings: stdout for results,
 * stderr for messages and progress, the environment (API URL and key, the state directory).
 * `processIo` is the real one; tests pass their own to run commands in-process.
 */
import { KairosError } from "../lib/errors.ts";

export interface CliIo {
  /** Writes to stdout (results: tables, `--json`). */
  out(text: string): void;
  /** Writes to stderr (errors, progress, hints). */
  err(text: string): void;
  readonly env: NodeJS.ProcessEnv;
  /** Reads stdin to its end (`--file -`); at most `maxBytes`. */
  readStdin(maxBytes: number): Promise<string>;
}

/** The process's own stdout, stderr, environment and stdin. */
export const processIo: CliIo = {
  out: (t) => void process.stdout.write(t),
  err: (t) => void process.stderr.write(t),
  env: process.env,
  async readStdin(maxBytes) {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of process.stdin) {
      const b = typeof c === "string" ? Buffer.from(c) : (c as Buffer);
      size += b.byteLength;
      if (size > maxBytes)
        throw new KairosError("invalid_argument", `--file -: stdin is over ${maxBytes} bytes`, {
          field: "--file",
        });
      chunks.push(b);
    }
    return Buffer.concat(chunks).toString("utf8");
  },
};
