/**
 * The job actor's pure core: `(state, message, now) → decision`. One actor per job holds the
 * definition, `next_run_at`, the active runs with their leases, and decides every transition:
 * firing occurrences (misfire and overlap policies), claiming worker slots, leases and fences,
 * heartbeats, completion, retries with backoff, dead letters, pause/resume, change, delete.
 *
 * Crash-safe ordering (DESIGN.md): run records are written first (`pre` effects: a `create` for a
 * new occurrence, which fails harmlessly if it exists), then the job state with CAS. A crash in
 * between re-fires the same occurrence, finds its run and advances: no duplicate, no skip.
 *
 * Leases live in memory as timers (`lease:<run>`), not in KV: a lease ends at its last heartbeat
 * ARRIVAL + TTL (the timer re-arms itself from the arrival table); a new owner re-arms them with a
 * fresh grace period on activation.
 *
 * Fences (ARCHITECTURE.md "Fences"): every offer of an attempt to a worker gets a fence of its own
 * (`fence_seq` grows), offered to exactly one worker. The first heartbeat or acceptance with that
 * fence records the claim (status leased, `worker`); from then on heartbeats and completions must
 * carry both the fence and that worker. An offer that failed or timed out is dead: the next offer
 * has a new fence, and the worker (which starts an attempt only after an acknowledged heartbeat,
 * src/worker/worker.ts) hears `lease_lost` for the old one. A re-queued run has fence 0 (no offer).
 *
 * Liveness of a lease is judged from heartbeat ARRIVAL times recorded by the host before the
 * mailbox (`ctx.arrivalMs`), so a lease does not expire while its heartbeats wait behind the
 * owner's own backlog. Retried commands carry request ids and are answered with their first result.
 */
import type { ActorContext, ActorDefinition, Decision, HostEffect } from "../actors/actor.ts";
import { KairosError, type ErrorCode } from "../lib/errors.ts";
import { compileSchedule, spreadOffsetMs, type CompiledSchedule } from "../schedule/index.ts";
import { retryDelayMs } from "./backoff.ts";
import { JOB_ACTOR, grantId, runIdFor, splitGrant, splitJobActorId } from "./ids.ts";
import { activeRunView, emptyJobState, instant, jobView, terminalRunView, type ActiveRun, type Draining, type JobRecord, type JobState } from "./job-state.ts";
import type { AttemptOutcome, JobPatch, JobSpec, RunView, TaskInput } from "./model.ts";
import type { Completion } from "../protocol/worker.ts";

export interface JobActorConfig {
  leaseTtlMs: number;
  /** Runs are created and matched to workers this long before they are due. */
  lookaheadMs: number;
  /** An occurrence fired later than this after its due time is a misfire. */
  misfireGraceMs: number;
  maxActiveRuns: number;
  queueLimit: number;
  catchUpLimit: number;
  redispatchDelayMs: number;
  /** How long a worker has to accept an offer; a new owner waits this long for an old offer's claim. */
  offerTimeoutMs: number;
  /**
   * A cancelled run's slot is held until its worker reports the attempt ended, at most the lease
   * TTL plus this (the executor's kill grace: SIGTERM, then SIGKILL) — see `JobState.draining`.
   */
  drainGraceMs: number;
  /**
   * TEST ONLY: re-opens hole 1 (one fence offered to several workers, heartbeats and completions
   * checked by fence alone), so the simulation can prove it finds it. Never set in production.
   */
  testOnlyHole1?: boolean;
}

export const DEFAULT_JOB_CONFIG: JobActorConfig = {
  leaseTtlMs: 10_000,
  // DESIGN.md: the slow work (KV writes, slot matching) happens in the minute before.
  lookaheadMs: 60_000,
  misfireGraceMs: 10_000,
  maxActiveRuns: 100,
  queueLimit: 10,
  catchUpLimit: 100,
  redispatchDelayMs: 1_000,
  offerTimeoutMs: 2_000,
  drainGraceMs: 10_000,
};

/** Most cancelled runs a job keeps a slot for while their workers kill them. */
export const MAX_DRAINING = 64;

/** Attempts that expired before they started and so do not count against max_attempts (a bound). */
export const MAX_UNSTARTED_ATTEMPTS = 10;

/** Most request ids a job remembers (retried run-now and patch requests answer their first result). */
export const RECENT_REQUESTS = 8;

/** The arrival key of a heartbeat (see ActorContext.arrivalMs). */
export const heartbeatKey = (runId: string, fence: number, worker: string): string => `hb:${runId}:${fence}:${worker}`;

/** What a worker reports when an attempt ends (defined with the worker protocol). */
export type { Completion };

export type JobMsg =
  | { kind: "create"; tenant_id: string; job_id: string; spec: JobSpec; request_hash: string }
  | { kind: "get" }
  | { kind: "patch"; patch: JobPatch; if_match?: number; request_id?: string }
  | { kind: "delete" }
  | { kind: "run_now"; request_id?: string }
  | { kind: "fire" }
  /** `run_id` is the grant id (`<run_id>_<slot_seq>`, see `grantId`). */
  | { kind: "slot_granted"; run_id: string }
  | { kind: "redispatch"; run_id: string }
  | { kind: "claimed"; run_id: string; fence: number; worker: string }
  | { kind: "dispatch_failed"; run_id: string; fence: number; reason: string }
  | { kind: "slot_check"; run_id: string }
  /** The tenant asks whether this run still holds the slot it granted (lost releases). */
  | { kind: "slot_audit"; run_id: string }
  | { kind: "heartbeat"; run_id: string; fence: number; worker: string; started_at_ms?: number }
  | ({ kind: "complete"; run_id: string; fence: number; worker: string } & Completion)
  | { kind: "lease_expired"; run_id: string; fence: number }
  | { kind: "retry_due"; run_id: string }
  /** A gated run's due instant: skip it if another run of the job is still active. */
  | { kind: "gate"; run_id: string }
  /** A cancelled run's drain bound: its worker has stopped it by now; give its slot back. */
  | { kind: "drained"; run_id: string; fence: number };

