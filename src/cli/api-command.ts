/**
 * What every customer command (`kairos jobs …`, `kairos runs …`) shares: the `--api-url`,
 * `--api-key` and `--json` options, the client they make, and how a failure is shown and turned
 * into an exit code (exit-codes.ts). An error names the input at fault: the API's `field` (a body
 * path such as `task.timeout_s`, a query parameter, a header), with the flag that sets it when
 * the command knows one.
 *
 * With `--json`, results are one JSON value on stdout and an error is one JSON line on stderr:
 * `{"error": {"code", "message", "field"?, "status"?}}`.
 */
import type { Command } from "commander";
import { HttpApiClient, ApiError } from "../client/http-api-client.ts";
import { isKairosError } from "../lib/errors.ts";
import { resolveApiTarget, type ApiTargetFlags } from "./api-target.ts";
import { EXIT, exitCodeOfError, type ExitCode } from "./exit-codes.ts";
import type { CliIo } from "./io.ts";

export interface ApiFlags extends ApiTargetFlags {
  json?: boolean;
}

/** The state of one invocation: its io and the exit code its action settled on. */
export interface CliContext {
  readonly io: CliIo;
  exitCode: number;
  /**
   * The command has ended (a one-shot command): the process may exit now, even though idle
   * keep-alive connections to the API are still open.
   */
  settled: boolean;
  /** Waits `ms` (the host's timer; tests may pass a faster one). */
  sleep(ms: number): Promise<void>;
}

export function cliContext(io: CliIo): CliContext {
  return {
    io,
    exitCode: EXIT.ok,
    settled: false,
    sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
  };
}

/** Adds `--api-url`, `--api-key` and `--json` to a customer command. */
export function apiOptions(cmd: Command): Command {
  return cmd
    .option("--api-url <url>", "the API (default: env KAIROS_API_URL, else the dev cluster's)")
    .option(
      "--api-key <key>",
      "the tenant's API key (default: env KAIROS_API_KEY, else the dev cluster's)",
    )
    .option("--json", "print JSON for scripts (errors: one JSON line on stderr)");
}

/** The flag that sets an API field, for the error message (undefined: none). */
export type FlagOf = (field: string) => string | undefined;

/** Shows a failure on stderr and returns its exit code. */
export function reportError(ctx: CliContext, e: unknown, json: boolean, flagOf?: FlagOf): ExitCode {
  if (!isKairosError(e)) {
    ctx.io.err(
      json
        ? JSON.stringify({ error: { code: "internal", message: String(e) } }) + "\n"
        : `kairos: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`,
    );
    return EXIT.internal;
  }
  const status = e instanceof ApiError ? e.status : undefined;
  if (json) {
    ctx.io.err(
      JSON.stringify({
        error: {
          code: e.code,
          message: e.message,
          ...(e.field !== undefined ? { field: e.field } : {}),
          ...(status !== undefined ? { status } : {}),
        },
      }) + "\n",
    );
  } else {
    const lines = [`kairos: ${e.message}`];
    if (e.field !== undefined) {
      const flag = flagOf?.(e.field);
      lines.push(
        `  field: ${e.field}${flag !== undefined && flag !== e.field ? ` (set with ${flag})` : ""}`,
      );
    }
    lines.push(`  code: ${e.code}${status !== undefined ? ` (HTTP ${status})` : ""}`);
    if (e.retryAfterMs !== undefined) lines.push(`  retry after: ${e.retryAfterMs / 1000} s`);
    ctx.io.err(lines.join("\n") + "\n");
  }
  return exitCodeOfError(e.code);
}

/**
 * Runs a customer command's body with a client for the target the flags name; its result (or
 * the failure's code) becomes the invocation's exit code.
 */
export async function withApi(
  ctx: CliContext,
  f: ApiFlags,
  fn: (api: HttpApiClient) => Promise<number | void>,
  flagOf?: FlagOf,
): Promise<void> {
  try {
    const target = resolveApiTarget(f, ctx.io.env);
    const code = await fn(new HttpApiClient({ url: target.url, apiKey: target.key }));
    ctx.exitCode = typeof code === "number" ? code : EXIT.ok;
  } catch (e) {
    ctx.exitCode = reportError(ctx, e, f.json === true, flagOf);
  } finally {
    ctx.settled = true;
  }
}

/** Most tries of a read the API answered "retry later" (429, 503). */
const READ_TRIES = 4;
/** Longest wait between them, whatever `Retry-After` says. */
const MAX_RETRY_WAIT_MS = 5_000;

/**
 * A read (GET: safe to repeat) tried again while the API answers 429 or 503 — back-pressure, or
 * the cluster moving the job's owner — after `Retry-After` (at most 5 s), up to 4 tries.
 */
export async function retryingRead<T>(ctx: CliContext, read: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await read();
    } catch (e) {
      const again = e instanceof ApiError && e.retryable && (e.status === 429 || e.status === 503);
      if (!again || attempt >= READ_TRIES) throw e;
      await ctx.sleep(Math.min(e.retryAfterMs ?? 500, MAX_RETRY_WAIT_MS));
    }
  }
}

/** Writes `v` as one JSON line on stdout. */
export function printJson(ctx: CliContext, v: unknown): void {
  ctx.io.out(JSON.stringify(v) + "\n");
}
