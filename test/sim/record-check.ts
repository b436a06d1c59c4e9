/**
 * The simulation's end-of-run checks of the run records against the schedules, the users'
 * commands and the executor's ledger (invariants.ts holds the incremental ones). Pure: it gets the
 * records, job states, ledger and command log, and reports through `fail`.
 *
 *  c  occurrence_lost / occurrence_duplicated / unexpected_run
 *     Every occurrence the job's schedule called for while it was enabled has exactly one run
 *     record (or waits in its overlap queue); an occurrence it did not call for (paused, deleted,
 *     an earlier schedule) has none, or one `cancelled` by the command (a run prepared ahead);
 *     no record for a time that is no occurrence of any of the job's schedules (manual runs
 *     aside) — or one `skipped` by a decision made ahead of the command (look-ahead decides skip
 *     at preparation when a run blocks it), or whose run had started before the command (a started
 *     run is not cancelled: it finishes, retries included), or whose stop a fault lost and whose
 *     record is what its one execution since did, begun within lease TTL + drain grace of the
 *     command (`lostStopOutcome`). An occurrence its owner had not fired yet (down, or slow) when a pause, a schedule
 *     change or a delete came within LATE_FIRE_MS after it may have no record, or one cancelled
 *     by the command. Occurrences inside a command's window (its first send to its answer, widened by the
 *     schedulers' clock offsets, which decide "now" for the owner — and up to the furthest a
 *     scheduler's clock had read by the answer: a clock stepped ahead fires early) may have a
 *     record or not.
 *  c  status_unexplained — every terminal record's status has its cause:
 *     `succeeded` — an execution of its last attempt exited 0 (ledger);
 *     `failed` / `timed_out` — see i;
 *     `cancelled` — a command of the job (pause, reschedule, delete) or overlap `replace`; and its
 *       executions end within lease TTL + drain grace of the cancel (a lost cancel of a prepared
 *       run lets it start: its first heartbeat after the start says `lease_lost`); one still
 *       running is judged at the check (`checkedAtMs`), so a cancel in the last seconds of a
 *       seed, its bound not reached yet, fires nothing;
 *     `skipped` — the job's overlap policy (skip, queue) or its active-run bound; never executed;
 *     `missed` — only a run not started within its starting deadline (the simulation's jobs catch
 *       up every misfire: `run_all`, within its bound): never executed, and ended no earlier than
 *       its deadline after its due time (or its creation, if later);
 *     `throttled` — a bounded backlog (the job's or the tenant's); never executed.
 *  t  throttled_under_bound — no run is throttled while its job (tenant) had fewer runs waiting
 *     for a slot than its bound: at the throttle's instant, the job's (tenant's) runs created and
 *     not yet ended or started — a superset of the runs waiting for a slot — number at least the
 *     bound (the instants widened by the schedulers' clock offsets).
 *  f  run_stuck — a run created (and due) before the faults stopped is still active at the end
 *     (except for a tenant whose backlog behind its cap still moves, `saturatedTenants`).
 *  i  attempt_unexecuted — an attempt counted against max_attempts (every attempt of a record
 *     whose error has no "(not counted…)" suffix, model.ts `lapseKind`) has an execution in the
 *     ledger: a run is never dead-lettered, nor brought closer to it, for a lapse that was not its
 *     own. The documented exception, counted and reported (`unstartedCap`): after
 *     MAX_UNSTARTED_ATTEMPTS uncounted lapses (or MAX_GIVEN_BACK give-backs), the next ones count.
 *  m  manual_run_lost — every run-now that was answered has its run record.
 *  p  started_while_paused — no execution of a job starts once its pause is answered (see
 *     `checkPausedStarts` for the exceptions).
 */
import { compileSchedule } from "../../src/schedule/index.ts";
import { parseRunId } from "../../src/protocol/ids.ts";
import type { JobState } from "../../src/job-state/job-state.ts";
import { TERMINAL, lapseKind, type JobSpec, type RunView } from "../../src/protocol/model.ts";
import { startingDeadlineMs } from "../../src/job-state/backlog.ts";
import { DEFAULT_JOB_CONFIG } from "../../src/job-state/job-types.ts";
import { DEFAULT_MAX_WAITING_RUNS } from "../../src/protocol/service.ts";
import { START_SKEW_TOLERANCE_MS } from "../../src/protocol/worker.ts";
import type { LedgerEntry } from "./executor.ts";

