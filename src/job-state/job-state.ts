/**
 * The job actor's persisted state and its conversions to API views. Times are epoch ms inside,
 * RFC 3339 strings outside. Active (non-terminal) runs live in the job state, with their
 * attempts, so every run transition is decided by the job actor alone and written to the run's
 * own record (runs bucket) before the job state: the record is what the API shows.
 */
import { formatInstant, formatUtc } from "../schedule/index.ts";
import type { AttemptView, JobSpec, JobView, RunStatus, RunView } from "../protocol/model.ts";
import type { RunIndexState } from "../history/run-index.ts";

export interface JobRecord {
  tenant_id: string;
  job_id: string;
  spec: JobSpec;
  version: number;
  created_at_ms: number;
  updated_at_ms: number;
  /** Hash of the create request, so a retried create is answered, a different one refused. */
  request_hash: string;
}

export type ActiveStatus = Extract<RunStatus, "queued" | "leased" | "running" | "retry_wait">;

export interface ActiveRun {
  run_id: string;
  scheduled_for_ms: number;
  /**
   * When the worker should start it (scheduled_for + flexible-window spread; a run-now's or a
   * queued occurrence's creation). Never moved later: a retry keeps it (run-messages.ts
   * `onRetryDue`), so it is a time of the schedule, not of the owner's clock at a retry.
   */
  start_at_ms: number;
  /**
   * When it last began to wait for a slot after its start (its retry fell due): only how often it
   * asks again (run-dispatch.ts `askSlot`). Absent: since its start or creation.
   */
  waiting_since_ms?: number;
  trigger: RunView["trigger"];
  status: ActiveStatus;
  attempt: number;
  /** Fence of the current offer or claim (0 = none); see ARCHITECTURE.md, "Design decisions". */
  fence: number;
  worker: string | null;
  /** A tenant slot is held for this run. */
  slot: boolean;
  /** Slots given back so far: names the current grant (see `grantId` in ids.ts). */
  slot_seq?: number;
  /**
   * Probes of the current lease sent and not answered (run-messages.ts `probeOrLapse`): all of
   * them (`probes`), those that found the worker silent and not advertising, in a row
   * (`silent_probes`), and whether one is out (`probe_open`). Memory only.
   */
  probes?: number;
  silent_probes?: number;
  probe_open?: true;
  /** Attempts whose lease expired before they started: not counted against max_attempts (bounded). */
  unstarted?: number;
  /** Of those, attempts their worker gave back unstarted (a drain): bounded apart (run-lifecycle.ts `MAX_GIVEN_BACK`). */
  given_back?: number;
  /**
   * Of those, attempts presumed not started (their worker did not answer, or no longer knew
   * them): each may have run, so the run can no longer end `missed` (backlog.ts `canMiss`).
   */
  presumed?: number;
  /**
   * Prepared ahead of its due time under overlap `skip` (look-ahead): its worker holds it but may
   * start it only once the owner's heartbeat reply no longer says `hold` — at the due instant, if
   * no other run of the job is active then; otherwise the owner skips it (see `holdOf`).
   */
  gate?: true;
  /**
   * Claimed while the job's overlap was `queue`: its acknowledgements carry no cover
   * (run-messages.ts `heartbeatAck`), so its worker asks again as its start nears, and a run
   * started by hand can still send it back to the queue (job-commands.ts `unprepareQueued`).
   */
  no_cover?: true;
  /**
   * A pause or a schedule change met it claimed by a worker, its start not heard: its worker was
   * told to stop it, and the worker's answer — not a guess — decides its record
   * (run-lifecycle.ts `stopBeforeStart`, `endStopped`). Its status stays `leased` meanwhile.
   */
  stopping?: "job paused" | "schedule changed";
  /**
   * Its record is created after the state write (a run-now: `create_run`), so on load a missing
   * record means "not written yet", not "ended and pruned" (job-shell.ts `reconcile`).
   */
  recorded_after?: true;
  /**
   * Its starting deadline (backlog.ts `startingDeadlineMs`): not started by then, it ends `missed`
   * instead of starting late. Absent: none (a run-now, a one-shot without `starting_deadline_s`).
   */
  deadline_ms?: number;
  created_at_ms: number;
  started_at_ms: number | null;
  next_attempt_at_ms: number | null;
  attempts: AttemptView[];
}