/** Work handed to the shell (src/jobs/job-shell.ts). */
export type JobEffect =
  /**
   * Writes a run record. `create`: a new occurrence (an existing key is a re-fire: fine).
   * `update`: CAS at the known revision; on a conflict re-read, refuse if a later epoch wrote it.
   * `terminal`: a record for an occurrence that does not run (skipped, missed, cancelled): created,
   * or written over an orphaned non-terminal record left by a crash before the job state advanced.
   * `settle`: like `terminal` but only over an existing non-terminal record (never creates).
   */
  | { kind: "put_run"; record: RunView; mode: "create" | "update" | "terminal" | "settle" }
  | { kind: "acquire_slot"; run_id: string; grant: string; timeout_s: number }
  | { kind: "release_slot"; grant: string }
  | { kind: "dispatch"; run_id: string; fence: number; attempt: number; start_at_ms: number; scheduled_for_ms: number; task: TaskInput }
  | { kind: "cancel_on_worker"; worker: string; run_id: string; fence: number }
  | { kind: "dead_letter"; record: RunView };

/** `hold`: (heartbeat) keep the attempt, do not start it yet (a gated run; see `holdOf`). */
export type JobReply = { job?: ReturnType<typeof jobView>; run?: RunView; run_id?: string; ok?: true; hold?: true } | null;
type D = Decision<JobState, JobReply, JobEffect>;

const schedules = new Map<string, CompiledSchedule>();
function scheduleOf(spec: JobSpec): CompiledSchedule {
  const k = JSON.stringify(spec.schedule);
  let s = schedules.get(k);
  if (!s) {
    s = compileSchedule("cron" in spec.schedule ? { cron: spec.schedule.cron, time_zone: spec.schedule.time_zone } : { at: spec.schedule.at });
    if (schedules.size > 10_000) schedules.clear();
    schedules.set(k, s);
  }
  return s;
}

/** A mutable working copy of the state plus the effects decided so far. */
class Tx {
  readonly s: JobState;
  readonly pre: JobEffect[] = [];
  readonly post: JobEffect[] = [];
  readonly fx: HostEffect<JobMsg>[] = [];
  changed = false;
  constructor(
    readonly orig: JobState,
    readonly now: number,
    readonly cfg: JobActorConfig,
    readonly arrivalMs: (key: string) => number | undefined = () => undefined,
  ) {
    this.s = {
      ...orig, runs: orig.runs.map((r) => ({ ...r, attempts: r.attempts.map((a) => ({ ...a })) })), queued: [...orig.queued],
      ...(orig.recent ? { recent: [...orig.recent] } : {}),
      ...(orig.draining ? { draining: [...orig.draining] } : {}),
    };
  }
  get job(): JobRecord {
    return this.s.job!;
  }
  done(reply: JobReply, fail?: { code: ErrorCode; message: string; field?: string }): D {
    return {
      state: this.changed ? this.s : this.orig,
      reply,
      effects: this.fx,
      pre: this.pre,
      post: this.post,
      ...(fail ? { fail } : {}),
    };
  }
  run(runId: string): ActiveRun | undefined {
    return this.s.runs.find((r) => r.run_id === runId);
  }
  putRun(r: ActiveRun, create = false): void {
    this.pre.push({ kind: "put_run", record: activeRunView(this.job, r), mode: create ? "create" : "update" });
  }
  remember(entry: { id: string; run_id?: string; version?: number }): void {
    this.s.recent = [...(this.s.recent ?? []), entry].slice(-RECENT_REQUESTS);
    this.changed = true;
  }
  recalled(id: string | undefined): { id: string; run_id?: string; version?: number } | undefined {
    return id === undefined ? undefined : this.s.recent?.find((e) => e.id === id);
  }
  timer(name: string, atMs: number, msg: JobMsg): void {
    this.fx.push({ kind: "timer", name, atMs, msg });
  }
  cancelTimer(name: string): void {
    this.fx.push({ kind: "cancel_timer", name });
  }
  armFire(): void {
    if (this.s.next_run_at_ms === null) this.cancelTimer("fire");
    else this.timer("fire", fireAt(this.cfg, this.s, this.now), { kind: "fire" });
  }
}

const iso = (ms: number): string => instant(ms);
/**
 * Look-ahead: runs are created, given a slot and a worker before they are due.
 * - `allow`: the NEXT occurrence only (a prepared run holds a worker slot until it ends).
 * - `skip` (the default): the NEXT occurrence only, prepared with a gate (`ActiveRun.gate`): its
 *   worker starts it from its own timer at its due time only if its last heartbeat reply did not
 *   say `hold`; the owner says `hold` (from memory) while a run that blocks it is active
 *   (`holdOf`), and at the due instant skips it if one still is (`gate` timer). In the common case
 *   nothing blocks it from preparation on, and it starts on time with no round trip at the due
 *   instant. One gated run at a time: while it waits, the window is closed.
 * - `queue`, `replace`: none (they act on other runs at the due instant).
 */
function lookahead(cfg: JobActorConfig, s: JobState, now: number): number {
  switch (s.job?.spec.overlap) {
    case "allow":
    case "skip":
      return undecided(s, now) === undefined ? cfg.lookaheadMs : 0;
    default:
      return 0;
  }
}

/**
 * The due instant of the run prepared ahead and not yet due, if any: at most one per job, since a
 * prepared run holds a worker slot until it ends (preparing a whole 60 s window of a job due every
 * 3 s took 20 worker slots per job; the ledger chaos run's fleet of 24 slots then starved the
 * other jobs).
 */
function undecided(s: JobState, now: number): number | undefined {
  let at: number | undefined;
  for (const r of s.runs) if (r.trigger !== "manual" && r.scheduled_for_ms > now && (at === undefined || r.scheduled_for_ms < at)) at = r.scheduled_for_ms;
  return at;
}

