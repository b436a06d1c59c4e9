/**
 * The simulation's in-process bus: NATS core semantics (src/cluster/bus.ts) between simulated
 * processes, with fault knobs driven by the seeded Random.
 *
 * - Each process gets its own `SimEndpoint` (a "connection"); subjects match with NATS wildcards
 *   (`*` one token, `>` the rest); a queue group delivers each message to one member.
 * - Faults, per delivery: loss, duplication, delay (uniform in a range, on the simulation clock;
 *   different delays reorder messages). Faults off: delivery is a microtask, in order.
 * - Partitions: `partition(a, b)` cuts every endpoint of `a` from every one of `b` (both ways);
 *   `isolate(x)` cuts x from everyone. A request that only unreachable subscribers could answer
 *   times out (the message is lost); one that nobody subscribes to fails at once (no responders).
 * - An endpoint belongs to a process (see sim-clock.ts `SimProcess`): deliveries and request
 *   timeouts pass through its gate, so a paused process gets its backlog on resume and a crashed
 *   one gets nothing. `close()` is a crash of the connection: pending requests never settle.
 *
 * Passes the same conformance suite as a real nats-server (test/integration/bus-conformance.test.ts).
 */
import type { Bus, BusMsg, BusSubscribeOptions, BusSubscription } from "../../src/cluster/bus.ts";
import { keyMatches } from "../../src/cluster/kv.ts";
import type { Clock } from "../../src/lib/clock.ts";
import type { Random } from "../../src/lib/random.ts";

export interface BusFaults {
  /** Probability that one delivery is lost. */
  loss: number;
  /** Probability that one delivery arrives twice. */
  dup: number;
  /** Delivery delay range [min, max] ms; [0, 0] = immediate. */
  delayMs: readonly [number, number];
}

export const NO_BUS_FAULTS: BusFaults = Object.freeze({
  loss: 0,
  dup: 0,
  delayMs: [0, 0] as const,
});

/** What an endpoint needs from its process: a gate and a clock (request timeouts). */
export interface EndpointHost {
  readonly clock: Clock;
  gate(fn: () => void): void;
}

export class SimTimeoutError extends Error {
  override readonly name = "TimeoutError";
  constructor(subject: string) {
    super(`TIMEOUT: request on ${subject} timed out`);
  }
}

export class SimNoRespondersError extends Error {
  override readonly name = "NoRespondersError";
  constructor(subject: string) {
    super(`503: no responders for ${subject}`);
  }
}

interface Sub {
  /** Subscription order (matches are returned in it, as from one list). */
  readonly seq: number;
  readonly ep: SimEndpoint;
  readonly subject: string;
  readonly queue: string | undefined;
  readonly callback: BusSubscribeOptions["callback"];
  active: boolean;
}

/** Observes every delivery decision (for the simulation's trace). */
export type BusTap = (e: {
  kind: "lost" | "dup" | "cut";
  from: string;
  to: string;
  subject: string;
}) => void;

export class SimBus {
  faults: BusFaults;
  tap: BusTap | undefined;
  readonly #clock: Clock;
  readonly #random: Random;
  /**
   * Subscriptions indexed by subject: exact subjects (every request's inbox) in a map, wildcard
   * ones in a list. A filter over every subscription per message was a quarter of a simulation's
   * time (`keyMatches` splitting both subjects each time).
   */
  readonly #exact = new Map<string, Sub[]>();
  readonly #wild: Sub[] = [];
  /** The wildcard subscriptions matching a subject, until the wildcard list changes (bounded). */
  readonly #wildOf = new Map<string, Sub[]>();
  #seq = 0;
  readonly #cuts: { a: ReadonlySet<string>; b: ReadonlySet<string> }[] = [];
  readonly #isolated = new Map<string, number>();

  constructor(o: { clock: Clock; random: Random; faults?: BusFaults }) {
    this.#clock = o.clock;
    this.#random = o.random;
    this.faults = o.faults ?? NO_BUS_FAULTS;
  }

