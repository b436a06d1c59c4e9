/**
 * A user cancels one run (`POST /v1/runs/{run_id}/cancel`, the NATS API's `runs.cancel`). The job
 * actor owns every transition of its runs, so the decision is its own, taken in its mailbox
 * between the others: a cancel and the run's completion cannot both win.
 *
 * - An active run ends `cancelled` at once (`finish`): one waiting for a slot or a retry, or
 *   offered, is dropped; one prepared on a worker ahead of its due time or running there is
 *   stopped — its worker is told (`cancel_on_worker`: the executor's SIGTERM, grace, SIGKILL) and
 *   its tenant slot is held until the worker reports the attempt ended (`drain`). The state is
 *   written before the answer, as a `replace` is.
 * - Any other run of the job is settled `cancelled` only if a record of it was left non-terminal
 *   by a fire whose state change was lost (a `settle` never creates and never overwrites an ended
 *   record); a re-fire of that occurrence then meets an ended record and drops its run. What the
 *   run became — cancelled (now or before), ended otherwise, or never made — its record says:
 *   the caller reads it (src/service/nats-service.ts `cancelRun`).
 *
 * Pure: the run's record, its worker and its slot are effects for the shell.
 */
import { parseRunId } from "../protocol/ids.ts";
import { terminalRunView } from "../job-state/job-state.ts";
import type { JobMsg } from "../job-state/job-types.ts";
import { finish } from "./run-lifecycle.ts";
import { isLeased } from "./run-status.ts";
import { fail, iso, type D, type Tx } from "../job-state/tx.ts";

/** Longest `by` and `note` kept in a cancelled run's reason (the API bounds them first). */
export const MAX_CANCEL_BY_CHARS = 100;
export const MAX_CANCEL_NOTE_CHARS = 200;

/** The reason a cancelled run shows: who asked, and why if they said. */
export function cancelReason(by: string, note?: string): string {
  const who = by.slice(0, MAX_CANCEL_BY_CHARS);
  return note === undefined
    ? `cancelled by request of ${who}`
    : `cancelled by request of ${who}: ${note.slice(0, MAX_CANCEL_NOTE_CHARS)}`;
}

/**
 * The answer: `run` — the run was active and is now cancelled (its terminal record); `ok` — it
 * was not active here, its record decides (settled first if a lost fire left it non-terminal).
 */
export function cancelRun(tx: Tx, m: Extract<JobMsg, { kind: "cancel" }>): D {
  const s = tx.s;
  const id = parseRunId(m.run_id);
  if (!s.job || s.deleted || id === null || id.jobId !== s.job.job_id)
    return tx.done(null, fail("not_found", "run not found"));
  const reason = cancelReason(m.by, m.note);
  const r = tx.run(m.run_id);
  if (r !== undefined) {
    // The attempt a worker holds (prepared or running) ends here too: its worker is told to stop.
    const a = r.attempts[r.attempts.length - 1];
    if (a !== undefined && isLeased(r) && a.outcome === null) {
      a.finished_at = iso(tx.now);
      a.outcome = "cancelled";
      a.error = reason;
    }
    const run = finish(tx, r, "cancelled", reason, null);
    tx.changed = true;
    return tx.done({ run });
  }
  tx.pre.push({
    kind: "put_run",
    mode: "settle",
    record: terminalRunView(
      tx.job,
      {
        run_id: m.run_id,
        scheduled_for_ms: id.ms,
        trigger: id.seq === 0 ? "schedule" : "manual",
        created_at_ms: tx.now,
      },
      "cancelled",
      tx.now,
      { reason },
    ),
  });
  return tx.done({ ok: true });
}
