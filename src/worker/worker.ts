/**
 * The worker, one per worker process: advertises free slots, accepts offers (a claim), heartbeats
 * its attempts in batches per partition, runs each through the sandbox executor and reports
 * completion with the fence. On start it kills containers left by an earlier incarnation.
 *
 * Its half of a lease, on the monotonic clock: an attempt STARTS only while a heartbeat for it is
 * acknowledged and fresh (send time + TTL − margin; for a run prepared ahead, send time + the
 * ack's `cover_ms` − margin), so a paused or cut-off worker starts nothing stale. A running
 * attempt whose acknowledgement runs out is killed here (self-fencing). A probe from the owner
 * gets the truth: `not_started` (and it never starts), `running`, or the completion. Completion
 * reports are resent until the owner answers ok, `stale_fence` or `not_found`.
 *
 * Drain (SIGTERM): refuse offers, give back unstarted ones, let running ones finish until the
 * timeout, then kill and report the rest as retryable (one that exited 0 first keeps its success).
 */
import type { Bus, BusMsg, BusSubscription } from "../cluster/bus.ts";
import { replyRefusal, type InboxMode, type ReplyRefusal } from "../cluster/reply-guard.ts";
import { countBusRefusal } from "../metrics/index.ts";
import type { Clock } from "../lib/clock.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { ActorRouter, ItemResult } from "../cluster/router.ts";
import { Fifo } from "../lib/fifo.ts";
import type { Execution, Executor, ExecutionResult, RunIdentity, TaskSpec } from "../sandbox/index.ts";
import { MAX_INSTANT_MS, formatUtc } from "../schedule/index.ts";
import { JOB_ACTOR, START_SKEW_TOLERANCE_MS, workerAdvertSubject, workerSubject, type CancelRequest, type Completion, type HeartbeatAck, type ProbeReply, type ProbeRequest, type StartReply, type StartRequest } from "../protocol/worker.ts";