export interface JobUnderTest {
  tenant: string;
  jobId: string;
  spec: JobSpec;
}

/** The users' commands the simulation sends during faults (cluster.ts `planCommands`). */
export type CommandKind = "pause" | "resume" | "reschedule" | "delete" | "run_now";

export interface CommandRecord {
  readonly jobId: string;
  readonly kind: CommandKind;
  /** Simulation time of the first send. */
  readonly sentMs: number;
  /** Simulation time of the answer; null while (or if never) answered. */
  ackMs: number | null;
  /** The job's spec once the command applies (pause, resume, reschedule). */
  readonly spec?: JobSpec;
  /** run_now: the run it created (once answered). */
  runId?: string;
}

export interface RecordCheckInput {
  jobs: readonly JobUnderTest[];
  states: ReadonlyMap<string, JobState | undefined>;
  records: ReadonlyMap<string, readonly RunView[]>;
  ledger: readonly LedgerEntry[];
  commands: readonly CommandRecord[];
  /** Occurrences due up to here are judged. */
  windowEndMs: number;
  /** The simulated instant of the check: an execution without an end is judged as running to it. */
  checkedAtMs: number;
  /** Runs created before this must have ended. */
  stuckBeforeMs: number;
  saturated: ReadonlySet<string>;
  /** The largest wall-clock offset (either way) of a scheduler host at some time in [fromMs, toMs]. */
  skewDuring: (fromMs: number, toMs: number) => number;
  /**
   * The furthest any scheduler's wall clock had read by true time `atMs`: an occurrence up to it
   * may have been fired by then (a clock stepped ahead fires early, and what it fired stays).
   */
  firedBy: (atMs: number) => number;
  leaseTtlMs: number;
  drainGraceMs: number;
  /** The job actor's look-ahead (a job's window is at most this). */
  lookaheadMs: number;
  maxUnstarted: number;
  /** Attempts given back unstarted (drains) that do not count, apart (MAX_GIVEN_BACK). */
  maxGivenBack: number;
  /** How late a cancelled run's kill may come (the executor's graceful kill, the worker's heartbeat interval). */
  killSlackMs: number;
  /** The job actor's bound on a job's runs waiting for a slot (default: `DEFAULT_JOB_CONFIG`'s). */
  maxWaitingRuns?: number;
  /** Each tenant's bound on its runs waiting for a slot (default: DEFAULT_MAX_WAITING_RUNS). */
  tenantMaxWaiting?: (tenant: string) => number;
  /** When `worker` first accepted the offer of this attempt (its `accepted` event), if it did. */
  acceptedAt?: (worker: string, runId: string, attempt: number) => number | undefined;
  /**
   * Whether a fault could have kept a stop sent to execution `x`'s worker at some time in
   * [fromMs, toMs] from reaching it (invariants.ts `stopCouldBeLost`). Absent: none could.
   */
  stopCouldBeLost?: (x: LedgerEntry, fromMs: number, toMs: number) => boolean;
}

export interface RecordCheckOutput {
  /** Attempts counted without an execution after MAX_UNSTARTED_ATTEMPTS uncounted lapses (the documented bound). */
  unstartedCap: number;
  /** Runs excused as the truthful outcome of a lost stop (`lostStopOutcome`), counted, not silent. */
  lostStops: string[];
}

type Fail = (invariant: string, subject: string, detail: string) => void;

/** An occurrence due this long before a command was sent may still be settled by it (its owner was down). */
export const LATE_FIRE_MS = 30_000;

interface Window {
  fromMs: number;
  toMs: number;
}

/** What the job's schedule and state were at each instant, from its commands. */
interface Segment {
  fromMs: number;
  spec: JobSpec;
  enabled: boolean;
}

