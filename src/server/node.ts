/**
 * A Kairos node: one process that joins the cluster with some roles. It wires the pieces —
 * NATS connection, buckets, membership, partition leases, the actor host and the router — and
 * owns their start and graceful stop. Scheduler nodes own partitions and host actors; every
 * node can send to actors through the router.
 */
import { randomUUID } from "node:crypto";
import type { NatsConnection } from "@nats-io/transport-node";
import { backoffMs } from "../lib/backoff.ts";
import { systemClock, type Clock } from "../lib/clock.ts";
import { KairosError, isKairosError } from "../lib/errors.ts";
import type { Random } from "../lib/random.ts";
import type { MessageGuard } from "../actors/actor.ts";
import { ActorHost, type ActorRegistration } from "../actors/host.ts";
import type { Bus } from "../cluster/bus.ts";
import { bucketName, openBuckets, type Buckets } from "../cluster/buckets.ts";
import { REPLICA_READ } from "../cluster/kv.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { NodeConfig } from "../cluster/config.ts";
import { EventBus } from "../cluster/events.ts";
import { Membership } from "../cluster/membership.ts";
import { connectNats } from "../cluster/nats.ts";
import {
  ThreadLeaseKeeper,
  type LeaseThread,
  type ThreadData,
} from "../cluster/lease-keeper-thread.ts";
import { PartitionManager } from "../cluster/partition-manager.ts";
import { muxedBus } from "../cluster/request-mux.ts";
import { assign } from "../cluster/placement.ts";
import { ActorRouter, type LocalActors } from "../cluster/router.ts";
import { inboxModeFor } from "../cluster/reply-guard.ts";
import { addClockSkewSource } from "../metrics/index.ts";
import { PartitionResponder } from "./partition-responder.ts";

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
  /**
   * Makes the lease keeper's thread (`leaseRenewer: "thread"`) in place of a worker thread: the
   * simulation's, on simulated time. Without it the thread needs a real connection and the
   * system clock, and an injected transport renews inline.
   */
  leaseThread?: (data: ThreadData) => LeaseThread;
}

/**
 * Reads the cluster's partition count, creating it on first start. A bucket another node has
 * just created may not have a leader yet (no responders): retried with backoff, bounded.
 */