  /** A new connection for the process `host` (default: always running, on the bus clock). */
  endpoint(name: string, host?: EndpointHost): SimEndpoint {
    return new SimEndpoint(this, name, host ?? { clock: this.#clock, gate: (fn) => fn() });
  }

  /** Cuts every endpoint named in `a` from every one named in `b`; returns the heal. */
  partition(a: readonly string[], b: readonly string[]): () => void {
    const cut = { a: new Set(a), b: new Set(b) };
    this.#cuts.push(cut);
    return () => {
      const i = this.#cuts.indexOf(cut);
      if (i >= 0) this.#cuts.splice(i, 1);
    };
  }

  /** Cuts `name` from everyone; returns the heal. */
  isolate(name: string): () => void {
    this.#isolated.set(name, (this.#isolated.get(name) ?? 0) + 1);
    let healed = false;
    return () => {
      if (healed) return;
      healed = true;
      const n = (this.#isolated.get(name) ?? 1) - 1;
      if (n <= 0) this.#isolated.delete(name);
      else this.#isolated.set(name, n);
    };
  }

  reachable(from: string, to: string): boolean {
    if (from === to) return true;
    if (this.#isolated.has(from) || this.#isolated.has(to)) return false;
    for (const c of this.#cuts) {
      if ((c.a.has(from) && c.b.has(to)) || (c.b.has(from) && c.a.has(to))) return false;
    }
    return true;
  }

  /** @internal The next subscription's order number. */
  nextSeq(): number {
    return this.#seq++;
  }

  /** @internal */
  addSub(s: Sub): void {
    if (isWild(s.subject)) {
      this.#wild.push(s);
      this.#wildOf.clear();
    } else {
      const list = this.#exact.get(s.subject);
      if (list) list.push(s);
      else this.#exact.set(s.subject, [s]);
    }
  }

  /** @internal */
  removeSub(s: Sub): void {
    s.active = false;
    const list = isWild(s.subject) ? this.#wild : this.#exact.get(s.subject);
    const i = list ? list.indexOf(s) : -1;
    if (i >= 0) list!.splice(i, 1);
    if (list === this.#wild) this.#wildOf.clear();
    else if (list && list.length === 0) this.#exact.delete(s.subject);
  }

  /** @internal Subscriptions matching `subject` (any endpoint), in subscription order. */
  matching(subject: string): Sub[] {
    const live = (s: Sub) => s.active && !s.ep.isClosed();
    const exact = (this.#exact.get(subject) ?? []).filter(live);
    let wildAll = this.#wildOf.get(subject);
    if (!wildAll) {
      wildAll = this.#wild.filter((s) => keyMatches(s.subject, subject));
      if (this.#wildOf.size >= 10_000) this.#wildOf.clear();
      this.#wildOf.set(subject, wildAll);
    }
    const wild = wildAll.filter(live);
    if (exact.length === 0) return wild;
    if (wild.length === 0) return exact;
    return [...exact, ...wild].sort((a, b) => a.seq - b.seq);
  }

  /** @internal Routes one message from `from`; returns how many subscribers it was routed to. */
  route(from: SimEndpoint, subject: string, data: Uint8Array, reply: string | undefined): number {
    const targets: Sub[] = [];
    const groups = new Map<string, Sub[]>();
    for (const s of this.matching(subject)) {
      if (s.queue === undefined) targets.push(s);
      else groups.set(s.queue, [...(groups.get(s.queue) ?? []), s]);
    }
    for (const members of groups.values()) {
      // The server only knows members it can reach: pick among those.
      const reach = members.filter((s) => this.reachable(from.name, s.ep.name));
      const pool = reach.length > 0 ? reach : members;
      targets.push(pool[Math.floor(this.#random.next() * pool.length)]!);
    }
    for (const s of targets) this.#deliver(from, s, subject, data, reply);
    return targets.length;
  }

  #deliver(
    from: SimEndpoint,
    s: Sub,
    subject: string,
    data: Uint8Array,
    reply: string | undefined,
  ): void {
    const f = this.faults;
    if (!this.reachable(from.name, s.ep.name)) {
      this.tap?.({ kind: "cut", from: from.name, to: s.ep.name, subject });
      return;
    }
    if (f.loss > 0 && this.#random.next() < f.loss) {
      this.tap?.({ kind: "lost", from: from.name, to: s.ep.name, subject });
      return;
    }
    const copies = f.dup > 0 && this.#random.next() < f.dup ? 2 : 1;
    if (copies === 2) this.tap?.({ kind: "dup", from: from.name, to: s.ep.name, subject });
    const bytes = data.slice();
    for (let i = 0; i < copies; i++) {
      const arrive = () => {
        if (!s.active || s.ep.isClosed() || !this.reachable(from.name, s.ep.name)) return;
        s.ep.host.gate(() => {
          if (!s.active || s.ep.isClosed()) return;
          const msg: BusMsg = {
            subject,
            data: bytes,
            reply,
            respond: (d: Uint8Array) => {
              if (reply === undefined || s.ep.isClosed()) return false;
              this.route(s.ep, reply, d, undefined);
              return true;
            },
          };
          s.callback(null, msg);
        });
      };
      const [lo, hi] = f.delayMs;
      const delay = hi > 0 ? lo + Math.floor(this.#random.next() * (hi - lo + 1)) : 0;
      if (delay > 0) this.#clock.setTimer(delay, arrive);
      else queueMicrotask(arrive);
    }
  }
}

const isWild = (subject: string): boolean => subject.includes("*") || subject.includes(">");

export class SimEndpoint implements Bus {
  readonly name: string;
  readonly host: EndpointHost;
  readonly #bus: SimBus;
  #closed = false;
  #inbox = 0;

  constructor(bus: SimBus, name: string, host: EndpointHost) {
    this.#bus = bus;
    this.name = name;
    this.host = host;
  }

  publish(subject: string, data: Uint8Array): void {
    if (this.#closed) return;
    this.#bus.route(this, subject, data, undefined);
  }

  request(
    subject: string,
    data: Uint8Array,
    opts: { timeout: number },
  ): Promise<{ readonly data: Uint8Array }> {
    if (this.#closed) return Promise.reject(new Error("CONNECTION_CLOSED"));
    const reachable = this.#bus
      .matching(subject)
      .filter((s) => this.#bus.reachable(this.name, s.ep.name));
    const anyone = this.#bus.matching(subject).length > 0;
    if (!anyone) return Promise.reject(new SimNoRespondersError(subject));
    const inbox = `_INBOX.${this.name}.${++this.#inbox}`;
    return new Promise((resolve, reject) => {
      let done = false;
      const sub = this.subscribe(inbox, {
        callback: (_e, m) => {
          if (done) return;
          done = true;
          sub.unsubscribe();
          cancel();
          resolve({ data: m.data });
        },
      });
      const cancel = this.host.clock.setTimer(opts.timeout, () => {
        if (done) return;
        done = true;
        sub.unsubscribe();
        reject(new SimTimeoutError(subject));
      });
      // Subscribers the requester cannot reach: the request is lost on the way and times out.
      if (reachable.length > 0) this.#bus.route(this, subject, data, inbox);
    });
  }

  subscribe(subject: string, opts: BusSubscribeOptions): BusSubscription {
    const s: Sub = {
      seq: this.#bus.nextSeq(),
      ep: this,
      subject,
      queue: opts.queue,
      callback: opts.callback,
      active: !this.#closed,
    };
    if (s.active) this.#bus.addSub(s);
    return { unsubscribe: () => this.#bus.removeSub(s) };
  }

  async flush(): Promise<void> {
    // Deliveries are already routed when publish returns.
  }

  isClosed(): boolean {
    return this.#closed;
  }

  /** Closes the connection: no more deliveries; pending requests never settle (crash). */
  close(): void {
    this.#closed = true;
  }
}
