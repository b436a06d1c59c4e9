/**
 * A tiny simulated shell for the job actor's pure core. It keeps the state, applies each
 * decision the way the real shell does (src/jobs/job-shell.ts) and runs on a simulated clock:
 *
 * - `pre` put_run effects go into a run-record map (by run_id); `create: true` never overwrites
 *   an existing record, exactly like a KV create. `records` is what the API shows (a `note_run`
 *   post effect updates an active run's view, as the API's overlay from the actor does);
 *   `written` holds only what was written to KV, `recordWrites` / `stateWrites` count writes.
 * - The state a decision changes with `deferWrite` stays in memory (`state`), not in `stored`,
 *   as the host does; `activate()` reloads `stored` (deferred changes are lost, as in a takeover).
 * - host `effects` (timer / cancel_timer by name) are kept and fired in time order by `advance`.
 * - `post` effects are answered as the shell would: acquire_slot → `slot_granted` (or held back
 *   when `autoGrant` is off), dispatch → `claimed` by worker w1 (or held back when `autoClaim`
 *   is off), release_slot drops the slot (or the ask still waiting), probe_worker → `probe_answer` (`probe`: default no
 *   answer, as from a dead worker); every post effect is logged for assertions.
 *
 * The driver also records invariant violations it can see from the outside (a terminal record
 * revived by a later write, an active run whose record is terminal, a slot held by no run).
 *
 * With `index` the core is wrapped with the runs index (src/jobs/with-history.ts `withRunIndex`),
 * as the shell runs it: its chunk writes (`write_run_index`, pre effects) are kept by seq, and a
 * `settle` that wrote or met an ended record answers `run_settled` (record-writes.ts). `listing()`
 * is what a runs page walks (the chunks, then the ids pending in the state in memory) and
 * `listingProblems()` what it gets wrong: a record written but not listed, or listed twice.
 */
import type { ActorDefinition, Decision, HostEffect } from "../../../src/actors/actor.ts";
import { makeJobActor } from "../../../src/jobs/job-actor.ts";
import { withRunIndex } from "../../../src/jobs/with-history.ts";
import { isRunIndexEffect, runIdOfSuffix } from "../../../src/history/run-index.ts";
import {
  DEFAULT_JOB_CONFIG,
  type Completion,
  type JobActorConfig,
  type JobEffect,
  type JobMsg,
  type JobReply,
} from "../../../src/job-state/job-types.ts";
import { activeRunView, type JobState } from "../../../src/job-state/job-state.ts";
import { splitGrant } from "../../../src/protocol/ids.ts";
import { TERMINAL, type JobSpec, type RunView } from "../../../src/protocol/model.ts";
import type { ProbeReply } from "../../../src/protocol/worker.ts";

export const TENANT = "t1";
export const JOB = "j0123456789abcdef";
export const ACTOR_ID = `${TENANT}.${JOB}`;
/** 2026-01-01T00:00:00.500Z: half a second past a whole second, so "after now" is unambiguous. */
export const T0 = Date.UTC(2026, 0, 1, 0, 0, 0) + 500;
export const WORKER = "w1";

export function spec(over: Partial<JobSpec> = {}): JobSpec {
  return {
    name: null,
    schedule: { cron: "*/2 * * * * *", time_zone: "UTC" },
    task: { image: "busybox", args: ["true"], env: {}, timeout_s: 60 },
    retry: { max_attempts: 1, backoff: "exponential", base_s: 1, max_s: 60 },
    overlap: "skip",
    misfire: { policy: "run_once", starting_deadline_s: null },
    flex_window_s: 0,
    enabled: true,
    ...over,
  };
}

/**
 * The job config of these tests: the defaults, but no look-ahead unless a test asks for it (most
 * tests are about what happens at the due instant; look-ahead has its own tests).
 */
export function cfg(over: Partial<JobActorConfig> = {}): JobActorConfig {
  return { ...DEFAULT_JOB_CONFIG, lookaheadMs: 0, ...over };
}

type D = Decision<JobState, JobReply, JobEffect>;
type Timer = { atMs: number; seq: number; msg: JobMsg };
export type DispatchFx = Extract<JobEffect, { kind: "dispatch" }>;