export function checkRecords(input: RecordCheckInput, fail: Fail): RecordCheckOutput {
  const out: RecordCheckOutput = { unstartedCap: 0, lostStops: [] };
  const lostStops = new Set<string>();
  /** Notes a run excused as a lost stop's outcome; returns whether it was. */
  const noteLostStop = (r: RunView, excused: boolean): boolean => {
    if (excused) lostStops.add(r.run_id);
    return excused;
  };
  const byRun = new Map<string, LedgerEntry[]>();
  for (const x of input.ledger) byRun.set(x.runId, [...(byRun.get(x.runId) ?? []), x]);
  for (const j of input.jobs) {
    const state = input.states.get(j.jobId);
    if (!state?.job) {
      fail(
        "occurrence_lost",
        j.jobId,
        `job ${j.tenant}/${j.jobId} has no state: its create never landed`,
      );
      continue;
    }
    const commands = input.commands.filter((c) => c.jobId === j.jobId);
    const records = input.records.get(j.jobId) ?? [];
    checkOccurrences(input, j, state, commands, records, byRun, noteLostStop, fail);
    checkPausedStarts(input, j, state.job.created_at_ms, commands, records, noteLostStop, fail);
    for (const r of records) {
      checkStatus(input, j, commands, r, byRun.get(r.run_id) ?? [], fail);
      out.unstartedCap += checkAttempts(input, r, byRun.get(r.run_id) ?? [], fail);
      const backlog = input.saturated.has(j.tenant);
      // Judged from its creation (a queue occurrence is created when it leaves the queue), or its
      // due time for a run prepared ahead.
      const since = Math.max(Date.parse(r.created_at), Date.parse(r.scheduled_for));
      if (!TERMINAL.has(r.status) && !backlog && since <= input.stuckBeforeMs) {
        fail(
          "run_stuck",
          r.run_id,
          `job ${j.jobId} (${describe(j.spec)}): run ${r.run_id} for ${r.scheduled_for} (created ${r.created_at}) still ${r.status} (attempt ${r.attempt}) at the end`,
        );
      }
    }
    checkThrottles(input, j, byRun, fail);
    const ids = new Set(records.map((r) => r.run_id));
    for (const c of commands) {
      if (c.kind === "run_now" && c.runId !== undefined && !ids.has(c.runId)) {
        fail(
          "manual_run_lost",
          c.runId,
          `job ${j.jobId}: run-now answered with run ${c.runId} at t=${c.ackMs}, which has no record`,
        );
      }
    }
  }
  out.lostStops = [...lostStops];
  return out;
}

function checkOccurrences(
  input: RecordCheckInput,
  j: JobUnderTest,
  state: JobState,
  commands: readonly CommandRecord[],
  records: readonly RunView[],
  byRun: ReadonlyMap<string, readonly LedgerEntry[]>,
  noteLostStop: (r: RunView, excused: boolean) => boolean,
  fail: Fail,
): void {
  const created = state.job!.created_at_ms;
  const segments = segmentsOf(j.spec, created, commands);
  const open: Window[] = commands
    .filter((c) => c.kind !== "run_now")
    .map((c) => {
      const skew = input.skewDuring(c.sentMs, c.ackMs ?? input.windowEndMs);
      const ack = c.ackMs ?? Number.POSITIVE_INFINITY;
      return {
        fromMs: c.sentMs - skew,
        toMs: Math.max(ack + skew, Number.isFinite(ack) ? input.firedBy(ack) : ack),
      };
    });
  const uncertain = (t: number) => open.some((w) => t >= w.fromMs && t <= w.toMs);
  // Every instant any of the job's schedules calls for, after its creation.
  const candidates = new Set<number>();
  for (const spec of new Set(segments.map((s) => JSON.stringify(s.spec.schedule)))) {
    const sched = compileSchedule(JSON.parse(spec) as JobSpec["schedule"]);
    for (
      let t = sched.next(created, 1)[0];
      t !== undefined && t <= input.windowEndMs;
      t = sched.next(t, 1)[0]
    )
      candidates.add(t);
  }
  const byTime = new Map<number, RunView[]>();
  for (const r of records) {
    if (r.trigger === "manual") continue;
    const t = Date.parse(r.scheduled_for);
    byTime.set(t, [...(byTime.get(t) ?? []), r]);
  }
  for (const o of [...candidates].sort((a, b) => a - b)) {
    const found = byTime.get(o) ?? [];
    if (found.length > 1) {
      fail(
        "occurrence_duplicated",
        `${j.jobId}|${o}`,
        `job ${j.jobId}: occurrence ${iso(o)} has ${found.length} run records`,
      );
      continue;
    }
    if (uncertain(o)) continue;
    const seg = segmentAt(segments, o);
    const calledFor = seg !== undefined && seg.enabled && occursIn(seg.spec, created, o);
    const r = found[0];
    // (Not fired yet when a pause, reschedule or delete came soon after its due time — its owner
    // down or slow: the command is decided first, and settles only records that exist.)
    const lateCommand = commands.some(
      (c) =>
        c.kind !== "run_now" &&
        c.kind !== "resume" &&
        c.sentMs >= o &&
        c.sentMs <= o + LATE_FIRE_MS,
    );
    if (calledFor && r === undefined && !state.queued.includes(o) && !lateCommand) {
      fail(
        "occurrence_lost",
        `${j.jobId}|${o}`,
        `job ${j.jobId} (${describe(seg.spec)}): occurrence ${iso(o)} has no run record`,
      );
    } else if (
      calledFor &&
      r?.status === "cancelled" &&
      !cancelledInTime(input, j, commands, r, o)
    ) {
      fail(
        "occurrence_lost",
        `${j.jobId}|${o}`,
        `job ${j.jobId}: occurrence ${iso(o)}, called for, was cancelled (${r.reason}) with no command of the job soon after it`,
      );
    } else if (
      !calledFor &&
      r !== undefined &&
      r.status !== "cancelled" &&
      r.status !== "skipped" &&
      r.status !== "throttled" &&
      !startedBefore(byRun.get(r.run_id), seg, input) &&
      !noteLostStop(
        r,
        lostStopOutcome(
          input,
          seg && stopOf(input, created, commands, r, o, seg.fromMs),
          r,
          byRun.get(r.run_id) ?? [],
        ),
      )
    ) {
      fail(
        "unexpected_run",
        r.run_id,
        `job ${j.jobId}: run ${r.run_id} for ${r.scheduled_for} (${r.status}), an occurrence its schedule did not call for then (${seg ? (seg.enabled ? describe(seg.spec) : "paused or deleted") : "before creation"})`,
      );
    }
  }
  for (const r of records) {
    const t = Date.parse(r.scheduled_for);
    if (r.trigger !== "manual" && t <= input.windowEndMs && !candidates.has(t)) {
      fail(
        "unexpected_run",
        r.run_id,
        `job ${j.jobId}: run ${r.run_id} for ${r.scheduled_for}, not an occurrence of its schedule`,
      );
    }
  }
}

