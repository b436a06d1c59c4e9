/**
 * Getting a run to a worker, the job actor's half of the slot economy: ask the tenant actor for a
 * slot (`askSlot`, re-asked after `SLOT_RECHECK_MS`, then less often the longer the run has
 * waited, at most every `SLOT_RECHECK_MAX_MS` — tenant waiting lists are soft; an audit of a
 * grant the run never heard of re-asks at once), take a
 * grant (`onGrant`, `granted`), then offer the attempt to one worker under a fence of its own
 * (`dispatch`; the shell picks the worker). A cancelled run keeps its slot until its worker has
 * killed the attempt (`drain`, `drained`).
 *
 * Gotchas: a grant is named per hold (`grantId`: `<run_id>_<slot_seq>`), so only the run's
 * current grant counts and any other is released; an audit never hands a slot over (the grant it
 * names may not be written yet). Every offer gets a new fence: an earlier offer is dead.
 */
import { grantId, splitGrant } from "../protocol/ids.ts";
import type { JobEffect, JobMsg } from "../job-state/job-types.ts";
import type { ActiveRun, Draining } from "../job-state/job-state.ts";
import type { D, Tx } from "../job-state/tx.ts";
import { canMiss } from "../job-state/backlog.ts";

/** Offers the attempt to one worker under a fence of its own (the shell picks the worker). */
export function dispatch(tx: Tx, r: ActiveRun): void {
  // Deferred within the reserved block (JobState.fence_reserved): an offer lost with its state
  // is recovered by the run's timers (redispatch, slot check) under a fence never handed out.
  r.fence = tx.nextFence();
  // A reminder in case neither the acceptance nor the refusal comes back (a `tell` lost with a
  // dropped instance): after the offer timeout the offer is dead and the run is offered again.
  tx.timer(`dispatch:${r.run_id}`, tx.now + tx.cfg.offerTimeoutMs + tx.cfg.redispatchDelayMs, {
    kind: "redispatch",
    run_id: r.run_id,
  });
  // A later attempt under the same slot: refresh the grant so it cannot expire under a run that
  // outlives one timeout (the tenant would then grant the slot twice).
  if (r.slot && r.attempt > 0) tx.post.push(slotAsk(tx, r));
  tx.post.push({
    kind: "dispatch",
    run_id: r.run_id,
    fence: r.fence,
    attempt: r.attempt + 1,
    start_at_ms: r.start_at_ms,
    scheduled_for_ms: r.scheduled_for_ms,
    task: tx.job.spec.task,
  });
}

/**
 * How soon a run still waiting for a tenant slot asks again, at first. The tenant's waiting list
 * is soft (lost when its actor reloads) and a grant it sends may be lost: the re-ask recovers
 * both. A run that waits is granted from the tenant's waiting list by a message when a slot frees, not by
 * this timer.
 */
export const SLOT_RECHECK_MS = 10_000;
/**
 * The longest interval between two asks: a run that has waited long asks again as often as it
 * has waited so far, at most this often. Every run re-asking every SLOT_RECHECK_MS made a backlog
 * a steady load of its own — 96,000 waiting runs: 9,600 job-actor turns and acquires a second,
 * each through the tenant's NATS request (fairness benchmark) — which delayed every timer of the
 * node (a small tenant's occurrences by ~12 s). Kept under the actor idle time (60 s), so a job
 * actor whose runs only wait is not passivated and reloaded between two asks.
 */
export const SLOT_RECHECK_MAX_MS = 30_000;

/**
 * How long before its starting deadline a waiting run asks once more, when its next re-ask would
 * come at the deadline or later. The tenant's waiting list is soft: an ask held by a tenant actor
 * whose node then died is gone, and the next ask came at the deadline itself — where the run ends
 * `missed` — because the shortest default deadline (10 s, a cron job of a period up to 10 s) is
 * SLOT_RECHECK_MS. Longer than a partition handoff (the failure timeout, 3 s at the defaults, and
 * the partition's lease): an ask made during one is retried by the router until the new owner answers.
 */
export const SLOT_ASK_BEFORE_DEADLINE_MS = 5_000;

/** The re-ask interval of a run that has waited `waitedMs` for its slot (see SLOT_RECHECK_MAX_MS). */
export function slotRecheckMs(waitedMs: number): number {
  return Math.min(SLOT_RECHECK_MAX_MS, Math.max(SLOT_RECHECK_MS, waitedMs));
}

/**
 * The acquire (or refresh) of a run's grant. Its lifetime counts from the run's start, not from
 * now: a grant made 5 min ahead with the timeout's lifetime (+ 2 min grace) expired before its run
 * started, and the tenant then extended and audited every such grant, one `expire` turn over all
 * of its grants per expiry (a 200,000-run burst with a 5 min look-ahead stalled on it).
 */
