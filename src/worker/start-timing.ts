/**
 * When an accepted attempt starts: at its `start_at` by this worker's clock — never before the
 * owner's time (its clock carried from the offer), and only while a fresh acknowledgement covers
 * it; otherwise it is due and starts on the next acknowledgement. Attempts due at one instant
 * share one timer and start in one tight loop (bursts); their `started` events and the
 * completions of executions that ended as they started are reported by one microtask each. An
 * attempt in the prefetch queue (slot-ledger.ts) starts, once its start instant has passed, in a
 * slot left free or the moment it takes a freed one.
 */
import { observeSlotIdle } from "../metrics/index.ts";
import { START_SKEW_TOLERANCE_MS } from "../protocol/worker.ts";
import type { WorkerCore } from "./core.ts";
import type { StartTimingPart } from "./types.ts";
import type { Lease } from "./lease.ts";

export class StartTiming implements StartTimingPart {
  readonly #c: WorkerCore;
  /** Attempts due at the same instant share one timer and start in one tight loop (bursts). */
  readonly #due = new Map<number, Lease[]>();
  /**
   * Starts deferred because this worker's clock ran ahead of an owner's (a skew the tolerance does
   * not cover).
   */
  #skewDeferrals = 0;
  /**
   * Attempts started since the last `#reportStarted` (their `started` events are still to come).
   */
  #startedToReport: Lease[] = [];
  /**
   * Attempts started since the last `#completeEnded` whose execution had already ended
   * (`Execution.ended`).
   */
  #endedToComplete: Lease[] = [];

  /** Attempts that took a freed slot since the last `#startPromoted` (one microtask starts them). */
  #promoted: Lease[] = [];

  constructor(c: WorkerCore) {
    this.#c = c;
    c.table.onFreed = (promoted) => this.#slotFreed(promoted);
  }

  /**
   * A lease gave up its slot or its place in the prefetch queue: the room is advertised at once
   * (schedulers need not wait for the next heartbeat), and the attempts that took the slot start
   * now — in a microtask, not inside the caller (which may be walking the leases).
   */
  #slotFreed(promoted: Lease[]): void {
    const c = this.#c;
    if (!c.stopping && !c.draining) c.parts.beats.advertiseSoon();
    if (promoted.length === 0) return;
    if (this.#promoted.length === 0) queueMicrotask(this.#startPromoted);
    this.#promoted.push(...promoted);
  }

