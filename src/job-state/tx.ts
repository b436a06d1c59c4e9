/**
 * `Tx`: one decision of the job actor in the making — a mutable working copy of the state plus
 * the effects decided so far (`pre`: run record writes before the state write; `post`: network
 * effects after it; `fx`: timers), closed by `done` into the `Decision` the host performs. Every
 * module of the core (occurrences, run lifecycle and dispatch, commands) works on a `Tx`.
 *
 * Gotchas: the copy is deep only for what handlers mutate (runs and their attempts, the queued,
 * recent and draining lists); set `changed` whenever the state is touched, or the write is
 * skipped. `occur` reaches the overlap policy (occurrences.ts) through the transaction so that the
 * run lifecycle, which occurrences.ts builds on, need not import it back.
 */
import type { Decision, HostEffect } from "../actors/actor.ts";
import type { ErrorCode } from "../lib/errors.ts";
import type { JobActorConfig, JobEffect, JobMsg, JobReply } from "./job-types.ts";
import {
  FENCE_BLOCK,
  activeRunView,
  instant,
  type ActiveRun,
  type JobRecord,
  type JobState,
} from "./job-state.ts";
import type { RunView } from "../protocol/model.ts";
import { fireAt } from "./occurrence-plan.ts";
import { NO_FAULTS, type JobFaults } from "./faults.ts";

/** Most request ids a job remembers (retried run-now and patch requests answer their first result). */
export const RECENT_REQUESTS = 8;

export type D = Decision<JobState, JobReply, JobEffect>;

/** The overlap policy for one occurrence (occurrences.ts `occur`). */
export type OverlapPolicy = (tx: Tx, scheduledForMs: number, trigger: RunView["trigger"]) => void;

/** A mutable working copy of the state plus the effects decided so far. */
export class Tx {
  readonly s: JobState;
  readonly pre: JobEffect[] = [];
  readonly post: JobEffect[] = [];
  readonly fx: HostEffect<JobMsg>[] = [];
  /** The state changed and must be written (before the reply and the post effects). */
  changed = false;
  /** The state changed in a way that is recoverable if lost: kept in memory, written later. */
  deferred = false;
  constructor(
    readonly orig: JobState,
    readonly now: number,
    readonly cfg: JobActorConfig,
    private readonly policy: OverlapPolicy,
    readonly arrivalMs: (key: string) => number | undefined = () => undefined,
    /** Whether a message with this coalesce key waits in the actor's mailbox (ActorContext.pending). */
    readonly pending: (coalesceKey: string) => boolean = () => false,
    /** Defences switched off by a simulation's self-test (faults.ts); none in production. */
    readonly faults: JobFaults = NO_FAULTS,
  ) {
    this.s = {
      ...orig,
      runs: orig.runs.map((r) => ({ ...r, attempts: r.attempts.map((a) => ({ ...a })) })),
      queued: [...orig.queued],
      ...(orig.recent ? { recent: [...orig.recent] } : {}),
      ...(orig.draining ? { draining: [...orig.draining] } : {}),
    };
    if (orig.ends_unwritten) {
      // A run-now's end the stored state does not show yet (JobState.ends_unwritten): written now.
      delete this.s.ends_unwritten;
      this.changed = true;
    }
  }
  get job(): JobRecord {
    return this.s.job!;
  }
  done(reply: JobReply, fail?: { code: ErrorCode; message: string; field?: string }): D {
    // Every write reserves the next block of fences (see JobState.fence_reserved).
    if (this.changed && (this.s.fence_reserved ?? 0) < this.s.fence_seq + FENCE_BLOCK / 2)
      this.s.fence_reserved = this.s.fence_seq + FENCE_BLOCK;
    return {
      state: this.changed || this.deferred ? this.s : this.orig,
      ...(this.deferred && !this.changed ? { deferWrite: true } : {}),
      reply,
      effects: this.fx,
      pre: this.pre,
      post: this.post,
      ...(fail ? { fail } : {}),
    };
  }
  /** A recoverable state change (see `deferred`): an offer, a grant, a start. */
  defer(): void {
    this.deferred = true;
  }
  /** The next fence: deferred while within the reserved block, else a write that reserves more. */
  nextFence(): number {
    const fence = ++this.s.fence_seq;
    if (fence <= (this.s.fence_reserved ?? 0)) this.defer();
    else this.changed = true;
    return fence;
  }
  run(runId: string): ActiveRun | undefined {
    return this.s.runs.find((r) => r.run_id === runId);
  }
  /**
   * A run's record: written when it is created (before the state); a later transition short of
   * its end is not written (`note_run`: counted by run metrics; the API reads an active run from
   * this actor) — the record is written again only with its end (`finish`).
   */
  putRun(r: ActiveRun, create = false, indexed = false): void {
    if (create && r.recorded_after)
      this.post.push({ kind: "create_run", record: activeRunView(this.job, r) });
    else if (create)
      this.pre.push({
        kind: "put_run",
        record: activeRunView(this.job, r),
        mode: "create",
        ...(indexed ? { indexed: true as const } : {}),
      });
    else this.post.push({ kind: "note_run", record: activeRunView(this.job, r) });
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
  /** Applies the overlap policy to an occurrence (see the module header). */
  occur(scheduledForMs: number, trigger: RunView["trigger"]): void {
    this.policy(this, scheduledForMs, trigger);
  }
  armFire(): void {
    if (this.s.next_run_at_ms === null) this.cancelTimer("fire");
    else this.timer("fire", fireAt(this.cfg, this.s, this.now), { kind: "fire" });
  }
}

export const iso = (ms: number): string => instant(ms);

export const fail = (code: ErrorCode, message: string, field?: string) =>
  field === undefined ? { code, message } : { code, message, field };
