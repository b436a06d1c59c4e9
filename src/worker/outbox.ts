/**
 * The completion outbox: an ended attempt's completion is reported to its owner, in batches per
 * partition, and sent again after each wait without a verdict (an unknown outcome) until the
 * owner answers ok, `stale_fence` or `not_found`, or the report is given up past
 * `completionDeadlineMs` (its completion is then kept for the owner's probe). At most
 * COMPLETIONS_IN_FLIGHT reports are being made at once; the rest wait here, heartbeated, in the
 * order their attempts ended. From its first copy on, an ended attempt is never heartbeated: its
 * copies keep the owner's lease, and between them the owner keeps it while a copy waits in its
 * mailbox or probes it. Heartbeated as well, a burst's ended attempts whose reports went
 * unanswered by a saturated owner came back to it 2–3 times each as heartbeats (a 200,000-run
 * burst: ~550,000 in a minute, most timed out), which kept it from the completions themselves.
 * A cancelled attempt's end is reported once, on its own.
 */
import type { ActorAddress } from "../cluster/placement.ts";
import type { ItemResult } from "../cluster/router.ts";
import { Fifo } from "../lib/fifo.ts";
import type { ExecutionResult } from "../sandbox/index.ts";
import { JOB_ACTOR, type Completion } from "../protocol/worker.ts";
import type { WorkerCore } from "./core.ts";
import type { OutboxPart } from "./types.ts";
import { endedBeforeKill, type Lease } from "./lease.ts";
import { REPORT_DUE_GRAIN_MS, reportCopyWaitMs, reportDueSlot } from "./report-backoff.ts";

/** How long completion reports gather before their batch goes (`#flushReports`). */
const REPORT_COALESCE_MS = 20;

/**
 * How long a completion report waits for the owner's answer before it counts as an unknown
 * outcome and a copy is sent (at most a quarter of the completion deadline, see `#reportWaitMs`),
 * and how many reports of this worker are being made at once (a report holds its slot from its
 * first copy until it is settled; the rest wait here, heartbeated, in the order their attempts
 * ended). The wait is not bounded by the lease: should a copy be lost, the owner probes the lease
 * it no longer hears and learns the completion from the answer. A short wait makes a burst's
 * completions time out at the saturated owner, whose answers come seconds after the requests (it
 * reads them behind the rest of the burst), and be sent again (a 200,000-run burst: three
 * quarters of the first copies timed out at 6.5 s); the owner lets a copy share the reply of one
 * still queued (the job actor's `coalesceKey`). A tight bound is no cure either: a waiting
 * report's attempt is heartbeated every round, and the owner answers those heartbeats instead of
 * preparing runs.
 */
export const COMPLETION_WAIT_MS = 15_000;
/**
 * The owner's budget for a batch of reports (server/batch-answer.ts): those not settled by then
 * are answered `pending` — queued at the owner, which settles them: such a report is handed over
 * (core.ts `handedOver`), never copied. Short, so that a saturated owner's answer (sent when a
 * timer fires on its busy event loop) arrives well within the wait: a batch answered late counts
 * as no answer, and each of its reports is copied after the wait.
 */
const REPORT_BUDGET_MS = 1_000;
/**
 * The longest wait between two copies of a report before its spread (report-backoff.ts): the waits
 * double from the first (the wait above) up to this, and at most half the completion deadline, so
 * that a report is still copied a few times before it is given up.
 */
export const REPORT_MAX_WAIT_MS = 30_000;
/**
 * The wait of a draining worker's report and between its copies (one answered `pending` too:
 * nothing is handed over while draining), so that it hears a verdict within its drain.
 */