function slotAsk(tx: Tx, r: ActiveRun): Extract<JobEffect, { kind: "acquire_slot" }> {
  return {
    kind: "acquire_slot",
    run_id: r.run_id,
    grant: grantId(r),
    timeout_s: tx.job.spec.task.timeout_s,
    starts_in_ms: Math.max(0, r.start_at_ms - tx.now),
    // Its own start, also when that is past: the tenant grants earliest start first, so a run
    // that has waited longest goes before any due later or prepared ahead, and the order is the
    // schedule's, not the asking owners' clocks (a run due since 12:00:57 asking through a clock
    // 28 s ahead named 12:01:25, and runs due at 12:01:54 went first).
    start_at_ms: r.start_at_ms,
    // The tenant's backlog bound refuses only a run of the schedule never attempted: a run-now, a
    // retry or a run offered before keeps its place (README, "Quotas and fairness").
    ...(r.trigger !== "manual" && r.attempt === 0 && !r.slot ? { throttle: true as const } : {}),
  };
}

/** Asks the tenant actor for a slot, and arranges to ask again if none comes. */
export function askSlot(tx: Tx, r: ActiveRun): void {
  tx.post.push(slotAsk(tx, r));
  // Waiting since it could start: its start time (a retry waits from when it fell due,
  // `waiting_since_ms`), or its creation if later — but a run prepared ahead and not due yet
  // counts from its creation: counted from its due time it re-asked every SLOT_RECHECK_MS
  // through the whole look-ahead window (up to 30 asks and turns per run in a 5 min window when
  // a burst exceeds the tenant's cap). A waiter is granted by a message as slots free, not by
  // these asks (lost asks only).
  const since =
    r.start_at_ms > tx.now
      ? r.created_at_ms
      : Math.max(r.created_at_ms, r.start_at_ms, r.waiting_since_ms ?? 0);
  const waited = tx.now - since;
  // While it can still miss its starting deadline: once more SLOT_ASK_BEFORE_DEADLINE_MS before
  // it (a fixed instant, so that ask is made once), then at the deadline, where the check ends it
  // `missed` (run-messages.ts). Never for a run that cannot (it started once): re-armed at a
  // deadline already past, its check would come again at once, forever.
  const at = tx.now + slotRecheckMs(waited);
  const deadline = canMiss(r) ? r.deadline_ms : undefined;
  let when = at;
  if (deadline !== undefined) {
    const lastAsk = deadline - SLOT_ASK_BEFORE_DEADLINE_MS;
    when = Math.min(at, lastAsk > tx.now ? lastAsk : Math.max(tx.now, deadline));
  }
  tx.timer(`slot:${r.run_id}`, when, { kind: "slot_check", run_id: r.run_id });
}

/**
 * Holds a cancelled run's slot until its worker reports the attempt ended or `until_ms` passes.
 * Bounded by admission, not by eviction: a job admits new runs only while its active and draining
 * runs together are under `maxActiveRuns` (job-state.ts `slotsHeld`), and a run moves from one to
 * the other. (Releasing the oldest draining slot early to bound the list let a tenant run over
 * its cap while those tasks were still dying: deleting an `allow` job with 80 running tasks that
 * trap SIGTERM let another job start 16 over it.)
 */
export function drain(tx: Tx, d: Draining): void {
  (tx.s.draining ??= []).push(d);
  tx.timer(`drain:${d.run_id}`, d.until_ms, { kind: "drained", run_id: d.run_id, fence: d.fence });
  tx.changed = true;
}

/** Ends a drain (the attempt ended, or its bound passed): the slot goes back to the tenant. */
export function drained(tx: Tx, runId: string, fence: number): boolean {
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

/** The tenant granted `r` its slot (or confirmed it): start it if it waits for nothing else. */
function granted(tx: Tx, r: ActiveRun): D {
  // A grant for a run that already holds its slot (a re-ask answered twice, or one that arrived
  // during retry_wait) changes nothing but may let a queued run go.
  if (!r.slot) {
    r.slot = true;
    tx.cancelTimer(`slot:${r.run_id}`);
    // Deferred: lost, the run re-asks (slot_check / redispatch) and the tenant, which holds the
    // grant durably under the same name, grants it again.
    tx.defer();
  }
  if (r.status === "queued" && r.fence === 0) dispatch(tx, r);
  return tx.done(null);
}

/** A grant (or an audit of one): only the run's current grant counts; any other is released. */
export function onGrant(tx: Tx, m: Extract<JobMsg, { kind: "slot_granted" | "slot_audit" }>): D {
  const { run_id, seq } = splitGrant(m.run_id);
  const r = tx.run(run_id);
  const keep =
    r !== undefined &&
    seq === (r.slot_seq ?? 0) &&
    (m.kind === "slot_granted" || r.slot || r.status === "queued");
  // A cancelled run's slot is still in use until its worker has killed it.
  if (!keep && tx.s.draining?.some((d) => d.grant === m.run_id)) return tx.done(null);
  if (!keep) {
    // Not this run's live slot (finished, superseded by a later grant, waiting to retry).
    tx.post.push({ kind: "release_slot", grant: m.run_id });
    return tx.done(null);
  }
  // An audit never hands a slot over: the grant it names may not be written yet. A queued run
  // that missed its grant (the tenant's message lost) re-asks now rather than at its slot check
  // (up to SLOT_RECHECK_MAX_MS away): acquire is idempotent and answers only once the grant is
  // durable.
  if (m.kind === "slot_audit") {
    if (!r.slot && r.status === "queued") askSlot(tx, r);
    return tx.done(null);
  }
  return granted(tx, r);
}
