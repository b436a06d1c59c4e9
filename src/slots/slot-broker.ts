/**
 * The node's slot broker: every `acquire_slot`/`release_slot` decided on this node for one tenant
 * within one turn of the event loop rides in ONE `slots` message to the tenant actor (at most
 * `MAX_SLOT_BATCH`), decided in one receive and written in one group commit (tenant-shell.ts). A
 * grant given at once returns to its job actor as `slot_granted`, an ask refused at the tenant's
 * backlog bound as `slot_throttled`. The broker holds nothing that must survive: the cap's proof
 * is the tenant's durable grant table.
 *
 * Pitfalls: a failed batch drops its acquires (each run's `slot_check` timer asks again; asking
 * at once would make a retry storm) and re-queues its releases with capped backoff, at most
 * RELEASE_ATTEMPTS times. In flight per tenant: `IN_FLIGHT_PER_TENANT` batches, plus
 * `URGENT_IN_FLIGHT` for runs due within GRANT_GATHER_LEAD_MS (so a run due now does not wait
 * behind batches being gathered) and `RELEASE_IN_FLIGHT` for releases only.
 */
import type { ActorAddress } from "../cluster/placement.ts";
import { backoffMs } from "../lib/backoff.ts";
import { TENANT_ACTOR } from "../protocol/ids.ts";
import {
  GRANT_GATHER_LEAD_MS,
  MAX_SLOT_BATCH,
  WAITING_LIMIT,
  type SlotAsk,
  type TenantMsg,
} from "./tenant-types.ts";

/** Batches in flight per tenant from one node. */
export const IN_FLIGHT_PER_TENANT = 4;
/** Beyond those, batches of urgent asks (runs due within GRANT_GATHER_LEAD_MS) that may be in flight. */
export const URGENT_IN_FLIGHT = 2;
/**
 * Beyond those, batches of releases only (no acquires) that may be in flight: a release is what
 * lets the tenant grant its next waiting run, so it does not queue behind a backlog's re-asks
 * (fairness benchmark: 96,000 waiting runs re-asking filled the tenant's lane, and its runs used
 * a smaller part of their grants than the other tenants').
 */
export const RELEASE_IN_FLIGHT = 1;
/** Most requests queued per tenant on one node (beyond it an acquire is dropped; the run re-asks). */
export const MAX_QUEUED_PER_TENANT = WAITING_LIMIT;

export interface SlotBrokerDeps {
  /** An actor request (the router's, with its retries until the deadline). */
  request: (to: ActorAddress, msg: TenantMsg) => Promise<unknown>;
  /** Runs `fn` after `ms` (0: a later turn of the event loop — asks decided together ride together). */
  defer: (fn: () => void, ms: number) => void;
  /**
   * The tenant's cap, bound on waiting runs and weight, sent with each batch (from its record;
   * cached by the caller).
   */
  tenantMaxConcurrent?: (tenantId: string) => Promise<number | undefined>;
  tenantMaxWaiting?: (tenantId: string) => Promise<number | undefined>;
  tenantWeight?: (tenantId: string) => Promise<number | undefined>;
  /** The fleet's worker slots as this node sees them (0: unknown), sent with each batch. */
  fleetSlots?: () => number;
  log: (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;
  /** Now (ms): tells an urgent ask (without it, none is). */
  nowMs?: () => number;
}

interface Ask {
  job: string;
  ttl_ms: number;
  /** When the run can start (the tenant grants its waiters earliest start first). */
  start_at_ms?: number;
  /** The tenant may refuse it at its backlog bound (`throttled` is then called). */
  throttle?: true;
  granted: () => void;
  throttled?: (waiting: number, maxWaiting: number) => void;
}

/** What the broker's caller hears of an ask: granted now, or refused at the tenant's bound. */
export interface AskAnswers {
  granted: () => void;
  throttled?: (waiting: number, maxWaiting: number) => void;
}

/** One tenant's queue on this node. */
interface Lane {
  asks: Map<string, Ask>;
  /** The queued asks that were urgent when asked (their runs due within GRANT_GATHER_LEAD_MS). */
  urgent: Set<string>;
  /** Releases to send, with how many batches carrying each have failed. */
  releases: Map<string, number>;
  /** Batches in flight, by kind (`#mode`). */
  inFlight: number;
  urgentInFlight: number;
  releaseInFlight: number;
  scheduled: boolean;
  /** Consecutive failed batches: the next one waits `retryDelayMs(failures)` (0: at once). */
  failures: number;
}

/** A failed release is sent again at most this many times, then left to the tenant's audit. */
export const RELEASE_ATTEMPTS = 5;

/** After `failures` failed batches in a row, the next waits this long (capped exponential). */
export function retryDelayMs(failures: number): number {
  return failures === 0 ? 0 : backoffMs(failures - 1, { baseMs: 100, maxMs: 5_000 });
}

/**
 * Takes the next batch out of a lane: releases first (they make room at the tenant), then acquires
 * in the order they were asked — every waiting one (`full`) or only the urgent ones (`urgent`).
 * `tries`: how many times each release was sent before.
 */
function takeBatch(
  lane: Lane,
  mode: "full" | "urgent" | "releases",
): { release: string[]; tries: Map<string, number>; acquire: SlotAsk[]; asked: Ask[] } {
  const release: string[] = [];
  const tries = new Map<string, number>();
  for (const [g, n] of lane.releases) {
    if (release.length >= MAX_SLOT_BATCH) break;
    release.push(g);
    tries.set(g, n);
  }
  for (const g of release) lane.releases.delete(g);
  const acquire: SlotAsk[] = [];
  const asked: Ask[] = [];
  const take = (g: string, a: Ask) => {
    acquire.push({
      run_id: g,
      job: a.job,
      ttl_ms: a.ttl_ms,
      ...(a.start_at_ms !== undefined ? { start_at_ms: a.start_at_ms } : {}),
      ...(a.throttle ? { throttle: true } : {}),
    });
    asked.push(a);
  };
  if (mode === "full") {
    for (const [g, a] of lane.asks) {
      if (release.length + acquire.length >= MAX_SLOT_BATCH) break;
      take(g, a);
    }
  } else if (mode === "urgent") {
    // The other batches may all be gathering at the tenant: these runs are due soon.
    for (const g of lane.urgent) {
      if (release.length + acquire.length >= MAX_SLOT_BATCH) break;
      const a = lane.asks.get(g);
      if (a) take(g, a);
    }
  }
  for (const a of acquire) {
    lane.asks.delete(a.run_id);
    lane.urgent.delete(a.run_id);
  }
  return { release, tries, acquire, asked };
}

export class SlotBroker {
  readonly #lanes = new Map<string, Lane>();
  /** Batches sent and items carried (for tests and the cost accounting). */
  batches = 0;
  items = 0;

