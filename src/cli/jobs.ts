/**
 * `kairos jobs create|list|get|edit|pause|resume|run|delete`: a tenant's jobs over the HTTP API
 * (docs/cli.md). Each prints a table or record for people, or the API's JSON body with `--json`;
 * failures exit with the codes of exit-codes.ts.
 *
 *   create   flags and/or --file spec.json → POST /v1/jobs (--idempotency-key: safe to retry)
 *   edit     GET the job, apply the flags → PATCH with If-Match (a concurrent change: exit 5)
 *   pause    PATCH {"enabled": false}; resume: {"enabled": true}
 *   run      POST /v1/jobs/{id}/runs (--wait: then as `runs wait`)
 */
import type { Command } from "commander";
import { KairosError } from "../lib/errors.ts";
import type { JobView } from "../protocol/model.ts";
import type { HttpApiClient, JobListOptions } from "../client/http-api-client.ts";
import {
  apiOptions,
  printJson,
  retryingRead,
  withApi,
  type ApiFlags,
  type CliContext,
} from "./api-command.ts";
import { formatJob, formatJobTable, stateOf } from "./job-format.ts";
import {
  applySpecFlags,
  checkSecretsKept,
  jobSpecOptions,
  readSpecFile,
  specFlagOf,
  type JobSpecFlags,
} from "./job-spec-flags.ts";
import { pageFlags, walkPages, type PageFlags } from "./pages.ts";
import { waitForRun, waitOptions, type WaitFlags } from "./run-wait.ts";

interface CreateFlags extends ApiFlags, JobSpecFlags {
  paused?: boolean;
  idempotencyKey?: string;
}

async function createJob(
  ctx: CliContext,
  api: HttpApiClient,
  f: CreateFlags,
  args: string[],
): Promise<void> {
  const base = f.file !== undefined ? await readSpecFile(f.file, ctx.io) : {};
  const spec = applySpecFlags(base, f, args);
  if (f.paused) spec["enabled"] = false;
  const { job, created } = await api.createJob(
    spec,
    f.idempotencyKey !== undefined ? { idempotencyKey: f.idempotencyKey } : {},
  );
  if (f.json) return printJson(ctx, job);
  ctx.io.out(`${job.job_id}\n`);
  ctx.io.err(
    `${created ? "created" : "already created (same --idempotency-key)"} job ${job.job_id}` +
      ` (${stateOf(job)}), next run ${job.next_run_at ?? "none"}\n`,
  );
}

async function editJob(
  ctx: CliContext,
  api: HttpApiClient,
  jobId: string,
  f: ApiFlags & JobSpecFlags,
  args: string[],
): Promise<void> {
  const base = f.file !== undefined ? await readSpecFile(f.file, ctx.io) : {};
  const job = await retryingRead(ctx, () => api.getJob(jobId));
  const patch = applySpecFlags(base, f, args, job);
  if (Object.keys(patch).length === 0)
    throw new KairosError(
      "invalid_argument",
      "nothing to change: give a flag (--cron, --image, …) or --file with the fields to replace",
      { field: "--file" },
    );
  checkSecretsKept(patch, job);
  showJob(ctx, await api.patchJob(jobId, patch, { ifMatch: job.version }), f.json);
}

function showJob(ctx: CliContext, job: JobView, json: boolean | undefined): void {
  if (json) printJson(ctx, job);
  else ctx.io.out(formatJob(job));
}

/** `pause` and `resume`: one PATCH of `enabled`. */
async function setEnabled(
  ctx: CliContext,
  api: HttpApiClient,
  jobId: string,
  enabled: boolean,
  f: ApiFlags,
): Promise<void> {
  const job = await api.patchJob(jobId, { enabled });
  if (f.json) return printJson(ctx, job);
  ctx.io.out(`${job.job_id} ${stateOf(job)}\n`);
}

function registerCreate(jobs: Command, ctx: CliContext): void {
  const cmd = jobs
    .command("create")
    .description("create a job from flags and/or --file spec.json; prints its id")
    .argument("[args...]", "the task's program and args (after --), instead of --command");
  jobSpecOptions(cmd, "create")
    .option("--paused", "create it paused (enabled: false)")
    .option("--idempotency-key <key>", "a retry with the same key and body returns the same job");
  apiOptions(cmd).action((args: string[], f: CreateFlags) =>
    withApi(ctx, f, (api) => createJob(ctx, api, f, args), specFlagOf(f)),
  );
}

