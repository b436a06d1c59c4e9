/**
 * The tenant actor's vocabulary (tenant-actor.ts): its state, messages, effects and replies, and
 * the timing constants its decisions use. A leaf of the area: the core, the shell and the broker
 * import these from here.
 */
import { MAX_WAITING_RUNS_LIMIT } from "../protocol/service.ts";

export interface TenantState {
  max_concurrent: number;
  /** The tenant's bound on waiting runs (its record's max_waiting_runs, with each batch). */
  max_waiting?: number;
  /** The tenant's weight (from its record, with each acquire). */
  weight: number;
  /**
   * The fleet's worker slots as the asking node's worker directory sees them (with each `slots`
   * batch; absent or 0: unknown). Without a share, grants stop there too: a grant beyond every
   * worker slot only makes a run hold a slot of the tenant while it waits for a worker.
   */
  fleet_slots?: number;
  /** Fair share of the fleet's slots (soft; absent: max_concurrent applies alone). */
  share?: number;
  /** When the share was heard; after SHARE_TTL_MS without one it is dropped. */
  share_at_ms?: number;
  /** Set when the tenant became busy and has no answer yet (one grant until then, see limit). */
  awaiting_since_ms?: number;
  /** When the next demand report is due (armed while the tenant has demand). */
  report_at_ms?: number;
  /** When the last report went out, and the demand it carried. */
  reported_at_ms?: number;
  reported?: number;
  /**
   * Grants held × ms since the last report (`running.size` summed over time, up to `held_at_ms`):
   * the report's `used` is its average, what the fleet actor turns its rounding by.
   */
  held_ms?: number;
  held_at_ms?: number;
  /** Peak running + waiting since the last report, and over the interval before it. */
  /** Peak running + waiting per report interval, the current one first (DEMAND_WINDOW_REPORTS). */
  peaks: number[];
  /** grant id (`<run_id>_<slot_seq>`) → grant expiry (ms). */
  running: Map<string, number>;
  /** Waiting requests by grant id (O(1) lookup and removal); granted in `order`. */
  waiting: Map<string, Waiter>;
  /**
   * The waiting requests as a min-heap by (start_at_ms, seq): earliest start first, then arrival
   * order. Lazy: an entry whose grant id left `waiting` (released, granted) or waits under a newer
   * seq is skipped when met. Absent or emptied while requests wait (a state built by hand): rebuilt
   * from `waiting`.
   */
  order?: WaitEntry[];
  /** The last `Waiter.seq` handed out. */
  wait_seq?: number;
  /** When the next grant audit is due (armed while runs wait); see `audit`. */
  audit_at_ms?: number;
  /** When the `expire` timer is armed for (the earliest grant expiry). */
  expire_at_ms?: number;
}

/**
 * A grant for a run starting at least this far ahead is not urgent: its batch may gather before
 * its write (tenant-shell.ts `GRANT_GATHER_MS`), and the node's slot broker sends its ask in the
 * ordinary lane (slot-broker.ts `URGENT_IN_FLIGHT`).
 */
export const GRANT_GATHER_LEAD_MS = 10_000;

/** A waiting request: its job actor, its grant's lifetime, when its run can start, its arrival number. */
export interface Waiter {
  job: string;
  ttl_ms: number;
  start_at_ms?: number;
  seq?: number;
  /** Its key in `order`: its start, or its arrival time when the ask named none (kept for rebuilds). */
  at?: number;
}
/** An entry of the waiting list's heap (tenant-waiting.ts): start, arrival number, grant id. */
export type WaitEntry = { at: number; seq: number; id: string };

export type TenantMsg =
  | {
      kind: "acquire";
      run_id: string;
      job: string;
      ttl_ms: number;
      start_at_ms?: number;
      max_concurrent?: number;
      weight?: number;
    }
  | { kind: "release"; run_id: string }
  /** Many acquires and releases from one node's slot broker (slot-broker.ts), in one decision. */
  | {
      kind: "slots";
      acquire: SlotAsk[];
      release: string[];
      max_concurrent?: number;
      max_waiting?: number;
      weight?: number;
      fleet_slots?: number;
    }
  | { kind: "set_quota"; max_concurrent: number; weight?: number }
  | { kind: "fair_report" }
  | { kind: "share"; share: number | null }
  | { kind: "expire" }
  | { kind: "audit" }
  | { kind: "status" };