export interface JobState {
  job: JobRecord | null;
  deleted: boolean;
  next_run_at_ms: number | null;
  runs: ActiveRun[];
  /** Occurrences held back by overlap=queue (oldest first, bounded). */
  queued: number[];
  /** Last fence handed out; grows with every offer. */
  fence_seq: number;
  /**
   * Fences up to here may be handed out without a state write (an offer's state change is
   * deferred, see tx.ts `dispatch`): every write reserves the next FENCE_BLOCK, and a state read
   * back starts above it (`loadJobState`), so an offer lost with unwritten state never has its
   * fence handed out again. Absent in states written before deferral: the first offer writes.
   */
  fence_reserved?: number;
  manual_seq: number;
  /** The latest occurrence already handled (run, skipped or missed); never fired again. */
  last_occurrence_ms?: number;
  /**
   * Occurrences above `last_occurrence_ms` that were handled all the same: the runs prepared
   * ahead that a schedule change cancelled (it lowers `last_occurrence_ms` so that the new
   * schedule's occurrences before them fire), or whose orphaned record it settled
   * (run-messages.ts `onRunSettled`). `fire` passes over them (their records stay cancelled);
   * at most MAX_HANDLED_AHEAD.
   */
  handled_ahead?: number[];
  /**
   * Occurrences in `queued` that a run started by hand sent back after they were prepared
   * (job-commands.ts `unprepareQueued`): their record and runs-index entry exist already, so the
   * record they get when they leave the queue (a run, or a `skipped`/`throttled` end) is not
   * indexed again — a second entry lists the run twice once a chunk closed in between. Bounded by
   * the queue (`queueLimit`).
   */
  requeued?: number[];
  /** Request ids of recent run-now and patch commands and what they did (bounded). */
  recent?: { id: string; run_id?: string; version?: number }[];
  /**
   * Cancelled runs whose worker may still be killing them: each keeps its tenant slot until the
   * worker reports the attempt ended, or until `until_ms` (the worker's lease plus its kill grace
   * has run out: it has stopped the task by then), so a cancel never lets the tenant start one
   * run more than its cap while the old one still executes (bounded, oldest first).
   */
  draining?: Draining[];
  /**
   * The runs index (run-index.ts): chunks of run ids written so far and the ids created since
   * (fewer than RUN_INDEX_CHUNK). Absent on jobs created before the index (key listing instead).
   */
  index?: RunIndexState;
  /**
   * In memory only: the read-back dropped a run-now's run whose terminal record it found
   * (job-shell.ts `reconcile`), and the stored state still lists it. The next decision writes
   * (tx.ts), a retention sweep too (with-history.ts) — before any prune could take that record:
   * a stored state listing a run-now with no record is read back as "not recorded yet" and run.
   */
  ends_unwritten?: true;
}

/** Most occurrences `JobState.handled_ahead` keeps (each change adds the runs it cancels ahead). */
export const MAX_HANDLED_AHEAD = 32;

export interface Draining {
  run_id: string;
  fence: number;
  worker: string;
  /** The slot grant the run holds (`grantId`). */
  grant: string;
  until_ms: number;
  /**
   * The run's `created_at_ms` and `scheduled_for_ms`: a run cancelled ahead whose worker missed
   * the cancel may still start under its cover, so under overlap `skip` it blocks the runs created
   * after it until its drain ends (occurrence-plan.ts `holdOf`). Absent in states written before.
   */
  created_at_ms?: number;
  scheduled_for_ms?: number;
  /**
   * Made on load from a run whose terminal record was written but whose end was not
   * (`reconcile`): its worker may never have heard the cancel. Told on activation (`recall`),
   * then cleared.
   */
  untold?: true;
}

/** The API views of a job's active runs. */
/**
 * What a job holds slots for: its active runs and its cancelled runs whose workers may still be
 * killing them (`draining`). New runs are admitted only below `maxActiveRuns` of these together,
 * which is also the bound of the draining list: a cancelled run's slot goes back only once its
 * task is gone (or its lease's end has passed), never early to make room.
 */
export function slotsHeld(s: JobState): number {
  return s.runs.length + (s.draining?.length ?? 0);
}

/**
 * Whether the job never had a run: none active or draining, no occurrence fired or held (not even
 * one skipped or missed), no run-now, no run record in its runs index. Nothing of a run — a slot
 * grant, an offer, a claim, a heartbeat, a completion, a probe's answer — can then be on its way
 * to it; its first run comes from its own `fire` or a run-now, each a message that reads it back.
 * A state read back after a fire whose change was lost says so too, but its `fire` is due then.
 */
export function neverRan(s: JobState): boolean {
  return (
    s.runs.length === 0 &&
    (s.draining?.length ?? 0) === 0 &&
    s.queued.length === 0 &&
    s.last_occurrence_ms === undefined &&
    (s.handled_ahead?.length ?? 0) === 0 &&
    s.manual_seq === 0 &&
    (s.index === undefined || (s.index.seq === 0 && s.index.pending.length === 0))
  );
}

/**
 * The job's runs waiting for a tenant slot: queued and not granted (prepared ahead included). A
 * job at its bound (`JobActorConfig.maxWaitingRuns`) prepares nothing ahead, and its occurrences
 * falling due are recorded `throttled` (backlog.ts).
 */