interface ListFilterFlags {
  name?: string;
  state?: string;
}

/** `--name` and `--state` as the API's filters; a state other than enabled/paused is refused here. */
function listFilter(f: ListFilterFlags): JobListOptions {
  if (f.state !== undefined && f.state !== "enabled" && f.state !== "paused")
    throw new KairosError(
      "invalid_argument",
      `--state: must be enabled or paused, got ${JSON.stringify(f.state)}`,
      { field: "--state" },
    );
  return {
    ...(f.name !== undefined ? { name: f.name } : {}),
    ...(f.state !== undefined ? { state: f.state } : {}),
  };
}

function registerReads(jobs: Command, ctx: CliContext): void {
  pageFlags(
    apiOptions(
      jobs
        .command("list")
        .description("the tenant's jobs (a page; --all: every page)")
        .option("--name <text>", "only jobs whose name contains this text (any case)")
        .option("--state <state>", "only enabled or paused jobs"),
    ),
  ).action((f: ApiFlags & PageFlags & ListFilterFlags) =>
    withApi(ctx, f, async (api) => {
      const filter = listFilter(f);
      const page = await walkPages(
        ctx,
        f,
        (p) => api.listJobs({ ...p, ...filter }),
        (pg) => pg.jobs,
        "jobs",
      );
      if (f.json) return printJson(ctx, { jobs: page.items, next_cursor: page.next_cursor });
      ctx.io.out(formatJobTable(page.items));
      if (page.next_cursor !== null) ctx.io.err(`more: --cursor ${page.next_cursor} (or --all)\n`);
    }),
  );
  apiOptions(
    jobs.command("get").description("one job, with its next 5 run times").argument("<job_id>"),
  ).action((jobId: string, f: ApiFlags) =>
    withApi(ctx, f, async (api) =>
      showJob(ctx, await retryingRead(ctx, () => api.getJob(jobId)), f.json),
    ),
  );
}

function registerChanges(jobs: Command, ctx: CliContext): void {
  const edit = jobs
    .command("edit")
    .description("change a job: the fields its flags or --file name (If-Match: the version read)")
    .argument("<job_id>")
    .argument("[args...]", "the task's new program and args (after --)");
  apiOptions(jobSpecOptions(edit, "edit")).action(
    (jobId: string, args: string[], f: ApiFlags & JobSpecFlags) =>
      withApi(ctx, f, (api) => editJob(ctx, api, jobId, f, args), specFlagOf(f)),
  );
  for (const [name, enabled, what] of [
    ["pause", false, "pause a job: runs not yet started are cancelled"],
    ["resume", true, "resume a paused job (the paused period is not caught up)"],
  ] as const)
    apiOptions(jobs.command(name).description(what).argument("<job_id>")).action(
      (jobId: string, f: ApiFlags) =>
        withApi(ctx, f, (api) => setEnabled(ctx, api, jobId, enabled, f)),
    );
  waitOptions(
    apiOptions(
      jobs
        .command("run")
        .description("run a job now; prints the run id (--wait: wait for its end, as runs wait)")
        .argument("<job_id>")
        .option("--wait", "wait for the run to end; exit with its outcome"),
    ),
  ).action((jobId: string, f: ApiFlags & WaitFlags & { wait?: boolean }) =>
    withApi(ctx, f, async (api) => {
      const run = await api.runNow(jobId);
      if (f.wait) {
        ctx.io.err(`started run ${run.run_id}\n`);
        return waitForRun(ctx, api, run.run_id, f);
      }
      if (f.json) return printJson(ctx, run);
      ctx.io.out(`${run.run_id}\n`);
      ctx.io.err(`run ${run.run_id} ${run.status}: kairos runs wait ${run.run_id}\n`);
    }),
  );
  apiOptions(
    jobs
      .command("delete")
      .description("delete a job; its active runs are cancelled")
      .argument("<job_id>"),
  ).action((jobId: string, f: ApiFlags) =>
    withApi(ctx, f, async (api) => {
      await api.deleteJob(jobId);
      if (f.json) return printJson(ctx, { job_id: jobId, deleted: true });
      ctx.io.out(`${jobId} deleted\n`);
    }),
  );
}

/** Registers `kairos jobs …`. */
export function registerJobCommands(program: Command, ctx: CliContext): void {
  const jobs = program.command("jobs").description("a tenant's jobs, over the HTTP API");
  registerCreate(jobs, ctx);
  registerReads(jobs, ctx);
  registerChanges(jobs, ctx);
}