/** Grant writes, performed before the reply (see the module header). */
export type TenantEffect =
  /**
   * `start_at_ms`: when the granted run starts — a batch of grants for runs that all start well
   * ahead gathers before it is written (tenant-shell.ts `GRANT_GATHER_MS`). Omitted when unknown,
   * and on grants a decision on releases only makes (they must not wait: a release never does).
   */
  | { kind: "put_grant"; run_id: string; expires_at_ms: number; start_at_ms?: number }
  | { kind: "del_grant"; run_id: string }
  /** A grant confirmed unchanged: its reply waits for any batch still writing it (tenant-shell.ts). */
  | { kind: "sync_grant"; run_id: string; start_at_ms?: number };

/**
 * One acquire of a `slots` batch: the grant id, its job actor, the grant's lifetime, when its run
 * can start (absent: now), and whether it may be refused when the backlog is at its bound.
 */
export interface SlotAsk {
  run_id: string;
  job: string;
  ttl_ms: number;
  start_at_ms?: number;
  throttle?: boolean;
}

/** Most acquires plus releases in one `slots` message (the broker's batch bound). */
export const MAX_SLOT_BATCH = 1_024;

export type TenantReply =
  | { granted: boolean }
  /** `throttled`: asks refused at the bound, with the waiting count and the bound then. */
  | { granted: string[]; throttled?: string[]; waiting?: number; max_waiting?: number }
  | {
      running: number;
      waiting: number;
      max_concurrent: number;
      /** The bound on waiting runs heard from its record (absent: none yet, the default applies). */
      max_waiting?: number;
      limit: number;
      share?: number;
      fleet_slots?: number;
      awaiting_share_ms?: number;
    }
  | null;

/** The hard limit on a tenant's waiting list, whatever its bound (asks beyond it: `overloaded`). */
export const WAITING_LIMIT = MAX_WAITING_RUNS_LIMIT;
/**
 * While runs wait, every this often the tenant asks the job actor of each grant whether its run
 * still holds the slot (`slot_audit`); a grant whose release was lost (a crash, a dropped
 * message) is released then, instead of blocking the tenant until it expires.
 */
export const SLOT_AUDIT_MS = 10_000;
/** How long an expired grant is extended while its job actor is asked whether it still holds it. */
export const EXPIRED_GRANT_GRACE_MS = 60_000;
/**
 * Least time between two `expire` turns: each is O(grants), and grants made one after another
 * expire one after another, so an `expire` armed for each expiry could run a turn per
 * millisecond over every grant of the tenant. An expired grant is only extended and audited
 * (never freed blindly), so handling it up to this much later changes nothing but the timing.
 */
export const EXPIRE_BATCH_MS = 1_000;
/** Most grants audited per round. */
export const AUDIT_LIMIT = 1_000;
/** A share not confirmed for this long is dropped (the fleet actor is gone or moving). */
export const SHARE_TTL_MS = 5_000;
/** A busy tenant without an answer for this long stops waiting for one (the cap applies). */
export const SHARE_WAIT_MS = 2_000;
/** A tenant's reported demand is its peak over this many report intervals. */
export const DEMAND_WINDOW_REPORTS = 6;
/** Least time between two reports when a filled share holds back a grown demand. */
export const EARLY_REPORT_MS = 50;
/** A report this overdue is taken as lost (its timer effect skipped) and re-armed by the next message. */
export const REPORT_LOST_MS = 10_000;

/** Fair sharing between tenants (see the module header); without it the tenant caps itself only. */
export interface TenantFairOptions {
  /** How often a tenant with demand reports it to the fleet actor (FAIR_REPORT_MS). */
  reportMs: number;
}
