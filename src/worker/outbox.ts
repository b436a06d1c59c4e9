/**
 * The completion outbox: an ended attempt's completion is reported to its owner, in batches per
 * partition, and sent again after each wait without a verdict (an unknown outcome) until the
 * owner answers ok, `stale_fence` or `not_found`, or the report is given up past
 * `completionDeadlineMs` (its completion is then kept for the owner's probe). At most
 * COMPLETIONS_IN_FLIGHT reports are being made at once; the rest wait here, heartbeated, in the
 * order their attempts ended. A cancelled attempt's end is reported once, on its own.
 */
import type { ItemResult } from "../cluster/router.ts";
import { Fifo } from "../lib/fifo.ts";
import type { ExecutionResult } from "../sandbox/index.ts";
import { JOB_ACTOR } from "../protocol/worker.ts";
import type { WorkerCore } from "./core.ts";
import type { OutboxPart } from "./types.ts";
import { endedBeforeKill, type Lease } from "./lease.ts";
import { reportCopyWaitMs, reportDueSlot } from "./report-backoff.ts";

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
/**
 * The owner's budget for a batch of reports (server/batch-answer.ts): those not settled by then
 * are answered `pending`. Short, so that a saturated owner's answer (sent when a timer fires on
 * its busy event loop) arrives well within the wait: a batch answered late counts as no answer,
 * and each of its reports is copied after the short wait (a burst's 200,000 reports were sent
 * about 13 times each).
 */
const REPORT_BUDGET_MS = 1_000;
/**
 * How long a report its owner answered `pending` (still queued in its job actor's mailbox) waits
 * before its next copy, at least the wait above and at most a quarter of the completion deadline.
 * The owner keeps the lease of a report queued there however long it waits (run-messages.ts
 * `onLeaseExpired`), so this copy only shortens the recovery of a report the owner lost (its
 * actor dropped or moved: the lease then lapses into a probe, which this worker answers with the
 * completion); sent at the short wait, a burst's queued reports came back as copies every round,
 * each one more item for the saturated owner to decode and join.
 */
export const PENDING_REPORT_WAIT_MS = 15_000;
/**
 * The longest wait between two copies of a report before its spread (report-backoff.ts): the waits
 * double from the first (the wait above, or PENDING_REPORT_WAIT_MS) up to this, and at most half
 * the completion deadline, so that a report is still copied a few times before it is given up.
 */
export const REPORT_MAX_WAIT_MS = 30_000;
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
    const { o } = this.#c;
    const wait = Math.min(o.completionDeadlineMs, o.completionWaitMs ?? COMPLETION_WAIT_MS);
    return Math.max(
      MIN_REPORT_WAIT_MS,
      Math.min(
        wait,
        l.req.lease_ttl_ms - o.heartbeatIntervalMs - this.#c.margin(l) - REPORT_COALESCE_MS,
      ),
    );
  }

  /**
   * Reports a completion, sending copies until the owner answers ok or `stale_fence`, or the
   * report is given up (completionDeadlineMs). Reports go in batches (`#flushReports`): one
   * request per partition (naming REPORT_BUDGET_MS, at most half the wait, as the owner's budget) carries every report due
   * within REPORT_COALESCE_MS, not a request and a socket write per completion. While a copy is on
   * the wire the lease is not heartbeated (its arrival keeps the lease); while it waits for a free
   * report slot or between copies, it is. So a burst's ended attempts cost their owner one item
   * each while it answers within the wait, not also a heartbeat every round.
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
      if (table.holds(l)) batch.push(l);
      else this.#reportSettled(l, true);
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
    let wait = Number.POSITIVE_INFINITY;
    for (const l of batch) {
      l.reportOnWire = true;
      l.reportCopies = (l.reportCopies ?? 0) + 1;
      table.sleep(l);
      wait = Math.min(wait, this.#reportWaitMs(l));
    }
    let results: ItemResult[] = [];
    try {
      results = await o.router.requestMany(
        batch.map((l) => ({
          to: { type: JOB_ACTOR, id: l.req.job_actor },
          msg: {
            kind: "complete",
            run_id: l.req.run_id,
            fence: l.req.fence,
            worker: o.workerId,
            ...l.completion!,
          },
        })),
        { deadlineMs: wait, budgetMs: Math.min(REPORT_BUDGET_MS, Math.floor(wait / 2)) },
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
    // waits out the rest; meanwhile heartbeat rounds carry the leases again. A report the owner
    // holds queued starts from a longer wait (PENDING_REPORT_WAIT_MS).
    const queuedFirst = Math.max(
      wait,
      Math.min(PENDING_REPORT_WAIT_MS, o.completionDeadlineMs / 4),
    );
    const cap = Math.max(queuedFirst, Math.min(REPORT_MAX_WAIT_MS, o.completionDeadlineMs / 2));
    batch.forEach((l, i) => {
      const next = this.#answered(l, results[i], now);
      if (next === undefined) return;
      const first = next === "queued" ? queuedFirst : wait;
      this.#copyAt(l, sentAt + reportCopyWaitMs(l.reportCopies ?? 1, first, cap, o.random));
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
    const { table } = this.#c;
    for (const l of later) {
      if (l.reportOnWire) {
        // Answered pending: off the wire now; rounds carry it until the copy goes.
        l.reportOnWire = false;
        if (table.holds(l)) table.awake.add(l);
      }
      this.#reportAgain.push(l);
    }
    this.#flushReportsSoon();
  }

  /**
   * One report's answer (`r`; undefined: none): settled or given up (undefined), or a copy goes
   * after the wait — `queued` when the owner said the report waits in its mailbox.
   */
  #answered(l: Lease, r: ItemResult | undefined, now: number): "again" | "queued" | undefined {
    const c = this.#c;
    const { o } = c;
    // Answered pending: the copy still waits in the owner's mailbox, which keeps the lease as
    // the copy on the wire did — it stays on the wire (not heartbeated) until the next copy. Only
    // so marked: an `unavailable` failure (the owner's KV) holds nothing there, and taken for
    // pending it left the attempt unheard for the longer wait (its start, lost with its owner's
    // actor, never learnt before a pause cancelled the run "before it started").
    const pending = r !== undefined && !r.ok && r.e.pending === true;
    const { req } = l;
    if (r?.ok === true) {
      c.table.drop(l);
      o.onEvent?.({ type: "completed", run_id: req.run_id, attempt: req.attempt });
    } else if (r !== undefined && (r.e.code === "stale_fence" || r.e.code === "not_found")) {
      c.refused(l); // its completion kept for a probe under its fence
      o.onEvent?.({ type: "stale_fence", run_id: req.run_id, attempt: req.attempt });
    } else if (now - (l.completionSinceMono ?? 0) > o.completionDeadlineMs) {
      c.giveUp(l);
      o.log("warn", "gave up reporting a completion; its owner's probe still learns the result", {
        run_id: req.run_id,
        err: r === undefined ? "no answer" : r.e.message,
      });
    } else if (c.table.holds(l)) {
      // Unknown outcome: the next copy goes after the wait.
      if (pending) return "queued";
      l.reportOnWire = false;
      c.table.awake.add(l); // rounds carry it meanwhile
      return "again";
    }
    l.reportOnWire = false;
    this.#reportSettled(l, true);
    return undefined;
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
