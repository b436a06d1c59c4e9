/**
 * How much of a worker's advert a scheduler believes — pure decisions, no I/O and no clock (the
 * worker directory, worker-directory.ts, passes `nowMs`). A worker identity can advertise only on
 * its own subject, but what it says there is its own word (docs/security.md, "Workers speak only
 * for themselves"), and the directory offers to the worker with the most free slots, each offer
 * carrying its task and the task's secrets. Two defences:
 *
 * - **Clamp** (`clampAdvert`): no advert is believed beyond the operator's limits per worker
 *   identity (`kairos node --max-worker-slots`, `--max-worker-prefetch`; NodeConfig): `slots` and
 *   `prefetch` are cut to them and `free` to their sum, so one identity draws at most that many
 *   offers per advert and adds at most that much to the capacity the fleet actor shares. Its
 *   `executing` (attempts running by tenant) is believed only whole: ids, counts ≥ 1, at most one
 *   per believed slot — a lying worker can tilt the fleet's rounding by its own slots at most.
 * - **Standing** (`afterOffer`, `standingAt`, `believedFree`): a worker that leaves an offer
 *   unanswered (timeout, no responder, an unreadable answer) is *benched* — believed to have no
 *   room, whatever it advertises — for `backoffMs(strikes)`, which doubles with every strike up to
 *   BACKOFF_MAX_MS. Then it is *on trial*: believed to have room for one offer at a time. An
 *   answer to the trial (acceptance or refusal) makes it trusted again; silence benches it for
 *   twice as long. Strikes are forgotten once it has answered FORGIVE_ANSWERS offers since (or
 *   stayed trusted FORGIVE_MS): a worker that answers its trial and then sits on the next flood
 *   of offers is benched longer each time, while an honest worker on a lossy link, which answers
 *   nearly every offer, keeps its benches short.
 *
 *   trusted ──unanswered──▶ benched ──interval over──▶ on_trial ──answered──▶ trusted
 *                              ▲                          │
 *                              └───────unanswered─────────┘
 *
 * Gotchas: answers to offers made before the worker was benched do not restore it (only the trial
 * does), and further silence while benched adds no strike (the offers of one flood time out
 * together: one strike, not one per offer). A trial whose outcome never comes back (the dispatch
 * was dropped before the offer was sent) is given up after TRIAL_STALE_MS, and another is allowed.
 */
import { DEFAULTS, type NodeConfig } from "../cluster/config.ts";
import { assertNever } from "../lib/assert.ts";
import { isValidId } from "../protocol/ids.ts";
import type { WorkerAdvert } from "../protocol/worker.ts";

/** The operator's bounds on what one worker identity's advert is believed for (NodeConfig). */
export interface AdvertLimits {
  /** Most slots believed of one worker. */
  readonly maxSlots: number;
  /** Most prefetch places believed of one worker. */
  readonly maxPrefetch: number;
}

/** The node config's defaults (`--max-worker-slots` 1,024, `--max-worker-prefetch` 256). */
export const DEFAULT_ADVERT_LIMITS: AdvertLimits = Object.freeze({
  maxSlots: DEFAULTS.maxWorkerSlots,
  maxPrefetch: DEFAULTS.maxWorkerPrefetch,
});

/** The limits of a node config. */
export function advertLimits(
  c: Pick<NodeConfig, "maxWorkerSlots" | "maxWorkerPrefetch">,
): AdvertLimits {
  return Object.freeze({ maxSlots: c.maxWorkerSlots, maxPrefetch: c.maxWorkerPrefetch });
}

/** The fields of an advert that can be cut by the limits. */
export type ClampedField = "slots" | "prefetch" | "free" | "executing";

/**
 * An advert's `executing` as believed: tenant ids that are ids, counts that are whole numbers ≥ 1,
 * at most one per slot in all; anything else (a worker's word, or a malformed advert) is not
 * believed at all (undefined: the fleet then knows nothing of this worker's executions).
 */
function believedExecuting(
  e: unknown,
  slots: number,
): { executing: Record<string, number> | undefined; ok: boolean } {
  if (e === undefined) return { executing: undefined, ok: true };
  if (typeof e !== "object" || e === null || Array.isArray(e))
    return { executing: undefined, ok: false };
  let sum = 0;
  const entries = Object.entries(e as Record<string, unknown>);
  if (entries.length > slots) return { executing: undefined, ok: false };
  for (const [tenant, n] of entries) {
    if (!isValidId(tenant) || typeof n !== "number" || !Number.isInteger(n) || n < 1)
      return { executing: undefined, ok: false };
    sum += n;
  }
  return sum <= slots
    ? { executing: e as Record<string, number>, ok: true }
    : { executing: undefined, ok: false };
}