export interface DriverOptions {
  autoGrant?: boolean;
  autoClaim?: boolean;
  /** Answer every accepted claim at once with this completion (e.g. exit 0). */
  autoComplete?: ((runId: string) => Partial<Completion>) | null;
  /** Deep-freeze the state handed to `receive`, to prove the core does not mutate it. */
  freeze?: boolean;
  /**
   * The worker's answer to a probe of a silent lease (`probe_worker`), delivered at once as
   * `probe_answer`; `undefined` holds it back; null: no answer in time; "advertising": no answer
   * in time from a worker that still advertises; "gone": no responder.
   * Default: "gone", as from a worker process that is gone (a silent lease in these tests is a
   * dead worker's).
   */
  probe?: (
    fx: Extract<JobEffect, { kind: "probe_worker" }>,
  ) => ProbeReply | null | "gone" | "advertising" | undefined;
  /**
   * The worker's report of an attempt it was told to stop (`cancel_on_worker`), delivered at once
   * as a `complete` with outcome `killed` and these fields (e.g. `{ not_started: true }`: it had
   * not started; `{ started_at_ms }`: killed running). Default: no report (held back, or lost).
   */
  cancelReport?: (fx: Extract<JobEffect, { kind: "cancel_on_worker" }>) => Partial<Completion>;
  /** Wrap the core with the runs index (see the module header); its decisions' `pre` then hold chunk writes too. */
  index?: boolean;
}

function deepFreeze<T>(o: T): T {
  if (o !== null && typeof o === "object" && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o as object)) deepFreeze(v);
  }
  return o;
}

export class Driver {
  readonly actor: ActorDefinition<JobState, JobMsg, JobReply, JobEffect>;
  state: JobState;
  now: number;
  readonly records = new Map<string, RunView>();
  /** The run records as written to KV (no `note_run` overlay). */
  readonly written = new Map<string, RunView>();
  /** The state as last written (a decision with `deferWrite` does not write). */
  stored: JobState;
  recordWrites = 0;
  stateWrites = 0;
  readonly timers = new Map<string, Timer>();
  /** Runs holding a tenant slot (acquired and not released). */
  readonly slots = new Set<string>();
  /** Runs whose acquire_slot is outstanding (only when autoGrant is off). */
  readonly pendingSlots: string[] = [];
  /** The grant id each run last asked for (slots and pendingSlots are keyed by run id). */
  readonly #grants = new Map<string, string>();
  /** Dispatches not yet claimed (only when autoClaim is off). */
  readonly pendingClaims: DispatchFx[] = [];
  readonly posts: JobEffect[] = [];
  readonly dispatches: DispatchFx[] = [];
  readonly violations: string[] = [];
  /** Heartbeat arrival times the host recorded before the mailbox (ctx.arrivalMs), by arrival key. */
  readonly arrivals = new Map<string, number>();
  /** Coalesce keys of messages waiting in the mailbox (ctx.pending), e.g. a completion report behind a turn. */
  readonly pending = new Set<string>();
  /** `create: true` writes that met an existing record (legit only when re-firing after a crash). */
  dupCreates = 0;
  /** Runs index chunks written (`index` only), by seq: run id suffixes, oldest first. */
  readonly chunks = new Map<number, string[]>();
  readonly decisions: { msg: JobMsg; d: D }[] = [];
  #seq = 0;
  #inbox: JobMsg[] = [];
  #busy = false;

  constructor(
    readonly config: JobActorConfig = cfg(),
    readonly opts: DriverOptions = {},
    startMs = T0,
  ) {
    // With the index its decisions' `pre` also hold `write_run_index` effects (handled in #pre).
    this.actor = opts.index
      ? (withRunIndex(makeJobActor(config)) as unknown as ActorDefinition<
          JobState,
          JobMsg,
          JobReply,
          JobEffect
        >)
      : makeJobActor(config);
    this.state = this.actor.initialState(ACTOR_ID);
    this.stored = this.state;
    this.now = startMs;
  }

  get autoGrant(): boolean {
    return this.opts.autoGrant ?? true;
  }
  get autoClaim(): boolean {
    return this.opts.autoClaim ?? true;
  }

