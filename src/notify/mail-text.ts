/**
 * The text of run-event mails (pure): one event's mail and a window's digest. Plain text only.
 * Everything tenant-controlled (reasons, output) is clipped, and control characters are taken out
 * of the subject line, so nothing a task prints can shape a header.
 */
import type { RunEventType } from "../protocol/events.ts";
import type { RunView } from "../protocol/model.ts";
import type { Digest } from "./mail-limit.ts";

export interface MailText {
  subject: string;
  text: string;
  headers: Record<string, string>;
}

/** Most characters of a run's output a mail quotes (its tail). */
export const MAIL_OUTPUT_CHARS = 2000;

/** One line, no control characters, at most `max` characters. */
export function oneLine(s: string, max: number): string {
  const flat = s.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 3)}...` : flat;
}

const WHAT: Record<RunEventType, string> = {
  "run.succeeded": "succeeded",
  "run.failed": "failed",
  "run.dead_lettered": "was dead-lettered",
  "run.missed": "was missed",
  "run.skipped": "was skipped",
  "run.timed_out": "timed out",
};

/** The mail of one event. */
export function eventMail(type: RunEventType, run: RunView): MailText {
  const last = run.attempts[run.attempts.length - 1];
  const output = run.result?.output ?? "";
  const lines = [
    `Run ${run.run_id} of job ${run.job_id} ${WHAT[type]}.`,
    "",
    `event:          ${type}`,
    `status:         ${run.status}`,
    `scheduled for:  ${run.scheduled_for}`,
    `finished at:    ${run.finished_at ?? "-"}`,
    `attempts:       ${run.attempts.length}`,
    `exit code:      ${run.result?.exit_code ?? "-"}`,
    `reason:         ${run.reason === null ? "-" : oneLine(run.reason, 500)}`,
    ...(last?.error ? [`last error:     ${oneLine(last.error, 500)}`] : []),
    ...(output !== ""
      ? ["", "output (tail):", output.slice(-MAIL_OUTPUT_CHARS).replace(/\r/g, "")]
      : []),
    "",
    `tenant ${run.tenant_id}; event id ${run.run_id}:${type}`,
  ];
  return {
    subject: oneLine(`[kairos] ${type}: job ${run.job_id}, run ${run.run_id}`, 200),
    text: lines.join("\n"),
    headers: headers(type, run.run_id),
  };
}

/** The digest of one address for a closed window. */
export function digestMail(d: Digest): MailText {
  const counts = Object.entries(d.byType)
    .map(([t, n]) => `  ${t}: ${n}`)
    .sort();
  const lines = [
    `${d.count} more run event(s) of tenant ${d.tenantId} between ${new Date(d.windowStartMs).toISOString()} and ${new Date(d.windowEndMs).toISOString()} were not mailed one by one (the tenant's mail limit for that window was reached).`,
    "",
    "by event:",
    ...counts,
    "",
    `the first ${d.listed.length}:`,
    ...d.listed.map(
      (l) =>
        `  ${l.type}  run ${l.run_id}  job ${l.job_id}  scheduled for ${l.scheduled_for}${l.reason ? `  (${oneLine(l.reason, 160)})` : ""}`,
    ),
    ...(d.count > d.listed.length ? [`  … and ${d.count - d.listed.length} more`] : []),
  ];
  return {
    subject: oneLine(`[kairos] digest: ${d.count} more run event(s) of tenant ${d.tenantId}`, 200),
    text: lines.join("\n"),
    headers: { "Auto-Submitted": "auto-generated", "X-Kairos-Digest": String(d.count) },
  };
}

function headers(type: RunEventType, runId: string): Record<string, string> {
  return { "Auto-Submitted": "auto-generated", "X-Kairos-Event": type, "X-Kairos-Run-Id": runId };
}