/** The advert as believed, and which of its fields were cut (empty: believed as sent). */
export function clampAdvert(
  a: WorkerAdvert,
  limits: AdvertLimits,
): { advert: WorkerAdvert; clamped: ClampedField[] } {
  const clamped: ClampedField[] = [];
  const slots = Math.max(0, Math.min(a.slots, limits.maxSlots));
  if (slots !== a.slots) clamped.push("slots");
  const prefetch =
    a.prefetch === undefined ? undefined : Math.max(0, Math.min(a.prefetch, limits.maxPrefetch));
  if (prefetch !== a.prefetch) clamped.push("prefetch");
  // `free` counts free slots and free prefetch places: never more than both together.
  const free = Math.max(0, Math.min(a.free, slots + (prefetch ?? 0)));
  if (free !== a.free) clamped.push("free");
  const { executing, ok } = believedExecuting(a.executing, slots);
  if (!ok) clamped.push("executing");
  if (clamped.length === 0) return { advert: a, clamped };
  const { executing: _sent, ...rest } = a;
  return {
    advert: {
      ...rest,
      slots,
      free,
      ...(prefetch !== undefined ? { prefetch } : {}),
      ...(executing !== undefined ? { executing } : {}),
    },
    clamped,
  };
}

/** The first bench: longer than an offer's timeout (2 s) and a redispatch, so the runs a silent worker drew are placed elsewhere first. */
export const BACKOFF_BASE_MS = 5_000;
/** The longest bench: a liar draws one trial offer a minute, an honest worker back from a long outage waits at most this long. */
export const BACKOFF_MAX_MS = 60_000;
/** Strikes are forgotten after this many answers since the worker was trusted again… */
export const FORGIVE_ANSWERS = 16;
/** …or after this long trusted. */
export const FORGIVE_MS = 600_000;
/** A trial offer not reported within this long is given up (another may be made). */
export const TRIAL_STALE_MS = BACKOFF_BASE_MS;

/** Where a worker stands with this scheduler. `strikes`: benches since it was last forgiven. */
export type Standing =
  /** `answered`: offers answered since it was trusted again. */
  | { kind: "trusted"; strikes: number; since_ms: number; answered: number }
  | { kind: "benched"; strikes: number; until_ms: number }
  /** `trial_ms`: when the one trial offer was made, null while none is out. */
  | { kind: "on_trial"; strikes: number; trial_ms: number | null };

/** A worker never benched (or forgiven). */
export const TRUSTED: Standing = Object.freeze({
  kind: "trusted",
  strikes: 0,
  since_ms: 0,
  answered: 0,
});

/** What became of an offer: any answer, or none (timeout, no responder, unreadable). */
export type OfferOutcome = "answered" | "unanswered";

/** The bench after `strikes` strikes: BACKOFF_BASE_MS doubled per strike after the first, capped. */
export function backoffMs(strikes: number): number {
  const n = Math.max(1, Math.min(strikes, 32));
  return Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** (n - 1));
}

/** The standing as time has moved it: a bench that ended is a trial; a stale trial is open again; old strikes forgiven. */
export function standingAt(s: Standing, nowMs: number): Standing {
  switch (s.kind) {
    case "trusted":
      return s.strikes > 0 && nowMs - s.since_ms >= FORGIVE_MS ? TRUSTED : s;
    case "benched":
      return nowMs >= s.until_ms ? { kind: "on_trial", strikes: s.strikes, trial_ms: null } : s;
    case "on_trial":
      return s.trial_ms !== null && nowMs - s.trial_ms >= TRIAL_STALE_MS
        ? { ...s, trial_ms: null }
        : s;
    default:
      return assertNever(s, "standing");
  }
}

/** The standing after an offer's outcome. */
export function afterOffer(s: Standing, outcome: OfferOutcome, nowMs: number): Standing {
  const now = standingAt(s, nowMs);
  const bench = (strikes: number): Standing => ({
    kind: "benched",
    strikes,
    until_ms: nowMs + backoffMs(strikes),
  });
  switch (now.kind) {
    case "trusted":
      if (outcome === "unanswered") return bench(now.strikes + 1);
      if (now.strikes === 0) return now;
      return now.answered + 1 >= FORGIVE_ANSWERS ? TRUSTED : { ...now, answered: now.answered + 1 };
    case "benched":
      return now; // answers to offers made before the bench, or more of the same silence
    case "on_trial":
      return outcome === "answered"
        ? { kind: "trusted", strikes: now.strikes, since_ms: nowMs, answered: 0 }
        : bench(now.strikes + 1);
    default:
      return assertNever(now, "standing");
  }
}

/** The free places believed of a worker that advertised `free` (after the clamp). */
export function believedFree(s: Standing, free: number): number {
  switch (s.kind) {
    case "trusted":
      return free;
    case "benched":
      return 0;
    case "on_trial":
      return s.trial_ms === null ? Math.min(free, 1) : 0;
    default:
      return assertNever(s, "standing");
  }
}

/** The standing once an offer was picked for the worker (a trial offer is now out). */
export function afterPick(s: Standing, nowMs: number): Standing {
  return s.kind === "on_trial" && s.trial_ms === null ? { ...s, trial_ms: nowMs } : s;
}

/** Whether the worker's places count in the fleet's capacity (only a trusted worker's do). */
export function countsInCapacity(s: Standing): boolean {
  return s.kind === "trusted";
}