const DRAINING_REPORT_WAIT_MS = 2_000;
/** The shortest wait of a completion report's copy (a tiny lease TTL must not make copies spin). */
const MIN_REPORT_WAIT_MS = 250;
/**
 * Most reports being made at once: as many as the attempts a worker remembers (attempt-memory.ts),
 * so that a burst's ended attempts are reported, not heartbeated while they wait here. With 65,536,
 * the other 134,464 ended attempts of a 200,000-run burst were heartbeated every round (54,000
 * heartbeats a second at their owner), which left the owner too little of its time for the reports
 * themselves: none was answered within the completion deadline. A report waiting in its owner's
 * mailbox costs that owner its message (a few hundred bytes) and nothing per round.
 */
export const COMPLETIONS_IN_FLIGHT = 262_144;

/**
 * The completion report of attempt `l` to its job actor: its own completion (an ended attempt's),
 * or the one given (a drain's give-back of an attempt that never started).
 */
export function reportItem(
  l: Lease,
  workerId: string,
  completion: Completion = l.completion!,
): { to: ActorAddress; msg: unknown } {
  return {
    to: { type: JOB_ACTOR, id: l.req.job_actor },
    msg: {
      kind: "complete",
      run_id: l.req.run_id,
      fence: l.req.fence,
      worker: workerId,
      ...completion,
    },
  };
}

export class CompletionOutbox implements OutboxPart {
  readonly #c: WorkerCore;
  /** Ended attempts waiting for a report slot (COMPLETIONS_IN_FLIGHT), oldest first. */
  readonly #reportQueue = new Fifo<Lease>();
  /** Most reports holding a slot at once (COMPLETIONS_IN_FLIGHT or the option). */
  readonly #reportLimit: number;
  /** Reports holding a slot: from their first copy until settled. */
  #reportsActive = 0;
  /** Reports whose next copy is due (they hold their slot). */
  #reportAgain: Lease[] = [];
  /** Reports whose next copy waits, by the instant it is due (REPORT_DUE_GRAIN_MS). */
  readonly #copiesDue = new Map<number, Lease[]>();
  #cancelReportFlush: (() => void) | undefined;

  constructor(c: WorkerCore) {
    this.#c = c;
    this.#reportLimit = c.o.completionsInFlight ?? COMPLETIONS_IN_FLIGHT;
    if (!Number.isInteger(this.#reportLimit) || this.#reportLimit < 1)
      throw new RangeError(
        `completionsInFlight must be a positive integer, got ${this.#reportLimit}`,
      );
  }

  stop(): void {
    this.#cancelReportFlush?.();
  }

  /** An attempt's execution ended with `r`: its completion is made and reported. */
  async complete(lease: Lease, r: ExecutionResult): Promise<void> {
    const c = this.#c;
    c.executionEnded(lease);
    c.parts.beats.stayHeard();
    if (lease.cancelled) return this.reportCancelled(lease, r);
    if (lease.lost) {
      // Only if still held under its key (a newer offer of the attempt may hold it)
      c.table.drop(lease);
      if (lease.killedAtOnce && endedBeforeKill(r)) c.keepEndedBeforeKill(lease, r);
      c.leaseGone();
      return;
    }
    // (A hand-back's kill is immediate: exit code 0 means the task ended by itself just before it.)
    const ownEnd = lease.handedBack === true && endedBeforeKill(r);
    lease.completion =
      lease.handedBack && r.outcome === "killed" && !ownEnd
        ? {
            // Handed back by a drain: a retryable error, so the owner retries it elsewhere at once.
            outcome: "error",
            exit_code: r.exitCode,
            output: r.output,
            error: {
              class: "executor_failure",
              message:
                "worker drained: the attempt was still running at the drain timeout and was handed back",
              retryable: true,
            },
            started_at_ms: r.startedAtMs,
            finished_at_ms: r.finishedAtMs,
          }
        : {
            outcome: ownEnd ? "exited" : r.outcome,
            exit_code: r.exitCode,
            output: r.output,
            error: r.error
              ? { class: r.error.class, message: r.error.message, retryable: r.error.retryable }
              : null,
            started_at_ms: r.startedAtMs,
            finished_at_ms: r.finishedAtMs,
          };
    if (r.imageDigest !== undefined) lease.completion.image_digest = r.imageDigest;
    lease.completionSinceMono = c.o.clock.monoMs();
    this.report(lease);
  }

  /**
   * The first wait of the copies of a report its owner answered with an error that settles
   * nothing: lease TTL − one heartbeat interval − the margin, so that should such a copy be lost,
   * the next lands within the TTL of the last heartbeat (the owner answers: it is heard from
   * meanwhile) — less the gathering before the next copy's batch goes (REPORT_COALESCE_MS).
   */
  #leaseWaitMs(l: Lease): number {
    const { o } = this.#c;
    return Math.max(
      MIN_REPORT_WAIT_MS,
      l.req.lease_ttl_ms - o.heartbeatIntervalMs - this.#c.margin(l) - REPORT_COALESCE_MS,
    );
  }

  /**
   * How long one copy of a completion report waits for its answer before the next copy goes:
   * COMPLETION_WAIT_MS (or the option), at most a quarter of the completion deadline (so that a
   * report is copied a few times before it is given up) and at least MIN_REPORT_WAIT_MS. The
   * owner keeps the lease from each copy's arrival and while one waits in its mailbox
   * (run-messages.ts `onLeaseExpired`); the lease is not heartbeated once a copy went, so a lost
   * copy costs the owner a probe of the lease (answered with the completion) rather than a copy
   * every few seconds. A copy finding the first still queued shares its turn.
   */
  #reportWaitMs(): number {
    const { o } = this.#c;
    const wait = Math.min(o.completionDeadlineMs / 4, o.completionWaitMs ?? COMPLETION_WAIT_MS);
    // A draining worker has only its drain's time to hear a verdict (its memory ends with it).
    const drain = this.#c.draining ? DRAINING_REPORT_WAIT_MS : Number.POSITIVE_INFINITY;
    return Math.max(MIN_REPORT_WAIT_MS, Math.min(wait, drain));
  }

