/**
 * The heartbeat loop: every interval the slot advert and one batched heartbeat round (one
 * request per partition) for the attempts that need one; rounds asked for in between (offers to
 * confirm, starts waiting for an acknowledgement) coalesce, one in flight at a time. An
 * acknowledgement extends an attempt's validity from the round's SEND time (by the lease TTL, or
 * the owner's cover through the start); `lease_lost`/`not_found` kill it (an attempt that ended
 * keeps its completion for a probe: core.ts `refused`).
 */
import type { ItemResult } from "../cluster/router.ts";
import { encode } from "../cluster/codec.ts";
import {
  JOB_ACTOR,
  workerAdvertSubject,
  type HeartbeatAck,
  type WorkerAdvert,
} from "../protocol/worker.ts";
import type { WorkerCore } from "./core.ts";
import type { HeartbeatsPart } from "./types.ts";
import { coverOf, type Lease } from "./lease.ts";

/** Delay of the heartbeat round that acknowledges fresh offers (coalesces a burst). */
const BEAT_SOON_MS = 20;
/** Least time between an advert and one sent because a slot freed (`advertiseSoon`). */
export const ADVERT_GAP_MS = 10;

export class Heartbeats implements HeartbeatsPart {
  readonly #c: WorkerCore;
  #round: Promise<void> | undefined;
  #roundAgain = false;
  /** A periodic round was asked for while one was in flight: the next round is periodic. */
  #periodicAgain = false;
  #cancelSoon: (() => void) | undefined;
  #cancelBeat: (() => void) | undefined;
  #cancelAdvert: (() => void) | undefined;
  /** Monotonic time of the last slot advert. */
  #advertisedAtMono = Number.NEGATIVE_INFINITY;
  /** Starts and completions since the advert clock was last looked at (`stayHeard`). */
  #sinceLook = 0;

  constructor(c: WorkerCore) {
    this.#c = c;
  }

  stop(): void {
    this.#cancelBeat?.();
    this.#cancelAdvert?.();
  }

  stopSoon(): void {
    this.#cancelSoon?.();
  }

  /** The periodic beat: the advert, a periodic round, and the next beat after an interval. */
  beat(): void {
    const { o } = this.#c;
    if (this.#c.stopping) return;
    this.advertise();
    void this.heartbeatAll(true);
    this.#cancelBeat = o.clock.setTimer(o.heartbeatIntervalMs, () => this.beat());
  }

  /** A heartbeat round shortly (coalesces the acknowledgements of a burst of offers). */
  beatSoon(): void {
    if (this.#cancelSoon || this.#c.stopping) return;
    this.#cancelSoon = this.#c.o.clock.setTimer(BEAT_SOON_MS, () => {
      this.#cancelSoon = undefined;
      void this.heartbeatAll();
    });
  }