/**
 * A called-for occurrence's run may be cancelled: replaced (overlap `replace`); by a delete sent
 * after its due time (it may still run then); by a pause, whenever it was due, if it had not
 * started (a pause cancels every run not heard to start); by a reschedule sent within
 * LATE_FIRE_MS after it (its owner, down, had not fired it yet: the command settles it); or by a
 * pause or reschedule answered up to a look-ahead window before it, which cancels the runs prepared ahead
 * for good even where the resumed or new schedule calls for the same occurrence (the documented
 * "stay cancelled": README, "Policies" and "Known limitations").
 */
function cancelledInTime(
  input: RecordCheckInput,
  j: JobUnderTest,
  commands: readonly CommandRecord[],
  r: RunView,
  o: number,
): boolean {
  const reason = r.reason ?? "";
  if (reason.includes("replaced by a newer occurrence")) return j.spec.overlap === "replace";
  // A run prepared ahead by a scheduler whose clock ran ahead earlier (and has since stepped
  // back) was prepared up to a look-ahead window past what that clock read: `firedBy`.
  const upTo = (c: CommandRecord) => {
    const ack = c.ackMs ?? Number.POSITIVE_INFINITY;
    const skew = input.skewDuring(c.sentMs, c.ackMs ?? input.windowEndMs);
    return (
      o <= Math.max(ack + skew, Number.isFinite(ack) ? input.firedBy(ack) : ack) + input.lookaheadMs
    );
  };
  return commands.some((c) =>
    c.kind === "delete"
      ? c.sentMs >= o && reason.includes("job deleted")
      : // A pause cancels every run not started, however long due (a backlog waiting for slots).
        c.kind === "pause"
        ? reason.includes("job paused") && upTo(c)
        : c.kind === "reschedule" && o >= c.sentMs - LATE_FIRE_MS && upTo(c),
  );
}

/**
 * Whether a pause can have cancelled this run: one not answered before the run was created (a
 * run-now sent to a paused job is created after the pause and is not cancelled by it).
 */
function pausedAfterCreation(
  input: RecordCheckInput,
  commands: readonly CommandRecord[],
  r: RunView,
): boolean {
  const created = Date.parse(r.created_at);
  return commands.some((c) => {
    if (c.kind !== "pause") return false;
    const ack = c.ackMs ?? Number.POSITIVE_INFINITY;
    const skew = input.skewDuring(c.sentMs, c.ackMs ?? input.windowEndMs);
    return Math.max(ack + skew, Number.isFinite(ack) ? input.firedBy(ack) : ack) >= created;
  });
}

