/** The options of a worker (worker.ts), shared by its parts. */
import type { Bus } from "../cluster/bus.ts";
import type { InboxMode, ReplyRefusal } from "../cluster/reply-guard.ts";
import type { ActorRouter } from "../cluster/router.ts";
import type { Clock } from "../lib/clock.ts";
import type { Random } from "../lib/random.ts";
import type { Executor } from "../sandbox/index.ts";

export interface WorkerOptions {
  workerId: string;
  clusterName: string;
  slots: number;
  /**
   * Attempts it accepts beyond its slots, queued to start the moment a slot frees after their start
   * (default: slot-ledger.ts `defaultPrefetch`; 0: none).
   */
  prefetch?: number;
  heartbeatIntervalMs: number;
  /** How long completion reports are retried before giving up (the lease then expires). */
  completionDeadlineMs: number;
  /**
   * Most completion reports being made at once, each from its first copy until settled (default
   * COMPLETIONS_IN_FLIGHT).
   */
  completionsInFlight?: number;
  /** How long one completion report waits for its answer (default COMPLETION_WAIT_MS). */
  completionWaitMs?: number;
  /** Safety margin of self-fencing (default: 20% of the lease TTL, 250 ms to 2 s). */
  leaseSafetyMarginMs?: number;
  nc: Bus;
  router: ActorRouter;
  executor: Executor;
  clock: Clock;
  /** Spreads the waits between copies of a completion report (report-backoff.ts). */
  random: Random;
  log: (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;
  /** Test hook: observe lifecycle (accepted, started, lease_lost, completed, stale_fence). */
  onEvent?: (e: { type: string; run_id: string; attempt: number }) => void;
  /**
   * Which reply subjects offers and probes may name (reply-guard.ts; default `per_user`: NATS
   * credentials).
   */
  inboxes?: InboxMode;
  /**
   * Told of each offer or probe dropped because of its reply subject (after it is counted and
   * logged).
   */
  onRefused?: (r: ReplyRefusal & { subject: string }) => void;
}