export function waitingRuns(s: JobState): number {
  let n = 0;
  for (const r of s.runs) if (r.status === "queued" && !r.slot) n++;
  return n;
}

export function activeRunViews(s: JobState): RunView[] {
  return s.job ? s.runs.map((r) => activeRunView(s.job!, r)) : [];
}

/** The answer to `active_runs`: the active runs and the runs index, from memory. */
export function activeRunsReply(s: JobState): { runs: RunView[]; index?: RunIndexState } {
  return { runs: activeRunViews(s), ...(s.index ? { index: s.index } : {}) };
}

/** Fences reserved by each state write (see `JobState.fence_reserved`). */
export const FENCE_BLOCK = 1_024;

/** A state read back from KV: fences continue above everything an earlier incarnation reserved. */
export function loadJobState(s: JobState): JobState {
  const fenced =
    s.fence_reserved !== undefined && s.fence_reserved > s.fence_seq
      ? { ...s, fence_seq: s.fence_reserved }
      : s;
  // A count of unanswered probes is memory only (run-messages.ts `probeOrLapse`); one a later
  // write happened to store must not let a new owner lapse a lease without asking.
  if (!fenced.runs.some(probed)) return fenced;
  const runs = fenced.runs.map((r) => {
    if (!probed(r)) return r;
    const copy = { ...r };
    forgetProbes(copy);
    return copy;
  });
  return { ...fenced, runs };
}

/** Whether a run carries memory of its lease's probes (`forgetProbes` clears it). */
function probed(r: ActiveRun): boolean {
  return r.probes !== undefined || r.silent_probes !== undefined || r.probe_open !== undefined;
}

/** Forgets the probes of a lease (heard from, or the lease ended): memory only. */
export function forgetProbes(r: ActiveRun): void {
  delete r.probes;
  delete r.silent_probes;
  delete r.probe_open;
}

export const emptyJobState = (): JobState => ({
  job: null,
  deleted: false,
  next_run_at_ms: null,
  runs: [],
  queued: [],
  fence_seq: 0,
  manual_seq: 0,
});

/** Event times (created, started, finished) keep milliseconds; occurrence times are whole seconds. */
export const instant = (ms: number): string => new Date(ms).toISOString();
const iso = (ms: number | null): string | null => (ms === null ? null : instant(ms));

export function jobView(s: JobState, nextRuns?: number[]): JobView {
  const j = s.job!;
  return {
    job_id: j.job_id,
    tenant_id: j.tenant_id,
    ...j.spec,
    version: j.version,
    created_at: formatUtc(j.created_at_ms),
    updated_at: formatUtc(j.updated_at_ms),
    next_run_at: s.next_run_at_ms === null ? null : formatInstant(s.next_run_at_ms),
    ...(nextRuns ? { next_runs: nextRuns.map(formatInstant) } : {}),
  };
}

/** The record of an active run, as stored and shown. */
export function activeRunView(j: JobRecord, r: ActiveRun): RunView {
  return {
    run_id: r.run_id,
    job_id: j.job_id,
    tenant_id: j.tenant_id,
    scheduled_for: formatInstant(r.scheduled_for_ms),
    trigger: r.trigger,
    status: r.status,
    attempt: r.attempt,
    attempts: r.attempts,
    created_at: instant(r.created_at_ms),
    started_at: iso(r.started_at_ms),
    finished_at: null,
    next_attempt_at: iso(r.next_attempt_at_ms),
    result: null,
    // A run being stopped says so while its worker's answer is awaited (README, pause).
    reason: r.stopping === undefined ? null : `${r.stopping}: stopping it on its worker`,
  };
}

/** A terminal record for an occurrence that never ran (skipped, missed) or a finished run. */
export function terminalRunView(
  j: JobRecord,
  base: {
    run_id: string;
    scheduled_for_ms: number;
    trigger: RunView["trigger"];
    created_at_ms: number;
  },
  status: Exclude<RunStatus, ActiveStatus>,
  nowMs: number,
  extra: Partial<Pick<RunView, "attempt" | "attempts" | "started_at" | "result" | "reason">> = {},
): RunView {
  return {
    run_id: base.run_id,
    job_id: j.job_id,
    tenant_id: j.tenant_id,
    scheduled_for: formatInstant(base.scheduled_for_ms),
    trigger: base.trigger,
    status,
    attempt: extra.attempt ?? 0,
    attempts: extra.attempts ?? [],
    created_at: instant(base.created_at_ms),
    started_at: extra.started_at ?? null,
    finished_at: instant(nowMs),
    next_attempt_at: null,
    result: extra.result ?? null,
    reason: extra.reason ?? null,
  };
}