  /**
   * Attempts that took a slot: one whose start instant had passed (`waitingSlot`) starts now if
   * its acknowledgement is fresh, else on the next one (due); the others start at their instant.
   */
  readonly #startPromoted = (): void => {
    const c = this.#c;
    const promoted = this.#promoted;
    this.#promoted = [];
    let waiting = false;
    for (const l of promoted) {
      if (!l.waitingSlot || !c.table.holds(l)) continue;
      l.waitingSlot = false;
      if (c.fresh(l)) {
        this.run(l);
        c.parts.fencing.fenceBy([l]);
      } else {
        l.due = true;
        waiting = true;
      }
    }
    if (waiting) void c.parts.beats.heartbeatAll();
  };

  get skewDeferrals(): number {
    return this.#skewDeferrals;
  }

  enqueueStart(lease: Lease, atMs: number): void {
    const group = this.#due.get(atMs);
    if (group) {
      group.push(lease);
      return;
    }
    this.#due.set(atMs, [lease]);
    const { clock } = this.#c.o;
    const fire = () => {
      const early = atMs - clock.now();
      if (early > 0) {
        // Host timers may fire a millisecond early; never start before the due time.
        clock.setTimer(early, fire);
        return;
      }
      const leases = this.#due.get(atMs) ?? [];
      this.#due.delete(atMs);
      this.#startDue(leases);
    };
    clock.setTimer(Math.max(0, atMs - clock.now()), fire);
  }

  /**
   * The attempts of one start instant: started, due (waiting for an acknowledgement) or deferred.
   */
  #startDue(leases: Lease[]): void {
    const c = this.#c;
    let waiting = false;
    const mono = c.o.clock.monoMs();
    for (const l of leases) {
      const early = this.#earlyByOwner(l, mono);
      if (early > 0 && !l.lost) {
        this.#deferForSkew(l, early);
        continue;
      }
      if (!l.lost) c.table.woken.push(l);
      if (c.fresh(l)) this.run(l);
      else if (!l.lost) {
        l.due = true; // starts when a heartbeat is acknowledged, if ever
        waiting = true;
      }
    }
    // The starts themselves ask for no round (see heartbeat.ts `needsBeat`): the next periodic
    // round or each attempt's completion reports them.
    if (waiting) void c.parts.beats.heartbeatAll();
    // Self-fencing from the start: an attempt started under a cover may have little of it left
    // (a worker paused until just before the cover ran out, sim seed 910), and the next round's
    // fence may come too late — the owner re-offers at start_at + TTL. Only this instant's
    // attempts are looked at (`fenceBy`): a walk of every awake lease at each start instant
    // (5,000 instants a second in the sustained benchmark) saturated the worker, and 82 % of the
    // runs never started.
    c.parts.fencing.fenceBy(leases);
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

  /**
   * Defers a start the worker's clock would make too early (see `#earlyByOwner`), grouped per 10
   * ms.
   */
  #deferForSkew(l: Lease, earlyMs: number): void {
    const { o } = this.#c;
    this.#skewDeferrals++;
    o.onEvent?.({ type: "start_deferred_skew", run_id: l.req.run_id, attempt: l.req.attempt });
    if (this.#skewDeferrals === 1 || this.#skewDeferrals % 1000 === 0) {
      o.log(
        "warn",
        "this worker's clock runs ahead of its owners': starts deferred to the owners' time",
        { deferrals: this.#skewDeferrals, early_ms: Math.round(earlyMs) },
      );
    }
    const at = Math.ceil((o.clock.now() + earlyMs) / 10) * 10;
    this.enqueueStart(l, at);
  }

  readonly #reportStarted = (): void => {
    const { o } = this.#c;
    const started = this.#startedToReport;
    this.#startedToReport = [];
    for (const l of started) {
      try {
        o.onEvent?.({ type: "started", run_id: l.req.run_id, attempt: l.req.attempt });
      } catch (e) {
        // An observer that throws must not cost the other starts of the loop their events.
        o.log("error", "a worker event observer failed", { run_id: l.req.run_id, err: String(e) });
      }
    }
  };

  /**
   * Starts an attempt in the executor (nothing if it is lost, already started, or the worker
   * stops).
   */
  run(lease: Lease): void {
    const c = this.#c;
    const { o } = c;
    if (lease.lost || c.stopping || lease.execution) return;
    lease.due = false;
    if (!c.table.slots.holds(lease) && !c.table.slots.take(lease)) {
      // In the prefetch queue, every slot taken: it starts when one frees (`#startPromoted`).
      lease.waitingSlot = true;
      return;
    }
    c.parts.beats.stayHeard();
    const { req } = lease;
    lease.startedAtMs = o.clock.now();
    const idleMs = c.turnaround.started(o.clock.monoMs());
    if (idleMs !== undefined) observeSlotIdle(idleMs / 1000);
    // What is left of the acknowledged lease, in whole ms: the container dies when it runs out
    // unrenewed.
    lease.task.leaseMs = Math.max(0, Math.floor((lease.validUntilMono ?? 0) - o.clock.monoMs()));
    lease.execution = o.executor.start(lease.task, lease.identity);
    c.executionStarted(lease);
    // Reported after the loop that starts a burst's attempts: the event is a log line, and writing
    // 20,000 of them inside the loop delayed the last starts of the burst. One microtask reports
    // the loop's starts (one per start was an event, a closure and an AsyncResource each, 3 % of
    // the loop and more of its garbage); it is queued before the first start's completion, so
    // every `started` comes before its `completed`.
    if (o.onEvent) {
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
      (r) => c.parts.outbox.complete(lease, r),
      (e: unknown) =>
        o.log("error", "execution failed unexpectedly", { run_id: req.run_id, err: String(e) }),
    );
  }

  readonly #completeEnded = (): void => {
    const ended = this.#endedToComplete;
    this.#endedToComplete = [];
    for (const l of ended) {
      this.#c.parts.outbox.complete(l, l.execution!.ended!).catch((e: unknown) =>
        this.#c.o.log("error", "completing an attempt failed", {
          run_id: l.req.run_id,
          err: String(e),
        }),
      );
    }
  };
}
