/**
 * Jobs for people: the `jobs list` table and the `jobs get` record. `--json` prints the API's
 * bodies instead; this is only how a terminal shows them.
 */
import type { JobView, ScheduleInput } from "../protocol/model.ts";
import { formatFields, formatTable, type Column } from "./table.ts";

/** `cron "0 9 * * 1-5" in Asia/Kolkata`, or `at 2026-04-01T09:00:00Z`. */
export function scheduleText(s: ScheduleInput): string {
  return "at" in s ? `at ${s.at}` : `cron "${s.cron}" in ${s.time_zone}`;
}

/** Args as a shell would need them typed (single-quoted where needed). */
export function argsText(args: readonly string[]): string {
  return args
    .map((a) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`))
    .join(" ");
}

export const stateOf = (j: JobView): string => (j.enabled ? "enabled" : "paused");

const JOB_COLUMNS: readonly Column<JobView>[] = [
  { header: "JOB ID", cell: (j) => j.job_id },
  { header: "NAME", cell: (j) => j.name ?? "-", max: 32 },
  { header: "STATE", cell: stateOf },
  { header: "SCHEDULE", cell: (j) => scheduleText(j.schedule), max: 48 },
  { header: "NEXT RUN (UTC)", cell: (j) => j.next_run_at ?? "-" },
];

export function formatJobTable(jobs: readonly JobView[]): string {
  return formatTable(jobs, JOB_COLUMNS);
}

function retryText(j: JobView): string {
  const r = j.retry;
  return r.max_attempts <= 1
    ? "none (1 attempt)"
    : `${r.max_attempts} attempts, ${r.backoff} backoff from ${r.base_s} s up to ${r.max_s} s`;
}

/** A job on its own: every field a customer sets, and its next run times. */
export function formatJob(j: JobView): string {
  const t = j.task;
  const res = t.resources;
  const fields: [string, string][] = [
    ["job", j.job_id],
    ["name", j.name ?? "-"],
    ["state", stateOf(j)],
    ["schedule", scheduleText(j.schedule)],
    ["image", t.image],
    ["args", argsText(t.args)],
    ["timeout", `${t.timeout_s} s`],
  ];
  const env = Object.keys(t.env ?? {});
  if (env.length > 0) fields.push(["env", env.map((k) => `${k}=${t.env[k]}`).join(" ")]);
  if (t.secret_env_names && t.secret_env_names.length > 0)
    fields.push(["secret env", `${t.secret_env_names.join(" ")} (values never shown)`]);
  if (res)
    fields.push([
      "resources",
      [
        res.memory_mb !== undefined ? `${res.memory_mb} MiB` : undefined,
        res.cpus !== undefined ? `${res.cpus} CPUs` : undefined,
        res.pids !== undefined ? `${res.pids} pids` : undefined,
      ]
        .filter((v) => v !== undefined)
        .join(", "),
    ]);
  fields.push(
    ["retry", retryText(j)],
    ["overlap", j.overlap],
    [
      "misfire",
      j.misfire.policy +
        (j.misfire.starting_deadline_s !== null
          ? ` (deadline ${j.misfire.starting_deadline_s} s)`
          : ""),
    ],
    ["flex window", `${j.flex_window_s} s`],
    ["version", String(j.version)],
    ["created", j.created_at],
    ["updated", j.updated_at],
  );
  const next = j.next_runs ?? (j.next_run_at !== null ? [j.next_run_at] : []);
  fields.push(
    ["next runs", next[0] ?? "-"],
    ...next.slice(1).map((n): [string, string] => ["", n]),
  );
  return formatFields(fields);
}