/**
 * Whether a run had begun executing before the command that stopped calling for its occurrence
 * took effect: a started run is not cancelled by a pause or a schedule change (only runs prepared
 * and not started are), and it finishes, retries included — prepared ahead, it may start up to the
 * start tolerance early. "Took effect" is the command's answer widened by the clocks' offsets and
 * the start tolerance, the instant `checkPausedStarts` counts starts after: the stop a command
 * sends a worker before its answer (a run it holds, its start not heard) may reach the worker just
 * after a start, or be lost, and the worker's report of that execution then decides the record —
 * one that ended by itself is recorded as it ended (succeeded, failed), truthfully.
 */
function startedBefore(
  runs: readonly LedgerEntry[] | undefined,
  seg: Segment | undefined,
  input: RecordCheckInput,
): boolean {
  if (!runs || runs.length === 0 || seg === undefined) return false;
  const first = Math.min(...runs.map((x) => x.startMs));
  return first <= seg.fromMs + input.skewDuring(seg.fromMs, seg.fromMs) + START_SKEW_TOLERANCE_MS;
}

/**
 * The change that stopped run `r` of occurrence `o` on its worker: the first pause or schedule
 * change answered once the run existed whose spec no longer calls for `o` — and answered by
 * `notAfterMs` (the change in force at `o`, or the pause judged): a run created for an occurrence
 * its schedule no longer called for is not excused by a later change.
 */
function stopOf(
  input: RecordCheckInput,
  jobCreatedMs: number,
  commands: readonly CommandRecord[],
  r: RunView,
  o: number,
  notAfterMs: number,
): CommandRecord | undefined {
  const c = commands.find(
    (c) =>
      (c.kind === "pause" || c.kind === "reschedule") &&
      c.ackMs !== null &&
      c.spec !== undefined &&
      (!c.spec.enabled || !occursIn(c.spec, jobCreatedMs, o)) &&
      answeredAfterCreation(input, c, r),
  );
  return c !== undefined && c.ackMs! <= notAfterMs ? c : undefined;
}

/** Whether command `c` was answered once run `r` existed (its creation stamped by an owner's clock). */
function answeredAfterCreation(input: RecordCheckInput, c: CommandRecord, r: RunView): boolean {
  const ack = c.ackMs ?? Number.POSITIVE_INFINITY;
  const skew = input.skewDuring(c.sentMs, c.ackMs ?? input.windowEndMs);
  return (
    Math.max(ack + skew, Number.isFinite(ack) ? input.firedBy(ack) : ack) >=
    Date.parse(r.created_at)
  );
}

/**
 * Whether `r`'s record is the truthful outcome of a stop that `change` (a pause or a schedule
 * change) sent and a fault lost. The change stops a run its worker holds, its start not heard, and
 * the worker's answer decides the record (src/runs/run-lifecycle.ts `stopBeforeStart`): a worker
 * that missed the stop (cut off from the bus) starts the run at its start under its claim's cover,
 * and one whose task ended before a heartbeat told it to stop reports its real end. Excused only
 * when all of these hold: the executing worker had accepted the attempt by the change's answer (it
 * held it: the change stopped it, not cancelled it at once); a fault could have kept the stop from
 * it between the change and the start; the run's one execution (`runs`: a stopped run is never
 * offered again nor retried) is of its last attempt, began after the change was sent and — as a
 * cancelled run's execution is bounded (`checkStatus`) — at most lease TTL + drain grace after its
 * answer (the cover ends lease TTL after a start at most lease TTL + the start tolerance ahead of
 * the change), and ended within lease TTL + drain grace (+ the kill slack) of the change or its
 * start; and the record's status is what that execution did. Any other execution is not excused.
 */
function lostStopOutcome(
  input: RecordCheckInput,
  change: CommandRecord | undefined,
  r: RunView,
  runs: readonly LedgerEntry[],
): boolean {
  if (change === undefined || change.ackMs === null || !answeredAfterCreation(input, change, r))
    return false;
  const at = change.ackMs + input.skewDuring(change.sentMs, change.ackMs);
  const x = runs.length === 1 ? runs[0]! : undefined;
  if (x === undefined || x.attempt !== r.attempt || x.endMs === null) return false;
  if (x.startMs < change.sentMs) return false; // begun before the change: not what its stop missed
  const accepted = input.acceptedAt?.(x.worker, x.runId, x.attempt);
  if (accepted === undefined || accepted > change.ackMs) return false;
  if (!(input.stopCouldBeLost?.(x, change.sentMs, x.startMs) ?? false)) return false;
  const grace = input.leaseTtlMs + input.drainGraceMs;
  if (x.startMs > at + grace) return false;
  if (x.endMs > Math.max(at, x.startMs) + grace + input.killSlackMs) return false;
  return statusOfExecution(x) === r.status;
}

