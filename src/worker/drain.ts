/**
 * Drain (SIGTERM): the worker refuses new offers and advertises no free slot, gives back
 * accepted offers that have not started (each owner re-offers its run at once elsewhere, not
 * counted as an attempt), lets running attempts finish and report — heartbeats go on as usual —
 * until the drain timeout, then hands back the rest: kills each and reports it as a retryable
 * error, so its owner retries it at once on another worker (as a new attempt) — unless the task
 * had exited 0 by itself just before the kill: that is reported as its success.
 */
import type { ItemResult } from "../cluster/router.ts";
import type { WorkerCore } from "./core.ts";
import type { Lease } from "./lease.ts";
import { reportItem } from "./outbox.ts";

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

/** The owners' budget for a drain's confirmation of handed-over reports (see `#confirm`). */
const CONFIRM_BUDGET_MS = 1_000;
/** How long a handed-over report its owner still holds queued waits before it is asked again. */
const CONFIRM_AGAIN_MS = 1_000;

export class Drain {
  readonly #c: WorkerCore;
  /** Ends the drain's wait for running attempts early (a second SIGTERM/SIGINT). */
  #hurry: (() => void) | undefined;
  /** A second signal came: the confirmation of handed-over reports stops too. */
  #hurried = false;

  constructor(c: WorkerCore) {
    this.#c = c;
  }

  /**
   * Drains (see the module header): resolves once no attempt is left — every running one finished
   * (or was handed back at `timeoutMs`) and its completion was acknowledged or given up. Bounded
   * by `timeoutMs` + the kill + `HAND_BACK_REPORT_MS`.
   */
  async drain(timeoutMs: number): Promise<DrainResult> {
    const c = this.#c;
    const { o, table } = c;
    c.draining = true;
    c.parts.beats.advertise(); // schedulers stop picking this worker now, not at the next heartbeat
    const given: Lease[] = [];
    for (const l of [...table.leases.values()]) {
      if (l.execution || l.completion || l.lost) continue;
      l.lost = true; // never started here, and now never will
      table.drop(l);
      given.push(l);
    }
    const dropped = given.length;
    const running = table.size;
    o.log("info", "worker draining", {
      evt: "worker_draining",
      running,
      dropped,
      timeout_ms: timeoutMs,
    });
    await Promise.all([
      this.#giveBack(given),
      this.#settle(timeoutMs, true),
      this.#confirm(c.takeHandedOver(), timeoutMs),
    ]);
    const rest = [...table.leases.values()].filter((l) => l.execution && !l.completion && !l.lost);
    for (const l of rest) l.handedBack = true;
    await Promise.all(
      rest.map((l) => l.execution!.kill("worker drained: drain timeout", { immediate: true })),
    );
    await this.#settle(HAND_BACK_REPORT_MS, false);
    const result: DrainResult = {
      finished: running - rest.length,
      handedBack: rest.length,
      dropped,
    };
    o.log("info", "worker drained", {
      evt: "worker_drained",
      finished: result.finished,
      handed_back: result.handedBack,
      dropped,
      left: table.size,
    });
    return result;
  }

  /**
   * Tells the owners of attempts held ahead of their start that they will not start here (a
   * drain): each re-offers its run at once, not counted against max_attempts (protocol/worker.ts
   * `Completion.not_started`). Without it they would wait for the lease's end (start_at + TTL)
   * and a probe — whose answer from a process restarted under the same id is `unknown`. A report
   * lost or refused leaves the run to that path: the owner's probe then hears `not_started` (this
   * process) or `unknown` (the next one), both uncounted for an attempt never heard to start.
   * Bounded by GIVE_BACK_REPORT_MS.
   */
  async #giveBack(leases: Lease[]): Promise<void> {
    const { o } = this.#c;
    if (leases.length === 0) return;
    const now = o.clock.now();
    let results: ItemResult[] = [];
    try {
      results = await o.router.requestMany(
        leases.map((l) =>
          reportItem(l, o.workerId, {
            outcome: "error",
            exit_code: null,
            output: "",
            error: {
              class: "not_started",
              message: "worker draining: the attempt was given back before its start",
              retryable: true,
            },
            started_at_ms: now,
            finished_at_ms: now,
            not_started: true,
          }),
        ),
        { deadlineMs: GIVE_BACK_REPORT_MS, budgetMs: Math.floor(GIVE_BACK_REPORT_MS / 2) },
      );
    } catch (e) {
      o.log("warn", "giving back unstarted attempts failed; their owners' probes re-offer them", {
        attempts: leases.length,
        err: String(e),
      });
    }
    const ok = results.filter((r) => r?.ok === true).length;
    o.log("info", "gave back unstarted attempts", {
      evt: "worker_gave_back",
      attempts: leases.length,
      acknowledged: ok,
    });
  }

  /** Ends a drain's wait for running attempts now: they are handed back (a second signal). */
  hurry(): void {
    this.#hurried = true;
    this.#hurry?.();
  }

  /**
   * Confirms the reports this worker handed over to their owners' mailboxes (answered `pending`:
   * core.ts `handedOver`) before the process ends: should an owner lose one queued there, its
   * probe would find the attempt memory gone with the process and offer the run again — a second
   * execution of a run that ran. Each is sent again until its owner answers ok, `stale_fence` or
   * `not_found` (settled, or refused: either way no longer held only here); `pending` again is
   * asked again a second later. Bounded by `timeoutMs` (and a second signal).
   */
  async #confirm(leases: Lease[], timeoutMs: number): Promise<void> {
    const { o } = this.#c;
    if (leases.length === 0) return;
    const until = o.clock.monoMs() + timeoutMs;
    let left = leases;
    while (left.length > 0 && !this.#hurried) {
      const rest = until - o.clock.monoMs();
      if (rest <= 0) break;
      let results: ItemResult[] = [];
      try {
        results = await o.router.requestMany(
          left.map((l) => reportItem(l, o.workerId)),
          { deadlineMs: rest, budgetMs: Math.min(CONFIRM_BUDGET_MS, Math.floor(rest / 2)) },
        );
      } catch {
        // No verdict: asked again below while time is left.
      }
      left = left.filter((_, i) => {
        const r = results[i];
        return !(r?.ok === true || r?.e.code === "stale_fence" || r?.e.code === "not_found");
      });
      if (left.length > 0)
        await new Promise<void>((r) =>
          o.clock.setTimer(Math.min(CONFIRM_AGAIN_MS, Math.max(0, until - o.clock.monoMs())), r),
        );
    }
    o.log(left.length === 0 ? "info" : "warn", "confirmed the reports handed over", {
      evt: "worker_reports_confirmed",
      reports: leases.length,
      unconfirmed: left.length,
    });
  }

  /** Resolves when no lease is left, after `ms`, or (when `hurryable`) on `hurry()`. */
  #settle(ms: number, hurryable: boolean): Promise<void> {
    const c = this.#c;
    return new Promise((resolve) => {
      if (c.table.size === 0) return resolve();
      const done = () => {
        cancel();
        c.onLeaseGone = undefined;
        this.#hurry = undefined;
        resolve();
      };
      const cancel = c.o.clock.setTimer(ms, done);
      c.onLeaseGone = () => {
        if (c.table.size === 0) done();
      };
      if (hurryable) this.#hurry = done;
    });
  }
}