/**
 * Whether a gated run's worker must keep holding it (not start it) now: while a run that BLOCKS it
 * is active — one created before it (an earlier occurrence, a retry, a manual run from before it
 * was prepared), or created with it for an earlier instant (catch-up). Runs created later (the
 * next prepared occurrence, a manual run from after it was prepared) never block it. The blocking
 * set only shrinks, so the answer is monotone: once no blocking run is left — at preparation in
 * the common case — the worker may start it at its due time from its own timer with no further
 * round trip, and the `gate` reminder at the due instant (same rule) can never contradict a go.
 */
export function holdOf(s: JobState, r: ActiveRun): boolean {
  if (!r.gate || s.job?.spec.overlap !== "skip") return false;
  return s.runs.some((x) => x !== r && (x.created_at_ms < r.created_at_ms || (x.created_at_ms === r.created_at_ms && x.scheduled_for_ms < r.scheduled_for_ms)));
}

/**
 * When to fire for `next_run_at`: the start of the look-ahead window plus a deterministic spread
 * over its first half (hash of job and occurrence), so that many jobs due at the same instant
 * prepare their runs across the window instead of all at once.
 */
function fireAt(cfg: JobActorConfig, s: JobState, now: number): number {
  const due = s.next_run_at_ms!;
  if (!s.job) return due;
  // A run prepared ahead closes the window until its due instant (one ahead at a time).
  const ahead = s.job.spec.overlap === "skip" || s.job.spec.overlap === "allow";
  const la = ahead ? cfg.lookaheadMs : 0;
  if (la <= 0) return due;
  const at = due - la + spreadOffsetMs(s.job.job_id, due, Math.floor(la / 2000));
  const waitFor = undecided(s, now);
  return waitFor === undefined ? at : Math.min(due, Math.max(at, waitFor));
}

const fail = (code: ErrorCode, message: string, field?: string) => (field === undefined ? { code, message } : { code, message, field });

// ---------------------------------------------------------------------------------------------
// Occurrences: misfire, overlap, run creation

function createRun(tx: Tx, scheduledForMs: number, trigger: RunView["trigger"], runId: string, gate = false): void {
  const spec = tx.job.spec;
  const r: ActiveRun = {
    run_id: runId,
    scheduled_for_ms: scheduledForMs,
    start_at_ms: scheduledForMs + spreadOffsetMs(tx.job.job_id, scheduledForMs, spec.flex_window_s),
    trigger,
    status: "queued",
    attempt: 0,
    fence: 0,
    worker: null,
    slot: false,
    created_at_ms: tx.now,
    started_at_ms: null,
    next_attempt_at_ms: null,
    attempts: [],
    ...(gate ? { gate: true as const } : {}),
  };
  tx.s.runs.push(r);
  tx.putRun(r, true);
  // The decision at the due instant (skip if a blocking run is still active then): see `holdOf`.
  if (gate) tx.timer(`gate:${runId}`, scheduledForMs, { kind: "gate", run_id: runId });
  askSlot(tx, r);
  tx.changed = true;
}

function recordTerminal(tx: Tx, scheduledForMs: number, trigger: RunView["trigger"], status: "skipped" | "missed", reason: string): void {
  const run_id = runIdFor(tx.job.job_id, scheduledForMs);
  tx.pre.push({
    kind: "put_run",
    mode: "terminal",
    record: terminalRunView(tx.job, { run_id, scheduled_for_ms: scheduledForMs, trigger, created_at_ms: tx.now }, status, tx.now, { reason }),
  });
}

/** Applies the overlap policy to one occurrence that is due to run (or, gated, prepared ahead). */
function occur(tx: Tx, scheduledForMs: number, trigger: RunView["trigger"]): void {
  const active = tx.s.runs.length > 0;
  const runId = runIdFor(tx.job.job_id, scheduledForMs);
  if (tx.s.runs.some((r) => r.run_id === runId)) return; // re-fired after a crash: already there
  if (tx.s.runs.length >= tx.cfg.maxActiveRuns) {
    recordTerminal(tx, scheduledForMs, trigger, "skipped", `too many active runs (${tx.cfg.maxActiveRuns})`);
    return;
  }
  switch (tx.job.spec.overlap) {
    case "allow":
      return createRun(tx, scheduledForMs, trigger, runId);
    case "skip":
      // Not due yet (look-ahead): prepared under a gate, decided at the due instant.
      if (scheduledForMs > tx.now) return createRun(tx, scheduledForMs, trigger, runId, true);
      if (active) return recordTerminal(tx, scheduledForMs, trigger, "skipped", "overlap: an earlier run is still active");
      return createRun(tx, scheduledForMs, trigger, runId);
    case "queue":
      if (!active) return createRun(tx, scheduledForMs, trigger, runId);
      if (tx.s.queued.length >= tx.cfg.queueLimit) {
        return recordTerminal(tx, scheduledForMs, trigger, "skipped", `overlap: queue full (${tx.cfg.queueLimit})`);
      }
      tx.s.queued.push(scheduledForMs);
      tx.changed = true;
      return;
    case "replace":
      for (const r of [...tx.s.runs]) finish(tx, r, "cancelled", "replaced by a newer occurrence", null);
      return createRun(tx, scheduledForMs, trigger, runId);
  }
}

/** Most due occurrences one `fire` enumerates; older ones beyond it are dropped (logged by count). */
export const MAX_ENUMERATED = 100_000;

