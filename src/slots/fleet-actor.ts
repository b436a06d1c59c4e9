/**
 * The fleet actor's pure core: one per cluster (`fleet/fleet`), it shares the fleet's worker slots
 * between tenants by weighted max-min fairness (fair-share.ts). Tenant actors with demand report
 * `{demand, weight, used}` every FAIR_REPORT_MS; the fleet recomputes (at most every
 * FLEET_RECOMPUTE_MS, at once on a new tenant, weight or capacity; every FLEET_ROTATE_MS while a
 * tenant is held back by its part, so a part of 1.5 slots is 1 and 2 in turn, and a tenant whose
 * runs executed beyond its part gives a slot to one whose runs executed less), answers with a share, and
 * tells tenants whose share changed at once (PUSH_LIMIT). Unasked slots are added by weight as
 * headroom. Capacity is the sum of live workers' advertised slots, put into each message by the
 * shell (fleet-shell.ts).
 *
 * The rounding turns by the slots tenants' runs execute in, not by what they were given: each
 * rounded tenant's exact part minus the attempts it has executing on the fleet (`executing`, from
 * the workers' adverts, added by the shell; when some worker does not advertise them, the grants
 * the tenant reported holding on average, `used`, else the share it was given; scaled so that the
 * rounded tenants' holdings sum to their parts) is summed over time (`owed`, slot·ms, at most
 * ±OWED_LIMIT_MS), and at each turn it moves each rounded part by up to a slot (fair-share.ts
 * `carry`): the slots left by the rounding go to those owed most, and a whole part of a tenant
 * that owes a slot or more gives one up. A share
 * that shrinks takes effect only as the tenant's runs end, one that grows only once the tenant
 * hears it, and a grant is not an execution (its run may wait for a worker's place or slot):
 * counting the slots executed makes up for all three within a few turns.
 *
 * Soft by design: shares are advice; the hard cap (`max_concurrent`) is the tenant's. A tenant
 * silent for FLEET_STALE_MS drops out. Pitfall: a fresh fleet actor waits FLEET_WARMUP_MS before
 * answering tenants still holding a share, so it does not hand the whole fleet to the first.
 */
import type { ActorDefinition, HostEffect } from "../actors/actor.ts";
import { KairosError } from "../lib/errors.ts";
import { MAX_FAIR_TENANTS, fairShares } from "./fair-share.ts";
import { TENANT_ACTOR, isValidId } from "../protocol/ids.ts";

export const FLEET_ACTOR = "fleet";
/** The one fleet actor's id. */
export const FLEET_ID = "fleet";
/** How often a tenant actor with demand reports it (tenant-actor.ts). */
export const FAIR_REPORT_MS = 500;
/** A tenant not heard from for this long is dropped from the computation. */
export const FLEET_STALE_MS = 5_000;
/** Shares are recomputed at most this often while only demands change. */
export const FLEET_RECOMPUTE_MS = 100;
/** While some share is rounded, the rounding turns (fair-share.ts `carry`) at least this often. */
export const FLEET_ROTATE_MS = 1_000;
/** A fresh fleet actor listens this long before it answers (every busy tenant reports by then). */
export const FLEET_WARMUP_MS = 2 * FAIR_REPORT_MS;
/** Most tenants told of a smaller share by one recomputation (the rest hear it at their next report). */
export const PUSH_LIMIT = 1_000;
/** Most tenants in a status reply. */
export const STATUS_LIMIT = 1_000;
/** What a rounded tenant may be owed or owe (slot·ms): two slots over one turn. */
export const OWED_LIMIT_MS = 2 * FLEET_ROTATE_MS;

interface TenantEntry {
  demand: number;
  weight: number;
  seen_ms: number;
  /** The grants it held on average over its last report interval, as it reported. */
  used?: number;
}

export interface FleetState {
  tenants: Map<string, TenantEntry>;
  /** The last computed shares (every tenant in `tenants` has one after a recompute). */
  shares: Map<string, number>;
  /** Capacity the shares were computed for. */
  capacity: number;
  computed_at_ms?: number;
  /** Demands changed since the last computation. */
  dirty: boolean;
  /** Deficit rounding between computations (fair-share.ts `fairShares`), set at each turn from `owed`. */
  carry?: Map<string, number>;
  /** Each rounded tenant's exact part in the last computation. */
  parts?: Map<string, number>;
  /** Slot·ms each rounded tenant is owed: its exact part minus the slots it held (executing), over time. */
  owed?: Map<string, number>;
  /** Until when `owed` is summed. */
  accrued_at_ms?: number;
  /** When the rounding last turned. */
  rotated_at_ms?: number;
  /** The last computation rounded some share: recompute every FLEET_ROTATE_MS to turn it. */
  rounded?: boolean;
  /** When this incarnation heard its first message (warm-up). */
  started_ms?: number;
}

/** What arrives on the bus. */
export type FleetWireMsg =
  | {
      kind: "demand";
      tenant: string;
      demand: number;
      weight: number;
      held?: boolean;
      /** The grants it held on average since its previous report (absent: unknown). */
      used?: number;
    }
  | { kind: "status" };