  /**
   * Reports a completion, sending copies until the owner answers ok or `stale_fence`, or the
   * report is given up (completionDeadlineMs). Reports go in batches (`#flushReports`): one
   * request per partition (naming REPORT_BUDGET_MS, at most half the wait, as the owner's budget) carries every report due
   * within REPORT_COALESCE_MS, not a request and a socket write per completion. Once its first
   * copy went, the lease is not heartbeated (the copies' arrivals keep it); while it waits for a
   * free report slot, it is. So a burst's ended attempts cost their owner one item each while it
   * answers within the wait, and one per copy when it does not — never also a heartbeat a round.
   */
  report(lease: Lease): void {
    if (lease.reporting) return;
    lease.reporting = true;
    this.#reportQueue.push(lease);
    this.#flushReportsSoon();
  }

  #flushReportsSoon(): void {
    if (this.#cancelReportFlush || this.#c.stopping) return;
    this.#cancelReportFlush = this.#c.o.clock.setTimer(REPORT_COALESCE_MS, () => {
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
    const { table } = this.#c;
    const batch: Lease[] = [];
    const again = this.#reportAgain;
    this.#reportAgain = [];
    for (const l of again) {
      if (!table.holds(l)) this.#reportSettled(l, true);
      else if (this.#pastDeadline(l, this.#c.o.clock.monoMs() + REPORT_DUE_GRAIN_MS)) {
        // Its copy was timed for the deadline (`#sendReports`; its batch may go up to one grain
        // early): given up, as its answer would be.
        this.#giveUp(l, "deadline");
        this.#reportSettled(l, true);
      } else batch.push(l);
    }
    while (this.#reportsActive < this.#reportLimit && this.#reportQueue.size > 0) {
      const l = this.#reportQueue.shift()!;
      if (!table.holds(l)) {
        this.#reportSettled(l, false); // not sent: settled while it waited for its turn
        continue;
      }
      this.#reportsActive++;
      batch.push(l);
    }
    if (batch.length > 0) void this.#sendReports(batch);
  }