function fire(tx: Tx): void {
  const s = tx.s;
  if (!s.job || s.deleted || !s.job.spec.enabled || s.next_run_at_ms === null) return;
  const sched = scheduleOf(s.job.spec);
  const horizon = tx.now + lookahead(tx.cfg, s, tx.now);
  // Look-ahead prepares only the next occurrence ahead of time (see `undecided`).
  const due: number[] = [];
  let cursor = s.next_run_at_ms;
  let dropped = 0;
  while (cursor <= horizon && !(due.length > 0 && due[due.length - 1]! > tx.now)) {
    if (due.length >= MAX_ENUMERATED) {
      due.shift();
      dropped++;
    }
    due.push(cursor);
    cursor = sched.next(cursor, 1)[0] ?? Number.POSITIVE_INFINITY;
  }
  if (due.length === 0) return tx.armFire();
  const { policy, starting_deadline_s } = s.job.spec.misfire;
  const pastDeadline = (o: number) => starting_deadline_s !== null && tx.now - o > starting_deadline_s * 1000;
  const isLate = (o: number) => tx.now - o > tx.cfg.misfireGraceMs;
  const late = due.filter((o) => isLate(o) && !pastDeadline(o));
  // Bounded catch-up: at most `catchUpLimit` records for occurrences that will not run (the
  // newest ones), and with run_all at most `catchUpLimit` runs (the newest ones).
  const toRun = new Set(policy === "run_all" ? late.slice(-tx.cfg.catchUpLimit) : policy === "run_once" ? late.slice(-1) : []);
  const notRun = due.filter((o) => (isLate(o) || pastDeadline(o)) && !toRun.has(o));
  const recorded = new Set(notRun.slice(-tx.cfg.catchUpLimit));
  const unrecorded = notRun.length - recorded.size + dropped;
  for (const o of due) {
    if (toRun.has(o)) occur(tx, o, "catch_up");
    else if (recorded.has(o)) {
      const why = pastDeadline(o) ? `misfire: past starting deadline (${starting_deadline_s} s)` : `misfire (${policy})`;
      const extra = o === notRun[notRun.length - recorded.size] && unrecorded > 0 ? `; ${unrecorded} earlier occurrence(s) not recorded (limit ${tx.cfg.catchUpLimit})` : "";
      recordTerminal(tx, o, "catch_up", "missed", why + extra);
    } else if (!isLate(o) && !pastDeadline(o)) occur(tx, o, "schedule");
  }
  s.last_occurrence_ms = Math.max(s.last_occurrence_ms ?? 0, due[due.length - 1]!);
  s.next_run_at_ms = Number.isFinite(cursor) ? cursor : null;
  tx.changed = true;
  tx.armFire();
}

// ---------------------------------------------------------------------------------------------
// Runs: slots, claims, leases, completion, retries

/** Offers the attempt to one worker under a fence of its own (the shell picks the worker). */
function dispatch(tx: Tx, r: ActiveRun): void {
  r.fence = ++tx.s.fence_seq;
  tx.changed = true;
  // A reminder in case neither the acceptance nor the refusal comes back (a `tell` lost with a
  // dropped instance): after the offer timeout the offer is dead and the run is offered again.
  tx.timer(`dispatch:${r.run_id}`, tx.now + tx.cfg.offerTimeoutMs + tx.cfg.redispatchDelayMs, { kind: "redispatch", run_id: r.run_id });
  // A later attempt under the same slot: refresh the grant so it cannot expire under a run that
  // outlives one timeout (the tenant would then grant the slot twice).
  if (r.slot && r.attempt > 0) tx.post.push({ kind: "acquire_slot", run_id: r.run_id, grant: grantId(r), timeout_s: tx.job.spec.task.timeout_s });
  tx.post.push({
    kind: "dispatch", run_id: r.run_id, fence: r.fence, attempt: r.attempt + 1,
    start_at_ms: r.start_at_ms, scheduled_for_ms: r.scheduled_for_ms, task: tx.job.spec.task,
  });
}

/** How often a run still waiting for a tenant slot asks again (tenant slot state is soft). */
export const SLOT_RECHECK_MS = 10_000;

/** Asks the tenant actor for a slot, and arranges to ask again if none comes. */
function askSlot(tx: Tx, r: ActiveRun): void {
  tx.post.push({ kind: "acquire_slot", run_id: r.run_id, grant: grantId(r), timeout_s: tx.job.spec.task.timeout_s });
  tx.timer(`slot:${r.run_id}`, tx.now + SLOT_RECHECK_MS, { kind: "slot_check", run_id: r.run_id });
}

/** Ends a run: record, release slot, stop the worker if needed, start a queued occurrence. */
function finish(tx: Tx, r: ActiveRun, status: "succeeded" | "failed" | "timed_out" | "cancelled" | "skipped", reason: string | null, result: RunView["result"]): void {
  tx.s.runs = tx.s.runs.filter((x) => x !== r);
  tx.changed = true;
  tx.cancelTimer(`lease:${r.run_id}`);
  tx.cancelTimer(`retry:${r.run_id}`);
  tx.cancelTimer(`dispatch:${r.run_id}`);
  tx.cancelTimer(`slot:${r.run_id}`);
  if (r.gate) tx.cancelTimer(`gate:${r.run_id}`);
  const onWorker = (r.status === "leased" || r.status === "running") && r.worker !== null;
  if (onWorker && (status === "cancelled" || status === "skipped")) {
    tx.post.push({ kind: "cancel_on_worker", worker: r.worker!, run_id: r.run_id, fence: r.fence });
  }
  // A cancelled attempt may still be executing until its worker has killed it: its slot is held
  // until then (`drain`). A gated run skipped at its due instant never started (its worker only
  // ever heard `hold`), so its slot goes back at once.
  if (r.slot && onWorker && status === "cancelled") drain(tx, { run_id: r.run_id, fence: r.fence, worker: r.worker!, grant: grantId(r), until_ms: tx.now + tx.cfg.leaseTtlMs + tx.cfg.drainGraceMs });
  else if (r.slot) tx.post.push({ kind: "release_slot", grant: grantId(r) });
  const record = terminalRunView(tx.job, r, status, tx.now, {
    attempt: r.attempt, attempts: r.attempts, started_at: r.started_at_ms === null ? null : iso(r.started_at_ms), result, reason,
  });
  tx.pre.push({ kind: "put_run", record, mode: "update" });
  if (status === "failed" || status === "timed_out") tx.post.push({ kind: "dead_letter", record });
  if (tx.s.runs.length === 0 && tx.s.queued.length > 0 && !tx.s.deleted) {
    const next = tx.s.queued.shift()!;
    occur(tx, next, "schedule");
  }
}