export interface WorkerOptions {
  workerId: string;
  clusterName: string;
  slots: number;
  heartbeatIntervalMs: number;
  /** How long completion reports are retried before giving up (the lease then expires). */
  completionDeadlineMs: number;
  /** Most completion reports being made at once, each from its first copy until settled (default COMPLETIONS_IN_FLIGHT). */
  completionsInFlight?: number;
  /** How long one completion report waits for its answer (default COMPLETION_WAIT_MS). */
  completionWaitMs?: number;
  /** Safety margin of self-fencing (default: 20% of the lease TTL, 250 ms to 2 s). */
  leaseSafetyMarginMs?: number;
  nc: Bus;
  router: ActorRouter;
  executor: Executor;
  clock: Clock;
  log: (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;
  /** Test hook: observe lifecycle (accepted, started, lease_lost, completed, stale_fence). */
  onEvent?: (e: { type: string; run_id: string; attempt: number }) => void;
  /** Which reply subjects offers and probes may name (reply-guard.ts; default `per_user`: NATS credentials). */
  inboxes?: InboxMode;
  /** Told of each offer or probe dropped because of its reply subject (after it is counted and logged). */
  onRefused?: (r: ReplyRefusal & { subject: string }) => void;
}

/** A job's resource limits as the executor names them (only those set). */
function resourcesOf(r: NonNullable<StartRequest["task"]["resources"]>): NonNullable<TaskSpec["resources"]> {
  const out: NonNullable<TaskSpec["resources"]> = {};
  if (r.memory_mb) out.memoryMb = r.memory_mb;
  if (r.cpus) out.cpus = r.cpus;
  if (r.pids) out.pids = r.pids;
  return out;
}

interface Lease {
  req: StartRequest;
  /**
   * What the executor is given, made at the offer (its `leaseMs` set at the start): made in a
   * burst's start loop, these objects would be most of its garbage, promoted into a heap that the
   * loop's allocation also pushes into a major GC.
   */
  task: TaskSpec;
  identity: RunIdentity;
  /** Its key in the worker's leases (run id # attempt), made once: rounds look leases up by it. */
  key: string;
  /** Monotonic time of acceptance: an offer never acknowledged by then + TTL − margin is dropped. */
  acceptedAtMono: number;
  /** Monotonic time until which the last acknowledged heartbeat lets this attempt run. */
  validUntilMono?: number | undefined;
  /** Monotonic send time of the latest acknowledged heartbeat. */
  ackSentMono?: number | undefined;
  /** The owner's last acknowledgement said `hold`: keep the attempt, do not start it (a gated run). */
  held?: boolean | undefined;
  /** `start_at` passed while not (freshly) acknowledged: start on the next acknowledgement. */
  due: boolean;
  execution?: Execution | undefined;
  startedAtMs?: number | undefined;
  /** The attempt ended; its completion is not acknowledged yet (a copy after each wait until settled, `#report`). */
  completion?: Completion | undefined;
  completionSinceMono?: number | undefined;
  /** A completion report is being made (waiting for its turn, in flight, or between copies). */
  reporting?: boolean | undefined;
  /**
   * A copy of the completion report is on the wire: the lease is not heartbeated meanwhile — the
   * report's arrival keeps the owner's lease as a heartbeat's would (job-actor.ts `arrivalKey`).
   */
  reportOnWire?: boolean | undefined;
  lost: boolean;
  /** Killed at once (SIGKILL: self-fenced, lease lost) — see `endedBeforeKill`. */
  killedAtOnce?: boolean | undefined;
  /** Killed by the drain timeout: its result is reported as a retryable error (handed back). */
  handedBack?: boolean | undefined;
  /**
   * Cancelled by its owner: no more heartbeats, but it keeps its slot here until the task is gone,
   * and its end is reported once (the owner holds the tenant slot until then; src/jobs/run-dispatch.ts `drain`).
   */
  cancelled?: boolean | undefined;
}

/**
 * A lease with every field present from the offer on (undefined until set): one shape for all
 * leases, its fields in the object itself. Added one by one later, each lease grew a separate
 * property store as it was heartbeated and started — an allocation and a copy per start in a
 * burst's start loop, on objects minutes old.
 */
function newLease(req: StartRequest, key: string, acceptedAtMono: number, workerId: string): Lease {
  const task: TaskSpec = { image: req.task.image, args: req.task.args, env: req.task.env, timeoutS: req.task.timeout_s, leaseMs: 0 };
  if (req.task.resources) task.resources = resourcesOf(req.task.resources);
  const identity: RunIdentity = {
    runId: req.run_id, attempt: req.attempt, jobId: req.job_id, tenantId: req.tenant_id, scheduledFor: formatUtc(req.scheduled_for_ms), workerId, fence: req.fence,
  };
  return {
    req, task, identity, key, acceptedAtMono, validUntilMono: undefined, ackSentMono: undefined, held: undefined, due: false,
    execution: undefined, startedAtMs: undefined, completion: undefined, completionSinceMono: undefined,
    reporting: undefined, reportOnWire: undefined, lost: false, killedAtOnce: undefined, handedBack: undefined, cancelled: undefined,
  };
}

/** What a drain did: attempts that finished during it, and attempts handed back at its timeout. */
export interface DrainResult {
  finished: number;
  handedBack: number;
  /** Accepted offers dropped before they started (re-offered elsewhere by their owners). */
  dropped: number;
}

/** How long a drain waits for the owners to acknowledge the attempts it gives back unstarted. */
export const GIVE_BACK_REPORT_MS = 5_000;

/** After handing back, how long the drain waits for the hand-back reports to be acknowledged. */
export const HAND_BACK_REPORT_MS = 5_000;

/** The longest cover an acknowledgement is taken for (a bound on a malformed or hostile reply). */
export const MAX_COVER_MS = 24 * 3_600_000;

/**
 * How long from its send time an acknowledgement lets an attempt run (before the margin): the
 * lease TTL, or the owner's `cover_ms` for an attempt not started yet (its lease then ends at
 * start_at + TTL on the owner's clock; see protocol/worker.ts `HeartbeatAck`), bounded.
 */
function coverOf(ack: Partial<HeartbeatAck> | null, l: Lease): number {
  const cover = ack?.cover_ms;
  if (l.execution || typeof cover !== "number" || !Number.isFinite(cover)) return l.req.lease_ttl_ms;
  return Math.min(MAX_COVER_MS, Math.max(l.req.lease_ttl_ms, cover));
}

/** Delay of the heartbeat round that acknowledges fresh offers (coalesces a burst). */
const BEAT_SOON_MS = 20;

/** How long completion reports gather before their batch goes (`#flushReports`). */
const REPORT_COALESCE_MS = 20;

/**
 * How long a completion report waits for the owner's answer before it counts as an unknown
 * outcome and a copy is sent (at most lease TTL − interval − margin, see `#reportWaitMs`), and how
 * many reports of this worker are being made at once (a report holds its slot from its first copy
 * until it is settled; the rest wait here, heartbeated, in the order their attempts ended). A
 * short wait makes a burst's completions time out at the saturated owner and be sent again every
 * round, copies queueing behind busy job actors until the scheduler's heap and GC take over; the
 * owner lets a copy share the reply of one still queued (the job actor's `coalesceKey`). A tight
 * bound is no cure either: a waiting report's attempt is heartbeated every round, and the owner
 * answers those heartbeats instead of preparing runs.
 */
export const COMPLETION_WAIT_MS = 10_000;
/** The shortest wait of a completion report's copy (a tiny lease TTL must not make copies spin). */
const MIN_REPORT_WAIT_MS = 250;
export const COMPLETIONS_IN_FLIGHT = 65_536;
/** Attempts gone from this worker remembered for probes (whether each started), oldest forgotten first. */
export const FORGOTTEN_LIMIT = 262_144;
/**
 * Completions of reports given up, kept for probes, oldest out first — as many as attempts gone
 * are remembered (`FORGOTTEN_LIMIT`): a given-up report whose completion was evicted answers its
 * probe `started`, and the run's result is lost (a smaller bound loses results in a 200,000-run
 * burst).
 */
export const GIVEN_UP_LIMIT = FORGOTTEN_LIMIT;
/**
 * …and at most this many characters of their output tails in all (UTF-16: up to twice as many
 * bytes); past it the oldest lose their output. Besides, each entry costs ~200 bytes (key,
 * object, error), ~50 MB at GIVEN_UP_LIMIT.
 */
export const GIVEN_UP_OUTPUT_CHARS = 64 * 1024 * 1024;
/** The output of a given-up completion kept once GIVEN_UP_OUTPUT_CHARS is spent. */
export const OUTPUT_NOT_KEPT = "[kairos: output not kept — this attempt's completion report was given up under load, and the worker's memory for such outputs was full]";

/**
 * Whether an attempt killed at once (SIGKILL) had in fact ended by itself, successfully, before
 * the kill — its exit not yet seen (the event loop runs timers before I/O, so a self-fencing
 * timer can fire after a task's exit and before the worker hears of it): exit code 0, where a
 * SIGKILL gives 137 (the executor may still call it `killed`: it was asked to stop it).
 */
export function endedBeforeKill(r: ExecutionResult): boolean {
  return r.exitCode === 0 && (r.outcome === "exited" || r.outcome === "killed");
}

/** The characters of output a given-up completion holds (the shared OUTPUT_NOT_KEPT costs none). */
function keptChars(c: Completion): number {
  return c.output === OUTPUT_NOT_KEPT ? 0 : c.output.length;
}

export class Worker {
  readonly #o: WorkerOptions;
  readonly #leases = new Map<string, Lease>();
  /**
   * The leases heartbeat rounds, `#enforce` and `#armFence` visit: every lease but those parked —
   * acknowledged through their start and waiting for it (`#parkIfCovered`), which only their start
   * timer wakes — and those whose completion report is on the wire (none of the three has anything
   * to do for them: `#sendReports` takes them back if a copy is to follow; with an owner slow to
   * answer, they were most of the walk — 0.5-0.9 s stalls of the sustained benchmark's worker).
   * A lease gone from `#leases` is dropped from here as it is met (`#awakeLeases`).
   * Visiting every lease made each round O(leases): with 100,000 attempts prepared minutes ahead
   * and a round 20 ms after each burst of offers, the worker spent its time walking parked leases.
   */
  readonly #awake = new Set<Lease>();
  /**
   * Leases a start instant woke, not yet added to `#awake`: a burst's start loop pushes here (an
   * array push) and the set takes them when next looked at — `#awakeLeases`, or before any delete
   * from it (`#sleep`), so the set's contents are as if each had been added in the loop. Adding
   * 200,000 leases to the set inside the loop (its table regrown on the way) delayed the last starts.
   */
  #woken: Lease[] = [];
  /** Ended attempts waiting for a report slot (COMPLETIONS_IN_FLIGHT), oldest first. */
  readonly #reportQueue = new Fifo<Lease>();
  /** Most reports holding a slot at once (COMPLETIONS_IN_FLIGHT or the option). */
  readonly #reportLimit: number;
  /** Reports holding a slot: from their first copy until settled. */
  #reportsActive = 0;
  /** Reports whose next copy is due (they hold their slot). */
  #reportAgain: Lease[] = [];
  #cancelReportFlush: (() => void) | undefined;
  #subs: BusSubscription[] = [];
  #cancelBeat: (() => void) | undefined;
  #stopping = false;
  #draining = false;
  /** Called whenever a lease goes away (the drain waits for none to be left). */
  #onLeaseGone: (() => void) | undefined;
  /** Ends the drain's wait for running attempts early (a second SIGTERM/SIGINT). */
  #hurry: (() => void) | undefined;

