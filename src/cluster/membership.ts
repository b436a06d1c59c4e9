/**
 * Node membership: each node publishes a heartbeat on `kairos.<cluster>.node.hb.<s|n>` every
 * `heartbeatIntervalMs` and a goodbye on `…node.leave.<s|n>`; a peer is gone after
 * `failureTimeoutMs` silent. `s` is for scheduler identities only (NATS permissions): placement
 * counts only schedulers heard on `s`, and nothing on `n` can change a scheduler's record, so a
 * worker credential cannot invent or evict schedulers. Records also go to the `nodes` bucket
 * (TTL) for `kairos cluster status`.
 *
 * Pitfalls: the view is local and may briefly disagree between nodes; ownership is decided by
 * partition leases, not by it. A peer's clock skew (`kairos_clock_skew_seconds`) is its `sentMs`
 * minus our clock at arrival, so it is understated by the one-way latency.
 */
import type { Bus, BusSubscription } from "./bus.ts";
import type { Clock } from "../lib/clock.ts";
import { decode, encode } from "./codec.ts";
import type { EventBus } from "./events.ts";
import type { KvStore } from "./kv.ts";
import { creditedSeen, Listening, type Heard } from "./listening.ts";
import { countBusRefusal } from "../metrics/index.ts";

export interface MemberInfo {
  nodeId: string;
  incarnation: string;
  roles: string[];
  startedAtMs: number;
}

export interface Peer extends MemberInfo, Heard {
  /** When last heard, credited with time this node could not listen (listening.ts `creditedSeen`). */
  lastSeenMs: number;
  /** The peer's clock minus this node's at its last heartbeat's arrival (undefined: its beats carry no time). */
  skewMs?: number | undefined;
}

/** A heartbeat on the wire: the member and its sender's wall clock when sent. */
interface Beat extends MemberInfo {
  sentMs?: number;
}

/** Longest node id, incarnation or role a membership message may carry (ids are far shorter). */
const MAX_MEMBER_STRING = 256;
/** Most roles a heartbeat may name (there are three). */
const MAX_MEMBER_ROLES = 8;

const memberString = (v: unknown): v is string =>
  typeof v === "string" && v.length > 0 && v.length <= MAX_MEMBER_STRING;

function isBeat(v: unknown): v is Beat {
  if (typeof v !== "object" || v === null) return false;
  const b = v as Partial<Record<keyof Beat, unknown>>;
  return (
    memberString(b.nodeId) &&
    memberString(b.incarnation) &&
    typeof b.startedAtMs === "number" &&
    Array.isArray(b.roles) &&
    b.roles.length <= MAX_MEMBER_ROLES &&
    b.roles.every(memberString) &&
    (b.sentMs === undefined || typeof b.sentMs === "number")
  );
}

function isGoodbye(v: unknown): v is { nodeId: string; incarnation: string } {
  if (typeof v !== "object" || v === null) return false;
  const g = v as { nodeId?: unknown; incarnation?: unknown };
  return memberString(g.nodeId) && memberString(g.incarnation);
}

/**
 * The message a membership body carries, or undefined (counted) when it is not one. Anyone who
 * may publish on `node.hb|leave.n` (every worker identity) reaches every node's subscription, and
 * an exception thrown from a NATS callback ends the client's reader: that connection then hears
 * nothing more (membership, adverts, its node record's answers) until the process restarts.
 */
function parsed<T>(data: Uint8Array, is: (v: unknown) => v is T): T | undefined {
  let v: unknown;
  try {
    v = decode<unknown>(data);
  } catch {
    v = undefined;
  }
  if (is(v)) return v;
  countBusRefusal("membership", "malformed");
  return undefined;
}

/** Pure: the live members at `nowMs` (sorted ids). */
export function liveMembers(
  peers: Iterable<Peer>,
  nowMs: number,
  failureTimeoutMs: number,
  role?: string,
): string[] {
  const out: string[] = [];
  for (const p of peers) {
    if (nowMs - p.lastSeenMs <= failureTimeoutMs && (role === undefined || p.roles.includes(role)))
      out.push(p.nodeId);
  }
  return out.sort();
}

export interface MembershipOptions {
  nc: Bus;
  clusterName: string;
  self: MemberInfo;
  clock: Clock;
  events: EventBus;
  nodesKv: KvStore;
  heartbeatIntervalMs: number;
  failureTimeoutMs: number;
  onChange: () => void;
}