/** Holds a cancelled run's slot until its worker reports the attempt ended or `until_ms` passes. */
function drain(tx: Tx, d: Draining): void {
  const list = (tx.s.draining ??= []);
  // Bounded: beyond it the oldest gives its slot back early (a tenant then may briefly run one
  // over its cap — only with more than MAX_DRAINING cancels of one job within a lease TTL).
  while (list.length >= MAX_DRAINING) {
    const old = list.shift()!;
    tx.cancelTimer(`drain:${old.run_id}`);
    tx.post.push({ kind: "release_slot", grant: old.grant });
  }
  list.push(d);
  tx.timer(`drain:${d.run_id}`, d.until_ms, { kind: "drained", run_id: d.run_id, fence: d.fence });
  tx.changed = true;
}

/** Ends a drain (the attempt ended, or its bound passed): the slot goes back to the tenant. */
function drained(tx: Tx, runId: string, fence: number): boolean {
  const list = tx.s.draining ?? [];
  const i = list.findIndex((d) => d.run_id === runId && d.fence === fence);
  if (i < 0) return false;
  const [d] = list.splice(i, 1);
  if (list.length === 0) delete tx.s.draining;
  tx.cancelTimer(`drain:${runId}`);
  tx.post.push({ kind: "release_slot", grant: d!.grant });
  tx.changed = true;
  return true;
}

/**
 * The occurrence at `next_run_at` will not fire now. If a crash struck between creating its run
 * record and advancing the job state, that record is still `queued`: settle it (one read).
 */
function settleNext(tx: Tx, why: string): void {
  const o = tx.s.next_run_at_ms;
  if (o === null || !tx.s.job) return;
  const run_id = runIdFor(tx.job.job_id, o);
  if (tx.run(run_id)) return;
  tx.pre.push({
    kind: "put_run", mode: "settle",
    record: terminalRunView(tx.job, { run_id, scheduled_for_ms: o, trigger: "schedule", created_at_ms: tx.now }, "cancelled", tx.now, { reason: `${why} before the occurrence started` }),
  });
}

/** Occurrences held by overlap=queue that will now never run get a `skipped` record each. */
function dropQueued(tx: Tx, why: string): void {
  for (const o of tx.s.queued) recordTerminal(tx, o, "schedule", "skipped", `overlap queue dropped: ${why}`);
  if (tx.s.queued.length > 0) tx.changed = true;
  tx.s.queued = [];
}

function mapOutcome(c: Completion): AttemptOutcome {
  switch (c.outcome) {
    case "exited": return c.exit_code === 0 ? "succeeded" : "failed";
    case "timed_out": return "timed_out";
    case "oom": return "oom";
    case "killed": return "cancelled";
    case "error": return "error";
  }
}

/** After a failed attempt: retry with backoff, or dead-letter. */
function failAttempt(tx: Tx, r: ActiveRun, outcome: AttemptOutcome, retryable: boolean, why: string, result: RunView["result"]): void {
  const retry = tx.job.spec.retry;
  tx.cancelTimer(`lease:${r.run_id}`);
  if (retryable && r.attempt - (r.unstarted ?? 0) < retry.max_attempts) {
    r.status = "retry_wait";
    r.worker = null;
    r.fence = 0;
    r.next_attempt_at_ms = tx.now + retryDelayMs(retry, r.attempt, r.run_id);
    if (r.slot) {
      tx.post.push({ kind: "release_slot", grant: grantId(r) });
      r.slot = false;
      r.slot_seq = (r.slot_seq ?? 0) + 1; // the next grant has a new name
    }
    tx.timer(`retry:${r.run_id}`, r.next_attempt_at_ms, { kind: "retry_due", run_id: r.run_id });
    tx.putRun(r);
    tx.changed = true;
    return;
  }
  const reason = retryable ? `dead-lettered after ${r.attempt - (r.unstarted ?? 0)} attempt(s): ${why}` : `not retryable: ${why}`;
  finish(tx, r, outcome === "timed_out" ? "timed_out" : "failed", reason, result);
}

/** A worker holds the attempt with the run's current fence: leased, lease timer armed. */
function claim(tx: Tx, r: ActiveRun, worker: string): void {
  r.status = "leased";
  r.attempt += 1;
  r.worker = worker;
  tx.cancelTimer(`dispatch:${r.run_id}`);
  r.next_attempt_at_ms = null;
  r.attempts.push({ attempt: r.attempt, worker, started_at: null, finished_at: null, exit_code: null, outcome: null, error: null });
  tx.putRun(r);
  tx.changed = true;
  tx.timer(`lease:${r.run_id}`, Math.max(tx.now, r.start_at_ms) + tx.cfg.leaseTtlMs, { kind: "lease_expired", run_id: r.run_id, fence: r.fence });
}

/** The attempt with this fence is the run's current lease, and `worker` holds it. */
function holds(tx: Tx, r: ActiveRun, fence: number, worker: string): boolean {
  if (r.fence !== fence || (r.status !== "leased" && r.status !== "running")) return false;
  return r.worker === worker || tx.cfg.testOnlyHole1 === true;
}

/** When the lease of `r` ends: the latest heartbeat arrival (or its start) plus the TTL. */
function leaseEndMs(tx: Tx, r: ActiveRun, armedAtMs: number): number {
  const seen = r.worker === null ? undefined : tx.arrivalMs(heartbeatKey(r.run_id, r.fence, r.worker));
  return Math.max(armedAtMs, seen ?? 0, r.start_at_ms) + tx.cfg.leaseTtlMs;
}

