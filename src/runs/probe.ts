/**
 * The `probe_worker` performer: asks a worker what became of an attempt whose lease fell silent
 * and tells the actor the answer (`probe_answer`: the reply; null when none came within
 * PROBE_TIMEOUT_MS — a frozen, cut-off or swamped worker, `advertising` when its adverts still
 * come; `gone` when no one answered and the worker directory knows it stopped advertising).
 *
 * Pitfall: "no responders" from a worker that still advertises (a live worker between two
 * connections) is not taken for gone — its lease would lapse at once and an attempt never heard
 * to start would run again: it is asked again, PROBE_NO_RESPONDER_ASKS times within the budget.
 */
import type { ShellContext } from "../actors/host.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { Clock } from "../lib/clock.ts";
import { workerSubject, type ProbeReply } from "../protocol/worker.ts";
import type { WorkerLink } from "./dispatcher.ts";
import type { JobEffect } from "../job-state/job-types.ts";

/**
 * How long a probe waits for its worker's answer (at most half the lease TTL): the worker answers
 * from memory, but a worker swamped by a burst reads it late. No answer: the actor asks again,
 * up to the bounds of run-messages.ts `probeOrLapse`, then the lease lapses.
 */
export const PROBE_TIMEOUT_MS = 5_000;

/** How many times a probe asks a worker that answers "no responders" yet is not known to have stopped advertising (spread over PROBE_TIMEOUT_MS). */
export const PROBE_NO_RESPONDER_ASKS = 5;

type ProbeEffect = Extract<JobEffect, { kind: "probe_worker" }>;

/** Whether a request failed for want of any subscriber (NATS 503; the simulation bus says the same). */
function isNoResponders(e: unknown): boolean {
  if (!(e instanceof Error)) return false;
  const cause = (e as { cause?: unknown }).cause;
  return (
    /no responders/i.test(e.message) ||
    (cause instanceof Error && cause.name === "NoRespondersError")
  );
}

/** The `probe_worker` performer of a job shell whose leases last `leaseTtlMs`. */
export function makeProber(
  leaseTtlMs: number,
  link: WorkerLink,
  clock: Clock,
): (ctx: ShellContext, fx: ProbeEffect) => Promise<void> {
  const pause = (ms: number): Promise<void> =>
    new Promise((resolve) => clock.setTimer(ms, resolve));

  /** One ask of a probe: the worker's reply, or why there is none. */
  async function askOnce(
    fx: ProbeEffect,
    timeoutMs: number,
  ): Promise<ProbeReply | "no_responders" | "no_answer"> {
    try {
      const m = await link.nc.request(
        workerSubject(link.clusterName, fx.worker, "probe"),
        encode({ run_id: fx.run_id, attempt: fx.attempt, fence: fx.fence }),
        { timeout: timeoutMs },
      );
      return decode<ProbeReply>(m.data);
    } catch (e) {
      return isNoResponders(e) ? "no_responders" : "no_answer"; // a timeout: frozen, cut off or swamped
    }
  }

  /**
   * Asks within PROBE_TIMEOUT_MS (at most half the lease TTL, so an answer lands before the
   * actor's fallback asks again); a worker still advertising that has no responder is asked
   * again, spread over the budget (see the module header).
   */
  return async function probe(ctx, fx) {
    const budgetMs = Math.min(PROBE_TIMEOUT_MS, leaseTtlMs / 2);
    const gapMs = budgetMs / PROBE_NO_RESPONDER_ASKS;
    let reply: ProbeReply | null = null;
    let gone = false;
    let advertising = false;
    for (let asked = 0; asked < PROBE_NO_RESPONDER_ASKS && ctx.stillOwner(); asked++) {
      if (asked > 0) await pause(gapMs);
      const r = await askOnce(fx, budgetMs - asked * gapMs);
      if (r === "no_answer") {
        // Alive (its adverts still come) yet silent: swamped, not gone — the actor asks longer.
        advertising = link.directory.advertises(fx.worker);
        break;
      }
      if (r !== "no_responders") {
        reply = r;
        break;
      }
      if (link.directory.stoppedAdvertising(fx.worker)) {
        gone = true;
        break;
      }
    }
    // A tell refused (the mailbox full) is not retried here: the lease's fallback timer asks again.
    ctx.tell({
      kind: "probe_answer",
      run_id: fx.run_id,
      fence: fx.fence,
      worker: fx.worker,
      reply,
      ...(gone ? { gone: true as const } : {}),
      ...(advertising ? { advertising: true as const } : {}),
    });
  };
}