  constructor(o: WorkerOptions) {
    this.#o = o;
    this.#reportLimit = o.completionsInFlight ?? COMPLETIONS_IN_FLIGHT;
    if (!Number.isInteger(this.#reportLimit) || this.#reportLimit < 1) throw new RangeError(`completionsInFlight must be a positive integer, got ${this.#reportLimit}`);
  }

  async start(): Promise<void> {
    const { nc, clusterName, workerId } = this.#o;
    const reaped = await this.#o.executor.reapOrphans(() => false);
    if (reaped > 0) this.#o.log("warn", `killed ${reaped} orphaned task(s) of an earlier incarnation`);
    this.#subs.push(
      nc.subscribe(workerSubject(clusterName, workerId, "start"), {
        callback: (_e, m) => {
          if (this.#refusesReply(m)) return;
          m.respond(encode(this.#offer(decode<StartRequest>(m.data))));
        },
      }),
      nc.subscribe(workerSubject(clusterName, workerId, "cancel"), {
        // Only on its own subject: a JetStream push consumer delivers stored messages under their
        // own subject (`$KV.…`) to whatever subject its creator chose (start and probe need a
        // scheduler's inbox to answer, which such a delivery never has: `#refusesReply`).
        callback: (e, m) => {
          if (e) return;
          if (m.subject === workerSubject(clusterName, workerId, "cancel")) this.#cancel(decode<CancelRequest>(m.data));
          else countBusRefusal("worker", "subject");
        },
      }),
      nc.subscribe(workerSubject(clusterName, workerId, "probe"), {
        callback: (_e, m) => {
          if (this.#refusesReply(m)) return;
          m.respond(encode(this.#probe(decode<ProbeRequest>(m.data))));
        },
      }),
    );
    this.#beat();
  }

  /**
   * An offer or probe whose reply subject is not a scheduler identity's inbox is dropped before it
   * is looked at (reply-guard.ts): no claim, no answer published where the sender chose.
   */
  #refusesReply(m: BusMsg): boolean {
    const refused = replyRefusal(m.reply, { kind: "scheduler" }, this.#o.inboxes ?? "per_user");
    if (!refused) return false;
    countBusRefusal("worker", refused.reason);
    this.#o.log("warn", "offer or probe dropped unanswered: its reply subject is not a scheduler's inbox", { reason: refused.reason, detail: refused.detail, subject: m.subject });
    this.#o.onRefused?.({ ...refused, subject: m.subject });
    return true;
  }

  get draining(): boolean {
    return this.#draining;
  }

  /** Attempts held, and how many of them are awake (visited by each round; the rest are parked). */
  get leaseCounts(): { held: number; awake: number } {
    return { held: this.#leases.size, awake: this.#awakeLeases().length };
  }

  /**
   * Drains (see the module header): resolves once no attempt is left — every running one finished
   * (or was handed back at `timeoutMs`) and its completion was acknowledged or given up. Bounded
   * by `timeoutMs` + the kill + `HAND_BACK_REPORT_MS`. Call `stop()` after it.
   */
  async drain(timeoutMs: number): Promise<DrainResult> {
    this.#draining = true;
    this.#advertise(); // schedulers stop picking this worker now, not at the next heartbeat
    const given: Lease[] = [];
    for (const l of [...this.#leases.values()]) {
      if (l.execution || l.completion || l.lost) continue;
      l.lost = true; // never started here, and now never will
      this.#drop(l);
      given.push(l);
    }
    const dropped = given.length;
    const running = this.#leases.size;
    this.#o.log("info", "worker draining", { evt: "worker_draining", running, dropped, timeout_ms: timeoutMs });
    await Promise.all([this.#giveBack(given), this.#settle(timeoutMs, true)]);
    const rest = [...this.#leases.values()].filter((l) => l.execution && !l.completion && !l.lost);
    for (const l of rest) l.handedBack = true;
    await Promise.all(rest.map((l) => l.execution!.kill("worker drained: drain timeout", { immediate: true })));
    await this.#settle(HAND_BACK_REPORT_MS, false);
    const result: DrainResult = { finished: running - rest.length, handedBack: rest.length, dropped };
    this.#o.log("info", "worker drained", { evt: "worker_drained", finished: result.finished, handed_back: result.handedBack, dropped, left: this.#leases.size });
    return result;
  }

  /**
   * Tells the owners of attempts held ahead of their start that they will not start here (a
   * drain): each re-offers its run at once, not counted against max_attempts (protocol/worker.ts
   * `Completion.not_started`). Without it they waited for the lease's end (start_at + TTL) and a
   * probe — whose answer from a process restarted under the same id was `unknown`. A report lost
   * or refused leaves the run to that path: the owner's probe then hears `not_started` (this
   * process) or `unknown` (the next one), both uncounted for an attempt never heard to start.
   * Bounded by GIVE_BACK_REPORT_MS.
   */
  async #giveBack(leases: Lease[]): Promise<void> {
    if (leases.length === 0) return;
    const now = this.#o.clock.now();
    let results: ItemResult[] = [];
    try {
      results = await this.#o.router.requestMany(leases.map((l) => ({
        to: { type: JOB_ACTOR, id: l.req.job_actor },
        msg: {
          kind: "complete", run_id: l.req.run_id, fence: l.req.fence, worker: this.#o.workerId,
          outcome: "error", exit_code: null, output: "",
          error: { class: "not_started", message: "worker draining: the attempt was given back before its start", retryable: true },
          started_at_ms: now, finished_at_ms: now, not_started: true,
        } satisfies Completion & { kind: "complete"; run_id: string; fence: number; worker: string },
      })), { deadlineMs: GIVE_BACK_REPORT_MS, budgetMs: Math.floor(GIVE_BACK_REPORT_MS / 2) });
    } catch (e) {
      this.#o.log("warn", "giving back unstarted attempts failed; their owners' probes re-offer them", { attempts: leases.length, err: String(e) });
    }
    const ok = results.filter((r) => r?.ok === true).length;
    this.#o.log("info", "gave back unstarted attempts", { evt: "worker_gave_back", attempts: leases.length, acknowledged: ok });
  }

  /** Ends a drain's wait for running attempts now: they are handed back (a second signal). */
  hurry(): void {
    this.#hurry?.();
  }

  /** Resolves when no lease is left, after `ms`, or (when `hurryable`) on `hurry()`. */
  #settle(ms: number, hurryable: boolean): Promise<void> {
    return new Promise((resolve) => {
      if (this.#leases.size === 0) return resolve();
      const done = () => {
        cancel();
        this.#onLeaseGone = undefined;
        this.#hurry = undefined;
        resolve();
      };
      const cancel = this.#o.clock.setTimer(ms, done);
      this.#onLeaseGone = () => {
        if (this.#leases.size === 0) done();
      };
      if (hurryable) this.#hurry = done;
    });
  }

  /** Stops taking work; running attempts are killed (their leases expire and they are retried). */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#cancelBeat?.();
    this.#cancelFence?.();
    this.#cancelSoon?.();
    this.#cancelReportFlush?.();
    for (const s of this.#subs) s.unsubscribe();
    await Promise.all([...this.#leases.values()].map((l) => this.#kill(l, "worker stopping")));
    await this.#o.executor.close();
  }

  #key(runId: string, attempt: number): string {
    return `${runId}#${attempt}`;
  }

  /** An attempt under one fence, as the worker's memory of attempts gone (`#forgotten`, `#givenUp`) names it. */
  #fenced(key: string, fence: number): string {
    return `${key}#${fence}`;
  }

  /** Attempts gone from here (key#fence → whether it started), for probes; bounded, oldest out first. */
  readonly #forgotten = new Map<string, boolean>();
  #forget(l: Lease): void {
    const k = this.#fenced(l.key, l.req.fence);
    this.#forgotten.delete(k);
    if (this.#forgotten.size >= FORGOTTEN_LIMIT) this.#forgotten.delete(this.#forgotten.keys().next().value!);
    this.#forgotten.set(k, l.execution !== undefined || l.completion !== undefined);
  }

  /** Completions of reports given up (key#fence), for probes; bounded, oldest out first. */
  readonly #givenUp = new Map<string, Completion>();
  /** Characters of output the given-up completions hold (at most GIVEN_UP_OUTPUT_CHARS). */
  #givenUpChars = 0;
  /** Given-up completions holding their output, oldest first (the first to lose it past the budget). */
  #givenUpWithOutput = new Fifo<string>();
  /**
   * A report given up (completionDeadlineMs): the lease goes, but its completion is kept for its
   * owner's probe — under a burst a report can wait here past the deadline, and its attempt would
   * otherwise count as started with its result lost (a dead letter at max_attempts 1). Past the
   * output budget
   * the oldest lose their output first (a run's result matters more than its log tail).
   */
  #giveUp(l: Lease): void {
    if (l.completion) {
      this.#remember(this.#fenced(l.key, l.req.fence), l.completion);
      this.#o.onEvent?.({ type: "report_given_up", run_id: l.req.run_id, attempt: l.req.attempt });
    }
    this.#drop(l);
  }

  /** Keeps a completion for probes (`#givenUp`), within GIVEN_UP_LIMIT and GIVEN_UP_OUTPUT_CHARS. */
  #remember(k: string, c: Completion): void {
    this.#forgetGivenUp(k);
    this.#givenUp.set(k, c);
    this.#givenUpChars += keptChars(c);
    if (keptChars(c) > 0) this.#givenUpWithOutput.push(k);
    while (this.#givenUp.size > GIVEN_UP_LIMIT) this.#forgetGivenUp(this.#givenUp.keys().next().value!);
    // Keys of entries evicted or replaced stay in the queue until met: rebuilt once they outnumber the live ones.
    if (this.#givenUpWithOutput.size > 2 * this.#givenUp.size + 1024) {
      this.#givenUpWithOutput = new Fifo<string>();
      for (const [key, kept] of this.#givenUp) if (keptChars(kept) > 0) this.#givenUpWithOutput.push(key);
    }
    while (this.#givenUpChars > GIVEN_UP_OUTPUT_CHARS && this.#givenUpWithOutput.size > 0) {
      const oldest = this.#givenUpWithOutput.shift()!;
      const kept = this.#givenUp.get(oldest);
      if (!kept || keptChars(kept) === 0) continue; // gone, or kept again since without output
      this.#givenUpChars -= keptChars(kept);
      this.#givenUp.set(oldest, { ...kept, output: OUTPUT_NOT_KEPT });
    }
  }

  /**
   * An attempt killed at once that had ended by itself just before (`endedBeforeKill`): its
   * success is kept for its owner's probe, as a given-up report's is. Thrown away, the probe would
   * answer `started` and its owner offer the run again — a second execution of a run that had
   * succeeded (a self-fencing timer firing as the task exits, ledger chaos invariant f). The owner
   * takes it only while the
   * lease is still its current one (run-lifecycle.ts `onProbeAnswer`).
   */
  #keepEndedBeforeKill(l: Lease, r: ExecutionResult): void {
    this.#remember(this.#fenced(l.key, l.req.fence), { outcome: "exited", exit_code: 0, output: r.output, error: null, started_at_ms: r.startedAtMs, finished_at_ms: r.finishedAtMs });
    this.#o.onEvent?.({ type: "ended_before_kill", run_id: l.req.run_id, attempt: l.req.attempt });
  }

  #forgetGivenUp(k: string): void {
    const c = this.#givenUp.get(k);
    if (!c) return;
    this.#givenUp.delete(k);
    this.#givenUpChars -= keptChars(c);
  }

  /**
   * What became of an attempt, for its owner whose lease fell silent (see the module header).
   * Answered from memory, at once: an attempt held and not started is dropped now.
   */
  #probe(p: ProbeRequest): ProbeReply {
    const reply = this.#probeAnswer(p);
    // Counted by answer (`probe_started`: a result lost; `probe_dropped`: held, dropped by the probe).
    this.#o.onEvent?.({ type: `probe_${reply.state}`, run_id: p.run_id, attempt: p.attempt });
    return reply;
  }

  #probeAnswer(p: ProbeRequest): ProbeReply {
    const key = this.#key(p.run_id, p.attempt);
    const l = this.#leases.get(key);
    if (l && l.req.fence === p.fence && !l.lost) {
      if (l.completion) return { state: "ended", completion: l.completion };
      if (l.execution) return { state: "running" };
      l.lost = true; // never started here, and now never will
      this.#drop(l);
      this.#o.onEvent?.({ type: "probe_dropped", run_id: p.run_id, attempt: p.attempt });
      this.#onLeaseGone?.();
      return { state: "not_started" };
    }
    const k = this.#fenced(key, p.fence);
    // Killed at once, its result not in yet: asked again a TTL later (run-lifecycle.ts `onProbeAnswer`).
    if (this.#killing.has(k)) return { state: "running" };
    const given = this.#givenUp.get(k);
    if (given) return { state: "ended", completion: given };
    const started = this.#forgotten.get(k);
    return started === undefined ? { state: "unknown" } : { state: started ? "started" : "not_started" };
  }

  #offer(req: StartRequest): StartReply {
    if (this.#stopping || this.#draining) return { accepted: false, reason: this.#draining ? "draining" : "stopping" };
    // (The identity made at the offer formats scheduled_for: a malformed time is refused here, not thrown.)
    if (!Number.isFinite(req.start_at_ms) || !Number.isFinite(req.scheduled_for_ms) || Math.abs(req.scheduled_for_ms) > MAX_INSTANT_MS) {
      return { accepted: false, reason: "malformed offer: scheduled_for_ms and start_at_ms must be finite times (within ±8.64e15 ms)" };
    }
    if (req.owner_now_ms !== undefined && !(Number.isFinite(req.owner_now_ms) && Math.abs(req.owner_now_ms) <= MAX_INSTANT_MS)) {
      return { accepted: false, reason: "malformed offer: owner_now_ms must be a finite time (within ±8.64e15 ms)" };
    }
    const k = this.#key(req.run_id, req.attempt);
    // A late copy of an offer this worker has already let go (dropped by a probe, say) must not
    // bring it back: it answered its owner that the attempt will never run here.
    const fenced = this.#fenced(k, req.fence);
    if (this.#forgotten.has(fenced) || this.#givenUp.has(fenced)) return { accepted: false, reason: "attempt already gone from here" };
    const existing = this.#leases.get(k);
    if (existing) {
      if (existing.req.fence === req.fence) return { accepted: true };
      if (existing.execution || existing.completion) return { accepted: false, reason: "attempt already running here" };
      // A newer offer of the same attempt supersedes one that never started (its fence is dead).
      existing.lost = true;
      this.#drop(existing);
    }
    if (this.#leases.size >= this.#o.slots) return { accepted: false, reason: "no free slot" };
    const lease = newLease(req, k, this.#o.clock.monoMs(), this.#o.workerId);
    this.#leases.set(k, lease);
    this.#awake.add(lease);
    this.#enqueueStart(lease, req.start_at_ms);
    this.#o.onEvent?.({ type: "accepted", run_id: req.run_id, attempt: req.attempt });
    this.#beatSoon(); // the acknowledged heartbeat that confirms the claim
    return { accepted: true };
  }

  /** Attempts due at the same instant share one timer and start in one tight loop (bursts). */
  readonly #due = new Map<number, Lease[]>();
  #enqueueStart(lease: Lease, atMs: number): void {
    const group = this.#due.get(atMs);
    if (group) {
      group.push(lease);
      return;
    }
    this.#due.set(atMs, [lease]);
    const fire = () => {
      const early = atMs - this.#o.clock.now();
      if (early > 0) {
        // Host timers may fire a millisecond early; never start before the due time.
        this.#o.clock.setTimer(early, fire);
        return;
      }
      const leases = this.#due.get(atMs) ?? [];
      this.#due.delete(atMs);
      let waiting = false;
      const mono = this.#o.clock.monoMs();
      for (const l of leases) {
        const early = this.#earlyByOwner(l, mono);
        if (early > 0 && !l.lost) {
          this.#deferForSkew(l, early);
          continue;
        }
        if (!l.lost) this.#woken.push(l);
        if (this.#fresh(l)) this.#run(l);
        else if (!l.lost) {
          l.due = true; // starts when a heartbeat is acknowledged, if ever
          waiting = true;
        }
      }
      // The starts themselves ask for no round (see `#needsBeat`): the next periodic round or each
      // attempt's completion reports them.
      if (waiting) void this.#heartbeatAll();
      // Self-fencing from the start: an attempt started under a cover may have little of it left
      // (a worker paused until just before the cover ran out, sim seed 910), and the next round's
      // fence may come too late — the owner re-offers at start_at + TTL. Only this instant's
      // attempts are looked at (`#fenceBy`): a walk of every awake lease at each start instant
      // (5,000 instants a second in the sustained benchmark) saturated the worker, and 82 % of the
      // runs never started.
      this.#fenceBy(leases);
    };
    this.#o.clock.setTimer(Math.max(0, atMs - this.#o.clock.now()), fire);
  }

  /**
   * How much too early a start would be now by the owner's clock (carried from the offer on the
   * monotonic clock), beyond START_SKEW_TOLERANCE_MS; 0 when it may start (or the offer names no
   * owner time).
   */
  #earlyByOwner(l: Lease, mono: number): number {
    const t = l.req.owner_now_ms;
    if (t === undefined) return 0;
    const ownerNow = t + (mono - l.acceptedAtMono);
    return Math.max(0, l.req.start_at_ms - START_SKEW_TOLERANCE_MS - ownerNow);
  }

  /** Starts deferred because this worker's clock ran ahead of an owner's (a skew the tolerance does not cover). */
  #skewDeferrals = 0;
  get skewDeferrals(): number {
    return this.#skewDeferrals;
  }

  /** Defers a start the worker's clock would make too early (see `#earlyByOwner`), grouped per 10 ms. */
  #deferForSkew(l: Lease, earlyMs: number): void {
    this.#skewDeferrals++;
    this.#o.onEvent?.({ type: "start_deferred_skew", run_id: l.req.run_id, attempt: l.req.attempt });
    if (this.#skewDeferrals === 1 || this.#skewDeferrals % 1000 === 0) {
      this.#o.log("warn", "this worker's clock runs ahead of its owners': starts deferred to the owners' time", { deferrals: this.#skewDeferrals, early_ms: Math.round(earlyMs) });
    }
    const at = Math.ceil((this.#o.clock.now() + earlyMs) / 10) * 10;
    this.#enqueueStart(l, at);
  }

  #margin(l: Lease): number {
    return this.#o.leaseSafetyMarginMs ?? Math.min(2000, Math.max(250, l.req.lease_ttl_ms * 0.2));
  }

  /** The owner's acknowledgement still covers this attempt. */
  #fresh(l: Lease): boolean {
    return !l.lost && !l.held && l.validUntilMono !== undefined && this.#o.clock.monoMs() < l.validUntilMono;
  }

  /** Attempts started since the last `#reportStarted` (their `started` events are still to come). */
  #startedToReport: Lease[] = [];
  readonly #reportStarted = (): void => {
    const started = this.#startedToReport;
    this.#startedToReport = [];
    for (const l of started) {
      try {
        this.#o.onEvent?.({ type: "started", run_id: l.req.run_id, attempt: l.req.attempt });
      } catch (e) {
        // An observer that throws must not cost the other starts of the loop their events.
        this.#o.log("error", "a worker event observer failed", { run_id: l.req.run_id, err: String(e) });
      }
    }
  };

  #run(lease: Lease): void {
    if (lease.lost || this.#stopping || lease.execution) return;
    lease.due = false;
    this.#stayHeard();
    const { req } = lease;
    lease.startedAtMs = this.#o.clock.now();
    // What is left of the acknowledged lease, in whole ms: the container dies when it runs out unrenewed.
    lease.task.leaseMs = Math.max(0, Math.floor((lease.validUntilMono ?? 0) - this.#o.clock.monoMs()));
    lease.execution = this.#o.executor.start(lease.task, lease.identity);
    // Reported after the loop that starts a burst's attempts: the event is a log line, and writing
    // 20,000 of them inside the loop delayed the last starts of the burst. One microtask reports
    // the loop's starts (one per start was an event, a closure and an AsyncResource each, 3 % of
    // the loop and more of its garbage); it is queued before the first start's completion, so
    // every `started` comes before its `completed`.
    if (this.#o.onEvent) {
      if (this.#startedToReport.length === 0) queueMicrotask(this.#reportStarted);
      this.#startedToReport.push(lease);
    }
    if (lease.execution.ended) {
      // Ended as it started (the noop executor, a task refused): completed by one microtask for
      // the loop (see `Execution.ended`), queued after the `started` one above.
      if (this.#endedToComplete.length === 0) queueMicrotask(this.#completeEnded);
      this.#endedToComplete.push(lease);
      return;
    }
    lease.execution.result.then(
      (r) => this.#complete(lease, r),
      (e: unknown) => this.#o.log("error", "execution failed unexpectedly", { run_id: req.run_id, err: String(e) }),
    );
  }

  /** Attempts started since the last `#completeEnded` whose execution had already ended (`Execution.ended`). */
  #endedToComplete: Lease[] = [];
  readonly #completeEnded = (): void => {
    const ended = this.#endedToComplete;
    this.#endedToComplete = [];
    for (const l of ended) {
      this.#complete(l, l.execution!.ended!).catch((e: unknown) => this.#o.log("error", "completing an attempt failed", { run_id: l.req.run_id, err: String(e) }));
    }
  };

  /**
   * One batched heartbeat for every attempt this worker holds (accepted, running, or waiting for
   * its completion to be acknowledged): one NATS request per partition. Acknowledgements extend
   * each attempt's validity from the SEND time; `lease_lost`/`not_found` kill it.
   */
  #round: Promise<void> | undefined;
  #roundAgain = false;
  /** A periodic round was asked for while one was in flight: the next round is periodic. */
  #periodicAgain = false;
  /** One heartbeat round in flight at a time; calls meanwhile coalesce into one more round after it. */
  #heartbeatAll(periodic = false): Promise<void> {
    if (this.#round) {
      this.#roundAgain = true;
      this.#periodicAgain ||= periodic;
      return this.#round;
    }
    this.#round = this.#heartbeatRound(periodic).finally(() => {
      this.#round = undefined;
      if (this.#roundAgain && !this.#stopping) {
        const again = this.#periodicAgain;
        this.#roundAgain = false;
        this.#periodicAgain = false;
        void this.#heartbeatAll(again);
      }
    });
    return this.#round;
  }

  async #heartbeatRound(periodic: boolean): Promise<void> {
    this.#enforce();
    const wallNow = this.#o.clock.now();
    const live = this.#awakeLeases().filter((l) => !l.lost && this.#needsBeat(l, wallNow, periodic));
    if (live.length === 0) return;
    const sentAt = this.#o.clock.monoMs();
    // A completion carries started_at itself: a heartbeat of an attempt that ended does not also
    // report its start (that would be one more actor turn and run-record write for nothing).
    const reportsStart = live.map((l) => l.startedAtMs !== undefined && !l.completion);
    const results = await this.#o.router.requestMany(
      live.map((l, i) => ({
        to: { type: JOB_ACTOR, id: l.req.job_actor },
        msg: { kind: "heartbeat", run_id: l.req.run_id, fence: l.req.fence, worker: this.#o.workerId, ...(reportsStart[i] ? { started_at_ms: l.startedAtMs } : {}) },
      })),
      { deadlineMs: this.#o.heartbeatIntervalMs },
    );
    this.#enforce(); // a lease that lapsed while the round was out is not revived by its reply
    await Promise.all(results.map(async (r, i) => {
      const l = live[i]!;
      if (this.#leases.get(l.key) !== l || l.lost) return;
      if (r.ok) {
        const ack = r.v as Partial<HeartbeatAck> | null;
        l.validUntilMono = Math.max(l.validUntilMono ?? 0, sentAt + coverOf(ack, l) - this.#margin(l));
        l.ackSentMono = Math.max(l.ackSentMono ?? sentAt, sentAt);
        l.execution?.renewLease?.(l.validUntilMono - this.#o.clock.monoMs());
        // A gated run (look-ahead under overlap skip) starts only on an acknowledgement without
        // `hold`; a due one that is still held asks again shortly (the owner decides at its due instant).
        l.held = !l.execution && ack?.hold === true;
        if (l.due && l.held) this.#beatSoon();
        if (l.due && this.#fresh(l)) {
          this.#run(l);
          // Fenced now, not by the #armFence after this round: the round may wait on a kill of
          // another attempt (a container still being created) past this one's validity.
          this.#fenceBy([l]);
        }
        if (l.completion) this.#report(l); // a report given up by a stall, say: sent again
        this.#parkIfCovered(l);
      } else if (r.e.code === "lease_lost" || r.e.code === "not_found") {
        this.#o.onEvent?.({ type: "lease_lost", run_id: l.req.run_id, attempt: l.req.attempt });
        await this.#kill(l, "lease lost", true);
      }
    }));
    this.#armFence();
  }

  /**
   * Whether this round heartbeats `l`. An attempt acknowledged with a cover through its start
   * (`cover_ms`, the usual case: its owner's lease runs until start_at + TTL — run-lifecycle.ts
   * `leaseEndMs`, `heartbeatAck`) is left out until it starts: a run prepared minutes ahead costs
   * one heartbeat, its claim. (Asking again as the start neared put 200,000 acknowledgements of a
   * 5-minute look-ahead into the same seconds before the burst, on a scheduler already saturated.)
   * Without a cover (an owner that sent none, or a `hold` since lifted), an attempt waiting for a
   * start more than half a lease TTL away is left out, and the rounds within the last window
   * before it (half the TTL, at least two heartbeat intervals, at most TTL − margin) make its
   * acknowledgement fresh at start_at and tell a gated run `hold` or go; if none is, it asks at
   * start_at and starts on the acknowledgement.
   */
  #needsBeat(l: Lease, wallNow: number, periodic: boolean): boolean {
    // Its completion report is on the wire: that keeps the owner's lease (`#report`).
    if (l.reportOnWire) return false;
    if (l.due || l.held || l.validUntilMono === undefined) return true;
    // A start is not news that cannot wait: the owner learns it from the next round that carries
    // the lease (the periodic one at the latest), or from the completion if the attempt ends
    // first. A burst's short runs then cost their owners one message each, not two (the start
    // notice was an actor turn and a run-record write per run at the due second). Until then the
    // owner's lease runs from start_at (run-lifecycle.ts `leaseEndMs`), as for any started run.
    // Every periodic round (each interval) carries every lease it always did. The rounds asked
    // for in between (a burst of offers, starts and completions each asks for one soon; they also
    // run back to back) carry a lease at most once per half interval: re-sending every lease in
    // each of them flooded the owners (a 200,000-run burst: 67,000 leases re-sent per round).
    if (!periodic) {
      const sinceAck = this.#o.clock.monoMs() - (l.ackSentMono ?? Number.NEGATIVE_INFINITY);
      if (sinceAck < this.#o.heartbeatIntervalMs / 2) return false;
    }
    if (l.execution || l.completion) return true;
    // Acknowledged through its start (the claim's `cover_ms`): nothing to ask before it starts.
    if (this.#coveredThroughStart(l, l.validUntilMono, wallNow)) return false;
    // At least two rounds before start_at, each acknowledgement still fresh at start_at.
    const window = Math.min(l.req.lease_ttl_ms - this.#margin(l), Math.max(l.req.lease_ttl_ms / 2, 2 * this.#o.heartbeatIntervalMs));
    return l.req.start_at_ms - wallNow <= window;
  }

  /** The awake leases still held (a snapshot: callers may drop leases while they walk it). */
  #awakeLeases(): Lease[] {
    this.#takeWoken();
    const out: Lease[] = [];
    for (const l of this.#awake) {
      if (this.#leases.get(l.key) === l) out.push(l);
      else this.#awake.delete(l);
    }
    return out;
  }

  /** Moves the leases woken since into `#awake` (see `#woken`). */
  #takeWoken(): void {
    if (this.#woken.length === 0) return;
    for (const l of this.#woken) this.#awake.add(l);
    this.#woken = [];
  }

  /** Takes a lease out of `#awake` (after the woken ones are in: a later delete wins over an earlier wake). */
  #sleep(l: Lease): void {
    this.#takeWoken();
    this.#awake.delete(l);
  }

  /**
   * Parks an attempt acknowledged through its start (see `#awake`): not started, not due, not
   * held, and its acknowledgement still covers its start (`#coveredThroughStart`). Nothing can be due
   * for it before its start timer, which wakes it: `#dropAtMono` keeps it until start_at + TTL,
   * and it needs no heartbeat before it starts (`#needsBeat`).
   */
  #parkIfCovered(l: Lease): void {
    if (l.lost || l.due || l.held || l.execution || l.completion || l.validUntilMono === undefined) return;
    if (this.#coveredThroughStart(l, l.validUntilMono, this.#o.clock.now())) this.#sleep(l);
  }

  /**
   * Whether an acknowledgement valid until `validUntilMono` still leaves enough at start_at for a
   * waiting attempt to skip the rounds before it: two heartbeat intervals (the first rounds after
   * the start renew it), at most half of TTL − margin.
   */
  #coveredThroughStart(l: Lease, validUntilMono: number, wallNow: number): boolean {
    const atStart = validUntilMono - this.#o.clock.monoMs() - Math.max(0, l.req.start_at_ms - wallNow);
    return atStart >= Math.min(2 * this.#o.heartbeatIntervalMs, (l.req.lease_ttl_ms - this.#margin(l)) / 2);
  }

  /**
   * Monotonic time at which an attempt not ended is dropped (`#enforce`): its last acknowledgement
   * + TTL − margin — an offer never acknowledged counts from its acceptance — except that an
   * acknowledged attempt not started yet is kept until start_at + TTL, when its owner's lease ends
   * (it is not heartbeated before its start nears, see `#needsBeat`, and never starts stale).
   */
  #dropAtMono(l: Lease, monoNow: number, wallNow: number): number {
    if (l.validUntilMono === undefined) return l.acceptedAtMono + l.req.lease_ttl_ms - this.#margin(l);
    if (l.execution) return l.validUntilMono;
    return Math.max(l.validUntilMono, monoNow + l.req.start_at_ms + l.req.lease_ttl_ms - wallNow);
  }

  /**
   * Self-fencing: drops offers never acknowledged in time and kills attempts whose last
   * acknowledgement ran out (the owner may already have offered the run elsewhere).
   */
  #enforce(): void {
    const now = this.#o.clock.monoMs();
    const wallNow = this.#o.clock.now();
    for (const l of this.#awakeLeases()) {
      if (l.completion) {
        // A worker cut off for longer than the completion deadline gives the report up (the slot
        // comes back; the owner's lease expires and the run is retried).
        if (now - (l.completionSinceMono ?? now) > this.#o.completionDeadlineMs) {
          this.#giveUp(l);
          this.#onLeaseGone?.();
          this.#o.log("warn", "gave up reporting a completion; its owner's probe still learns the result", { run_id: l.req.run_id });
        }
        continue;
      }
      if (l.lost) continue;
      if (now < this.#dropAtMono(l, now, wallNow)) continue;
      this.#o.onEvent?.({ type: l.execution ? "self_fenced" : "offer_expired", run_id: l.req.run_id, attempt: l.req.attempt });
      void this.#kill(l, "self-fenced: no acknowledged heartbeat within the lease", true);
    }
  }

  #cancelFence: (() => void) | undefined;
  /** When the armed fence timer fires (monotonic ms); +∞: none armed. */
  #fenceAtMono = Number.POSITIVE_INFINITY;
  /** A timer at the earliest moment an attempt's acknowledgement runs out (a walk of the awake leases). */
  #armFence(): void {
    this.#cancelFence?.();
    this.#cancelFence = undefined;
    this.#fenceAtMono = Number.POSITIVE_INFINITY;
    this.#fenceBy(this.#awakeLeases());
  }

  /**
   * Brings the fence timer forward to the earliest drop time among `leases`, if that is sooner
   * than the one armed (O(leases)). When it fires it enforces and walks every awake lease
   * (`#armFence`). Every start calls it for the attempts it starts (the start timer, the round
   * that acknowledges a due attempt), so a started attempt's drop time is never later than the
   * fence armed, whichever path started it.
   */
  #fenceBy(leases: Iterable<Lease>): void {
    let earliest = Number.POSITIVE_INFINITY;
    const monoNow = this.#o.clock.monoMs();
    const wallNow = this.#o.clock.now();
    for (const l of leases) {
      if (l.lost || l.completion) continue;
      // An acknowledged attempt waiting for its start is dropped by a heartbeat round's #enforce
      // (every interval; a parked one once its start timer has woken it), not by this timer: its drop time (start_at + TTL) differs per attempt,
      // and at 5,000 runs/s prepared ahead this O(attempts) timer fired every millisecond.
      if (!l.execution && l.validUntilMono !== undefined) continue;
      earliest = Math.min(earliest, this.#dropAtMono(l, monoNow, wallNow));
    }
    const at = earliest + 1;
    if (!Number.isFinite(earliest) || this.#stopping || at >= this.#fenceAtMono) return;
    this.#cancelFence?.();
    this.#fenceAtMono = at;
    this.#cancelFence = this.#o.clock.setTimer(Math.max(0, at - monoNow), () => {
      this.#cancelFence = undefined;
      this.#fenceAtMono = Number.POSITIVE_INFINITY;
      this.#enforce();
      this.#armFence();
    });
  }

  #cancelSoon: (() => void) | undefined;
  /** A heartbeat round shortly (coalesces the acknowledgements of a burst of offers). */
  #beatSoon(): void {
    if (this.#cancelSoon || this.#stopping) return;
    this.#cancelSoon = this.#o.clock.setTimer(BEAT_SOON_MS, () => {
      this.#cancelSoon = undefined;
      void this.#heartbeatAll();
    });
  }

  async #complete(lease: Lease, r: ExecutionResult): Promise<void> {
    this.#stayHeard();
    if (lease.cancelled) return this.#reportCancelled(lease, r);
    if (lease.lost) {
      this.#drop(lease); // only if still held under its key (a newer offer of the attempt may hold it)
      if (lease.killedAtOnce && endedBeforeKill(r)) this.#keepEndedBeforeKill(lease, r);
      this.#onLeaseGone?.();
      return;
    }
    // (A hand-back's kill is immediate: exit code 0 means the task ended by itself just before it.)
    const ownEnd = lease.handedBack === true && endedBeforeKill(r);
    lease.completion = lease.handedBack && r.outcome === "killed" && !ownEnd
      ? {
        // Handed back by a drain: a retryable error, so the owner retries it elsewhere at once.
        outcome: "error", exit_code: r.exitCode, output: r.output,
        error: { class: "executor_failure", message: "worker drained: the attempt was still running at the drain timeout and was handed back", retryable: true },
        started_at_ms: r.startedAtMs, finished_at_ms: r.finishedAtMs,
      }
      : {
        outcome: ownEnd ? "exited" : r.outcome, exit_code: r.exitCode, output: r.output,
        error: r.error ? { class: r.error.class, message: r.error.message, retryable: r.error.retryable } : null,
        started_at_ms: r.startedAtMs, finished_at_ms: r.finishedAtMs,
      };
    lease.completionSinceMono = this.#o.clock.monoMs();
    this.#report(lease);
  }

  /**
   * How long one copy of a completion report waits for its answer before the next copy goes:
   * COMPLETION_WAIT_MS (or the option), and never more than the lease TTL − one heartbeat
   * interval − the margin (nor under MIN_REPORT_WAIT_MS). The owner keeps the lease while the
   * report waits in its mailbox (run-lifecycle.ts `onLeaseExpired`, `pending`) and from each
   * copy's arrival; the lease is not heartbeated while a copy is on the wire, so should the first
   * be lost, the next must arrive within the TTL of the last heartbeat before the attempt ended
   * (at most one interval earlier) — less the gathering before the next copy's batch goes
   * (REPORT_COALESCE_MS). A copy finding the first still queued shares its turn.
   */
  #reportWaitMs(l: Lease): number {
    const wait = Math.min(this.#o.completionDeadlineMs, this.#o.completionWaitMs ?? COMPLETION_WAIT_MS);
    return Math.max(MIN_REPORT_WAIT_MS, Math.min(wait, l.req.lease_ttl_ms - this.#o.heartbeatIntervalMs - this.#margin(l) - REPORT_COALESCE_MS));
  }

  /**
   * Reports a completion, sending copies until the owner answers ok or `stale_fence`, or the
   * report is given up (completionDeadlineMs). Reports go in batches (`#flushReports`): one
   * request per partition (naming half the wait as the owner's budget) carries every report due
   * within REPORT_COALESCE_MS, not a request and a socket write per completion. While a copy is on
   * the wire the lease is not heartbeated (its arrival keeps the lease); while it waits for a free
   * report slot or between copies, it is. So a burst's ended attempts cost their owner one item
   * each while it answers within the wait, not also a heartbeat every round.
   */
  #report(lease: Lease): void {
    if (lease.reporting) return;
    lease.reporting = true;
    this.#reportQueue.push(lease);
    this.#flushReportsSoon();
  }

  /** Still to be reported: held here and not lost (settled, given up or killed meanwhile otherwise). */
  #reportable(l: Lease): boolean {
    return this.#leases.get(l.key) === l && !l.lost;
  }

  #flushReportsSoon(): void {
    if (this.#cancelReportFlush || this.#stopping) return;
    this.#cancelReportFlush = this.#o.clock.setTimer(REPORT_COALESCE_MS, () => {
      this.#cancelReportFlush = undefined;
      this.#flushReports();
    });
  }

  /**
   * One batch: the next copy of every report whose wait ended, and first copies while report
   * slots are free (COMPLETIONS_IN_FLIGHT; a report holds its slot from its first copy until it is
   * settled, the rest wait here, heartbeated, in the order their attempts ended).
   */
  #flushReports(): void {
    const batch: Lease[] = [];
    const again = this.#reportAgain;
    this.#reportAgain = [];
    for (const l of again) {
      if (this.#reportable(l)) batch.push(l);
      else this.#reportSettled(l, true);
    }
    while (this.#reportsActive < this.#reportLimit && this.#reportQueue.size > 0) {
      const l = this.#reportQueue.shift()!;
      if (!this.#reportable(l)) {
        this.#reportSettled(l, false); // not sent: settled while it waited for its turn
        continue;
      }
      this.#reportsActive++;
      batch.push(l);
    }
    if (batch.length > 0) void this.#sendReports(batch);
  }

  /** A report ends (`active`: it held a report slot): the drain may be done, a waiting report may go. */
  #reportSettled(l: Lease, active: boolean): void {
    l.reporting = false;
    if (active) this.#reportsActive--;
    this.#onLeaseGone?.();
    if (active && this.#reportQueue.size > 0) this.#flushReportsSoon();
  }

  /**
   * One copy of each report in `batch`. Each settles on ok, `stale_fence` or `not_found`, or is
   * given up past completionDeadlineMs; any other answer, or none within the wait, is an unknown
   * outcome: its next copy goes once the wait has passed since this one was sent.
   */
  async #sendReports(batch: Lease[]): Promise<void> {
    const sentAt = this.#o.clock.monoMs();
    let wait = Number.POSITIVE_INFINITY;
    for (const l of batch) {
      l.reportOnWire = true;
      this.#sleep(l);
      wait = Math.min(wait, this.#reportWaitMs(l));
    }
    let results: ItemResult[] = [];
    try {
      results = await this.#o.router.requestMany(batch.map((l) => ({
        to: { type: JOB_ACTOR, id: l.req.job_actor },
        msg: { kind: "complete", run_id: l.req.run_id, fence: l.req.fence, worker: this.#o.workerId, ...l.completion! },
      })), { deadlineMs: wait, budgetMs: Math.floor(wait / 2) });
    } catch (e) {
      this.#o.log("warn", "completion reports failed; they are sent again", { reports: batch.length, err: String(e) });
    }
    const later: Lease[] = [];
    const now = this.#o.clock.monoMs();
    batch.forEach((l, i) => {
      const r = results[i];
      // Answered pending: the copy still waits in the owner's mailbox, which keeps the lease as
      // the copy on the wire did — it stays on the wire (not heartbeated) until the next copy.
      const pending = r !== undefined && !r.ok && r.e.code === "unavailable";
      const { req } = l;
      if (r?.ok === true) {
        this.#drop(l);
        this.#o.onEvent?.({ type: "completed", run_id: req.run_id, attempt: req.attempt });
      } else if (r !== undefined && (r.e.code === "stale_fence" || r.e.code === "not_found")) {
        this.#drop(l);
        this.#o.onEvent?.({ type: "stale_fence", run_id: req.run_id, attempt: req.attempt });
      } else if (now - (l.completionSinceMono ?? 0) > this.#o.completionDeadlineMs) {
        this.#giveUp(l);
        this.#o.log("warn", "gave up reporting a completion; its owner's probe still learns the result", { run_id: req.run_id, err: r === undefined ? "no answer" : r.e.message });
      } else if (this.#reportable(l)) {
        later.push(l); // unknown outcome: the next copy goes after the wait
        if (!pending) {
          l.reportOnWire = false;
          this.#awake.add(l); // rounds carry it meanwhile
        }
        return;
      }
      l.reportOnWire = false;
      this.#reportSettled(l, true);
    });
    if (later.length === 0) return;
    // A failure faster than the wait (no responder, a closed connection) waits out the rest;
    // meanwhile heartbeat rounds carry the leases again.
    const queueAgain = () => {
      for (const l of later) {
        if (l.reportOnWire) {
          l.reportOnWire = false; // answered pending: off the wire now; rounds carry it until the copy goes
          if (this.#reportable(l)) this.#awake.add(l);
        }
        this.#reportAgain.push(l);
      }
      this.#flushReportsSoon();
    };
    const rest = sentAt + wait - now;
    if (rest > 0) this.#o.clock.setTimer(rest, queueAgain);
    else queueAgain();
  }

