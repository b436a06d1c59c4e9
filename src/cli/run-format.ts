/**
 * Runs for people: the `runs list` table, the `runs get` record (attempts and the output tail)
 * and the one-line progress `runs wait` prints when a run moves. `--json` prints the API's
 * bodies instead.
 */
import type { RunView } from "../protocol/model.ts";
import { formatFields, formatTable, type Column } from "./table.ts";

const exitOf = (r: RunView): string =>
  r.result?.exit_code !== null && r.result?.exit_code !== undefined
    ? String(r.result.exit_code)
    : "-";

const RUN_COLUMNS: readonly Column<RunView>[] = [
  { header: "RUN ID", cell: (r) => r.run_id },
  { header: "STATUS", cell: (r) => r.status },
  { header: "ATTEMPT", cell: (r) => String(r.attempt) },
  { header: "SCHEDULED FOR (UTC)", cell: (r) => r.scheduled_for },
  { header: "FINISHED", cell: (r) => r.finished_at ?? "-" },
  { header: "EXIT", cell: exitOf },
  { header: "TRIGGER", cell: (r) => r.trigger },
];

export function formatRunTable(runs: readonly RunView[]): string {
  return formatTable(runs, RUN_COLUMNS);
}

/** A run on its own: times, reason, each attempt, and the output tail. */
export function formatRun(r: RunView): string {
  const fields: [string, string][] = [
    ["run", r.run_id],
    ["job", r.job_id],
    ["status", r.status],
    ["trigger", r.trigger],
    ["scheduled for", r.scheduled_for],
    ["created", r.created_at],
    ["started", r.started_at ?? "-"],
    ["finished", r.finished_at ?? "-"],
    ["attempt", String(r.attempt)],
  ];
  if (r.next_attempt_at !== null) fields.push(["next attempt", r.next_attempt_at]);
  if (r.reason !== null) fields.push(["reason", r.reason]);
  if (r.result !== null) fields.push(["exit code", exitOf(r)]);
  let text = formatFields(fields);
  if (r.attempts.length > 0)
    text +=
      "\n" +
      formatTable(r.attempts, [
        { header: "ATTEMPT", cell: (a) => String(a.attempt) },
        { header: "WORKER", cell: (a) => a.worker ?? "-" },
        { header: "STARTED", cell: (a) => a.started_at ?? "-" },
        { header: "FINISHED", cell: (a) => a.finished_at ?? "-" },
        { header: "EXIT", cell: (a) => (a.exit_code !== null ? String(a.exit_code) : "-") },
        { header: "OUTCOME", cell: (a) => a.outcome ?? "-" },
        { header: "ERROR", cell: (a) => a.error ?? "", max: 80 },
      ]);
  if (r.result !== null && r.result.output !== "")
    text += `\noutput (tail):\n${r.result.output.endsWith("\n") ? r.result.output : `${r.result.output}\n`}`;
  return text;
}

/** What a waiter shows of a run: its status, the attempt and where it stands. */
export function progressLine(r: RunView): string {
  const a = r.attempts[r.attempts.length - 1];
  const parts = [`run ${r.run_id}: ${r.status}`];
  if (r.attempt > 0) parts.push(`attempt ${r.attempt}`);
  if (a?.worker && (r.status === "leased" || r.status === "running")) parts.push(`on ${a.worker}`);
  if (r.status === "retry_wait") {
    if (a?.outcome)
      parts.push(
        `(last attempt ${a.outcome}${a.exit_code !== null ? `, exit ${a.exit_code}` : ""})`,
      );
    if (r.next_attempt_at !== null) parts.push(`next at ${r.next_attempt_at}`);
  }
  if (r.result?.exit_code !== null && r.result?.exit_code !== undefined)
    parts.push(`exit ${r.result.exit_code}`);
  if (r.reason !== null) parts.push(`— ${r.reason}`);
  return parts.join(" ");
}
