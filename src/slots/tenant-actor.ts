/**
 * The tenant actor's pure core: one per tenant, it hands out worker slots to the tenant's job
 * actors within `max_concurrent`. Asks beyond the cap wait in a bounded list, earliest start first
 * (a run due now is not kept behind one prepared minutes ahead), and are granted by message as
 * slots come back. Grants are durable (tenant-shell.ts), so the cap holds across moves; the
 * waiting list is soft (waiters re-ask, run-dispatch.ts). An expired grant is extended and audited
 * with its job actor, so a lost release cannot leak a slot.
 *
 * Bounded backlog: an ask marked `throttle` (a run of a schedule never attempted) that finds
 * `max_waiting` runs already waiting is refused — `throttled` in the reply, and the job actor
 * records the run `throttled` — instead of joining the list. Other asks wait up to WAITING_LIMIT.
 *
 * Fair shares (`fair`, fleet-actor.ts): while it has demand the tenant reports its peak demand,
 * weight and the grants it held on average since its last report (`used`: the fleet turns its
 * rounding by it), and grants only while running < min(max_concurrent, share), the share floored
 * at 1.
 * Without a share it falls back to max_concurrent, bounded by the fleet's advertised slots.
 *
 * Pitfalls: maps are mutated in place, never copied per message (too slow for a burst): an actor
 * whose grant write fails is dropped and reloaded. `expire` and `audit` are O(grants) and rare.
 */
import type { ActorDefinition, HostEffect } from "../actors/actor.ts";
import { JOB_ACTOR, TENANT_ACTOR, jobActorId, jobIdOfRun, splitGrant } from "../protocol/ids.ts";
import { FLEET_ACTOR, FLEET_ID } from "./fleet-actor.ts";
import { DEFAULT_MAX_WAITING_RUNS } from "../protocol/service.ts";
import { enqueue, nextWaiter } from "./tenant-waiting.ts";
import {
  type TenantState,
  type TenantMsg,
  type TenantEffect,
  type SlotAsk,
  MAX_SLOT_BATCH,
  type TenantReply,
  WAITING_LIMIT,
  SLOT_AUDIT_MS,
  EXPIRED_GRANT_GRACE_MS,
  EXPIRE_BATCH_MS,
  AUDIT_LIMIT,
  SHARE_TTL_MS,
  SHARE_WAIT_MS,
  DEMAND_WINDOW_REPORTS,
  EARLY_REPORT_MS,
  REPORT_LOST_MS,
  type TenantFairOptions,
} from "./tenant-types.ts";

const validWeight = (w: unknown): w is number => typeof w === "number" && w > 0 && w <= 1e6;
const validCap = (n: unknown): n is number => typeof n === "number" && Number.isFinite(n);
const validAsk = (a: unknown): a is SlotAsk => {
  const x = a as Partial<SlotAsk> | null;
  return (
    typeof x === "object" &&
    x !== null &&
    typeof x.run_id === "string" &&
    typeof x.job === "string" &&
    typeof x.ttl_ms === "number" &&
    Number.isFinite(x.ttl_ms) &&
    x.ttl_ms > 0
  );
};
/** An ask's start, if it names a usable one (else it counts as due now: a bad value only reorders the tenant's own runs). */
const startOf = (v: unknown): number | undefined =>
  typeof v === "number" && Number.isFinite(v) ? v : undefined;

/** One decision of the tenant actor in the making: the state, and the grant writes and host effects so far. */
class Turn {
  readonly pre: TenantEffect[] = [];
  readonly effects: HostEffect<TenantMsg>[] = [];
  /** The earliest grant expiry (the `expire` timer's time). */
  expireAt: number | undefined;
  constructor(
    readonly state: TenantState,
    readonly now: number,
    readonly tenant: string,
  ) {
    this.expireAt = state.expire_at_ms;
  }

  put(id: string, exp: number, startAtMs?: number): void {
    this.state.running.set(id, exp);
    this.pre.push(
      startAtMs === undefined
        ? { kind: "put_grant", run_id: id, expires_at_ms: exp }
        : { kind: "put_grant", run_id: id, expires_at_ms: exp, start_at_ms: startAtMs },
    );
    if (this.expireAt === undefined || exp < this.expireAt) this.expireAt = exp;
  }

