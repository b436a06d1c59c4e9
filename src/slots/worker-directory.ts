/**
 * The worker directory of a scheduler node (the dispatcher's view of the fleet): workers advertise
 * free slots on `kairos.<cluster>.adverts.<worker id>` — every heartbeat, and at once when a slot
 * frees (so a freed slot is known without waiting for a heartbeat); a worker is forgotten after
 * `expireAfterMs` without one. `pick()` chooses the most free slots, counting local reservations
 * since the last advert so a burst does not pile onto one worker. `optimistic`: when all
 * advertised slots are reserved, it still offers to a worker that has not refused since its last
 * advert (slots free up between adverts); a refusal (`markFull`) stops that until the next.
 * Dispatches that found no room wait here (`waitForRoom`, bounded) and are woken by the next
 * advert with room.
 *
 * An advert is a worker's own word: it is believed only up to the operator's limits per worker
 * identity, and a worker that leaves an offer unanswered is benched for a growing interval
 * (`markUnanswered`, `markAnswered`; the decisions are worker-trust.ts's). Standings outlive
 * forgetting: a benched worker that stops advertising and comes back is still benched.
 *
 * Pitfall: busy is not dead — expiry counts only time this process could listen
 * (src/cluster/listening.ts), so a stalled scheduler does not forget its workers; production
 * reads adverts on the control connection. A worker that itself stops advertising (its loop
 * busy starting a burst) is forgotten.
 */
import type { Bus, BusSubscription } from "../cluster/bus.ts";
import type { Clock } from "../lib/clock.ts";
import type { Random } from "../lib/random.ts";
import { decode } from "../cluster/codec.ts";
import { creditedSeen, Listening, type Heard } from "../cluster/listening.ts";
import {
  advertSubjectWorker,
  workerAdvertWildcard,
  type WorkerAdvert,
} from "../protocol/worker.ts";
import { countBusRefusal, countWorkerBench } from "../metrics/index.ts";
import {
  DEFAULT_ADVERT_LIMITS,
  TRUSTED,
  afterOffer,
  afterPick,
  believedFree,
  clampAdvert,
  countsInCapacity,
  standingAt,
  type AdvertLimits,
  type ClampedField,
  type OfferOutcome,
  type Standing,
} from "./worker-trust.ts";
import { OrderedMap } from "../lib/ordered-map.ts";

interface Entry extends WorkerAdvert, Heard {
  /** When last heard, credited with time this process could not listen. */
  seenMs: number;
  reserved: number;
  /** Refused an offer since its last heartbeat. */
  refused: boolean;
  /** Refused an offer on time since its last heartbeat (its places for those are full too). */
  refusedOnTime: boolean;
  /** Its last advert was above the limits (told once per run of such adverts). */
  clamped: boolean;
}

/** A well-formed advert (a worker's own process sends it, but its identity may be stolen). */
function isAdvert(a: unknown): a is WorkerAdvert {
  const v = a as Partial<WorkerAdvert> | null;
  return (
    typeof v === "object" &&
    v !== null &&
    typeof v.worker_id === "string" &&
    Number.isInteger(v.slots) &&
    Number.isInteger(v.free) &&
    typeof v.executor === "string" &&
    (v.prefetch === undefined || (Number.isInteger(v.prefetch) && v.prefetch >= 0))
  );
}

/** Most dispatches waiting for room on one node (`waitForRoom`); beyond it they wait for their timer. */
export const ROOM_WAITERS_LIMIT = 4_096;
/**
 * Most workers with a standing other than plain trust kept (benched, on trial, or strikes not yet
 * forgiven); beyond it the oldest is dropped. Pinned worker identities are as many as the
 * operator made; only the shared `worker` identity could name more.
 */
export const STANDINGS_LIMIT = 4_096;
/** The executing attempts by tenant (`executing`) are summed again at most this often. */
export const EXECUTING_SUM_MS = 100;

/** What the directory tells its node about workers it believes less than they say. */
export interface DirectoryOptions {
  /** When all advertised slots are reserved, still offer to a worker that has not refused. */
  optimistic?: boolean;
  /** The operator's per-worker limits (default DEFAULT_ADVERT_LIMITS). */
  limits?: AdvertLimits;
  onRefused?: (subject: string, reason: string) => void;
  /** A worker's adverts went above the limits (once, until one is within them again). */
  onClamped?: (workerId: string, fields: ClampedField[], advert: WorkerAdvert) => void;
  /** A worker was benched (an offer unanswered) or trusted again (its trial answered). */
  onStanding?: (workerId: string, standing: Standing) => void;
}