  #cancel(c: CancelRequest): void {
    for (const l of [...this.#leases.values()]) {
      // (An attempt that already ended is reported by its completion, which ends the drain too.)
      if (l.req.run_id !== c.run_id || l.req.fence !== c.fence || l.lost || l.completion) continue;
      l.lost = true; // no more heartbeats, never started from here on
      l.cancelled = true;
      // Never started: nothing to wait for. Running: its slot stays taken until the task is gone.
      if (!l.execution) void this.#reportCancelled(l, null);
      else void l.execution.kill("cancelled by the scheduler", { immediate: false });
    }
  }

  /**
   * A cancelled attempt ended (or never started): report it once, so the owner gives the tenant
   * slot back now rather than at its drain bound; then free the worker slot. The owner answers
   * ok (it was draining it) or stale_fence; a lost report only delays the slot to that bound.
   */
  async #reportCancelled(lease: Lease, r: ExecutionResult | null): Promise<void> {
    const { req } = lease;
    const now = this.#o.clock.now();
    try {
      await this.#o.router.request({ type: JOB_ACTOR, id: req.job_actor }, {
        kind: "complete", run_id: req.run_id, fence: req.fence, worker: this.#o.workerId,
        outcome: "killed", exit_code: r?.exitCode ?? null, output: r?.output ?? "", error: null,
        started_at_ms: r?.startedAtMs ?? now, finished_at_ms: r?.finishedAtMs ?? now,
      }, { deadlineMs: Math.max(1000, this.#o.heartbeatIntervalMs * 2) });
    } catch {
      // stale_fence (not draining it), or no answer: its drain bound gives the slot back.
    } finally {
      this.#drop(lease);
      this.#onLeaseGone?.();
    }
  }