/**
 * What the core receives: the shell adds the capacity it observes and the attempts executing on
 * the fleet by tenant, when every worker counted in it advertises them (fleet-shell.ts).
 */
export type FleetMsg = FleetWireMsg & {
  capacity: number;
  executing?: ReadonlyMap<string, number> | undefined;
};

export interface FleetStatus {
  capacity: number;
  computed_at_ms: number | null;
  /** `used`: the grants it reported holding on average (absent: not reported). */
  tenants: {
    tenant: string;
    demand: number;
    weight: number;
    share: number | null;
    used?: number;
  }[];
}
export type FleetReply = { share: number | null } | FleetStatus;

/** The message a tenant actor gets: its share, or null (no share: use the cap). */
export interface ShareMsg {
  kind: "share";
  share: number | null;
}

function parse(raw: unknown): FleetWireMsg {
  const m = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  if (m["kind"] === "status") return { kind: "status" };
  const { tenant, demand, weight } = m;
  if (m["kind"] !== "demand" || typeof tenant !== "string" || !isValidId(tenant)) {
    throw new KairosError(
      "invalid_argument",
      "fleet message must be {kind:'status'} or {kind:'demand', tenant, demand, weight}",
    );
  }
  if (typeof demand !== "number" || !Number.isInteger(demand) || demand < 0 || demand > 1e9)
    throw new KairosError("invalid_argument", "demand must be a whole number 0-1e9", {
      field: "demand",
    });
  if (typeof weight !== "number" || !(weight > 0 && weight <= 1e6))
    throw new KairosError("invalid_argument", "weight must be a number in (0, 1e6]", {
      field: "weight",
    });
  const used = m["used"];
  if (used !== undefined && !(typeof used === "number" && used >= 0 && used <= 1e9))
    throw new KairosError("invalid_argument", "used must be a number in [0, 1e9]", {
      field: "used",
    });
  return {
    kind: "demand",
    tenant,
    demand,
    weight,
    ...(m["held"] === true ? { held: true } : {}),
    ...(used !== undefined ? { used } : {}),
  };
}

/**
 * Sums each rounded tenant's exact part minus what it held — its attempts executing now
 * (`executing`), else its report's `used` (grants held), else the share it was given — since the
 * last computation into `owed` (see the module header). What they held is scaled to what their
 * parts sum to: the parts share the prefetch places too (executions never fill those), and grants
 * outnumber the places while shrunk shares wait for runs to end; unscaled every tenant would owe,
 * all alike, the rounding then turning by ties.
 */
function accrue(
  state: FleetState,
  now: number,
  executing: ReadonlyMap<string, number> | undefined,
): void {
  const since = state.accrued_at_ms;
  state.accrued_at_ms = now;
  if (since === undefined || now <= since || !state.parts) return;
  const owed = (state.owed ??= new Map());
  const held = new Map<string, number>();
  let parts = 0;
  let sum = 0;
  for (const [tenant, part] of state.parts) {
    const t = state.tenants.get(tenant);
    if (!t) {
      owed.delete(tenant);
      continue;
    }
    const h = executing
      ? (executing.get(tenant) ?? 0)
      : (t.used ?? state.shares.get(tenant) ?? part);
    // Asking no more than its part rounded up and holding less than its floor, a tenant is not
    // held back by its share (a light tenant whose grants are mostly runs prepared ahead, waiting
    // for their start): counted, its shortfall would scale every other tenant's holding up, all of
    // them would owe alike (OWED_LIMIT_MS) and the rounding would go by ties.
    if (h < Math.floor(part) && t.demand <= Math.ceil(part)) {
      owed.delete(tenant);
      continue;
    }
    held.set(tenant, h);
    parts += part;
    sum += h;
  }
  const scale = sum > 0 ? parts / sum : 1;
  for (const [tenant, h] of held) {
    const o = (owed.get(tenant) ?? 0) + (state.parts.get(tenant)! - h * scale) * (now - since);
    owed.set(tenant, Math.max(-OWED_LIMIT_MS, Math.min(OWED_LIMIT_MS, o)));
  }
}

