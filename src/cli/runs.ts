/**
 * `kairos runs list|get|cancel|wait`: a tenant's runs over the HTTP API (docs/cli.md). `list`
 * takes a job id (its runs, newest first, `--status` to filter), nothing (the tenant's runs across
 * its jobs, newest first; `--status` any status) or
 * `--dead-lettered` (the tenant's dead-lettered runs across its jobs, oldest first); `cancel` ends a run that has not
 * ended (409 once it ended otherwise: exit 5); `wait` is run-wait.ts.
 */
import { Option, type Command } from "commander";
import { KairosError } from "../lib/errors.ts";
import { RUN_STATUSES, type RunStatus } from "../protocol/model.ts";
import type { HttpApiClient } from "../client/http-api-client.ts";
import {
  apiOptions,
  printJson,
  retryingRead,
  withApi,
  type ApiFlags,
  type CliContext,
} from "./api-command.ts";
import { pageFlags, walkPages, type PageFlags } from "./pages.ts";
import { formatRun, formatRunTable } from "./run-format.ts";
import { waitForRun, waitOptions, type WaitFlags } from "./run-wait.ts";

interface ListFlags extends ApiFlags, PageFlags {
  status?: string;
  deadLettered?: boolean;
}

const isStatus = (s: string): s is RunStatus => (RUN_STATUSES as readonly string[]).includes(s);

async function listRuns(
  ctx: CliContext,
  api: HttpApiClient,
  jobId: string | undefined,
  f: ListFlags,
): Promise<void> {
  if (jobId !== undefined && f.deadLettered === true)
    throw new KairosError(
      "invalid_argument",
      "give a job id (its runs) or --dead-lettered (the tenant's dead-lettered runs), not both",
      { field: "job_id" },
    );
  if (f.status !== undefined && f.deadLettered)
    throw new KairosError(
      "invalid_argument",
      "--status: not with --dead-lettered (those runs are failed or timed_out)",
      { field: "--status" },
    );
  const status = f.status !== undefined && isStatus(f.status) ? f.status : undefined;
  const page = await walkPages(
    ctx,
    f,
    (p) =>
      jobId !== undefined
        ? api.listRuns(jobId, { ...p, ...(status !== undefined ? { status } : {}) })
        : f.deadLettered === true
          ? api.listDeadLetters(p)
          : api.listTenantRuns(status !== undefined ? { ...p, status } : p),
    (pg) => pg.runs,
    "runs",
  );
  if (f.json) return printJson(ctx, { runs: page.items, next_cursor: page.next_cursor });
  ctx.io.out(formatRunTable(page.items));
  if (page.next_cursor !== null) ctx.io.err(`more: --cursor ${page.next_cursor} (or --all)\n`);
}

/** Registers `kairos runs …`. */
export function registerRunCommands(program: Command, ctx: CliContext): void {
  const runs = program.command("runs").description("a tenant's runs, over the HTTP API");
  pageFlags(
    apiOptions(
      runs
        .command("list")
        .description(
          "a job's runs, newest first; without a job, the tenant's across its jobs; --dead-lettered: the tenant's dead letters, oldest first",
        )
        .argument("[job_id]")
        .addOption(
          new Option("--status <status>", "only runs in this status").choices(RUN_STATUSES),
        )
        .option("--dead-lettered", "the tenant's dead-lettered runs, across its jobs"),
    ),
  ).action((jobId: string | undefined, f: ListFlags) =>
    withApi(ctx, f, (api) => listRuns(ctx, api, jobId, f)),
  );
  apiOptions(
    runs.command("get").description("one run: attempts, times, output tail").argument("<run_id>"),
  ).action((runId: string, f: ApiFlags) =>
    withApi(ctx, f, async (api) => {
      const run = await retryingRead(ctx, () => api.getRun(runId));
      if (f.json) return printJson(ctx, run);
      ctx.io.out(formatRun(run));
    }),
  );
  apiOptions(
    runs
      .command("cancel")
      .description(
        "cancel a run that has not ended: dropped if waiting or prepared, killed if running",
      )
      .argument("<run_id>")
      .option(
        "--reason <text>",
        "shown in the run's reason after who cancelled it (1-200 characters)",
      ),
  ).action((runId: string, f: ApiFlags & { reason?: string }) =>
    withApi(
      ctx,
      f,
      async (api) => {
        const run = await api.cancelRun(runId, f.reason === undefined ? {} : { reason: f.reason });
        if (f.json) return printJson(ctx, run);
        ctx.io.out(formatRun(run));
      },
      (field) => (field === "reason" ? "--reason" : undefined),
    ),
  );
  waitOptions(
    apiOptions(
      runs
        .command("wait")
        .description("wait for a run to end, showing its progress; exit with its outcome")
        .argument("<run_id>"),
    ),
  ).action((runId: string, f: ApiFlags & WaitFlags) =>
    withApi(ctx, f, (api) => waitForRun(ctx, api, runId, f)),
  );
}