  /**
   * A report ends (`active`: it held a report slot): the drain may be done, a waiting report may
   * go.
   */
  #reportSettled(l: Lease, active: boolean): void {
    l.reporting = false;
    if (active) this.#reportsActive--;
    this.#c.leaseGone();
    if (active && this.#reportQueue.size > 0) this.#flushReportsSoon();
  }

  /**
   * One copy of each report in `batch`. Each settles on ok, `stale_fence` or `not_found`, or is
   * given up past completionDeadlineMs; any other answer, or none within the wait, is an unknown
   * outcome: its next copy goes once the wait has passed since this one was sent.
   */
  async #sendReports(batch: Lease[]): Promise<void> {
    const { o, table } = this.#c;
    const sentAt = o.clock.monoMs();
    const wait = this.#reportWaitMs();
    for (const l of batch) {
      l.reportCopies = (l.reportCopies ?? 0) + 1;
      l.reportRefused = false;
      table.sleep(l);
    }
    let results: ItemResult[] = [];
    try {
      results = await o.router.requestMany(
        batch.map((l) => reportItem(l, o.workerId)),
        {
          deadlineMs: wait,
          attemptMs: wait,
          budgetMs: Math.min(REPORT_BUDGET_MS, Math.floor(wait / 2)),
        },
      );
    } catch (e) {
      o.log("warn", "completion reports failed; they are sent again", {
        reports: batch.length,
        err: String(e),
      });
    }
    const now = o.clock.monoMs();
    // The next copy of each unsettled report: after a wait growing with its copies sent
    // (report-backoff.ts). A failure faster than the wait (no responder, a closed connection)
    // waits out the rest (the owner probes a lease it has not heard of for a TTL).
    const cap = Math.max(wait, Math.min(REPORT_MAX_WAIT_MS, o.completionDeadlineMs / 2));
    batch.forEach((l, i) => {
      if (!this.#answered(l, results[i], now)) return;
      const first = l.reportRefused === true ? Math.min(wait, this.#leaseWaitMs(l)) : wait;
      const due = this.#c.draining
        ? now + Math.min(wait, DRAINING_REPORT_WAIT_MS)
        : sentAt + reportCopyWaitMs(l.reportCopies ?? 1, first, cap, o.random);
      // Given up at the deadline, not at the answer of a copy after it (up to a whole wait late):
      // the lease is not heartbeated, so no round looks at it meanwhile.
      const deadline = (l.completionSinceMono ?? sentAt) + o.completionDeadlineMs + 1;
      this.#copyAt(l, Math.min(due, deadline));
    });
  }

  /**
   * The next copy of `l` goes at `due` (monotonic ms; at once if past), in one batch with the
   * others due in the same REPORT_DUE_GRAIN_MS: their timer is the first one's, so each copy goes
   * within that grain of its own instant.
   */
  #copyAt(l: Lease, due: number): void {
    const { o } = this.#c;
    const slot = reportDueSlot(due);
    const group = this.#copiesDue.get(slot);
    if (group) {
      group.push(l);
      return;
    }
    const rest = due - o.clock.monoMs();
    if (rest <= 0) {
      this.#queueAgain([l]);
      return;
    }
    this.#copiesDue.set(slot, [l]);
    o.clock.setTimer(rest, () => {
      const later = this.#copiesDue.get(slot) ?? [];
      this.#copiesDue.delete(slot);
      this.#queueAgain(later);
    });
  }