export class Membership {
  readonly #o: MembershipOptions;
  readonly #peers = new Map<string, Peer>();
  #subs: BusSubscription[] = [];
  #cancelTimer: (() => void) | undefined;
  #stopped = false;
  #beats = 0;
  /** When this node's own heartbeat loop last ran: how far its listening reaches (listening.ts). */
  readonly #listening: Listening;

  constructor(o: MembershipOptions) {
    this.#o = o;
    this.#listening = new Listening(o.clock, o.heartbeatIntervalMs);
    this.#listening.start();
    const t0 = o.clock.now();
    this.#peers.set(o.self.nodeId, { ...o.self, lastSeenMs: t0, heardMs: t0, longestDeafMs: 0 });
  }

  /**
   * The time peers are judged at: now, but no later than one interval past this node's own last
   * heartbeat tick. A node whose event loop stalled for seconds heard nobody meanwhile (their
   * heartbeats wait in its socket): that proves nothing about them, and it must not drop its
   * peers — nor itself — from placement (a 200,000-run burst: the scheduler released all its
   * partitions after a 4.7 s stall, then spent minutes reloading them).
   */
  #judgeAt(): number {
    return this.#listening.judgeAt();
  }

  /** While running, this node is live to itself whatever its loop did. */
  #touchSelf(): void {
    if (this.#stopped) return;
    const me = this.#peers.get(this.#o.self.nodeId);
    if (me) me.lastSeenMs = Math.max(me.lastSeenMs, this.#judgeAt());
  }

  get subjectPrefix(): string {
    return `kairos.${this.#o.clusterName}.node`;
  }

  /** `s` when this node speaks as a scheduler (its identity may publish there), else `n`. */
  get #voice(): "s" | "n" {
    return this.#o.self.roles.includes("scheduler") ? "s" : "n";
  }

  start(): void {
    const { nc } = this.#o;
    // Which voice a message came in: `s`, `n`, or neither. Only the exact subject counts: a
    // JetStream push consumer delivers a stored message to whatever deliver subject its creator
    // chose, under the message's own subject (`$KV.<bucket>.<key>`, a key like `x.s`) — as the
    // account, past every permission — so a suffix check would believe a KV write as a scheduler.
    const voiceOf = (kind: "hb" | "leave", subject: string): boolean | undefined => {
      if (subject === `${this.subjectPrefix}.${kind}.s`) return true;
      if (subject === `${this.subjectPrefix}.${kind}.n`) return false;
      countBusRefusal("membership", "subject");
      return undefined;
    };
    this.#subs.push(
      // A subscription error (permission violation) arrives as a callback with an empty message.
      nc.subscribe(`${this.subjectPrefix}.hb.*`, {
        callback: (e, m) => {
          if (e) return;
          const s = voiceOf("hb", m.subject);
          if (s === undefined) return;
          const b = parsed(m.data, isBeat);
          // Only the fields a heartbeat has: nothing else a sender adds is kept.
          if (b !== undefined)
            this.#onBeat(
              {
                nodeId: b.nodeId,
                incarnation: b.incarnation,
                roles: [...b.roles],
                startedAtMs: b.startedAtMs,
                ...(b.sentMs === undefined ? {} : { sentMs: b.sentMs }),
              },
              s,
            );
        },
      }),
      nc.subscribe(`${this.subjectPrefix}.leave.*`, {
        callback: (e, m) => {
          if (e) return;
          const s = voiceOf("leave", m.subject);
          if (s === undefined) return;
          const bye = parsed(m.data, isGoodbye);
          if (bye !== undefined) this.#onLeave(bye, s);
        },
      }),
    );
    this.#tick();
  }

  /** Live members, optionally only those with `role`. Always includes self while running. */
  live(role?: string): string[] {
    this.#touchSelf();
    return liveMembers(this.#peers.values(), this.#judgeAt(), this.#o.failureTimeoutMs, role);
  }

  isLive(nodeId: string, incarnation?: string): boolean {
    this.#touchSelf();
    const p = this.#peers.get(nodeId);
    if (!p) return false;
    if (incarnation !== undefined && p.incarnation !== incarnation) return false;
    return this.#judgeAt() - p.lastSeenMs <= this.#o.failureTimeoutMs;
  }

  /** Stops heartbeating and tells the others at once, so placement moves without waiting. */
  async leave(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#cancelTimer?.();
    const { nc, self } = this.#o;
    if (!nc.isClosed()) {
      nc.publish(
        `${this.subjectPrefix}.leave.${this.#voice}`,
        encode({ nodeId: self.nodeId, incarnation: self.incarnation }),
      );
      await nc.flush().catch(() => undefined);
      await this.#o.nodesKv.delete(self.nodeId).catch(() => undefined);
    }
  }

  async stop(): Promise<void> {
    await this.leave();
    for (const s of this.#subs) s.unsubscribe();
    this.#subs = [];
  }

  #tick(): void {
    if (this.#stopped) return;
    const { nc, self, clock } = this.#o;
    const now = clock.now();
    // This loop ran late (the event loop stalled): credit every peer with the time this node
    // could not listen, so the next expiry judges only time it did — at most one failure timeout
    // past when it was last heard.
    const deaf = this.#listening.tick();
    if (deaf > 0) {
      for (const p of this.#peers.values()) {
        p.lastSeenMs = creditedSeen(p, p.lastSeenMs, deaf, now, this.#o.failureTimeoutMs);
      }
    }
    this.#peers.set(self.nodeId, { ...self, lastSeenMs: now, heardMs: now, longestDeafMs: 0 });
    if (!nc.isClosed()) {
      nc.publish(
        `${this.subjectPrefix}.hb.${this.#voice}`,
        encode({ ...self, sentMs: now } satisfies Beat),
      );
      if (this.#beats++ % 4 === 0) {
        this.#o.nodesKv
          .put(self.nodeId, encode({ ...self, lastSeenMs: now }))
          .catch(() => undefined);
      }
    }
    this.#expire(now);
    this.#cancelTimer = clock.setTimer(this.#o.heartbeatIntervalMs, () => this.#tick());
  }

  #expire(now: number): void {
    let changed = false;
    for (const [id, p] of this.#peers) {
      if (id !== this.#o.self.nodeId && now - p.lastSeenMs > this.#o.failureTimeoutMs) {
        this.#peers.delete(id);
        this.#o.events.emit({ type: "member_left", nodeId: id, reason: "timeout" });
        changed = true;
      }
    }
    if (changed) this.#o.onChange();
  }

  /** A live peer heard as a scheduler: only a scheduler identity may change its record. */
  #isScheduler(p: Peer | undefined): boolean {
    return (
      p !== undefined &&
      p.roles.includes("scheduler") &&
      this.#judgeAt() - p.lastSeenMs <= this.#o.failureTimeoutMs
    );
  }

  /** Each live peer's clock skew against this node's, in ms (see the module header). */
  skews(): Map<string, number> {
    const out = new Map<string, number>();
    for (const [id, p] of this.#peers)
      if (id !== this.#o.self.nodeId && p.skewMs !== undefined) out.set(id, p.skewMs);
    return out;
  }

  #onBeat(beat: Beat, fromScheduler: boolean): void {
    if (beat.nodeId === this.#o.self.nodeId) return;
    const prev = this.#peers.get(beat.nodeId);
    if (!fromScheduler && this.#isScheduler(prev)) return;
    const { sentMs, ...raw } = beat;
    const info = fromScheduler
      ? raw
      : { ...raw, roles: raw.roles.filter((r) => r !== "scheduler") };
    const heard = this.#o.clock.now();
    const skewMs =
      typeof sentMs === "number" && Number.isFinite(sentMs) ? sentMs - heard : undefined;
    this.#peers.set(info.nodeId, {
      ...info,
      lastSeenMs: heard,
      heardMs: heard,
      longestDeafMs: 0,
      skewMs,
    });
    if (!prev || prev.incarnation !== info.incarnation) {
      this.#o.events.emit({ type: "member_joined", nodeId: info.nodeId, roles: info.roles });
      this.#o.onChange();
    }
  }

  #onLeave(info: { nodeId: string; incarnation: string }, fromScheduler: boolean): void {
    const p = this.#peers.get(info.nodeId);
    if (!p || p.incarnation !== info.incarnation || info.nodeId === this.#o.self.nodeId) return;
    if (!fromScheduler && this.#isScheduler(p)) return;
    this.#peers.delete(info.nodeId);
    this.#o.events.emit({ type: "member_left", nodeId: info.nodeId, reason: "leave" });
    this.#o.onChange();
  }
}