function complete(tx: Tx, m: Extract<JobMsg, { kind: "complete" }>): D {
  // The end of a cancelled attempt: its slot goes back now (the record is already terminal).
  if (tx.s.draining?.some((d) => d.run_id === m.run_id && d.fence === m.fence && d.worker === m.worker)) {
    drained(tx, m.run_id, m.fence);
    return tx.done({ ok: true });
  }
  const r = tx.run(m.run_id);
  if (r && r.fence === m.fence && r.status === "queued" && r.fence > 0) claim(tx, r, m.worker);
  if (!r || !holds(tx, r, m.fence, m.worker)) {
    return tx.done(null, fail("stale_fence", `run ${m.run_id}: fence ${m.fence} of worker ${m.worker} is not the current lease`));
  }
  const outcome = mapOutcome(m);
  const a = r.attempts[r.attempts.length - 1];
  const errorText = m.error?.message ?? (outcome === "oom" ? "killed: out of memory" : outcome === "timed_out" ? "timed out" : null);
  if (a) {
    a.started_at ??= iso(m.started_at_ms);
    a.finished_at = iso(m.finished_at_ms);
    a.exit_code = m.exit_code;
    a.outcome = outcome;
    a.error = outcome === "succeeded" ? null : errorText ?? `exit code ${m.exit_code}`;
  }
  r.started_at_ms ??= m.started_at_ms;
  const result = { exit_code: m.exit_code, output: m.output };
  if (outcome === "succeeded") finish(tx, r, "succeeded", null, result);
  else {
    const retryable = m.error ? m.error.retryable : outcome !== "cancelled";
    failAttempt(tx, r, outcome, retryable, a?.error ?? outcome, result);
  }
  return tx.done({ ok: true });
}

/** The tenant granted `r` its slot (or confirmed it): start it if it waits for nothing else. */
function granted(tx: Tx, r: ActiveRun): D {
  // A grant for a run that already holds its slot (a re-ask answered twice, or one that arrived
  // during retry_wait) changes nothing but may let a queued run go.
  if (!r.slot) {
    r.slot = true;
    tx.cancelTimer(`slot:${r.run_id}`);
    tx.changed = true;
  }
  if (r.status === "queued" && r.fence === 0) dispatch(tx, r);
  return tx.done(null);
}

/** A grant (or an audit of one): only the run's current grant counts; any other is released. */
function onGrant(tx: Tx, m: Extract<JobMsg, { kind: "slot_granted" | "slot_audit" }>): D {
  const { run_id, seq } = splitGrant(m.run_id);
  const r = tx.run(run_id);
  const keep = r !== undefined && seq === (r.slot_seq ?? 0) && (m.kind === "slot_granted" || r.slot || r.status === "queued");
  // A cancelled run's slot is still in use until its worker has killed it.
  if (!keep && tx.s.draining?.some((d) => d.grant === m.run_id)) return tx.done(null);
  if (!keep) {
    // Not this run's live slot (finished, superseded by a later grant, waiting to retry).
    tx.post.push({ kind: "release_slot", grant: m.run_id });
    return tx.done(null);
  }
  // An audit never hands a slot over: the grant it names may not be written yet. A queued run
  // that missed its grant gets it from its own re-ask (acquire is idempotent and durable first).
  if (m.kind === "slot_audit") return tx.done(null);
  return granted(tx, r);
}

function onRunMessage(tx: Tx, m: Exclude<JobMsg, { kind: "create" | "get" | "patch" | "delete" | "run_now" | "fire" | "complete" }>): D {
  if (m.kind === "slot_granted" || m.kind === "slot_audit") return onGrant(tx, m);
  const r = tx.run(m.run_id);
  switch (m.kind) {
    case "redispatch":
      if (!r || r.status !== "queued") return tx.done(null);
      if (!r.slot) askSlot(tx, r);
      else dispatch(tx, r); // a new fence: the earlier offer (if any) is dead
      return tx.done(null);
    case "slot_check":
      if (r && r.status === "queued" && !r.slot) askSlot(tx, r);
      return tx.done(null);
    case "claimed":
      if (r && holds(tx, r, m.fence, m.worker)) {
        return tx.done(null); // already claimed implicitly by the worker's first heartbeat
      }
      if (!r || r.fence !== m.fence || r.status !== "queued") {
        // The worker holds a claim we no longer want: tell it to stop.
        tx.post.push({ kind: "cancel_on_worker", worker: m.worker, run_id: m.run_id, fence: m.fence });
        return tx.done(null);
      }
      claim(tx, r, m.worker);
      return tx.done(null);
    case "dispatch_failed":
      if (r && r.fence === m.fence && r.status === "queued") {
        tx.timer(`dispatch:${r.run_id}`, tx.now + tx.cfg.redispatchDelayMs, { kind: "redispatch", run_id: r.run_id });
      }
      return tx.done(null);
    case "heartbeat":
      // The worker may start (and heartbeat) before its acceptance reaches us as `claimed`:
      // the current fence proves the claim.
      if (r && r.fence === m.fence && r.status === "queued" && r.fence > 0) claim(tx, r, m.worker);
      if (!r || !holds(tx, r, m.fence, m.worker)) {
        return tx.done(null, fail("lease_lost", `run ${m.run_id}: lease with fence ${m.fence} of worker ${m.worker} is gone`));
      }
      tx.timer(`lease:${r.run_id}`, leaseEndMs(tx, r, tx.now), { kind: "lease_expired", run_id: r.run_id, fence: r.fence });
      if (r.status === "leased" && m.started_at_ms === undefined && holdOf(tx.s, r)) return tx.done({ ok: true, hold: true });
      if (r.status === "leased" && m.started_at_ms !== undefined) {
        r.status = "running";
        r.started_at_ms ??= m.started_at_ms;
        const a = r.attempts[r.attempts.length - 1];
        if (a) a.started_at = iso(m.started_at_ms);
        tx.putRun(r);
        tx.changed = true;
      }
      return tx.done({ ok: true });
    case "lease_expired":
      if (!r || r.fence !== m.fence || (r.status !== "leased" && r.status !== "running")) return tx.done(null);
      {
        // Busy is not dead: a heartbeat that arrived (even if still queued behind this timer)
        // extends the lease; re-arm for its end instead of expiring.
        const end = leaseEndMs(tx, r, 0);
        if (end > tx.now) {
          tx.timer(`lease:${r.run_id}`, end, { kind: "lease_expired", run_id: r.run_id, fence: r.fence });
          return tx.done(null);
        }
        // An attempt whose lease ran out before it started never executed (the worker did not
        // get our acknowledgement in time — e.g. this scheduler was saturated by a burst — and
        // never starts without one): it does not count against max_attempts, up to a bound.
        const neverStarted = r.status === "leased" && (r.unstarted ?? 0) < MAX_UNSTARTED_ATTEMPTS;
        const a = r.attempts[r.attempts.length - 1];
        if (a) {
          a.finished_at = iso(tx.now);
          a.outcome = "lease_lost";
          a.error = neverStarted
            ? `lease expired on worker ${r.worker ?? "?"} before the attempt started (not counted)`
            : `lease expired on worker ${r.worker ?? "?"}`;
        }
        if (neverStarted) r.unstarted = (r.unstarted ?? 0) + 1;
        if (r.attempt - (r.unstarted ?? 0) < tx.job.spec.retry.max_attempts) {
          // Re-queue at once with a new fence (the old worker's heartbeat now gets lease_lost).
          r.status = "queued";
          r.worker = null;
          r.fence = 0; // the lost lease's fence is dead; the next offer gets a new one
          tx.putRun(r);
          if (r.slot) dispatch(tx, r);
          else askSlot(tx, r);
          tx.changed = true;
        } else {
          finish(tx, r, "failed", `dead-lettered after ${r.attempt - (r.unstarted ?? 0)} attempt(s): lease lost`, null);
        }
      }
      return tx.done(null);
    case "drained":
      drained(tx, m.run_id, m.fence);
      return tx.done(null);
    case "gate":
      // The due instant of a gated run. A blocking run still active: skip this occurrence (its
      // worker has only ever heard `hold`, so it never started). Otherwise it goes (or went).
      if (r && r.gate && r.started_at_ms === null && (r.status === "queued" || r.status === "leased") && holdOf(tx.s, r)) {
        finish(tx, r, "skipped", "overlap: an earlier run is still active", null);
      }
      return tx.done(null);
    case "retry_due":
      if (!r || r.status !== "retry_wait") return tx.done(null);
      r.status = "queued";
      r.next_attempt_at_ms = null;
      r.start_at_ms = tx.now;
      r.fence = 0;
      tx.putRun(r);
      // A grant may have arrived during retry_wait: then the slot is held and the run goes now.
      if (r.slot) dispatch(tx, r);
      else askSlot(tx, r);
      tx.changed = true;
      return tx.done(null);
  }
}

