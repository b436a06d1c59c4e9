/**
 * A Kairos node: one process that joins the cluster with some roles. It wires the pieces —
 * NATS connection, buckets, membership, partition leases, the actor host and the router — and
 * owns their start and graceful stop. Scheduler nodes own partitions and host actors; every
 * node can send to actors through the router.
 */
import { randomUUID } from "node:crypto";
import type { Clock } from "../lib/clock.ts";
import { KairosError, isKairosError } from "../lib/errors.ts";
import type { Random } from "../lib/random.ts";
import { ActorHost, type ActorRegistration } from "../actors/host.ts";
import type { Bus, BusSubscription } from "./bus.ts";
import { openBuckets, type Buckets } from "./buckets.ts";
import { decode, encode } from "./codec.ts";
import type { NodeConfig } from "./config.ts";
import { EventBus } from "./events.ts";
import { Membership } from "./membership.ts";
import { connectNats } from "./nats.ts";
import { PartitionManager } from "./partition-manager.ts";
import { assign } from "./placement.ts";
import { ActorRouter, MAX_BATCH, partitionSubject, type ActorReply, type ActorRequest, type BatchRequest, type ItemResult } from "./router.ts";

/** How long one item of a batch request may take before the batch answers it as pending. */
export const BATCH_ITEM_BUDGET_MS = 500;

export interface NodeDeps {
  clock: Clock;
  random: Random;
  log: (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;
  /**
   * A ready transport instead of connecting to `config.natsUrl` (the simulation's in-process bus
   * and fault-injecting KV). Production and every real-process test leave it unset.
   */
  transport?: { bus: Bus; buckets: Buckets; close?: () => Promise<void> };
  /** This run's incarnation id (the simulation passes a seeded one); random when unset. */
  incarnation?: string;
}

/**
 * Reads the cluster's partition count, creating it on first start. A bucket another node has
 * just created may not have a leader yet (no responders): retried with backoff, bounded.
 */
async function clusterPartitions(b: Buckets, wanted: number, clock: Clock): Promise<number> {
  let last: unknown;
  for (let i = 0; i < 40; i++) {
    try {
      const e = await b.cluster.get("config");
      if (e) return decode<{ partitions: number }>(e.value).partitions;
      const r = await b.cluster.create("config", encode({ partitions: wanted, createdBy: "kairos" }));
      if (r.ok) return wanted;
    } catch (err) {
      if (!isKairosError(err, "unavailable") && !isKairosError(err, "timeout")) throw err;
      last = err;
    }
    await new Promise<void>((r) => clock.setTimer(Math.min(1000, 50 * 2 ** Math.min(i, 5)), r));
  }
  throw new KairosError("unavailable", `cannot read the cluster config: ${String(last)}`, { cause: last });
}

export class KairosNode {
  readonly config: NodeConfig;
  readonly incarnation: string;
  readonly events = new EventBus();
  readonly #deps: NodeDeps;
  readonly #registrations: ActorRegistration[] = [];
  #nc: Bus | undefined;
  #buckets: Buckets | undefined;
  #partitions = 0;
  #membership: Membership | undefined;
  #leases: PartitionManager | undefined;
  #host: ActorHost | undefined;
  #router: ActorRouter | undefined;
  #subs = new Map<number, BusSubscription>();
  #cancelSweep: (() => void) | undefined;
  #drain: (() => Promise<void>) | undefined;
  /** The control-plane connection (membership, leases); the data connection under an injected transport. */
  #control: Bus | undefined;
  #stopping = false;

  constructor(config: NodeConfig, deps: NodeDeps) {
    this.config = config;
    this.#deps = deps;
    this.incarnation = deps.incarnation ?? randomUUID().slice(0, 8);
  }

  /** Registers an actor type; call before start() or from an `onConnected` hook. */
  register(reg: ActorRegistration): void {
    this.#registrations.push(reg);
  }

  readonly #connectedHooks: ((node: KairosNode) => void | Promise<void>)[] = [];
  /** Runs once NATS, the buckets and the router are ready, before partitions are taken. */
  onConnected(fn: (node: KairosNode) => void | Promise<void>): void {
    this.#connectedHooks.push(fn);
  }