  del(id: string): void {
    if (!this.state.running.delete(id)) return;
    this.pre.push({ kind: "del_grant", run_id: id });
  }

  /**
   * Grants are made while running < limit(): the cap, and the fair share when there is one. The
   * share's expiry and the wait for a first answer are judged here too, not only when the report
   * timer runs: that timer can lag far behind in a saturated node (200,000 burst: ten tenants
   * granted one run at a time for 97 s, their first report never sent).
   */
  limit(): number {
    const { state, now } = this;
    if (
      state.share !== undefined &&
      (state.share_at_ms === undefined || now - state.share_at_ms <= SHARE_TTL_MS)
    )
      return Math.min(state.max_concurrent, Math.max(1, state.share));
    if (state.awaiting_since_ms !== undefined && now - state.awaiting_since_ms < SHARE_WAIT_MS)
      return 1;
    return state.fleet_slots === undefined
      ? state.max_concurrent
      : Math.min(state.max_concurrent, state.fleet_slots);
  }

  /**
   * One acquire (idempotent per grant id): granted, waiting (earliest start first), refused at
   * the backlog's bound (`throttled`: only an ask that allows it), or refused (list full).
   */
  acquire(
    id: string,
    job: string,
    ttlMs: number,
    startAtMs: number | undefined,
    throttle = false,
  ): "granted" | "waiting" | "throttled" | "overloaded" {
    const { state, now } = this;
    const held = state.running.get(id);
    if (held !== undefined) {
      if (held !== now + ttlMs) this.put(id, now + ttlMs, startAtMs);
      else
        this.pre.push(
          startAtMs === undefined
            ? { kind: "sync_grant", run_id: id }
            : { kind: "sync_grant", run_id: id, start_at_ms: startAtMs },
        ); // its write may still be in flight
      return "granted";
    }
    if (state.running.size < this.limit() && state.waiting.size === 0) {
      this.put(id, now + ttlMs, startAtMs);
      return "granted";
    }
    if (state.waiting.has(id)) return "waiting";
    if (throttle && state.waiting.size >= maxWaiting(state)) return "throttled";
    if (state.waiting.size >= WAITING_LIMIT) return "overloaded";
    enqueue(
      state,
      id,
      { job, ttl_ms: ttlMs, ...(startAtMs !== undefined ? { start_at_ms: startAtMs } : {}) },
      now,
    );
    return "waiting";
  }

  /** Asks the job actor holding grant `id` (if it names one) whether its run still holds the slot. */
  audit(id: string): void {
    const jobId = jobIdOfRun(splitGrant(id).run_id);
    if (jobId)
      this.effects.push({
        kind: "send",
        to: { type: JOB_ACTOR, id: jobActorId(this.tenant, jobId) },
        msg: { kind: "slot_audit", run_id: id },
      });
  }
}

/** The bound on waiting runs in force. */
export function maxWaiting(state: TenantState): number {
  return state.max_waiting ?? DEFAULT_MAX_WAITING_RUNS;
}

/** The cap, bound, weight and fleet size a message carries, when valid. */
function takeLimits(state: TenantState, msg: TenantMsg): void {
  if ((msg.kind === "acquire" || msg.kind === "slots") && validCap(msg.max_concurrent))
    state.max_concurrent = Math.max(1, Math.floor(msg.max_concurrent));
  if (msg.kind === "slots" && validCap(msg.max_waiting))
    state.max_waiting = Math.min(WAITING_LIMIT, Math.max(1, Math.floor(msg.max_waiting)));
  if (
    (msg.kind === "acquire" || msg.kind === "slots" || msg.kind === "set_quota") &&
    validWeight(msg.weight)
  )
    state.weight = msg.weight;
  if (
    msg.kind === "slots" &&
    typeof msg.fleet_slots === "number" &&
    Number.isInteger(msg.fleet_slots) &&
    msg.fleet_slots >= 0
  ) {
    if (msg.fleet_slots > 0) state.fleet_slots = msg.fleet_slots;
    else delete state.fleet_slots;
  }
}