// ---------------------------------------------------------------------------------------------
// Job commands

function nextRuns(s: JobState, count: number): number[] {
  if (!s.job || s.next_run_at_ms === null) return [];
  const sched = scheduleOf(s.job.spec);
  return [s.next_run_at_ms, ...sched.next(s.next_run_at_ms, count - 1)];
}

/** The next occurrence after now that has not been handled yet (never re-fires an old one). */
function firstAfter(spec: JobSpec, nowMs: number, s?: JobState): number | null {
  return spec.enabled ? (scheduleOf(spec).next(Math.max(nowMs, s?.last_occurrence_ms ?? 0), 1)[0] ?? null) : null;
}

function validSchedule(spec: JobSpec): { code: ErrorCode; message: string; field?: string } | null {
  try {
    scheduleOf(spec);
    return null;
  } catch (e) {
    if (e instanceof KairosError) return fail(e.code, e.message, e.field);
    throw e;
  }
}

function command(tx: Tx, m: Extract<JobMsg, { kind: "create" | "get" | "patch" | "delete" | "run_now" }>): D {
  const s = tx.s;
  if (m.kind === "create") {
    if (s.job) {
      if (!s.deleted && s.job.request_hash === m.request_hash) return tx.done({ job: jobView(s, nextRuns(s, 5)) });
      return tx.done(null, fail("conflict", `job ${m.job_id} already exists`));
    }
    const bad = validSchedule(m.spec);
    if (bad) return tx.done(null, bad);
    s.job = { tenant_id: m.tenant_id, job_id: m.job_id, spec: m.spec, version: 1, created_at_ms: tx.now, updated_at_ms: tx.now, request_hash: m.request_hash };
    s.next_run_at_ms = firstAfter(m.spec, tx.now);
    tx.changed = true;
    tx.armFire();
    return tx.done({ job: jobView(s, nextRuns(s, 5)) });
  }
  if (!s.job || s.deleted) return tx.done(null, fail("not_found", "job not found"));
  switch (m.kind) {
    case "get":
      return tx.done({ job: jobView(s, nextRuns(s, 5)) });
    case "patch": {
      if (tx.recalled(m.request_id)) return tx.done({ job: jobView(s, nextRuns(s, 5)) }); // a retry of a patch that applied
      if (m.if_match !== undefined && m.if_match !== s.job.version) {
        return tx.done(null, fail("precondition_failed", `If-Match: job is at version ${s.job.version}, not ${m.if_match}`, "If-Match"));
      }
      const before = s.job.spec;
      const spec: JobSpec = { ...before, ...m.patch };
      const bad = validSchedule(spec);
      if (bad) return tx.done(null, bad);
      s.job = { ...s.job, spec, version: s.job.version + 1, updated_at_ms: tx.now };
      const scheduleChanged = JSON.stringify(before.schedule) !== JSON.stringify(spec.schedule);
      if (!spec.enabled || scheduleChanged) {
        // Runs created ahead of their due time (look-ahead) for occurrences that the pause or
        // the new schedule no longer calls for are cancelled before they start.
        for (const r of [...s.runs]) {
          if (r.trigger !== "manual" && r.scheduled_for_ms > tx.now && (r.status === "queued" || r.status === "leased")) {
            finish(tx, r, "cancelled", spec.enabled ? "schedule changed before it started" : "job paused before it started", null);
          }
        }
      }
      if ((!spec.enabled && before.enabled) || scheduleChanged) settleNext(tx, spec.enabled ? "schedule changed" : "job paused");
      if (!spec.enabled) s.next_run_at_ms = null;
      else if (scheduleChanged || !before.enabled) s.next_run_at_ms = firstAfter(spec, tx.now, s); // resume: no catch-up
      if (!spec.enabled || spec.overlap !== "queue") dropQueued(tx, spec.enabled ? "overlap policy changed" : "job paused");
      if (m.request_id !== undefined) tx.remember({ id: m.request_id, version: s.job.version });
      tx.changed = true;
      tx.armFire();
      return tx.done({ job: jobView(s, nextRuns(s, 5)) });
    }
    case "delete":
      s.deleted = true;
      dropQueued(tx, "job deleted");
      settleNext(tx, "job deleted");
      for (const r of [...s.runs]) finish(tx, r, "cancelled", "job deleted", null);
      s.next_run_at_ms = null;
      tx.changed = true;
      tx.armFire();
      return tx.done({ ok: true });
    case "run_now": {
      const prior = tx.recalled(m.request_id);
      if (prior?.run_id !== undefined) {
        // A retry of a run-now that was applied (its reply was lost): answer with that run.
        const active = tx.run(prior.run_id);
        return tx.done(active ? { run: activeRunView(s.job, active) } : { run_id: prior.run_id });
      }
      if (s.runs.length >= tx.cfg.maxActiveRuns) return tx.done(null, fail("quota_exceeded", `job has ${s.runs.length} active runs`));
      const seq = ++s.manual_seq;
      const runId = runIdFor(s.job.job_id, tx.now, seq);
      createRun(tx, tx.now, "manual", runId);
      if (m.request_id !== undefined) tx.remember({ id: m.request_id, run_id: runId });
      return tx.done({ run: activeRunView(s.job, tx.run(runId)!) });
    }
  }
}

