/**
 * Identifiers. A job id is `j` + 16 lowercase base-36 characters (a new job's begin with its
 * creation time: `newTimedJobId`); a job actor is addressed as
 * `job/<tenant_id>.<job_id>`. A run id is derived from its job and occurrence —
 * `<job_id>-<scheduled_for ms in base 36>` (manual runs add `-m<n>`) — so one occurrence can only
 * ever have one run key: the unique-key safety net (ARCHITECTURE.md). The `-` before a manual run's
 * sequence is what keeps the id unambiguous: base 36 has both `m` and digits, so a time such as
 * `mx6qm100` (2026-12-02T23:08:42Z) read with an optional `m<n>` suffix parsed as `mx6q` + run
 * 100 — a time in 1970, which retention then deleted as older than its age limit.
 */
const ID_RE = /^[A-Za-z0-9_-]{1,64}$/;

/** Defined with the worker protocol, which addresses job actors by it. */
export { JOB_ACTOR } from "./worker.ts";
export const TENANT_ACTOR = "tenant";

export function isValidId(s: string): boolean {
  return ID_RE.test(s);
}

/** A new id, `j` + 16 characters from random values in [0, 1) (request ids use it too). */
export function newJobId(random: () => number): string {
  let s = "j";
  for (let i = 0; i < 16; i++) s += Math.floor(random() * 36).toString(36);
  return s;
}

/** Characters of a job id that hold its creation time (ms in base 36: enough until year 5000). */
export const JOB_ID_TIME_CHARS = 9;

/**
 * A new job's id: `j`, its creation time (ms, base 36, JOB_ID_TIME_CHARS characters) and 7
 * random characters, so that ids sort in the order jobs were created. The jobs list is in id
 * order: a tenant's creates land together at the end of its job catalog (src/catalog/), where the
 * catalog writes them a group at a time. Two creates in the same millisecond with the same random
 * part are one chance in 36^7; the create that meets a job with its id tries another
 * (nats-service.ts).
 */
export function newTimedJobId(nowMs: number, random: () => number): string {
  let s = `j${Math.max(0, Math.floor(nowMs)).toString(36).padStart(JOB_ID_TIME_CHARS, "0")}`;
  while (s.length < 17) s += Math.floor(random() * 36).toString(36);
  return s;
}

export function jobActorId(tenantId: string, jobId: string): string {
  return `${tenantId}.${jobId}`;
}

export function splitJobActorId(id: string): { tenantId: string; jobId: string } {
  const i = id.indexOf(".");
  return { tenantId: id.slice(0, i), jobId: id.slice(i + 1) };
}

export function runIdFor(jobId: string, scheduledForMs: number, manualSeq?: number): string {
  return `${jobId}-${scheduledForMs.toString(36)}${manualSeq === undefined ? "" : `-m${manualSeq}`}`;
}

const RUN_ID_RE = /^(j[0-9a-z]{16})-([0-9a-z]{1,11})(?:-m(\d{1,15}))?$/;

/** The parts of a run id: its job, its occurrence time and its manual sequence (0: scheduled). */
export function parseRunId(runId: string): { jobId: string; ms: number; seq: number } | null {
  const m = RUN_ID_RE.exec(runId);
  if (!m) return null;
  const ms = parseInt(m[2]!, 36);
  const seq = m[3] === undefined ? 0 : Number(m[3]);
  return Number.isSafeInteger(ms) && Number.isSafeInteger(seq) ? { jobId: m[1]!, ms, seq } : null;
}

/** The job id inside a run id, or null when the run id is malformed. */
export function jobIdOfRun(runId: string): string | null {
  return parseRunId(runId)?.jobId ?? null;
}

/** KV key of a run record: `<partition>.<tenant>.<job>.<run>`, so a job's runs list by filter. */
export function runKey(partition: number, tenantId: string, jobId: string, runId: string): string {
  return `${partition}.${tenantId}.${jobId}.${runId}`;
}

/**
 * A tenant slot grant is named by its run AND by how many times the run has given a slot back
 * (`slot_seq`): a release of an earlier grant that arrives after the run asked again (messages
 * through the router can overtake each other) then cannot delete the newer grant.
 */
export const grantId = (r: { run_id: string; slot_seq?: number }): string =>
  `${r.run_id}_${r.slot_seq ?? 0}`;

export function splitGrant(id: string): { run_id: string; seq: number } {
  const i = id.lastIndexOf("_");
  const seq = i < 0 ? 0 : Number(id.slice(i + 1));
  return i < 0 || !Number.isInteger(seq) ? { run_id: id, seq: 0 } : { run_id: id.slice(0, i), seq };
}