  /** The copies of `later` are due: they go in the next batch. */
  #queueAgain(later: Lease[]): void {
    for (const l of later) this.#reportAgain.push(l);
    this.#flushReportsSoon();
  }

  /**
   * One report's answer (`r`; undefined: none): settled, handed over or given up (false), or a
   * copy goes after the wait (true).
   */
  #answered(l: Lease, r: ItemResult | undefined, now: number): boolean {
    const c = this.#c;
    const { o } = c;
    // Answered pending: the report waits in the owner's mailbox, which settles it and keeps the
    // lease meanwhile — handed over (core.ts `handedOver`). Only so marked: an `unavailable`
    // failure (the owner's KV) holds nothing there, and taken for pending it left the attempt
    // unheard (its start, lost with its owner's actor, never learnt before a pause cancelled the
    // run "before it started"); it is copied after the wait.
    // A draining worker hands nothing over: its memory ends with the process, so it copies the
    // report (after the wait) until a verdict, as the drain does with those handed over before.
    const pending = r !== undefined && !r.ok && r.e.pending === true;
    const { req } = l;
    if (r?.ok === true) {
      c.table.drop(l);
      o.onEvent?.({ type: "completed", run_id: req.run_id, attempt: req.attempt });
    } else if (r !== undefined && (r.e.code === "stale_fence" || r.e.code === "not_found")) {
      c.refused(l); // its completion kept for a probe under its fence
      o.onEvent?.({ type: "stale_fence", run_id: req.run_id, attempt: req.attempt });
    } else if (pending && !c.draining) {
      c.handedOver(l);
    } else if (this.#pastDeadline(l, now)) {
      this.#giveUp(l, r === undefined ? "no answer" : r.e.message);
    } else if (c.table.holds(l)) {
      // Unknown outcome: the next copy goes after the wait. An owner that answered (an error that
      // settles nothing: its KV, say) is not saturated: the lease is heartbeated meanwhile and the
      // copy goes after the lease-bounded wait, as before a lease lapses. One that did not answer
      // is not heartbeated (each would time out as the report did, and come again): `no_owner` is
      // the router's word for no answer within the deadline.
      if (r !== undefined && r.e.code !== "no_owner") {
        l.reportRefused = true;
        c.table.awake.add(l);
      }
      return true;
    }
    this.#reportSettled(l, true);
    return false;
  }

  /** Whether `l`'s report is past the completion deadline (then given up, not copied again). */
  #pastDeadline(l: Lease, now = this.#c.o.clock.monoMs()): boolean {
    return now - (l.completionSinceMono ?? 0) > this.#c.o.completionDeadlineMs;
  }

  /** Gives a report up: the lease goes, its completion kept for the owner's probe (core.ts). */
  #giveUp(l: Lease, why: string): void {
    this.#c.giveUp(l);
    this.#c.o.log(
      "warn",
      "gave up reporting a completion; its owner's probe still learns the result",
      {
        run_id: l.req.run_id,
        err: why,
      },
    );
  }

  /**
   * A cancelled attempt ended (or never started): report it once, so the owner gives the tenant
   * slot back now rather than at its drain bound; then free the worker slot. The owner answers
   * ok (it was draining it, or stopping it for a pause: the report then decides its record) or
   * stale_fence; a lost report only delays the slot to that bound (or to its lease's probe).
   */
  async reportCancelled(lease: Lease, r: ExecutionResult | null): Promise<void> {
    const c = this.#c;
    const { o } = c;
    const { req } = lease;
    const now = o.clock.now();
    // Its task is gone (killed, or it never started): logged `worker_cancelled`.
    o.onEvent?.({ type: "cancelled", run_id: req.run_id, attempt: req.attempt });
    try {
      await o.router.request(
        { type: JOB_ACTOR, id: req.job_actor },
        {
          kind: "complete",
          run_id: req.run_id,
          fence: req.fence,
          worker: o.workerId,
          outcome: "killed",
          exit_code: r?.exitCode ?? null,
          output: r?.output ?? "",
          error: null,
          started_at_ms: r?.startedAtMs ?? now,
          finished_at_ms: r?.finishedAtMs ?? now,
          // Never started: its owner may not know whether it had (a pause's stop waits for this).
          ...(r === null ? { not_started: true as const } : {}),
        },
        { deadlineMs: Math.max(1000, o.heartbeatIntervalMs * 2) },
      );
    } catch {
      // stale_fence (not draining it), or no answer: its drain bound gives the slot back.
    } finally {
      c.table.drop(lease);
      c.leaseGone();
    }
  }
}