/**
 * A broker's batch: releases first (they make room), then the acquires earliest start first; a
 * malformed item is skipped (its run asks again), an overloaded one is simply not granted.
 */
function onSlots(t: Turn, msg: Extract<TenantMsg, { kind: "slots" }>): TenantReply {
  const granted: string[] = [];
  const throttled: string[] = [];
  const rel = Array.isArray(msg.release) ? msg.release.slice(0, MAX_SLOT_BATCH) : [];
  for (const id of rel) {
    if (typeof id !== "string") continue;
    t.del(id);
    t.state.waiting.delete(id);
  }
  // Earliest start first within the batch too (a stable sort: ties in the order asked), or
  // free slots would go to its first asks — runs prepared minutes ahead — before a run due now.
  const asks = (Array.isArray(msg.acquire) ? msg.acquire.slice(0, MAX_SLOT_BATCH) : [])
    .filter(validAsk)
    .map((a) => ({ a, at: startOf(a.start_at_ms) ?? t.now }))
    .sort((x, y) => x.at - y.at);
  for (const { a } of asks) {
    const got = t.acquire(a.run_id, a.job, a.ttl_ms, startOf(a.start_at_ms), a.throttle === true);
    if (got === "granted") granted.push(a.run_id);
    else if (got === "throttled") throttled.push(a.run_id);
  }
  if (throttled.length === 0) return { granted };
  return { granted, throttled, waiting: t.state.waiting.size, max_waiting: maxWaiting(t.state) };
}

/**
 * The `expire` timer. A grant past its expiry is not dropped blindly (its run may still wait for
 * a flexible start or a free worker): it is extended and audited; the job releases it if unheld.
 */
function onExpire(t: Turn): void {
  const { running } = t.state;
  const now = t.now;
  const expired: string[] = [];
  for (const [id, exp] of running) if (exp <= now) expired.push(id);
  t.expireAt = undefined;
  for (const [, exp] of running)
    if (exp > now && (t.expireAt === undefined || exp < t.expireAt)) t.expireAt = exp;
  if (t.expireAt !== undefined) t.expireAt = Math.max(t.expireAt, now + EXPIRE_BATCH_MS);
  for (const id of expired) {
    if (!jobIdOfRun(splitGrant(id).run_id)) {
      t.del(id);
      continue;
    }
    t.put(id, now + EXPIRED_GRANT_GRACE_MS);
    t.audit(id);
  }
}

/** The `audit` timer: up to AUDIT_LIMIT grants audited. */
function onAudit(t: Turn): void {
  let n = 0;
  for (const run_id of t.state.running.keys()) {
    if (n++ >= AUDIT_LIMIT) break;
    t.audit(run_id);
  }
  delete t.state.audit_at_ms;
}

function statusOf(t: Turn): TenantReply {
  const { state } = t;
  return {
    running: state.running.size,
    waiting: state.waiting.size,
    max_concurrent: state.max_concurrent,
    ...(state.max_waiting !== undefined ? { max_waiting: state.max_waiting } : {}),
    limit: t.limit(),
    ...(state.share !== undefined ? { share: state.share } : {}),
    ...(state.fleet_slots !== undefined ? { fleet_slots: state.fleet_slots } : {}),
    ...(state.awaiting_since_ms !== undefined
      ? { awaiting_share_ms: t.now - state.awaiting_since_ms }
      : {}),
  };
}

/** The fleet actor's answer: the tenant's share (null: no share, the cap applies). */
function onShare(
  t: Turn,
  msg: Extract<TenantMsg, { kind: "share" }>,
  fair: TenantFairOptions | undefined,
): void {
  const { state } = t;
  if (!fair || state.report_at_ms === undefined) return; // a late answer to an idle tenant
  if (msg.share === null) delete state.share;
  else if (Number.isInteger(msg.share) && msg.share >= 0) state.share = msg.share;
  else return;
  state.share_at_ms = t.now;
  delete state.awaiting_since_ms;
}