  constructor(private readonly deps: SlotBrokerDeps) {}

  /**
   * Asks for grant `grant` of job actor `job`; `granted` is called if the tenant grants it now,
   * `throttled` if it refuses it at its backlog bound (only an ask with `throttle`).
   */
  acquire(
    tenantId: string,
    a: { grant: string; job: string; ttl_ms: number; start_at_ms?: number; throttle?: boolean },
    answers: (() => void) | AskAnswers,
  ): void {
    const { granted, throttled } = typeof answers === "function" ? { granted: answers } : answers;
    const lane = this.#lane(tenantId);
    lane.releases.delete(a.grant);
    if (!lane.asks.has(a.grant) && lane.asks.size >= MAX_QUEUED_PER_TENANT) return; // the run re-asks
    lane.asks.set(a.grant, {
      job: a.job,
      ttl_ms: a.ttl_ms,
      ...(a.start_at_ms !== undefined ? { start_at_ms: a.start_at_ms } : {}),
      ...(a.throttle === true && throttled ? { throttle: true as const, throttled } : {}),
      granted,
    });
    // (An ask of unknown start is not gathered at the tenant: it needs no lane of its own.)
    const now = this.deps.nowMs?.();
    if (
      a.start_at_ms !== undefined &&
      now !== undefined &&
      a.start_at_ms - now < GRANT_GATHER_LEAD_MS
    )
      lane.urgent.add(a.grant);
    else lane.urgent.delete(a.grant);
    this.#kick(tenantId, lane);
  }

  /** Gives grant `grant` back (a queued acquire of it is cancelled). */
  release(tenantId: string, grant: string): void {
    const lane = this.#lane(tenantId);
    lane.asks.delete(grant);
    lane.urgent.delete(grant);
    if (lane.releases.size >= MAX_QUEUED_PER_TENANT) return; // lost release: the tenant's audit frees it
    lane.releases.set(grant, 0);
    this.#kick(tenantId, lane);
  }

  /** Requests queued and not yet sent (for tests). */
  queued(tenantId: string): number {
    const lane = this.#lanes.get(tenantId);
    return lane ? lane.asks.size + lane.releases.size : 0;
  }

  #lane(tenantId: string): Lane {
    let lane = this.#lanes.get(tenantId);
    if (!lane) {
      lane = {
        asks: new Map(),
        urgent: new Set(),
        releases: new Map(),
        inFlight: 0,
        urgentInFlight: 0,
        releaseInFlight: 0,
        scheduled: false,
        failures: 0,
      };
      this.#lanes.set(tenantId, lane);
    }
    return lane;
  }