async function clusterPartitions(
  b: Buckets,
  wanted: number,
  clock: Clock,
  mayCreate: boolean,
): Promise<number> {
  let last: unknown = "no scheduler node has created the cluster config yet";
  for (let i = 0; i < 40; i++) {
    try {
      // A worker's identity may read this key only by a direct get (nats-permissions.ts), which a
      // replica answers: harmless, the count is written once and never changes — a replica that
      // has not seen it yet answers "absent", and the worker asks again.
      const e = await b.cluster.get("config", mayCreate ? undefined : REPLICA_READ);
      if (e) return decode<{ partitions: number }>(e.value).partitions;
      // Only scheduler identities may write the cluster bucket: other nodes wait for one.
      const r = mayCreate
        ? await b.cluster.create("config", encode({ partitions: wanted, createdBy: "kairos" }))
        : { ok: false };
      if (r.ok) return wanted;
    } catch (err) {
      if (!isKairosError(err, "unavailable") && !isKairosError(err, "timeout")) throw err;
      last = err;
    }
    await new Promise<void>((r) => clock.setTimer(backoffMs(i, { baseMs: 50, maxMs: 1000 }), r));
  }
  throw new KairosError("unavailable", `cannot read the cluster config: ${String(last)}`, {
    cause: last,
  });
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
  #removeSkewSource: (() => void) | undefined;
  #skewRead: (() => ReadonlyMap<string, number>) | undefined;
  #leases: PartitionManager | undefined;
  #host: ActorHost | undefined;
  #router: ActorRouter | undefined;
  #workerRouter: ActorRouter | undefined;
  #commandRouter: ActorRouter | undefined;
  /** The host as the command router's `LocalActors`: behind the responder's guards. */
  #local: LocalActors | undefined;
  /** Answers the actor requests of the partitions this node holds (partition-responder.ts). */
  readonly #responder: PartitionResponder;
  #cancelSweep: (() => void) | undefined;
  #drain: (() => Promise<void>) | undefined;
  /** The control-plane connection (membership, leases, reading worker adverts); none under an injected transport. */
  #control: Bus | undefined;
  #stopping = false;

  constructor(config: NodeConfig, deps: NodeDeps) {
    this.config = config;
    this.#deps = deps;
    this.#responder = new PartitionResponder({
      clusterName: config.clusterName,
      inboxes: inboxModeFor(config.natsAuth),
      bus: () => this.nc,
      host: () => this.#host!,
      events: this.events,
      log: deps.log,
      clock: deps.clock,
    });
    this.incarnation = deps.incarnation ?? randomUUID().slice(0, 8);
  }

  /** Registers an actor type; call before start() or from an `onConnected` hook. */
  register(reg: ActorRegistration): void {
    this.#registrations.push(reg);
  }

  /** Adds a check of every message to actors of `type` arriving over NATS (see `MessageGuard`). */
  guard(type: string, fn: MessageGuard): void {
    this.#responder.guard(type, fn);
  }

  /**
   * The messages (by `kind`) that actors of `type` accept on the worker plane
   * (`kairos.<c>.w.<n>`, where worker identities may publish). Anything else sent there is
   * refused with `permission_denied`.
   */
  allowFromWorkers(type: string, kinds: readonly string[]): void {
    this.#responder.allowFromWorkers(type, kinds);
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
  /**
   * The control-plane connection (membership, partition leases, the worker directory's reading of adverts):
   * little traffic, so what arrives there never waits behind a burst on the data connection.
   * Under an injected transport (the simulation), the data bus.
   */
  get control(): Bus {
    return this.#control ?? this.nc;
  }
  get buckets(): Buckets {
    if (!this.#buckets) throw new KairosError("unavailable", "node not started");
    return this.#buckets;
  }
  get router(): ActorRouter {
    if (!this.#router) throw new KairosError("unavailable", "node not started");
    return this.#router;
  }
  /**
   * The router of the API's commands to job actors: a partition this node serves is asked in
   * memory, not over NATS (`LocalActors`, router.ts), past the checks its NATS responder makes of
   * an actor-plane request's message (`guard`); any other partition as through `router`.
   */
  get commandRouter(): ActorRouter {
    if (!this.#commandRouter) throw new KairosError("unavailable", "node not started");
    return this.#commandRouter;
  }
  /** The router a worker uses: heartbeats and completions on the worker plane. */
  get workerRouter(): ActorRouter {
    if (!this.#workerRouter) throw new KairosError("unavailable", "node not started");
    return this.#workerRouter;
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
      const { nc, control, data } = await connectNode(c);
      // Requests go through Kairos's own mux: nc.request builds a discarded Error per reply (request-mux.ts).
      this.#nc = muxedBus(nc, clock);
      this.#control = control;
      this.#drain = async () => {
        await nc.drain();
        if (data && !data.isClosed()) await data.drain();
        if (!control.isClosed()) await control.drain();
      };
      this.#buckets = await openBuckets(nc, {
        clusterName: c.clusterName,
        replicas: c.replicas,
        warn: (m) => log("warn", m),
        control,
        ...(data ? { data } : {}),
        // A worker identity may not create streams: it waits for an api or scheduler node to. It
        // reads the partition count and writes its own node record, nothing else (buckets.ts).
        createStreams: c.roles.includes("api") || c.roles.includes("scheduler"),
        scope: c.roles.includes("api") || c.roles.includes("scheduler") ? "cluster" : "worker",
      });
    }
    this.#partitions = await clusterPartitions(
      this.#buckets,
      c.partitions,
      clock,
      c.roles.includes("scheduler"),
    );
    const routing = {
      nc: this.#nc,
      clusterName: c.clusterName,
      clock,
      random: this.#deps.random,
      partitions: this.#partitions,
      deadlineMs: c.requestDeadlineMs,
    };
    this.#router = new ActorRouter(routing);
    this.#workerRouter = new ActorRouter({ ...routing, plane: "workers", workerId: c.nodeId });
    this.#commandRouter = new ActorRouter({ ...routing, local: () => this.#local });
    for (const h of this.#connectedHooks) await h(this);
    const isScheduler = c.roles.includes("scheduler");
    this.#membership = new Membership({
      nc: this.#control ?? this.#nc,
      clusterName: c.clusterName,
      clock,
      events,
      self: {
        nodeId: c.nodeId,
        incarnation: this.incarnation,
        roles: [...c.roles],
        startedAtMs: clock.now(),
      },
      nodesKv: this.#buckets.nodes,
      heartbeatIntervalMs: c.heartbeatIntervalMs,
      failureTimeoutMs: c.failureTimeoutMs,
      onChange: () => this.#leases?.poke(),
    });
    this.#membership.start();
    const m = this.#membership;
    this.#skewRead = () => m.skews(); // held here: the metrics module holds it weakly
    this.#removeSkewSource = addClockSkewSource(this.#skewRead);
    if (isScheduler) await this.#startScheduler();
    events.emit({
      type: "node_started",
      nodeId: c.nodeId,
      incarnation: this.incarnation,
      roles: [...c.roles],
    });
  }

  async #startScheduler(): Promise<void> {
    const { config: c, events } = this;
    const { clock } = this.#deps;
    const membership = this.#membership!;
    const host = new ActorHost({
      nodeId: c.nodeId,
      clock,
      events,
      kv: this.buckets.actors,
      partitions: this.#partitions,
      isTrusted: (p) => this.#leases?.isTrusted(p) ?? false,
      epochOf: (p) => this.#leases?.epochOf(p),
      send: (to, msg) => this.router.request(to, msg),
      mailboxLimit: c.mailboxLimit,
      idleMs: c.actorIdleMs,
      onError: (m, e) => this.#deps.log("warn", m, { err: String(e) }),
    });
    for (const r of this.#registrations) host.register(r);
    this.#host = host;
    this.#local = this.#responder.localActors(host);
    const keeperStart = this.#startLeaseKeeper();
    const keeper = keeperStart ? await keeperStart : undefined;
    this.#leases = new PartitionManager({
      ...(keeper ? { keeper } : {}),
      leases: this.buckets.leases,
      clock,
      events,
      me: c.nodeId,
      incarnation: this.incarnation,
      partitions: this.#partitions,
      leaseTtlMs: c.leaseTtlMs,
      renewIntervalMs: c.leaseRenewIntervalMs,
      safetyMarginMs: c.leaseSafetyMarginMs,
      tickMs: c.partitionTickMs,
      desired: () => assign(this.#partitions, membership.live("scheduler")),
      callbacks: {
        onAcquired: async (p) => {
          await host.acquire(p);
          // Subscribe while held, even in a trust blip (deliveries check trust themselves): a
          // partition held but never subscribed answers "no responders" until its next loss.
          if (this.#leases?.holds(p)) this.#responder.subscribe(p);
        },
        onReleasing: async (p) => {
          this.#responder.unsubscribe(p);
          await host.release(p);
        },
        onLost: (p) => {
          this.#responder.unsubscribe(p);
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

  /**
   * The thread that renews partition leases (`--lease-renewer thread`), started when it can be:
   * a real connection and the system clock, or a thread the caller makes (the simulation's).
   * Undefined: the partition manager renews inline.
   */
  #startLeaseKeeper(): Promise<ThreadLeaseKeeper> | undefined {
    const c = this.config;
    const { clock } = this.#deps;
    const keeperOptions = {
      me: c.nodeId,
      incarnation: this.incarnation,
      leaseTtlMs: c.leaseTtlMs,
      renewIntervalMs: c.leaseRenewIntervalMs,
      safetyMarginMs: c.leaseSafetyMarginMs,
    };
    const onError = (m: string, e: unknown) => this.#deps.log("warn", m, { err: String(e) });
    // Renewals from a thread of their own need a real connection and the system clock (or a
    // thread of the caller's making: the simulation's).
    const spawn = this.#deps.leaseThread;
    return c.leaseRenewer === "thread" &&
      ((this.#deps.transport === undefined && clock === systemClock) || spawn !== undefined)
      ? ThreadLeaseKeeper.start({
          keeper: keeperOptions,
          partitions: this.#partitions,
          natsUrl: c.natsUrl,
          natsAuth: c.natsAuth,
          connectionName: `kairos-${c.nodeId}-leases`,
          bucket: bucketName(c.clusterName, "leases"),
          tickMs: c.partitionTickMs,
          mainStallMs: c.leaseMainStallMs,
          startTimeoutMs: 10_000,
          clock,
          leases: this.buckets.leases,
          onError,
          ...(spawn ? { spawn } : {}),
        })
      : undefined;
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
    this.#removeSkewSource?.();
    if (this.#nc && !this.#nc.isClosed()) await (this.#drain ?? this.#deps.transport?.close)?.();
  }
}

/**
 * A node's NATS connections: the main one (actor requests and replies), the control plane's
 * (leases, membership: see openBuckets `control`) and, on a scheduler or api node, the data
 * buckets' (see openBuckets `data`), each a socket of its own. Those opened are closed if a later
 * one fails.
 */
async function connectNode(
  c: NodeConfig,
): Promise<{ nc: NatsConnection; control: NatsConnection; data: NatsConnection | undefined }> {
  const nc = await connectNats({ url: c.natsUrl, name: `kairos-${c.nodeId}`, ...c.natsAuth });
  const control = await connectNats({
    url: c.natsUrl,
    name: `kairos-${c.nodeId}-control`,
    ...c.natsAuth,
  }).catch(async (e: unknown) => {
    await nc.close();
    throw e;
  });
  const store = c.roles.includes("api") || c.roles.includes("scheduler");
  const data = store
    ? await connectNats({ url: c.natsUrl, name: `kairos-${c.nodeId}-kv`, ...c.natsAuth }).catch(
        async (e: unknown) => {
          await nc.close();
          await control.close();
          throw e;
        },
      )
    : undefined;
  return { nc, control, data };
}