/** The end of every decision: waiting requests granted while there is room, the timers armed. */
function settle(t: Turn, releaseOnly: boolean, fair: TenantFairOptions | undefined): void {
  const { state, now, effects } = t;
  const { running, waiting } = state;
  // Grant waiting requests while there is room (earliest start first).
  while (waiting.size > 0 && running.size < t.limit()) {
    const next = nextWaiter(state, now);
    if (!next) break;
    const [run_id, w] = next;
    // Named without a start (so not gathered) when this decision is a release only: a node's
    // release lane is one batch, and a release must not wait behind a gathering grant.
    t.put(run_id, now + w.ttl_ms, releaseOnly ? undefined : w.start_at_ms);
    effects.push({
      kind: "send",
      to: { type: JOB_ACTOR, id: w.job },
      msg: { kind: "slot_granted", run_id },
    });
  }
  if (waiting.size === 0 && (state.order?.length ?? 0) > 0) state.order = []; // its stale entries go
  // The expiry timer: at the earliest grant expiry (a later put never moves it later).
  if (running.size === 0) t.expireAt = undefined;
  if (t.expireAt !== undefined && t.expireAt !== state.expire_at_ms)
    effects.push({ kind: "timer", name: "expire", atMs: t.expireAt, msg: { kind: "expire" } });
  if (t.expireAt === undefined) delete state.expire_at_ms;
  else state.expire_at_ms = t.expireAt;
  if (waiting.size > 0 && (state.audit_at_ms === undefined || state.audit_at_ms <= now)) {
    state.audit_at_ms = now + SLOT_AUDIT_MS;
    effects.push({ kind: "timer", name: "audit", atMs: state.audit_at_ms, msg: { kind: "audit" } });
  }
  if (fair) armReport(state, fair, now, effects);
}

export function makeTenantActor(
  defaultMaxConcurrent = 100,
  fair?: TenantFairOptions,
): ActorDefinition<TenantState, TenantMsg, TenantReply, TenantEffect> {
  return {
    type: TENANT_ACTOR,
    persist: false,
    urgentTimers: true, // its demand report must not wait behind a burst's preparation timers
    // Every job actor of the tenant asks it for slots: in a burst its queue may hold one acquire
    // per waiting run, which it bounds itself (WAITING_LIMIT), not the node-wide default.
    mailboxLimit: WAITING_LIMIT,
    initialState: () => ({
      max_concurrent: defaultMaxConcurrent,
      weight: 1,
      peaks: [0],
      running: new Map(),
      waiting: new Map(),
    }),
    receive(state, msg, ctx) {
      const t = new Turn(state, ctx.nowMs, ctx.id);
      if (fair) holdUntil(state, ctx.nowMs); // before this message changes what is held
      let reply: TenantReply = null;
      let fail: { code: "overloaded"; message: string } | undefined;
      const releaseOnly =
        msg.kind === "release" ||
        (msg.kind === "slots" && (!Array.isArray(msg.acquire) || msg.acquire.length === 0));
      takeLimits(state, msg);
      switch (msg.kind) {
        case "acquire": {
          const got = t.acquire(msg.run_id, msg.job, msg.ttl_ms, startOf(msg.start_at_ms));
          if (got === "overloaded")
            fail = {
              code: "overloaded",
              message: `tenant has ${WAITING_LIMIT} runs waiting for slots`,
            };
          else reply = { granted: got === "granted" };
          break;
        }
        case "slots":
          reply = onSlots(t, msg);
          break;
        case "release":
          t.del(msg.run_id);
          state.waiting.delete(msg.run_id);
          break;
        case "set_quota":
          state.max_concurrent = Math.max(1, Math.floor(msg.max_concurrent));
          break;
        case "expire":
          onExpire(t);
          break;
        case "audit":
          onAudit(t);
          break;
        case "status":
          reply = statusOf(t);
          break;
        case "share":
          onShare(t, msg, fair);
          break;
        case "fair_report":
          if (fair) report(state, fair, t.now, t.effects, ctx.id);
          break;
      }
      settle(t, releaseOnly, fair);
      return { state, reply, effects: t.effects, pre: t.pre, ...(fail ? { fail } : {}) };
    },
  };
}