  /** Delivers one message, then everything the simulated shell answers; returns its decision. */
  send(msg: JobMsg): D {
    const d = this.#apply(msg);
    if (!this.#busy) {
      this.#busy = true;
      try {
        for (let m = this.#inbox.shift(); m !== undefined; m = this.#inbox.shift()) this.#apply(m);
      } finally {
        this.#busy = false;
      }
    }
    return d;
  }

  create(s: JobSpec = spec(), requestHash = "h1"): D {
    return this.send({
      kind: "create",
      tenant_id: TENANT,
      job_id: JOB,
      spec: s,
      request_hash: requestHash,
    });
  }

  #apply(msg: JobMsg): D {
    const input = this.opts.freeze ? deepFreeze(this.state) : this.state;
    const d = this.actor.receive(input, msg, this.#ctx());
    this.decisions.push({ msg, d });
    for (const fx of d.pre ?? []) this.#pre(fx);
    if (d.state !== this.state && d.deferWrite !== true) {
      this.stored = d.state;
      this.stateWrites++;
    }
    this.state = d.state;
    for (const fx of d.effects ?? []) this.#effect(fx);
    for (const fx of d.post ?? []) this.#post(fx);
    const auto = this.opts.autoComplete;
    if (
      auto &&
      msg.kind === "claimed" &&
      this.run(msg.run_id)?.fence === msg.fence &&
      this.run(msg.run_id)?.status === "leased"
    ) {
      this.#inbox.push({
        kind: "complete",
        run_id: msg.run_id,
        fence: msg.fence,
        worker: WORKER,
        outcome: "exited",
        exit_code: 0,
        output: "ok",
        error: null,
        started_at_ms: this.now,
        finished_at_ms: this.now,
        ...auto(msg.run_id),
      });
    }
    return d;
  }

  /**
   * A crash between the run-record writes and the job state write: the `pre` effects land, the
   * state, timers and post effects are lost. Returns the lost decision.
   */
  crashAfterPre(msg: JobMsg): D {
    const d = this.actor.receive(this.state, msg, this.#ctx());
    for (const fx of d.pre ?? []) this.#pre(fx);
    return d;
  }

  /**
   * A state write that landed unseen (a timeout): the `pre` effects and the state land; the host
   * drops the actor (its timers and post effects are lost) and reads it back (`activate`).
   */
  crashAfterWrite(msg: JobMsg): D {
    const d = this.actor.receive(this.state, msg, this.#ctx());
    for (const fx of d.pre ?? []) this.#pre(fx);
    this.stored = d.state;
    this.stateWrites++;
    return d;
  }

  /** A later write carried the deferred changes along (the state in memory is now stored). */
  flush(): void {
    if (this.stored !== this.state) this.stateWrites++;
    this.stored = this.state;
  }

  #ctx() {
    return {
      id: ACTOR_ID,
      nowMs: this.now,
      arrivalMs: (k: string) => this.arrivals.get(k),
      pending: (k: string) => this.pending.has(k),
    };
  }

  /**
   * A takeover: a new owner loads the persisted state; the old owner's timers are gone and
   * `onActivate` re-arms them (offers already made stay in `pendingClaims`: their worker may
   * still accept). Returns the activation effects.
   */
  activate(): readonly HostEffect<unknown>[] {
    this.timers.clear();
    const loaded = this.actor.onLoad ? this.actor.onLoad(this.stored) : this.stored;
    // The shell's reconcile (job-shell.ts): runs whose record ended are dropped on load.
    // A run-now's run whose record is not written yet (`recorded_after`) is live: its record is written.
    for (const r of loaded.runs) {
      if (r.recorded_after && !this.written.has(r.run_id) && loaded.job)
        this.#post({ kind: "create_run", record: activeRunView(loaded.job, r) });
    }
    const ended = (id: string) => {
      const w = this.written.get(id);
      return w === undefined || TERMINAL.has(w.status);
    };
    // A run-now's end found so is written by the next decision (JobState.ends_unwritten).
    const unwritten = loaded.runs.some((r) => r.recorded_after && ended(r.run_id));
    this.state = loaded.runs.some((r) => ended(r.run_id))
      ? {
          ...loaded,
          runs: loaded.runs.filter((r) => !ended(r.run_id)),
          ...(unwritten ? { ends_unwritten: true as const } : {}),
        }
      : loaded;
    const fx = this.actor.onActivate?.(this.state, this.#ctx()) ?? [];
    for (const e of fx) this.#effect(e);
    return fx;
  }

  #pre(fx: JobEffect): void {
    if (isRunIndexEffect(fx)) {
      // A chunk is created, or replaces the orphan of a decision whose state was lost.
      const chunk = fx as unknown as { seq: number; ids: string[] };
      this.chunks.set(chunk.seq, [...chunk.ids]);
      return;
    }
    if (fx.kind !== "put_run") throw new Error(`unexpected pre effect ${fx.kind}`);
    const old = this.records.get(fx.record.run_id);
    // A settle that wrote over an orphan, or met it ended, indexes it (record-writes.ts).
    if (this.opts.index && fx.mode === "settle" && old)
      this.#inbox.unshift({ kind: "run_settled", run_id: fx.record.run_id });
    // Models the shell (src/jobs/job-shell.ts putRun) mode by mode.
    switch (fx.mode) {
      case "create":
        if (old) {
          this.dupCreates++;
          // The shell tells the actor when the record it met had ended (`already_ended`).
          if (TERMINAL.has(this.written.get(fx.record.run_id)?.status ?? "queued"))
            this.#inbox.unshift({ kind: "already_ended", run_id: fx.record.run_id });
          return; // KV create: the key exists, nothing written
        }
        break;
      case "terminal":
      case "settle":
        if (old && TERMINAL.has(old.status)) return; // already settled
        if (!old && fx.mode === "settle") return;
        break;
      case "update":
        if (old && TERMINAL.has(old.status)) {
          this.violations.push(
            `terminal record ${old.run_id} (${old.status}) overwritten with ${fx.record.status}`,
          );
        }
        break;
    }
    this.records.set(fx.record.run_id, fx.record);
    this.written.set(fx.record.run_id, fx.record);
    this.recordWrites++;
  }

  #effect(fx: HostEffect<unknown>): void {
    switch (fx.kind) {
      case "timer":
        this.timers.set(fx.name, { atMs: fx.atMs, seq: this.#seq++, msg: fx.msg as JobMsg });
        return;
      case "cancel_timer":
        this.timers.delete(fx.name);
        return;
      case "send":
        throw new Error("the job actor sends nothing directly");
    }
  }

  #post(fx: JobEffect): void {
    this.posts.push(fx);
    switch (fx.kind) {
      case "acquire_slot":
        this.#grants.set(fx.run_id, fx.grant);
        if (this.autoGrant) {
          this.slots.add(fx.run_id);
          this.#inbox.push({ kind: "slot_granted", run_id: fx.grant });
        } else if (!this.pendingSlots.includes(fx.run_id) && !this.slots.has(fx.run_id)) {
          this.pendingSlots.push(fx.run_id);
        }
        return;
      case "release_slot": {
        // The tenant drops the grant, or the ask still in its waiting list.
        const id = splitGrant(fx.grant).run_id;
        this.slots.delete(id);
        const i = this.pendingSlots.indexOf(id);
        if (i >= 0 && this.#grants.get(id) === fx.grant) this.pendingSlots.splice(i, 1);
        return;
      }
      case "dispatch":
        this.dispatches.push(fx);
        if (this.autoClaim)
          this.#inbox.push({ kind: "claimed", run_id: fx.run_id, fence: fx.fence, worker: WORKER });
        else this.pendingClaims.push(fx);
        return;
      case "note_run": {
        const old = this.records.get(fx.record.run_id);
        if (old && !TERMINAL.has(old.status)) this.records.set(fx.record.run_id, fx.record);
        return;
      }
      case "probe_worker": {
        const reply = this.opts.probe ? this.opts.probe(fx) : "gone";
        if (reply === undefined) return;
        this.#inbox.push({
          kind: "probe_answer",
          run_id: fx.run_id,
          fence: fx.fence,
          worker: fx.worker,
          reply: reply === "gone" || reply === "advertising" ? null : reply,
          ...(reply === "gone" ? { gone: true as const } : {}),
          ...(reply === "advertising" ? { advertising: true as const } : {}),
        });
        return;
      }
      case "create_run":
        // The shell's create after the state write (a run-now's record): never over an existing one.
        if (!this.records.has(fx.record.run_id)) {
          this.records.set(fx.record.run_id, fx.record);
          this.written.set(fx.record.run_id, fx.record);
          this.recordWrites++;
        }
        return;
      case "cancel_on_worker": {
        const report = this.opts.cancelReport?.(fx);
        if (report !== undefined)
          this.#inbox.push({
            kind: "complete",
            run_id: fx.run_id,
            fence: fx.fence,
            worker: fx.worker,
            outcome: "killed",
            exit_code: null,
            output: "",
            error: null,
            started_at_ms: this.now,
            finished_at_ms: this.now,
            ...report,
          });
        return;
      }
      case "dead_letter":
      case "run_ended":
      case "put_run":
        return;
    }
  }

  /** The tenant grants the oldest (or the named) waiting slot request. */
  grant(runId?: string): void {
    const i = runId === undefined ? 0 : this.pendingSlots.indexOf(runId);
    const id = this.pendingSlots[i];
    if (i < 0 || id === undefined) throw new Error(`no pending slot request ${runId ?? ""}`);
    this.pendingSlots.splice(i, 1);
    this.slots.add(id);
    this.send({ kind: "slot_granted", run_id: this.#grants.get(id) ?? `${id}_0` });
  }

  /** The worker accepts the oldest pending dispatch. */
  claim(): D {
    const fx = this.pendingClaims.shift();
    if (!fx) throw new Error("no pending dispatch");
    return this.send({ kind: "claimed", run_id: fx.run_id, fence: fx.fence, worker: WORKER });
  }

  /** Moves the clock forward, firing due timers in time order (ties in arming order). */
  advance(ms: number): void {
    const target = this.now + ms;
    for (;;) {
      let best: [string, Timer] | undefined;
      for (const e of this.timers) {
        if (
          e[1].atMs <= target &&
          (!best ||
            e[1].atMs < best[1].atMs ||
            (e[1].atMs === best[1].atMs && e[1].seq < best[1].seq))
        )
          best = e;
      }
      if (!best) break;
      this.timers.delete(best[0]);
      this.now = Math.max(this.now, best[1].atMs);
      this.send(best[1].msg);
    }
    this.now = target;
  }

  /** Downtime: the clock moves, no timer fires. */
  skipTime(ms: number): void {
    this.now += ms;
  }

  run(runId: string) {
    return this.state.runs.find((r) => r.run_id === runId);
  }

  heartbeat(runId: string, fence?: number, startedAtMs?: number): D {
    const f = fence ?? this.run(runId)?.fence ?? 0;
    return this.send({
      kind: "heartbeat",
      run_id: runId,
      fence: f,
      worker: WORKER,
      ...(startedAtMs === undefined ? {} : { started_at_ms: startedAtMs }),
    });
  }

  complete(runId: string, c: Partial<Completion> = {}, fence?: number): D {
    const f = fence ?? this.run(runId)?.fence ?? 0;
    return this.send({
      kind: "complete",
      run_id: runId,
      fence: f,
      worker: WORKER,
      outcome: "exited",
      exit_code: 0,
      output: "ok",
      error: null,
      started_at_ms: this.now,
      finished_at_ms: this.now,
      ...c,
    });
  }

  postsOf<K extends JobEffect["kind"]>(kind: K): Extract<JobEffect, { kind: K }>[] {
    return this.posts.filter((p): p is Extract<JobEffect, { kind: K }> => p.kind === kind);
  }

  /** The run ids a runs page walks, oldest first: the chunks, then the ids pending (`index` only). */
  listing(): string[] {
    const ix = this.state.index;
    if (!ix) throw new Error("no runs index: create the driver with { index: true }");
    const out: string[] = [];
    for (let seq = 0; seq < ix.seq; seq++) {
      const chunk = this.chunks.get(seq);
      if (!chunk) throw new Error(`runs index chunk ${seq} was never written`);
      out.push(...chunk);
    }
    out.push(...ix.pending);
    return out.map((sfx) => runIdOfSuffix(JOB, sfx));
  }

  /** What the runs list gets wrong: a record written but not listed, a run listed twice. */
  listingProblems(): string[] {
    const listed = this.listing();
    const count = new Map<string, number>();
    for (const id of listed) count.set(id, (count.get(id) ?? 0) + 1);
    const out: string[] = [];
    for (const [id, r] of this.written)
      if (!count.has(id))
        out.push(`${id} (${r.trigger}, ${r.status}) has a record but is not listed`);
    for (const [id, n] of count) if (n > 1) out.push(`${id} is listed ${n} times`);
    return out;
  }

  recordsByStatus(status: RunView["status"]): RunView[] {
    return [...this.records.values()]
      .filter((r) => r.status === status)
      .sort((a, b) => a.scheduled_for.localeCompare(b.scheduled_for));
  }
}
