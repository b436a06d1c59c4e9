/**
 * Runs the `kairos` command line in-process (src/cli/program.ts `runCli`) with captured stdout and
 * stderr, a given environment and stdin: the same code path as the binary, minus process start.
 * The environment starts empty but for `KAIROS_STATE_DIR` (a fresh empty directory), so no
 * developer's `.kairos/dev.json` or `KAIROS_API_*` leaks into a test. `waitErr` resolves when
 * stderr matches — for waiting on a command's progress while it still runs.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cliContext } from "../../src/cli/api-command.ts";
import { runCli } from "../../src/cli/program.ts";

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface CliRun {
  /** Resolves when the command has ended. */
  readonly done: Promise<CliResult>;
  /** Resolves when stderr so far matches `re` (rejects after `timeoutMs`, naming `phase`). */
  waitErr(re: RegExp, timeoutMs: number, phase: string): Promise<void>;
}

export interface CliOptions {
  env?: Record<string, string>;
  stdin?: string;
}

/** An empty state directory (no dev file). */
export function emptyStateDir(): string {
  return mkdtempSync(join(tmpdir(), "kairos-cli-"));
}

/** Starts `kairos <argv…>` in-process; see `kairos` for the common case. */
export function startKairos(argv: readonly string[], o: CliOptions = {}): CliRun {
  let stdout = "";
  let stderr = "";
  const waiters = new Set<() => void>();
  const ctx = cliContext({
    out: (t) => {
      stdout += t;
    },
    err: (t) => {
      stderr += t;
      for (const w of [...waiters]) w();
    },
    env: { KAIROS_STATE_DIR: emptyStateDir(), ...o.env },
    readStdin: (max) => {
      const s = o.stdin ?? "";
      if (Buffer.byteLength(s) > max) throw new Error("stdin over the limit");
      return Promise.resolve(s);
    },
  });
  const done = runCli(argv, ctx).then((code) => ({ code, stdout, stderr }));
  return {
    done,
    waitErr(re, timeoutMs, phase) {
      return new Promise((resolve, reject) => {
        const check = (): void => {
          if (!re.test(stderr)) return;
          waiters.delete(check);
          clearTimeout(t);
          resolve();
        };
        const t = setTimeout(() => {
          waiters.delete(check);
          reject(
            new Error(`timed out after ${timeoutMs} ms waiting for ${phase}; stderr:\n${stderr}`),
          );
        }, timeoutMs);
        waiters.add(check);
        check();
        void done.then(() => {
          if (waiters.has(check)) {
            waiters.delete(check);
            clearTimeout(t);
            if (!re.test(stderr))
              reject(new Error(`the command ended before ${phase}; stderr:\n${stderr}`));
            else resolve();
          }
        });
      });
    },
  };
}

/** Runs `kairos <argv…>` in-process to its end. */
export function kairos(argv: readonly string[], o: CliOptions = {}): Promise<CliResult> {
  return startKairos(argv, o).done;
}