/** Adds the grants held since `held_at_ms` to `held_ms` (they change only inside a message). O(1). */
function holdUntil(state: TenantState, now: number): void {
  if (state.held_at_ms !== undefined && now > state.held_at_ms)
    state.held_ms = (state.held_ms ?? 0) + state.running.size * (now - state.held_at_ms);
  state.held_at_ms = now;
}

/** The grants held on average since the last report (the current ones if there was none). */
function usedSinceReport(state: TenantState, now: number): number {
  const since = state.reported_at_ms;
  const used =
    since !== undefined && now > since ? (state.held_ms ?? 0) / (now - since) : state.running.size;
  return Math.round(used * 1000) / 1000;
}

/** The `fair_report` timer: sends the demand (peak of the window, capped) to the fleet actor. */
function report(
  state: TenantState,
  fair: TenantFairOptions,
  now: number,
  effects: HostEffect<TenantMsg>[],
  tenant: string,
): void {
  const current = state.running.size + state.waiting.size;
  const demand = Math.min(state.max_concurrent, Math.max(current, ...state.peaks));
  state.peaks.unshift(current);
  if (state.peaks.length > DEMAND_WINDOW_REPORTS) state.peaks.length = DEMAND_WINDOW_REPORTS;
  if (state.share_at_ms !== undefined && now - state.share_at_ms > SHARE_TTL_MS) {
    delete state.share; // not confirmed for too long: the fleet actor is gone
    delete state.share_at_ms;
  }
  if (state.awaiting_since_ms !== undefined && now - state.awaiting_since_ms >= SHARE_WAIT_MS)
    delete state.awaiting_since_ms; // no answer: the cap
  effects.push({
    kind: "send",
    to: { type: FLEET_ACTOR, id: FLEET_ID },
    msg: {
      kind: "demand",
      tenant,
      demand,
      weight: state.weight,
      ...(state.share !== undefined ? { held: true } : {}),
      used: usedSinceReport(state, now),
    },
  });
  state.held_ms = 0;
  state.reported = demand;
  state.reported_at_ms = now;
  if (demand > 0) {
    state.report_at_ms = now + fair.reportMs;
    effects.push({
      kind: "timer",
      name: "fair",
      atMs: state.report_at_ms,
      msg: { kind: "fair_report" },
    });
  } else {
    // Idle: out of the fleet's computation; a new burst starts unconstrained by a stale share.
    delete state.report_at_ms;
    delete state.share;
    delete state.share_at_ms;
    delete state.awaiting_since_ms;
  }
}

/** After every message: track the peak demand; arm the first report, or an early one. O(1). */
function armReport(
  state: TenantState,
  fair: TenantFairOptions,
  now: number,
  effects: HostEffect<TenantMsg>[],
): void {
  const current = state.running.size + state.waiting.size;
  if (current > (state.peaks[0] ?? 0)) state.peaks[0] = current;
  if (current === 0) return;
  let at = state.report_at_ms;
  if (at === undefined) {
    at = now; // busy from idle: report now, grant one run until the answer
    if (state.share === undefined) state.awaiting_since_ms = now;
  }
  // Overdue: its timer was lost (a timer set in a turn whose effects were skipped, e.g. the
  // partition's trust lapsed meanwhile). Without this, the tenant never reports again while it
  // stays loaded, and the fleet forgets it (fairness benchmark: only the small tenant listed).
  // Only when overdue by far more than any timer lag of a working node: re-arming moves the
  // timer behind every overdue timer of the node, so re-arming it often would starve it.
  else if (at < now - REPORT_LOST_MS) at = now;
  else if (
    state.share !== undefined &&
    state.reported !== undefined &&
    state.share >= state.reported &&
    state.waiting.size > 0 &&
    current > state.reported &&
    state.share < state.max_concurrent
  ) {
    // Held back by a share it had filled: its demand grew, so ask again soon.
    at = Math.min(at, Math.max(now, (state.reported_at_ms ?? now) + EARLY_REPORT_MS));
  }
  if (at === state.report_at_ms) return;
  state.report_at_ms = at;
  effects.push({ kind: "timer", name: "fair", atMs: at, msg: { kind: "fair_report" } });
}