  /**
   * One batched heartbeat for every attempt this worker holds (accepted, running, or waiting for
   * its completion to be acknowledged): one NATS request per partition. One heartbeat round in
   * flight at a time; calls meanwhile coalesce into one more round after it.
   */
  heartbeatAll(periodic = false): Promise<void> {
    if (this.#round) {
      this.#roundAgain = true;
      this.#periodicAgain ||= periodic;
      return this.#round;
    }
    this.#round = this.#heartbeatRound(periodic).finally(() => {
      this.#round = undefined;
      if (this.#roundAgain && !this.#c.stopping) {
        const again = this.#periodicAgain;
        this.#roundAgain = false;
        this.#periodicAgain = false;
        void this.heartbeatAll(again);
      }
    });
    return this.#round;
  }

  async #heartbeatRound(periodic: boolean): Promise<void> {
    const c = this.#c;
    const { o } = c;
    c.parts.fencing.enforce();
    const wallNow = o.clock.now();
    const live = c.table
      .awakeLeases()
      .filter((l) => !l.lost && this.#needsBeat(l, wallNow, periodic));
    if (live.length === 0) return;
    const sentAt = o.clock.monoMs();
    // A completion carries started_at itself: a heartbeat of an attempt that ended does not also
    // report its start (that would be one more actor turn and run-record write for nothing).
    const reportsStart = live.map((l) => l.startedAtMs !== undefined && !l.completion);
    const results = await o.router.requestMany(
      live.map((l, i) => ({
        to: { type: JOB_ACTOR, id: l.req.job_actor },
        msg: {
          kind: "heartbeat",
          run_id: l.req.run_id,
          fence: l.req.fence,
          worker: o.workerId,
          ...(reportsStart[i] ? { started_at_ms: l.startedAtMs } : {}),
        },
      })),
      { deadlineMs: o.heartbeatIntervalMs },
    );
    // A lease that lapsed while the round was out is not revived by its reply.
    c.parts.fencing.enforce();
    await Promise.all(results.map((r, i) => this.#answered(live[i]!, r, sentAt)));
    c.parts.fencing.armFence();
  }

  /**
   * One attempt's answer in a round sent at `sentAt`: its validity extended, or the attempt killed.
   */
  async #answered(l: Lease, r: ItemResult, sentAt: number): Promise<void> {
    const c = this.#c;
    const { o } = c;
    if (c.table.leases.get(l.key) !== l || l.lost) return;
    if (r.ok) {
      const ack = r.v as Partial<HeartbeatAck> | null;
      l.validUntilMono = Math.max(l.validUntilMono ?? 0, sentAt + coverOf(ack, l) - c.margin(l));
      l.ackSentMono = Math.max(l.ackSentMono ?? sentAt, sentAt);
      l.execution?.renewLease?.(l.validUntilMono - o.clock.monoMs());
      // A gated run (look-ahead under overlap skip) starts only on an acknowledgement without
      // `hold`; a due one that is still held asks again shortly (the owner decides at its due
      // instant).
      l.held = !l.execution && ack?.hold === true;
      if (l.due && l.held) this.beatSoon();
      if (l.due && c.fresh(l)) {
        c.parts.starts.run(l);
        // Fenced now, not by the `armFence` after this round: the round may wait on a kill of
        // another attempt (a container still being created) past this one's validity.
        c.parts.fencing.fenceBy([l]);
      }
      if (l.completion) c.parts.outbox.report(l); // a report given up by a stall, say: sent again
      c.parts.fencing.parkIfCovered(l);
    } else if (r.e.code === "lease_lost" || r.e.code === "not_found") {
      o.onEvent?.({ type: "lease_lost", run_id: l.req.run_id, attempt: l.req.attempt });
      // Ended (its report waits for its next copy): nothing to kill, its completion is kept.
      if (l.completion) c.refused(l);
      else await c.kill(l, "lease lost", true);
    }
  }

  /**
   * Whether this round heartbeats `l`. An attempt acknowledged with a cover through its start
   * (`cover_ms`, the usual case: its owner's lease runs until start_at + TTL — run-lifecycle.ts
   * `leaseEndMs`, `heartbeatAck`) is left out until it starts: a run prepared minutes ahead costs
   * one heartbeat, its claim. (Asking again as the start neared put 200,000 acknowledgements of a
   * 5-minute look-ahead into the same seconds before the burst, on a scheduler already saturated.)
   * Without a cover (an owner that sent none, or a `hold` since lifted), an attempt waiting for a
   * start more than half a lease TTL away is left out, and the rounds within the last window
   * before it (half the TTL, at least two heartbeat intervals, at most TTL − margin) make its
   * acknowledgement fresh at start_at and tell a gated run `hold` or go; if none is, it asks at
   * start_at and starts on the acknowledgement.
   */
  #needsBeat(l: Lease, wallNow: number, periodic: boolean): boolean {
    const { o } = this.#c;
    // Ended, its report sent: the report's copies keep the owner's lease, not heartbeats
    // (outbox.ts `report`) — unless its owner answered the last copy with an error.
    if (l.completion && l.reportCopies !== undefined && l.reportRefused !== true) return false;
    if (l.due || l.held || l.validUntilMono === undefined) return true;
    // A start is not news that cannot wait: the owner learns it from the next round that carries
    // the lease (the periodic one at the latest), or from the completion if the attempt ends
    // first. A burst's short runs then cost their owners one message each, not two (the start
    // notice was an actor turn and a run-record write per run at the due second). Until then the
    // owner's lease runs from start_at (run-lifecycle.ts `leaseEndMs`), as for any started run.
    // Every periodic round (each interval) carries every lease it always did. The rounds asked
    // for in between (a burst of offers, starts and completions each asks for one soon; they also
    // run back to back) carry a lease at most once per half interval: re-sending every lease in
    // each of them flooded the owners (a 200,000-run burst: 67,000 leases re-sent per round).
    if (!periodic) {
      const sinceAck = o.clock.monoMs() - (l.ackSentMono ?? Number.NEGATIVE_INFINITY);
      if (sinceAck < o.heartbeatIntervalMs / 2) return false;
    }
    // Running, ended, or waiting in the prefetch queue for a slot (fresh when it takes one).
    if (l.execution || l.completion || l.waitingSlot) return true;
    // Acknowledged through its start (the claim's `cover_ms`): nothing to ask before it starts.
    if (this.#c.parts.fencing.coveredThroughStart(l, l.validUntilMono, wallNow)) return false;
    // At least two rounds before start_at, each acknowledgement still fresh at start_at.
    const window = Math.min(
      l.req.lease_ttl_ms - this.#c.margin(l),
      Math.max(l.req.lease_ttl_ms / 2, 2 * o.heartbeatIntervalMs),
    );
    return l.req.start_at_ms - wallNow <= window;
  }

  /**
   * Called for every start and every completion: in a long synchronous stretch of them (a
   * burst's attempts start in one loop at their due instant, and their completions follow in
   * microtasks) the heartbeat timer cannot fire, and a worker that sent no advert for three
   * intervals is forgotten by the schedulers' directories — silent ≥ 9-15 s at the 200,000
   * burst (README, "Known limitations"). Every 256 calls it looks at the clock, and once an
   * interval has passed since the last advert, sends one and flushes the connection at once (a
   * publish is otherwise written in a microtask, after the stretch).
   */
  stayHeard(): void {
    const { o } = this.#c;
    if (++this.#sinceLook < 256 || this.#c.stopping) return;
    this.#sinceLook = 0;
    if (o.clock.monoMs() - this.#advertisedAtMono < o.heartbeatIntervalMs) return;
    this.advertise();
    if (!o.nc.isClosed()) o.nc.flush().catch(() => undefined);
  }

  /**
   * An advert soon (at most one per ADVERT_GAP_MS): a slot or a place in the prefetch queue freed,
   * and the schedulers' directories hear of it now rather than at the next beat.
   */
  advertiseSoon(): void {
    if (this.#cancelAdvert || this.#c.stopping) return;
    const { clock } = this.#c.o;
    const wait = Math.max(0, this.#advertisedAtMono + ADVERT_GAP_MS - clock.monoMs());
    this.#cancelAdvert = clock.setTimer(wait, () => {
      this.#cancelAdvert = undefined;
      if (!this.#c.stopping) this.advertise();
    });
  }

  /**
   * The slot advert: its slots, its prefetch, `free` — the offers it would take now (free slots
   * and the free places in the prefetch queue a late offer may take: slot-ledger.ts `room`; a
   * draining worker advertises none) — and its executing attempts by tenant.
   */
  advertise(): void {
    // On the data connection, the path offers take: an advert proves it (a worker whose data
    // connection is down must not go on advertising free slots from another).
    const { o } = this.#c;
    const { nc, clusterName, workerId, slots } = o;
    if (nc.isClosed()) return;
    this.#advertisedAtMono = o.clock.monoMs();
    const ledger = this.#c.table.slots;
    const free = this.#c.draining ? 0 : ledger.room;
    nc.publish(
      workerAdvertSubject(clusterName, workerId),
      encode({
        worker_id: workerId,
        slots,
        free,
        executor: o.executor.kind,
        prefetch: ledger.prefetch,
        executing: Object.fromEntries(this.#c.executing),
      } satisfies WorkerAdvert),
    );
  }
}