  /** `immediate` (self-fencing, lease lost): SIGKILL without grace — the margin is already spent. */
  async #kill(lease: Lease, why: string, immediate = false): Promise<void> {
    lease.lost = true;
    if (immediate) lease.killedAtOnce = true;
    this.#drop(lease);
    this.#onLeaseGone?.();
    if (!lease.execution) return;
    // Until its result is in, a probe must not hear `started`: the task may have ended by itself
    // just before the kill (`endedBeforeKill`), and its success is known only then.
    // (`#complete`, queued at the start — a `.then` of the result, or `#completeEnded` for an
    // execution ended as it started — runs before this callback: the result is kept first.)
    if (immediate) {
      const k = this.#fenced(lease.key, lease.req.fence);
      this.#killing.add(k);
      const done = () => this.#killing.delete(k);
      lease.execution.result.then(done, done);
    }
    await lease.execution.kill(why, { immediate });
  }

  /** Attempts killed at once whose result is not in yet (key#fence): a probe hears `running`. */
  readonly #killing = new Set<string>();

  /** Removes `l` from the held leases, unless a newer lease of the same attempt took its key; remembers it for probes. */
  #drop(l: Lease): void {
    if (this.#leases.get(l.key) !== l) return;
    this.#leases.delete(l.key);
    this.#forget(l);
  }

  /** Monotonic time of the last slot advert. */
  #advertisedAtMono = Number.NEGATIVE_INFINITY;
  /** Starts and completions since the advert clock was last looked at (`#stayHeard`). */
  #sinceLook = 0;

  /**
   * Called for every start and every completion: in a long synchronous stretch of them (a
   * burst's attempts start in one loop at their due instant, and their completions follow in
   * microtasks) the heartbeat timer cannot fire, and a worker that sent no advert for three
   * intervals is forgotten by the schedulers' directories — silent ≥ 9-15 s at the 200,000
   * burst (README, "Known limitations"). Every 256 calls it looks at the clock, and once an
   * interval has passed since the last advert, sends one and flushes the connection at once (a
   * publish is otherwise written in a microtask, after the stretch).
   */
  #stayHeard(): void {
    if (++this.#sinceLook < 256 || this.#stopping) return;
    this.#sinceLook = 0;
    if (this.#o.clock.monoMs() - this.#advertisedAtMono < this.#o.heartbeatIntervalMs) return;
    this.#advertise();
    if (!this.#o.nc.isClosed()) this.#o.nc.flush().catch(() => undefined);
  }

  /** The slot advert; a draining worker advertises no free slot. */
  #advertise(): void {
    // On the data connection, the path offers take: an advert proves it (a worker whose data
    // connection is down must not go on advertising free slots from another).
    const { nc, clusterName, workerId, slots } = this.#o;
    if (nc.isClosed()) return;
    this.#advertisedAtMono = this.#o.clock.monoMs();
    const free = this.#draining ? 0 : Math.max(0, slots - this.#leases.size);
    nc.publish(workerAdvertSubject(clusterName, workerId), encode({ worker_id: workerId, slots, free, executor: this.#o.executor.kind }));
  }

  #beat(): void {
    if (this.#stopping) return;
    this.#advertise();
    void this.#heartbeatAll(true);
    this.#cancelBeat = this.#o.clock.setTimer(this.#o.heartbeatIntervalMs, () => this.#beat());
  }
}
