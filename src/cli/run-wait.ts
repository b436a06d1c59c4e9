/**
 * `kairos runs wait <run_id>` (and `jobs run --wait`): reads the run until it ends, printing a
 * line on stderr each time it moves (status, attempt, worker, next retry), then the run on
 * stdout, and exits with the run's outcome (exit-codes.ts: 0 succeeded, 10 failed, 11 timed out,
 * 12 cancelled, 13 skipped, missed or throttled, 14 still running at `--timeout`).
 *
 * There is no push channel for a run's changes, so it polls `GET /v1/runs/{id}`: every 250 ms at
 * first, slowing to every 2 s. Once the run has been read, an answer of "retry later" or no
 * answer at all (an API node restarting, the job's owner moving) is waited out until `--timeout`
 * and said once; before that (a wrong URL), and on 401 or 404, the wait ends at once.
 */
import type { Command } from "commander";
import { ApiError, type HttpApiClient } from "../client/http-api-client.ts";
import { isKairosError, KairosError } from "../lib/errors.ts";
import type { RunView } from "../protocol/model.ts";
import { printJson, retryingRead, type ApiFlags, type CliContext } from "./api-command.ts";
import { EXIT, exitCodeOfRun } from "./exit-codes.ts";
import { formatRun, progressLine } from "./run-format.ts";

export interface WaitFlags {
  timeout?: string;
  quiet?: boolean;
}

/** Default and longest `--timeout` (seconds): a day, and 30 days. */
export const DEFAULT_WAIT_S = 86_400;
export const MAX_WAIT_S = 30 * 86_400;
const FIRST_POLL_MS = 250;
const MAX_POLL_MS = 2_000;

export function waitOptions(cmd: Command): Command {
  return cmd
    .option("--timeout <seconds>", `give up after this long, exit 14 (default ${DEFAULT_WAIT_S})`)
    .option("-q, --quiet", "no progress lines on stderr");
}

function waitMs(raw: string | undefined): number {
  if (raw === undefined) return DEFAULT_WAIT_S * 1000;
  const s = /^\d+(?:\.\d+)?$/.test(raw.trim()) ? Number(raw.trim()) : NaN;
  if (!(s > 0 && s <= MAX_WAIT_S))
    throw new KairosError(
      "invalid_argument",
      `--timeout: must be a number of seconds, more than 0 and at most ${MAX_WAIT_S}, got ${JSON.stringify(raw)}`,
      { field: "--timeout" },
    );
  return s * 1000;
}

/** An answer to wait out while polling: "retry later", or no answer at all. */
function transient(e: unknown): boolean {
  if (e instanceof ApiError) return e.status === 429 || e.status === 503;
  return isKairosError(e, "unavailable") || isKairosError(e, "timeout");
}

function finish(ctx: CliContext, run: RunView, json: boolean | undefined): void {
  if (json) printJson(ctx, run);
  else ctx.io.out(formatRun(run));
}

/** Polls the run until it ends or `--timeout`; returns the exit code of its outcome. */
export async function waitForRun(
  ctx: CliContext,
  api: HttpApiClient,
  runId: string,
  f: ApiFlags & WaitFlags,
): Promise<number> {
  const deadline = Date.now() + waitMs(f.timeout);
  let run = await retryingRead(ctx, () => api.getRun(runId));
  let shown = "";
  let noted = false;
  let delay = FIRST_POLL_MS;
  for (;;) {
    const line = progressLine(run);
    if (line !== shown && !f.quiet) ctx.io.err(`${line}\n`);
    shown = line;
    const code = exitCodeOfRun(run.status);
    if (code !== undefined) {
      finish(ctx, run, f.json);
      return code;
    }
    const left = deadline - Date.now();
    if (left <= 0) {
      ctx.io.err(`kairos: gave up waiting: run ${run.run_id} is still ${run.status}\n`);
      finish(ctx, run, f.json);
      return EXIT.waitTimedOut;
    }
    await ctx.sleep(Math.min(delay, left));
    delay = Math.min(Math.round(delay * 1.5), MAX_POLL_MS);
    try {
      run = await api.getRun(runId);
    } catch (e) {
      if (!transient(e)) throw e;
      if (!noted && !f.quiet) ctx.io.err(`kairos: ${(e as Error).message} (still waiting)\n`);
      noted = true;
    }
  }
}