/** Recomputes every share; returns the tenants whose share changed (they are told at once). */
function recompute(
  state: FleetState,
  now: number,
  capacity: number,
  executing: ReadonlyMap<string, number> | undefined,
): string[] {
  const before = state.capacity > 0 ? state.shares : new Map<string, number>();
  for (const [id, t] of state.tenants)
    if (now - t.seen_ms > FLEET_STALE_MS) state.tenants.delete(id);
  const demands = [...state.tenants].map(([tenant, t]) => ({
    tenant,
    demand: t.demand,
    weight: t.weight,
  }));
  accrue(state, now, executing);
  // The rounding turns at most every FLEET_ROTATE_MS: a recompute for changed demands in between
  // keeps the turn's order (a carry advanced on every 100 ms recompute flipped shares ten times a
  // second, each flip pushes to the tenants whose share changed).
  const turn = state.rotated_at_ms === undefined || now - state.rotated_at_ms >= FLEET_ROTATE_MS;
  if (turn) {
    state.carry = new Map<string, number>();
    for (const [t, ms] of state.owed ?? [])
      state.carry.set(t, Math.max(-1, Math.min(1, ms / FLEET_ROTATE_MS)));
    state.rotated_at_ms = now;
  }
  const fair = fairShares(capacity, demands, state.carry ?? new Map());
  state.shares = fair.shares;
  state.parts = fair.parts;
  // A tenant no longer rounded (served in full) owes and is owed nothing.
  for (const t of state.owed?.keys() ?? []) if (!fair.parts.has(t)) state.owed!.delete(t);
  state.rounded = fair.fractional;
  // Headroom: slots nobody asked for, added by weight (floors: the sum stays ≤ capacity).
  let spare = capacity;
  let weights = 0;
  for (const d of demands) {
    spare -= state.shares.get(d.tenant)!;
    weights += d.weight;
  }
  if (spare > 0 && weights > 0)
    for (const d of demands)
      state.shares.set(
        d.tenant,
        state.shares.get(d.tenant)! + Math.floor((spare * d.weight) / weights),
      );
  state.capacity = capacity;
  state.computed_at_ms = now;
  state.dirty = false;
  const changed: string[] = [];
  if (capacity === 0) return changed;
  for (const [tenant, share] of state.shares) {
    if (changed.length >= PUSH_LIMIT) break;
    const was = before.get(tenant);
    if (was !== undefined && share !== was) changed.push(tenant);
  }
  return changed;
}

function status(state: FleetState, capacity: number): FleetStatus {
  const ids = [...state.tenants.keys()].sort().slice(0, STATUS_LIMIT);
  return {
    capacity,
    computed_at_ms: state.computed_at_ms ?? null,
    tenants: ids.map((tenant) => {
      const t = state.tenants.get(tenant)!;
      return {
        tenant,
        demand: t.demand,
        weight: t.weight,
        share: state.capacity > 0 ? (state.shares.get(tenant) ?? null) : null,
        ...(t.used === undefined ? {} : { used: t.used }),
      };
    }),
  };
}

export function makeFleetActor(): ActorDefinition<FleetState, FleetMsg, FleetReply> {
  return {
    type: FLEET_ACTOR,
    persist: false,
    initialState: () => ({ tenants: new Map(), shares: new Map(), capacity: 0, dirty: false }),
    parse: (raw) => parse(raw) as FleetMsg, // the capacity is added by the shell (fleet-shell.ts)
    receive(state, msg, ctx) {
      const now = ctx.nowMs;
      state.started_ms ??= now;
      const capacity = Math.max(0, Math.floor(msg.capacity));
      if (msg.kind === "status") return { state, reply: status(state, capacity) };
      const effects: HostEffect<never>[] = [];
      const known = state.tenants.get(msg.tenant);
      if (msg.demand === 0) {
        // No demand: out of the computation (its share goes to the others at the next recompute).
        if (known) {
          state.tenants.delete(msg.tenant);
          state.shares.delete(msg.tenant);
          state.dirty = true;
        }
        return { state, reply: { share: null } };
      }
      if (!known && state.tenants.size >= MAX_FAIR_TENANTS)
        return { state, reply: { share: null } }; // bounded: the cap applies
      const fresh = !known || known.weight !== msg.weight;
      if (!known || known.demand !== msg.demand || known.weight !== msg.weight) state.dirty = true;
      state.tenants.set(msg.tenant, {
        demand: msg.demand,
        weight: msg.weight,
        seen_ms: now,
        ...(msg.used !== undefined ? { used: msg.used } : {}),
      });
      if (msg.held && now - state.started_ms < FLEET_WARMUP_MS)
        return { state, reply: { share: null } };
      const due =
        state.computed_at_ms === undefined ||
        fresh ||
        capacity !== state.capacity ||
        (state.dirty && now - state.computed_at_ms >= FLEET_RECOMPUTE_MS) ||
        now - state.computed_at_ms >= FLEET_STALE_MS ||
        (state.rounded === true && now - state.computed_at_ms >= FLEET_ROTATE_MS);
      const changed = due ? recompute(state, now, capacity, msg.executing) : [];
      const share = capacity > 0 ? (state.shares.get(msg.tenant) ?? null) : null;
      effects.push({
        kind: "send",
        to: { type: TENANT_ACTOR, id: msg.tenant },
        msg: { kind: "share", share } satisfies ShareMsg,
      });
      // The others' new shares take effect now, not at their next reports (up to FAIR_REPORT_MS
      // later): a smaller one would meanwhile grant into the reporter's part of the fleet; a
      // larger one (the rounding turned its way, a tenant left) would leave the slot freed by
      // the tenant that gave it up idle until then — a slot turnaround of up to FAIR_REPORT_MS
      // when no run of another tenant waits for it on its worker (fleet benchmark, 8 slots).
      for (const t of changed) {
        if (t !== msg.tenant)
          effects.push({
            kind: "send",
            to: { type: TENANT_ACTOR, id: t },
            msg: { kind: "share", share: state.shares.get(t)! } satisfies ShareMsg,
          });
      }
      return { state, reply: { share }, effects };
    },
  };
}