/** The terminal status an execution's own end gives its run (none for a kill: the owner decides). */
function statusOfExecution(x: LedgerEntry): RunView["status"] | undefined {
  if (x.outcome === "exit 0") return "succeeded";
  if (x.outcome === "timed_out") return "timed_out";
  if (x.outcome !== null && /^exit \d+$/.test(x.outcome)) return "failed";
  return undefined;
}

/** The job's spec and enabled state from creation on, as its answered commands set them (applied at their answer). */
function segmentsOf(
  spec: JobSpec,
  createdMs: number,
  commands: readonly CommandRecord[],
): Segment[] {
  const out: Segment[] = [{ fromMs: createdMs, spec, enabled: spec.enabled }];
  for (const c of commands) {
    if (c.kind === "run_now") continue;
    const at = c.ackMs ?? c.sentMs;
    const prev = out[out.length - 1]!;
    if (c.kind === "delete") out.push({ fromMs: at, spec: prev.spec, enabled: false });
    else out.push({ fromMs: at, spec: c.spec!, enabled: c.spec!.enabled });
  }
  return out;
}

function segmentAt(segments: readonly Segment[], t: number): Segment | undefined {
  let s: Segment | undefined;
  for (const x of segments) if (x.fromMs <= t) s = x;
  return s;
}

function occursIn(spec: JobSpec, createdMs: number, t: number): boolean {
  const sched = compileSchedule(spec.schedule);
  return sched.next(Math.max(createdMs, t - 1), 1)[0] === t;
}

/**
 * `started_while_paused`: once a pause is answered (widened by the clocks' offsets and the start
 * tolerance) and until the job is enabled again, no execution of it starts — except a run-now sent
 * after the pause, or a run the pause (or an earlier schedule change) stopped whose stop a fault
 * lost: a worker holding it prepared with a cover may start it. Recorded `cancelled`, checkStatus
 * bounds how long it runs on; recorded as it ended, `lostStopOutcome` bounds its start and end.
 */
function checkPausedStarts(
  input: RecordCheckInput,
  j: JobUnderTest,
  jobCreatedMs: number,
  commands: readonly CommandRecord[],
  records: readonly RunView[],
  noteLostStop: (r: RunView, excused: boolean) => boolean,
  fail: Fail,
): void {
  const byId = new Map(records.map((r) => [r.run_id, r]));
  const answered = commands.filter((c) => c.kind !== "run_now" && c.ackMs !== null);
  for (const [i, c] of answered.entries()) {
    if (c.kind !== "pause") continue;
    const from = c.ackMs! + input.skewDuring(c.sentMs, c.ackMs!) + START_SKEW_TOLERANCE_MS;
    const next = answered
      .slice(i + 1)
      .find((x) => x.kind === "resume" || (x.kind === "reschedule" && x.spec?.enabled));
    const to = next ? next.sentMs : Number.POSITIVE_INFINITY;
    for (const x of input.ledger) {
      if (x.job !== j.jobId || x.startMs <= from || x.startMs >= to) continue;
      const r = byId.get(x.runId);
      const manualAfter = commands.some(
        (m) => m.kind === "run_now" && m.runId === x.runId && m.sentMs >= c.sentMs,
      );
      const cancelled = r?.status === "cancelled" && (r.reason ?? "").includes("job paused");
      // Its stop lost: this execution is the run's only one, begun after the pause. A scheduled
      // run may have been stopped by an earlier schedule change: bounded from that one.
      const stop =
        r === undefined || r.trigger === "manual"
          ? c
          : (stopOf(input, jobCreatedMs, commands, r, Date.parse(r.scheduled_for), c.ackMs!) ?? c);
      const since = input.ledger.filter((y) => y.runId === x.runId);
      const lostStop =
        r !== undefined &&
        since.every((y) => y.startMs > from) &&
        noteLostStop(r, lostStopOutcome(input, stop, r, since));
      if (!manualAfter && !cancelled && !lostStop)
        fail(
          "started_while_paused",
          x.runId,
          `job ${j.jobId}: attempt ${x.attempt} of ${x.runId} started at ${iso(x.startMs)}, after the pause answered at ${iso(c.ackMs!)} (record ${r?.status ?? "none"}: ${r?.reason ?? ""})`,
        );
    }
  }
}