/** Re-arms timers from persisted state when the actor is (re)activated on a node. */
function onActivate(s: JobState, ctx: ActorContext, cfg: JobActorConfig): HostEffect<JobMsg>[] {
  const fx: HostEffect<JobMsg>[] = [];
  for (const d of s.draining ?? []) fx.push({ kind: "timer", name: `drain:${d.run_id}`, atMs: Math.max(d.until_ms, ctx.nowMs), msg: { kind: "drained", run_id: d.run_id, fence: d.fence } });
  if (!s.job || s.deleted) return fx;
  if (s.next_run_at_ms !== null) fx.push({ kind: "timer", name: "fire", atMs: fireAt(cfg, s, ctx.nowMs), msg: { kind: "fire" } });
  for (const r of s.runs) {
    if (r.gate && r.started_at_ms === null) fx.push({ kind: "timer", name: `gate:${r.run_id}`, atMs: r.scheduled_for_ms, msg: { kind: "gate", run_id: r.run_id } });
    if (r.status === "leased" || r.status === "running") {
      // A fresh grace period: live workers re-heartbeat with the same fence.
      fx.push({ kind: "timer", name: `lease:${r.run_id}`, atMs: Math.max(ctx.nowMs, r.start_at_ms) + cfg.leaseTtlMs, msg: { kind: "lease_expired", run_id: r.run_id, fence: r.fence } });
    } else if (r.status === "retry_wait" && r.next_attempt_at_ms !== null) {
      fx.push({ kind: "timer", name: `retry:${r.run_id}`, atMs: r.next_attempt_at_ms, msg: { kind: "retry_due", run_id: r.run_id } });
    } else if (r.status === "queued") {
      // An offer of the previous owner may have been accepted: give its worker the offer timeout
      // to claim it by heartbeat before offering again under a new fence. (It cannot be running
      // unclaimed: workers start only after an acknowledged heartbeat.)
      const wait = r.fence > 0 ? cfg.offerTimeoutMs : 0;
      fx.push({ kind: "timer", name: `dispatch:${r.run_id}`, atMs: ctx.nowMs + wait, msg: { kind: "redispatch", run_id: r.run_id } });
    }
  }
  return fx;
}

export function makeJobActor(cfg: JobActorConfig = DEFAULT_JOB_CONFIG): ActorDefinition<JobState, JobMsg, JobReply, JobEffect> {
  return {
    type: JOB_ACTOR,
    loadOnAcquire: true,
    initialState: () => emptyJobState(),
    onActivate: (s, ctx) => onActivate(s, ctx, cfg),
    // Heartbeats: their arrival is recorded before the mailbox, and one for a lease already
    // recorded is acknowledged from the committed state without queueing (busy is not dead).
    arrivalKey: (m) => (m.kind === "heartbeat" ? heartbeatKey(m.run_id, m.fence, m.worker) : undefined),
    query: (s, m) => {
      if (m.kind !== "heartbeat") return undefined;
      const r = s.runs.find((x) => x.run_id === m.run_id);
      if (!r || r.fence !== m.fence || r.worker !== m.worker || (r.status !== "leased" && r.status !== "running")) return undefined;
      // The first heartbeat after the start still goes through the mailbox (status running).
      if (r.status === "leased" && m.started_at_ms === undefined && holdOf(s, r)) return { reply: { ok: true, hold: true }, alsoQueue: false };
      return { reply: { ok: true }, alsoQueue: r.status === "leased" && m.started_at_ms !== undefined };
    },
    receive(state, msg, ctx) {
      const tx = new Tx(state, ctx.nowMs, cfg, ctx.arrivalMs ? (k) => ctx.arrivalMs!(k) : undefined);
      if (msg.kind !== "create" && !state.job) {
        return tx.done(null, fail("not_found", `job ${splitJobActorId(ctx.id).jobId} not found`));
      }
      switch (msg.kind) {
        case "create":
        case "get":
        case "patch":
        case "delete":
        case "run_now":
          return command(tx, msg);
        case "fire":
          fire(tx);
          return tx.done(null);
        case "complete":
          return complete(tx, msg);
        default:
          return onRunMessage(tx, msg);
      }
    },
  };
}