  get nc(): Bus {
    if (!this.#nc) throw new KairosError("unavailable", "node not started");
    return this.#nc;
  }
  get buckets(): Buckets {
    if (!this.#buckets) throw new KairosError("unavailable", "node not started");
    return this.#buckets;
  }
  get router(): ActorRouter {
    if (!this.#router) throw new KairosError("unavailable", "node not started");
    return this.#router;
  }
  get partitions(): number {
    return this.#partitions;
  }
  get membership(): Membership | undefined {
    return this.#membership;
  }
  get host(): ActorHost | undefined {
    return this.#host;
  }
  heldPartitions(): number[] {
    return this.#leases?.heldPartitions() ?? [];
  }

  async start(): Promise<void> {
    const { config: c, events } = this;
    const { clock, log } = this.#deps;
    const t = this.#deps.transport;
    if (t) {
      this.#nc = t.bus;
      this.#buckets = t.buckets;
    } else {
      const nc = await connectNats({ url: c.natsUrl, name: `kairos-${c.nodeId}` });
      // The control plane (leases, membership) has a socket of its own: see openBuckets.
      const control = await connectNats({ url: c.natsUrl, name: `kairos-${c.nodeId}-control` }).catch(async (e: unknown) => {
        await nc.close();
        throw e;
      });
      this.#nc = nc;
      this.#control = control;
      this.#drain = async () => {
        await nc.drain();
        if (!control.isClosed()) await control.drain();
      };
      this.#buckets = await openBuckets(nc, {
        clusterName: c.clusterName,
        replicas: c.replicas,
        warn: (m) => log("warn", m),
        control,
      });
    }
    this.#partitions = await clusterPartitions(this.#buckets, c.partitions, clock);
    this.#router = new ActorRouter({
      nc: this.#nc, clusterName: c.clusterName, clock, random: this.#deps.random,
      partitions: this.#partitions, deadlineMs: c.requestDeadlineMs,
    });
    for (const h of this.#connectedHooks) await h(this);
    const isScheduler = c.roles.includes("scheduler");
    this.#membership = new Membership({
      nc: this.#control ?? this.#nc, clusterName: c.clusterName, clock, events,
      self: { nodeId: c.nodeId, incarnation: this.incarnation, roles: [...c.roles], startedAtMs: clock.now() },
      nodesKv: this.#buckets.nodes,
      heartbeatIntervalMs: c.heartbeatIntervalMs,
      failureTimeoutMs: c.failureTimeoutMs,
      onChange: () => this.#leases?.poke(),
    });
    this.#membership.start();
    if (isScheduler) await this.#startScheduler();
    events.emit({ type: "node_started", nodeId: c.nodeId, incarnation: this.incarnation, roles: [...c.roles] });
  }

  async #startScheduler(): Promise<void> {
    const { config: c, events } = this;
    const { clock } = this.#deps;
    const membership = this.#membership!;
    const host = new ActorHost({
      nodeId: c.nodeId, clock, events, kv: this.buckets.actors, partitions: this.#partitions,
      isTrusted: (p) => this.#leases?.isTrusted(p) ?? false,
      epochOf: (p) => this.#leases?.epochOf(p),
      send: (to, msg) => this.router.request(to, msg),
      mailboxLimit: c.mailboxLimit, idleMs: c.actorIdleMs,
      onError: (m, e) => this.#deps.log("warn", m, { err: String(e) }),
    });
    for (const r of this.#registrations) host.register(r);
    this.#host = host;
    this.#leases = new PartitionManager({
      leases: this.buckets.leases, clock, events,
      me: c.nodeId, incarnation: this.incarnation, partitions: this.#partitions,
      leaseTtlMs: c.leaseTtlMs, renewIntervalMs: c.leaseRenewIntervalMs,
      safetyMarginMs: c.leaseSafetyMarginMs, tickMs: c.partitionTickMs,
      desired: () => assign(this.#partitions, membership.live("scheduler")),
      callbacks: {
        onAcquired: async (p) => {
          await host.acquire(p);
          if (this.#leases?.isTrusted(p)) this.#subscribe(p);
        },
        onReleasing: async (p) => {
          this.#subs.get(p)?.unsubscribe();
          this.#subs.delete(p);
          await host.release(p);
        },
        onLost: (p) => {
          this.#subs.get(p)?.unsubscribe();
          this.#subs.delete(p);
          host.lose(p);
        },
      },
      onError: (m, e) => this.#deps.log("warn", m, { err: String(e) }),
    });
    await this.#leases.start();
    const sweep = () => {
      host.sweep();
      this.#cancelSweep = clock.setTimer(Math.max(1000, c.actorIdleMs / 4), sweep);
    };
    sweep();
  }

  #subscribe(p: number): void {
    if (this.#subs.has(p)) return;
    const host = this.#host!;
    const sub = this.nc.subscribe(partitionSubject(this.config.clusterName, p), {
      queue: "owners",
      callback: (_err, m) => {
        let req: ActorRequest | BatchRequest;
        try {
          req = decode<ActorRequest | BatchRequest>(m.data);
        } catch {
          m.respond(encode({ ok: false, e: { code: "invalid_argument", message: "undecodable actor request" } } satisfies ActorReply));
          return;
        }
        if ("b" in req) {
          const items = req.b.slice(0, MAX_BATCH);
          // Each item has a budget: one item queued behind a busy actor (a claim that needs a
          // write) must not hold back the acknowledgements of the others (answered from memory).
          // An item past its budget answers `unavailable` (pending): the sender simply retries it.
          void Promise.all(items.map((it) => new Promise<ItemResult>((resolve) => {
            const cancel = this.#deps.clock.setTimer(BATCH_ITEM_BUDGET_MS, () => resolve({ ok: false, e: { code: "unavailable", message: "pending: still queued at the actor" } }));
            host.deliver(it.t, it.i, it.m).then(
              (v) => resolve({ ok: true, v }),
              (e: unknown) => resolve({ ok: false, e: isKairosError(e) ? { code: e.code, message: e.message } : { code: "internal", message: "internal error" } }),
            ).finally(cancel);
          }))).then((v) => m.respond(encode({ ok: true, v } satisfies ActorReply)));
          return;
        }
        const one = req;
        host.deliver(one.t, one.i, one.m).then(
          (v) => m.respond(encode({ ok: true, v } satisfies ActorReply)),
          (e: unknown) => {
            const err = isKairosError(e) ? e.toJSON() : { code: "internal" as const, message: "internal error" };
            if (!isKairosError(e)) this.#deps.log("error", `actor ${one.t}/${one.i} failed`, { err: String(e) });
            m.respond(encode({ ok: false, e: err } satisfies ActorReply));
          },
        );
      },
    });
    this.#subs.set(p, sub);
  }

  /** Graceful stop: hand partitions off, say goodbye, drain NATS. */
  async stop(): Promise<void> {
    if (this.#stopping) return;
    this.#stopping = true;
    this.events.emit({ type: "node_stopping", nodeId: this.config.nodeId });
    this.#cancelSweep?.();
    await this.#membership?.leave();
    await this.#leases?.stop();
    this.#host?.stop();
    await this.#membership?.stop();
    if (this.#nc && !this.#nc.isClosed()) await (this.#drain ?? this.#deps.transport?.close)?.();
  }
}