export class WorkerDirectory {
  readonly #workers = new Map<string, Entry>();
  /** Standings other than plain trust, by worker (bounded: STANDINGS_LIMIT). */
  readonly #standings = new OrderedMap<string, Standing>();
  readonly #limits: AdvertLimits;
  /** Dispatches that found no worker with room, by run, oldest first (`waitForRoom`). */
  readonly #waiters = new Map<string, () => void>();
  /** The same for runs on time (`waitForRoom`): woken first, by any advert. */
  readonly #onTimeWaiters = new Map<string, () => void>();
  #sub: BusSubscription | undefined;
  #cancelTick: (() => void) | undefined;
  readonly #listening: Listening;
  readonly #tickMs: number;
  /** When any worker last advertised, and since when adverts came with no gap longer than the expiry. */
  #lastAdvertMs = Number.NEGATIVE_INFINITY;
  #hearingSinceMs = Number.POSITIVE_INFINITY;
  /** The last sum of `executing`, when it was made, and whether an advert came since. */
  #executing: ReadonlyMap<string, number> | undefined;
  #executingAtMs = Number.NEGATIVE_INFINITY;
  #executingStale = true;
  constructor(
    private readonly clock: Clock,
    private readonly random: Random,
    private readonly expireAfterMs: number,
    private readonly opts: DirectoryOptions = {},
  ) {
    this.#limits = opts.limits ?? DEFAULT_ADVERT_LIMITS;
    // Three ticks per expiry: the workers' heartbeat interval when expiry is three of them.
    this.#tickMs = Math.max(1, Math.floor(expireAfterMs / 3));
    this.#listening = new Listening(clock, this.#tickMs);
  }