  /**
   * The batch the lane may send now: `full` (releases and asks in the order asked) while fewer
   * than IN_FLIGHT_PER_TENANT are in flight; else `urgent` (releases and the urgent asks) while
   * fewer than URGENT_IN_FLIGHT of those are; else `releases` (releases only) while fewer than
   * RELEASE_IN_FLIGHT; undefined: none.
   */
  #mode(lane: Lane): "full" | "urgent" | "releases" | undefined {
    if (lane.inFlight < IN_FLIGHT_PER_TENANT && (lane.asks.size > 0 || lane.releases.size > 0))
      return "full";
    if (lane.urgent.size > 0 && lane.urgentInFlight < URGENT_IN_FLIGHT) return "urgent";
    if (lane.releases.size > 0 && lane.releaseInFlight < RELEASE_IN_FLIGHT) return "releases";
    return undefined;
  }

  #kick(tenantId: string, lane: Lane): void {
    if (lane.scheduled) return;
    if (lane.asks.size === 0 && lane.releases.size === 0) {
      if (
        lane.inFlight + lane.urgentInFlight + lane.releaseInFlight === 0 &&
        this.#lanes.get(tenantId) === lane
      )
        this.#lanes.delete(tenantId);
      return;
    }
    if (this.#mode(lane) === undefined) return;
    lane.scheduled = true;
    this.deps.defer(() => {
      lane.scheduled = false;
      void this.#send(tenantId, lane);
    }, retryDelayMs(lane.failures));
  }

  async #send(tenantId: string, lane: Lane): Promise<void> {
    const mode = this.#mode(lane);
    if (mode === undefined) return this.#kick(tenantId, lane);
    const { release, tries, acquire, asked } = takeBatch(lane, mode);
    if (release.length + acquire.length === 0) return this.#kick(tenantId, lane);
    const count = (d: number) => {
      if (mode === "full") lane.inFlight += d;
      else if (mode === "urgent") lane.urgentInFlight += d;
      else lane.releaseInFlight += d;
    };
    count(1);
    this.batches++;
    this.items += release.length + acquire.length;
    // More queued than one batch holds: the next goes out now, without waiting for this reply.
    this.#kick(tenantId, lane);
    try {
      const max = await this.deps.tenantMaxConcurrent?.(tenantId);
      const maxWaiting = await this.deps.tenantMaxWaiting?.(tenantId);
      const weight = await this.deps.tenantWeight?.(tenantId);
      const fleet = this.deps.fleetSlots?.();
      const reply = (await this.deps.request(
        { type: TENANT_ACTOR, id: tenantId },
        {
          kind: "slots",
          acquire,
          release,
          ...(max !== undefined ? { max_concurrent: max } : {}),
          ...(maxWaiting !== undefined ? { max_waiting: maxWaiting } : {}),
          ...(weight !== undefined ? { weight } : {}),
          ...(fleet !== undefined ? { fleet_slots: fleet } : {}),
        },
      )) as {
        granted?: unknown;
        throttled?: unknown;
        waiting?: unknown;
        max_waiting?: unknown;
      } | null;
      const granted = new Set(Array.isArray(reply?.granted) ? reply.granted : []);
      const throttled = new Set(Array.isArray(reply?.throttled) ? reply.throttled : []);
      const count = (v: unknown) => (typeof v === "number" && Number.isSafeInteger(v) ? v : 0);
      acquire.forEach((a, i) => {
        const ask = asked[i]!;
        if (granted.has(a.run_id)) ask.granted();
        else if (ask.throttle && throttled.has(a.run_id))
          ask.throttled?.(count(reply?.waiting), count(reply?.max_waiting));
      });
      lane.failures = 0;
    } catch (e) {
      // Acquires are asked again by their runs' slot checks; releases go out with a later batch,
      // after a backoff (a tenant that fails at once — overloaded, its write failed, the
      // connection closed — is not hammered), each at most RELEASE_ATTEMPTS times.
      lane.failures++;
      for (const g of release) {
        const n = (tries.get(g) ?? 0) + 1;
        if (
          n < RELEASE_ATTEMPTS &&
          lane.releases.size < MAX_QUEUED_PER_TENANT &&
          !lane.releases.has(g)
        )
          lane.releases.set(g, n);
      }
      if (lane.failures === 1 || lane.failures % 10 === 0) {
        this.deps.log("warn", "slot batch failed", {
          tenant: tenantId,
          acquires: acquire.length,
          releases: release.length,
          failures: lane.failures,
          err: String(e),
        });
      }
    } finally {
      count(-1);
      this.#kick(tenantId, lane);
    }
  }
}