/** `status_unexplained`: each terminal status has its cause (see the module header). */
function checkStatus(
  input: RecordCheckInput,
  j: JobUnderTest,
  commands: readonly CommandRecord[],
  r: RunView,
  runs: readonly LedgerEntry[],
  fail: Fail,
): void {
  const why = (s: string) =>
    fail(
      "status_unexplained",
      r.run_id,
      `job ${j.jobId} (${describe(j.spec)}): run ${r.run_id} for ${r.scheduled_for} is ${r.status} (${r.reason ?? "no reason"}) but ${s}`,
    );
  const reason = r.reason ?? "";
  switch (r.status) {
    case "succeeded":
      if (!runs.some((x) => x.attempt === r.attempt && x.outcome === "exit 0"))
        why(
          `no execution of attempt ${r.attempt} exited 0 (ledger: ${runs.map(label).join(", ") || "none"})`,
        );
      return;
    case "cancelled": {
      const cause = reason.includes("replaced by a newer occurrence")
        ? j.spec.overlap === "replace"
        : reason.includes("job deleted")
          ? commands.some((c) => c.kind === "delete")
          : reason.includes("job paused")
            ? pausedAfterCreation(input, commands, r)
            : reason.includes("schedule changed")
              ? commands.some((c) => c.kind === "reschedule")
              : false;
      if (!cause) return why("no command of the job or overlap policy explains it");
      const stamped = Date.parse(r.finished_at ?? r.created_at);
      const at = stamped + input.skewDuring(stamped - 60_000, stamped + 60_000);
      for (const x of runs) {
        const bound =
          Math.max(at, x.startMs) + input.leaseTtlMs + input.drainGraceMs + input.killSlackMs;
        // An execution still running is judged at the check: one whose cancel came in the last
        // seconds has not had its bound yet, and proves nothing.
        if ((x.endMs ?? input.checkedAtMs) > bound)
          why(
            `its execution ${label(x)} ran on past ${iso(bound)}, lease TTL + drain grace after the cancel${x.endMs === null ? ` (still running at ${iso(input.checkedAtMs)})` : ""}`,
          );
      }
      return;
    }
    case "skipped": {
      const cause = reason.startsWith("overlap: an earlier run")
        ? j.spec.overlap === "skip"
        : reason.includes("queue")
          ? j.spec.overlap === "queue"
          : reason.startsWith("too many active runs");
      if (!cause) why("the job's overlap policy does not explain it");
      else if (runs.length > 0) why(`it executed: ${runs.map(label).join(", ")}`);
      return;
    }
    case "missed": {
      if (!reason.startsWith("starting deadline:"))
        return why(
          "the simulation's jobs catch up every missed occurrence (run_all, within its bound)",
        );
      if (runs.length > 0) return why(`it executed: ${runs.map(label).join(", ")}`);
      const due = Date.parse(r.scheduled_for);
      // Under any of the specs the job had (a reschedule changes a cron job's default): the
      // shortest is the bound the run cannot have ended before.
      const deadlines = [j.spec, ...commands.flatMap((c) => (c.spec ? [c.spec] : []))]
        .map((spec) => startingDeadlineMs(spec, due, r.trigger))
        .filter((d): d is number => d !== null);
      if (deadlines.length === 0) return why("its job has no starting deadline for it");
      const deadline = Math.min(...deadlines);
      // From its due time (a run prepared ahead), or its creation if later (an occurrence that
      // waited in the overlap queue); both stamped by owners' clocks.
      const from = Math.max(due, Date.parse(r.created_at));
      // Both stamped by the owner's clock that decided (its now against the deadline it set).
      const ended = Date.parse(r.finished_at ?? r.created_at);
      const skew = input.skewDuring(from - 60_000, ended + 60_000);
      if (ended + 2 * skew < from + deadline)
        why(`it ended ${ended - from} ms after its due time, before its deadline (${deadline} ms)`);
      return;
    }
    case "throttled":
      if (
        !reason.startsWith("backlog: the job has") &&
        !reason.startsWith("backlog: the tenant has")
      )
        why("no backlog bound explains it");
      else if (runs.length > 0) why(`it executed: ${runs.map(label).join(", ")}`);
      return;
    case "failed":
    case "timed_out":
      if (runs.length === 0) why("it never executed (ledger: none)");
      return;
    case "queued":
    case "leased":
    case "running":
    case "retry_wait":
      return;
  }
}