  /** Subscribes to the adverts and starts judging silence by listening time (until `stop`). */
  start(nc: Bus, cluster: string): void {
    this.#listening.start();
    this.#armTick();
    const advertPrefix = workerAdvertWildcard(cluster).slice(0, -1);
    this.#sub = nc.subscribe(workerAdvertWildcard(cluster), {
      // An error (a permission violation) comes with an empty message: nothing to observe.
      callback: (e, m) => {
        // Only on an advert subject: a JetStream push consumer delivers stored messages under
        // their own subject (`$KV.…`, membership.ts) to whatever subject its creator chose.
        if (e) return;
        if (!m.subject.startsWith(advertPrefix)) {
          countBusRefusal("adverts", "subject");
          return;
        }
        let a: WorkerAdvert;
        try {
          a = decode<WorkerAdvert>(m.data);
        } catch {
          return;
        }
        // Only the worker the subject names may advertise for it (NATS permissions pin a worker
        // identity to its own subject): an advert naming another is ignored, and counted.
        if (!isAdvert(a) || a.worker_id !== advertSubjectWorker(m.subject)) {
          countBusRefusal("adverts", "identity");
          this.opts.onRefused?.(
            m.subject,
            isAdvert(a)
              ? `advert names worker ${JSON.stringify(a.worker_id.slice(0, 80))}`
              : "malformed advert",
          );
          return;
        }
        this.observe(a);
      },
    });
  }

  stop(): void {
    this.#sub?.unsubscribe();
    this.#cancelTick?.();
    this.#cancelTick = undefined;
    this.#listening.stop(); // no tick any more: judge by the clock, or nothing would expire
  }

  observe(sent: WorkerAdvert): void {
    const now = this.clock.now();
    if (now - this.#lastAdvertMs > this.expireAfterMs) this.#hearingSinceMs = now;
    this.#lastAdvertMs = now;
    const { advert: a, clamped } = clampAdvert(sent, this.#limits);
    const wasClamped = this.#workers.get(a.worker_id)?.clamped === true;
    // It refused a run on time since its last advert: its places for those were full then, and
    // an advert does not say whether one freed since — only its room wakes waiters this time (a
    // full fleet's every advert would otherwise wake `prefetch` runs into refusals).
    const refusedOnTime = this.#workers.get(a.worker_id)?.refusedOnTime === true;
    if (clamped.length > 0) {
      countBusRefusal("adverts", "inflated");
      if (!wasClamped) this.opts.onClamped?.(a.worker_id, clamped, sent);
    }
    this.#workers.set(a.worker_id, {
      // Only the advert's own fields: whatever else a worker puts in its body is not kept.
      worker_id: a.worker_id,
      slots: a.slots,
      free: a.free,
      executor: a.executor,
      ...(a.prefetch !== undefined ? { prefetch: a.prefetch } : {}),
      ...(a.executing !== undefined ? { executing: a.executing } : {}),
      seenMs: now,
      heardMs: now,
      longestDeafMs: 0,
      reserved: 0,
      refused: false,
      refusedOnTime: false,
      clamped: clamped.length > 0,
    });
    this.#executingStale = true;
    // Runs on time first, in the worker's places for them (not in its advertised room: a light
    // tenant's run must not wait behind the backlogs' dispatches for a slot to free), then in its
    // room; the others in what room is left.
    const standing = this.#standing(a.worker_id, now);
    let onTimePlaces = standing.kind === "trusted" && !refusedOnTime ? (a.prefetch ?? 0) : 0;
    let room = believedFree(standing, a.free);
    for (const [key, wake] of this.#onTimeWaiters) {
      if (onTimePlaces > 0) onTimePlaces--;
      else if (room-- <= 0) break;
      this.#onTimeWaiters.delete(key);
      wake();
    }
    for (const [key, wake] of this.#waiters) {
      if (room-- <= 0) break;
      this.#waiters.delete(key);
      wake();
    }
  }

  /**
   * The dispatch of run `key` found no worker with room (or was refused): `wake` is called, once,
   * when an advert shows room — the longest waiting first, as many as the advert's room — so the
   * run is offered again at once rather than at its redispatch timer. A run waits once: asking
   * again keeps its place with the newer `wake`. False (not kept) when ROOM_WAITERS_LIMIT wait.
   * A run `onTime` (offered by its start, as a tenant within its share is: a worker keeps places
   * of its own for those, not counted in its room) waits apart and is woken first by any advert,
   * as many as the worker's `prefetch` and then its room.
   */
  waitForRoom(key: string, wake: () => void, onTime = false): boolean {
    const waiters = onTime ? this.#onTimeWaiters : this.#waiters;
    // Out of the other list first: a wake left there would be called for nothing.
    (onTime ? this.#waiters : this.#onTimeWaiters).delete(key);
    if (!waiters.has(key) && waiters.size >= ROOM_WAITERS_LIMIT) return false;
    waiters.set(key, wake);
    return true;
  }

  /** Run `key` no longer waits for room (its offer was accepted). */
  stopWaiting(key: string): void {
    this.#waiters.delete(key);
    this.#onTimeWaiters.delete(key);
  }

  /** Dispatches waiting for room (for tests). */
  get roomWaiters(): number {
    return this.#waiters.size + this.#onTimeWaiters.size;
  }

  #armTick(): void {
    this.#cancelTick = this.clock.setTimer(this.#tickMs, () => {
      const deaf = this.#listening.tick();
      if (deaf > 0) {
        const now = this.clock.now();
        for (const w of this.#workers.values()) {
          w.seenMs = creditedSeen(w, w.seenMs, deaf, now, this.expireAfterMs);
        }
      }
      this.#armTick();
    });
  }

  /**
   * Workers believed to have a free slot, best first; `exclude` skips ones that just refused. An
   * offer `onTime` may also go, optimistically, to a worker that refused only offers that came
   * late since its last advert (it keeps places of its own for runs on time).
   */
  pick(exclude: ReadonlySet<string> = new Set(), onTime = false): string | undefined {
    const now = this.#listening.judgeAt();
    const wallNow = this.clock.now();
    let best: Entry | undefined;
    let bestFree = 0;
    let hope: Entry | undefined; // optimistic: the least over-reserved worker that has not refused
    for (const [id, w] of this.#workers) {
      if (now - w.seenMs > this.expireAfterMs) {
        this.#workers.delete(id);
        continue;
      }
      if (exclude.has(id)) continue;
      const standing = this.#standings.size > 0 ? this.#standing(id, wallNow) : TRUSTED;
      const free = believedFree(standing, w.free) - w.reserved;
      if (free > bestFree || (free === bestFree && free > 0 && this.random.next() < 0.5)) {
        best = w;
        bestFree = free;
      }
      if (
        this.opts.optimistic &&
        !best &&
        standing.kind === "trusted" &&
        !(onTime ? w.refusedOnTime : w.refused) &&
        w.reserved < w.slots &&
        (!hope || free > hope.free - hope.reserved)
      )
        hope = w;
    }
    best ??= hope;
    if (!best) return undefined;
    best.reserved++;
    const s = this.#standings.get(best.worker_id);
    if (s) this.#standings.set(best.worker_id, afterPick(s, wallNow));
    return best.worker_id;
  }

  /** Whether some worker is believed to have a free slot not yet reserved (no optimism). */
  hasRoom(): boolean {
    const now = this.#listening.judgeAt();
    const wallNow = this.clock.now();
    for (const [id, w] of this.#workers) {
      if (now - w.seenMs > this.expireAfterMs) continue;
      if (believedFree(this.#standing(id, wallNow), w.free) - w.reserved > 0) return true;
    }
    return false;
  }

  /** Worker `workerId` answered an offer (accepted or refused it): a trial answered restores it. */
  markAnswered(workerId: string): void {
    this.#afterOffer(workerId, "answered");
  }

  /**
   * Worker `workerId` left an offer unanswered (timeout, no responder, an unreadable answer): it
   * is benched (worker-trust.ts), and takes no offer until its next advert in any case.
   */
  markUnanswered(workerId: string): void {
    this.#afterOffer(workerId, "unanswered");
    this.markFull(workerId, true);
  }

  /** Where `workerId` stands now (trusted unless benched, on trial, or with strikes not forgiven). */
  standing(workerId: string): Standing {
    return this.#standing(workerId, this.clock.now());
  }

  #afterOffer(workerId: string, outcome: OfferOutcome): void {
    const now = this.clock.now();
    const before = this.#standing(workerId, now);
    const after = afterOffer(before, outcome, now);
    if (after === before) return;
    this.#setStanding(workerId, after);
    if (after.kind === "benched") countWorkerBench();
    if (after.kind !== before.kind) this.opts.onStanding?.(workerId, after);
  }

  /** The standing as time has moved it (and stored so: a trial begins, strikes are forgiven). */
  #standing(workerId: string, now: number): Standing {
    const s = this.#standings.get(workerId);
    if (!s) return TRUSTED;
    const moved = standingAt(s, now);
    if (moved !== s) this.#setStanding(workerId, moved);
    return moved;
  }

  #setStanding(workerId: string, s: Standing): void {
    if (s.kind === "trusted" && s.strikes === 0) {
      this.#standings.delete(workerId);
      return;
    }
    if (!this.#standings.has(workerId) && this.#standings.size >= STANDINGS_LIMIT) {
      const oldest = this.#standings.oldest();
      if (oldest !== undefined) this.#standings.delete(oldest);
    }
    this.#standings.set(workerId, s);
  }

  /** Whether `workerId` advertised within `expireAfterMs` of listening time (it is not forgotten). */
  advertises(workerId: string): boolean {
    const w = this.#workers.get(workerId);
    return w !== undefined && this.#listening.judgeAt() - w.seenMs <= this.expireAfterMs;
  }

  /**
   * Whether `workerId` is known to have stopped advertising: not heard within the expiry, while
   * this node heard other workers' adverts with no gap longer than the expiry for at least the
   * expiry. A node that hears nobody (itself cut off from NATS, just reconnected, or the fleet's
   * only worker gone) knows nothing from silence (job-shell.ts `probe`: a probe's "no responders"
   * means the worker's process is gone only then).
   */
  stoppedAdvertising(workerId: string): boolean {
    const now = this.clock.now();
    return (
      !this.advertises(workerId) &&
      now - this.#hearingSinceMs >= this.expireAfterMs &&
      now - this.#lastAdvertMs <= this.expireAfterMs
    );
  }

  /**
   * A worker refused (full): stop offering it work until its next heartbeat — offers on time too
   * if it refused one (`onTime`).
   */
  markFull(workerId: string, onTime = false): void {
    const w = this.#workers.get(workerId);
    if (!w) return;
    w.reserved = Math.max(w.reserved, w.free);
    w.refused = true;
    if (onTime) w.refusedOnTime = true;
  }

  /**
   * The fleet's capacity as this node sees it: the places advertised by workers heard from within
   * `expireAfterMs` of listening — slots plus both prefetch queues, `prefetch` places each for
   * runs offered late and on time (busy or not; a draining worker still counts until it stops
   * advertising). The fleet actor shares this between tenants (src/slots/fleet-actor.ts): a
   * prefetched run holds its tenant's grant while it waits for a slot, so without the prefetch
   * every grant would have its slot and no worker would hold a run ready to start when a slot
   * frees (src/worker/slot-ledger.ts). The places for runs on time count too: a run prepared
   * ahead holds its grant from its offer, seconds before its start; uncounted, a light tenant's
   * prepared run took a place of the backlogs' prefetch, which was then often empty when a slot
   * freed (fleet benchmark, 8 slots: a run ready at 1 free in 5, each other turnaround a grant's
   * round trip or more). Slots and prefetch as clamped to the limits; a benched worker or one on
   * trial adds none. O(workers).
   */
  capacity(): number {
    const now = this.#listening.judgeAt();
    const wallNow = this.clock.now();
    let places = 0;
    for (const [id, w] of this.#workers) {
      if (now - w.seenMs > this.expireAfterMs) continue;
      // A benched worker (or one on trial) takes almost no offers: sharing its places would
      // grant tenants slots that only wait.
      if (this.#standings.size > 0 && !countsInCapacity(this.#standing(id, wallNow))) continue;
      places += w.slots + 2 * (w.prefetch ?? 0);
    }
    return places;
  }

  /**
   * The workers heard within the expiry, as this node believes them (the operators' view; at
   * most `max`, by id): their advert, clamped to the limits, and their standing.
   */
  list(max = 1_000): WorkerListing[] {
    const now = this.#listening.judgeAt();
    const wallNow = this.clock.now();
    const out: WorkerListing[] = [];
    for (const [id, w] of this.#workers) {
      if (now - w.seenMs > this.expireAfterMs) continue;
      out.push({
        worker_id: id,
        executor: w.executor,
        slots: w.slots,
        free: w.free,
        prefetch: w.prefetch ?? 0,
        standing: this.#standing(id, wallNow).kind,
      });
    }
    return out.sort((a, b) => a.worker_id.localeCompare(b.worker_id)).slice(0, max);
  }

  /**
   * The attempts executing on the fleet now, by tenant, as the workers counted in `capacity`
   * advertise them; undefined when one of them does not (a worker that predates the field, or
   * whose count was not believed: worker-trust.ts): the fleet actor then goes by grants held.
   * Summed again at most every EXECUTING_SUM_MS once an advert came (the same map until then: not
   * to be changed by the caller); O(entries of the workers' adverts).
   */
  executingByTenant(): ReadonlyMap<string, number> | undefined {
    const wallNow = this.clock.now();
    const age = wallNow - this.#executingAtMs;
    if (!(age >= this.#tickMs || (this.#executingStale && age >= EXECUTING_SUM_MS)))
      return this.#executing;
    this.#executingAtMs = wallNow;
    this.#executingStale = false;
    const now = this.#listening.judgeAt();
    const sum = new Map<string, number>();
    let known = true;
    for (const [id, w] of this.#workers) {
      if (now - w.seenMs > this.expireAfterMs) continue;
      if (this.#standings.size > 0 && !countsInCapacity(this.#standing(id, wallNow))) continue;
      if (!w.executing) {
        known = false;
        break;
      }
      for (const [tenant, n] of Object.entries(w.executing))
        sum.set(tenant, (sum.get(tenant) ?? 0) + n);
    }
    this.#executing = known ? sum : undefined;
    return this.#executing;
  }

  get size(): number {
    return this.#workers.size;
  }
}

/** A worker as `WorkerDirectory.list` shows it. */
export interface WorkerListing {
  worker_id: string;
  executor: string;
  slots: number;
  free: number;
  prefetch: number;
  standing: Standing["kind"];
}