/**
 * `throttled_under_bound` (see the module header): each throttled run of the job had, at its
 * throttle, at least the bound of runs created and neither ended nor started — of its job (the
 * job's bound) or of its tenant (the tenant's). A necessary condition: those runs include every
 * run waiting for a slot then.
 */
function checkThrottles(
  input: RecordCheckInput,
  j: JobUnderTest,
  byRun: ReadonlyMap<string, readonly LedgerEntry[]>,
  fail: Fail,
): void {
  const mine = input.records.get(j.jobId) ?? [];
  for (const r of mine) {
    if (r.status !== "throttled") continue;
    const tenantWide = (r.reason ?? "").startsWith("backlog: the tenant has");
    const bound = tenantWide
      ? (input.tenantMaxWaiting?.(j.tenant) ?? DEFAULT_MAX_WAITING_RUNS)
      : (input.maxWaitingRuns ?? DEFAULT_JOB_CONFIG.maxWaitingRuns);
    const pool = tenantWide
      ? input.jobs
          .filter((x) => x.tenant === j.tenant)
          .flatMap((x) => input.records.get(x.jobId) ?? [])
      : mine;
    const at = Date.parse(r.finished_at ?? r.created_at);
    const tol = input.skewDuring(at - 60_000, at + 60_000) + 1_000;
    let open = 0;
    for (const x of pool) {
      if (x === r) continue;
      const created = Date.parse(x.created_at);
      const ended = x.finished_at === null ? Number.POSITIVE_INFINITY : Date.parse(x.finished_at);
      // A record made terminal at once (skipped, missed or throttled when fired) never waited.
      if (ended === created && x.attempts.length === 0) continue;
      const started = Math.min(
        Number.POSITIVE_INFINITY,
        ...(byRun.get(x.run_id) ?? []).map((e) => e.startMs),
      );
      if (created <= at + tol && ended >= at - tol && started >= at - tol) open++;
    }
    if (open < bound)
      fail(
        "throttled_under_bound",
        r.run_id,
        `job ${j.jobId}: run ${r.run_id} for ${r.scheduled_for} throttled at ${r.finished_at} (${r.reason}) while only ${open} of its ${tenantWide ? "tenant's" : "job's"} runs were created and neither ended nor started (bound ${bound})`,
      );
  }
}

/** `attempt_unexecuted`; returns 1 when the documented bound explains an unexecuted counted attempt. */
function checkAttempts(
  input: RecordCheckInput,
  r: RunView,
  runs: readonly LedgerEntry[],
  fail: Fail,
): number {
  let uncounted = 0;
  let givenBack = 0;
  let capped = 0;
  for (const a of r.attempts) {
    if (lapseKind(a.error) !== "counted") {
      if (a.error?.startsWith("given back")) givenBack++;
      else uncounted++;
      continue;
    }
    // A cancelled attempt is the command's (its run is cancelled, not failed); one still under way has no outcome yet.
    if (a.outcome === null || a.outcome === "cancelled") continue;
    if (runs.some((x) => x.attempt === a.attempt)) continue;
    if (uncounted >= input.maxUnstarted || givenBack >= input.maxGivenBack) {
      capped = 1;
      continue;
    }
    fail(
      "attempt_unexecuted",
      `${r.run_id}#${a.attempt}`,
      `run ${r.run_id} (${r.status}): attempt ${a.attempt} on ${a.worker ?? "?"} counted against max_attempts (${a.outcome}: ${a.error ?? "no error"}) but never executed (ledger: ${runs.map(label).join(", ") || "none"})`,
    );
  }
  return capped;
}

function label(x: LedgerEntry): string {
  return `#${x.attempt}/f${x.fence}@${x.worker} ${x.outcome ?? "running"}`;
}

const iso = (ms: number) => new Date(ms).toISOString();

export function describe(spec: JobSpec): string {
  return "cron" in spec.schedule
    ? `cron ${spec.schedule.cron}, overlap ${spec.overlap}`
    : `at ${spec.schedule.at}`;
}

/** Whether a run id names a manual run (run-now). */
export const isManual = (runId: string): boolean => (parseRunId(runId)?.seq ?? 0) > 0;
