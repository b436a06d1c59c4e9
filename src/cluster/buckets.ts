/**
 * The KV buckets of a cluster, created on first use with the cluster's replica count.
 * Bucket names carry the cluster name so several clusters can share one NATS account.
 * Never delete and recreate a live bucket: revisions would restart and fences would go backwards.
 */
import { withMuxedRequests } from "./request-mux.ts";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  DiscardPolicy,
  RetentionPolicy,
  StorageType,
  jetstream,
  jetstreamManager,
  type JetStreamManager,
  type StreamConfig,
} from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { KV_TIMEOUT_MS, LIBRARY_TIMEOUT_FACTOR, NatsKv } from "./kv-nats.ts";
import { DeniedKv } from "./kv-denied.ts";
import { InFlightLimiter } from "./in-flight.ts";
import type { KvStore } from "./kv.ts";
import { checkServerVersion } from "./server-version.ts";
import { systemClock, type Clock } from "../lib/clock.ts";

export interface Buckets {
  /** Cluster-wide settings (`config`: partition count). */
  readonly cluster: KvStore;
  /** Partition leases `p.<n>`; the acquiring write's revision is the partition epoch. */
  readonly leases: KvStore;
  /** Node records `<node_id>`, refreshed by heartbeat, expiring by bucket TTL. */
  readonly nodes: KvStore;
  /** Actor state `<type>.<partition>.<id…>`. */
  readonly actors: KvStore;
  /** Run records `<partition>.<tenant>.<job>.<run>`. */
  readonly runs: KvStore;
  /** Tenants `t.<tenant>` and API key hashes `k.<sha256>`. */
  readonly tenants: KvStore;
  /** Idempotency keys `<tenant>.<sha256(key)>`, expiring after 24 h. */
  readonly idempotency: KvStore;
}

export interface BucketOptions {
  clusterName: string;
  replicas: number;
  /** Limits the storage of each bucket (bytes); unlimited when omitted. */
  maxBytes?: number;
  /** Server version warnings go here. */
  warn?: (msg: string) => void;
  /** Paces retries while a new NATS cluster settles (default: the system clock). */
  clock?: Clock;
  /**
   * The control plane: partition leases and node records on a connection of their own, so a
   * lease renewal never waits behind a burst of data writes on the same socket (busy is not
   * dead). Default: the data connection.
   */
  control?: NatsConnection;
  /**
   * The data buckets' connection (actors, runs, tenants, idem): by default the data connection
   * itself. A scheduler gives them a socket of their own, so that the acknowledgement of a write
   * does not wait behind the actor requests arriving on the data connection: a burst's completion
   * reports (tens of megabytes read on a busy event loop) held back every write's acknowledgement,
   * and so every job-actor turn, for tens of seconds.
   */
  data?: NatsConnection;
  /** Most data-bucket operations (actors, runs, tenants, idem) in flight at once (default 512). */
  maxInFlight?: number;
  /**
   * May this identity create missing buckets (default true)? A worker's may not (NATS
   * permissions): it waits, bounded, for an api or scheduler node to create them.
   */
  createStreams?: boolean;
  /**
   * `worker`: a worker-only identity, whose NATS permissions allow exactly two JetStream
   * operations (nats-permissions.ts): a direct get of the key `config` of the `cluster` bucket and
   * writes of its own `nodes` record. Those two buckets are bound by name — no JetStream API
   * info, no stream info (which would list any bucket's keys with a subject filter), no consumer —
   * and every other bucket is a `DeniedKv`. Default `cluster`: every bucket, as api and
   * scheduler identities use them.
   */
  scope?: "cluster" | "worker";
}

export const DEFAULT_MAX_IN_FLIGHT = 512;

/**
 * The suffixes of the cluster's buckets (`<cluster>_<suffix>`, stream `KV_<cluster>_<suffix>`);
 * nats-permissions.ts grants by this list.
 */
export const BUCKET_SUFFIXES = [
  "cluster",
  "leases",
  "nodes",
  "actors",
  "runs",
  "tenants",
  "idem",
] as const;

/** A cluster's bucket name (`<cluster>_<suffix>`, e.g. `kairos_leases`). */
export const bucketName = (clusterName: string, suffix: string): string =>
  `${clusterName}_${suffix}`;

const NODE_TTL_MS = 30_000;
const IDEMPOTENCY_TTL_MS = 24 * 3600_000;

/**
 * A JetStream error that a node starting against a NATS cluster in flux should wait out: a
 * cluster that has just elected its JetStream leader may not know every peer yet ("no suitable
 * peers for placement"); a stream whose leader is being elected, or a server just restarted,
 * answers nothing in time (timeout, no responders), or JetStream says it is temporarily
 * unavailable or the stream offline (a meta leader being elected). Retried, bounded, they pass.
 */
export function isTransientStartupError(e: unknown): boolean {
  if (!(e instanceof Error)) return false;
  const cause = (e as { cause?: unknown }).cause;
  const names = [e.name, cause instanceof Error ? cause.name : ""];
  return (
    names.some((n) => n === "TimeoutError" || n === "NoRespondersError") ||
    /no suitable peers|insufficient resources|timeout|timed out|no responders|jetstream (cluster )?not (available|enabled)|temporarily unavailable|stream is offline|leader/i.test(
      e.message,
    )
  );
}

/** How often, and how long apart, a start-up step retries a transient JetStream error (~30 s in all). */
const STARTUP_TRIES = 60;
const STARTUP_RETRY_MS = 500;

async function startupRetry<T>(step: () => Promise<T>, clock: Clock): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await step();
    } catch (e) {
      if (!isTransientStartupError(e) || attempt >= STARTUP_TRIES) throw e;
      await new Promise<void>((r) => clock.setTimer(STARTUP_RETRY_MS, r));
    }
  }
}

export async function openBuckets(nc: NatsConnection, opts: BucketOptions): Promise<Buckets> {
  const warning = checkServerVersion(nc.info?.version ?? "0.0.0", opts.replicas);
  if (warning) opts.warn?.(warning);
  if (opts.scope === "worker") return workerBuckets(nc, opts);
  const clock = opts.clock ?? systemClock;
  const limiter = new InFlightLimiter(opts.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT);
  // The library's own timeouts are longer than NatsKv's stall-aware deadline (kv-nats.ts).
  // KV reads, writes, scans and stream requests are JetStream requests: through the connection's
  // request mux (no Error built per request, stall-aware deadlines: request-mux.ts).
  // The manager serves leader reads, watch floors, scans and purges: the same longer timeout.
  const js = (c: NatsConnection) =>
    jetstream(withMuxedRequests(c), { timeout: LIBRARY_TIMEOUT_FACTOR * KV_TIMEOUT_MS });
  const jsm = (c: NatsConnection) =>
    jetstreamManager(withMuxedRequests(c), { timeout: LIBRARY_TIMEOUT_FACTOR * KV_TIMEOUT_MS });
  const dataNc = opts.data ?? nc;
  const data = {
    jsm: await startupRetry(() => jsm(dataNc), clock),
    kvm: new Kvm(js(dataNc)),
    limiter,
  };
  const control = opts.control
    ? {
        jsm: await startupRetry(() => jsm(opts.control!), clock),
        kvm: new Kvm(js(opts.control)),
        limiter: undefined,
      }
    : { ...data, limiter: undefined };
  const open = async (
    suffix: string,
    ttl = 0,
    history = 1,
    plane: { jsm: JetStreamManager; kvm: Kvm; limiter: InFlightLimiter | undefined } = data,
  ): Promise<KvStore> => {
    const name = bucketName(opts.clusterName, suffix);
    const settings = {
      replicas: opts.replicas,
      history,
      ...(ttl > 0 ? { ttl } : {}),
      ...(opts.maxBytes ? { max_bytes: opts.maxBytes } : {}),
    };
    // A NATS cluster that has just elected its JetStream leader may not know every peer yet:
    // replicated streams then fail with "no suitable peers for placement". Retry, bounded.
    for (let attempt = 0; ; attempt++) {
      try {
        if (opts.createStreams === false) await plane.jsm.streams.info(`KV_${name}`);
        else await ensureStream(plane.jsm, name, settings, opts.warn);
        return new NatsKv(
          name,
          await plane.kvm.create(name, settings),
          plane.jsm,
          undefined,
          plane.limiter,
        );
      } catch (e) {
        const missing =
          opts.createStreams === false && e instanceof Error && /stream not found/i.test(e.message);
        // The KV library reads the stream back and, told "stream not found" by a server that has
        // not caught up with the creation just made, adds its own (rollups on): "already in use
        // with a different configuration". The next try reads it back.
        const raced = e instanceof Error && /already in use/i.test(e.message);
        const transient = missing || raced || isTransientStartupError(e);
        if (!transient || attempt >= (missing ? 120 : 40)) throw e;
        await new Promise<void>((r) => clock.setTimer(250, r));
      }
    }
  };
  const [cluster, leases, nodes, actors, runs, tenants, idempotency] = await Promise.all([
    open("cluster", 0, 1, control),
    open("leases", 0, 1, control),
    open("nodes", NODE_TTL_MS, 1, control),
    open("actors", 0, 4),
    open("runs"),
    open("tenants"),
    open("idem", IDEMPOTENCY_TTL_MS),
  ]);
  return { cluster, leases, nodes, actors, runs, tenants, idempotency };
}

/**
 * Creates a bucket's stream when missing, as the KV library would but with rollup headers off
 * (the library turns them on), and warns when an existing stream has them on. Why: a write
 * carrying `Nats-Rollup: all` purges every other key of the stream, so any identity allowed to
 * write one key of a bucket (a worker its own `nodes` record, an API node `jc.*` in `tenants`)
 * could erase the whole bucket. Kairos never sends the header: it deletes with `KV-Operation:
 * DEL` markers and purges with the stream purge API, neither of which needs rollups.
 */
async function ensureStream(
  jsm: JetStreamManager,
  name: string,
  s: { replicas: number; history: number; ttl?: number; max_bytes?: number },
  warn?: (msg: string) => void,
): Promise<void> {
  const stream = `KV_${name}`;
  try {
    const info = await jsm.streams.info(stream);
    if (info.config.allow_rollup_hdrs)
      warn?.(
        `bucket ${name} allows rollup headers: any identity that may write one of its keys can purge all of them; as admin, update stream ${stream} with allow_rollup_hdrs false (kairos cluster harden-buckets)`,
      );
    return;
  } catch (e) {
    if (!(e instanceof Error && /stream not found/i.test(e.message))) throw e;
  }
  const config: Partial<StreamConfig> & { name: string } = {
    name: stream,
    subjects: [`$KV.${name}.>`],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_msgs_per_subject: s.history,
    max_msg_size: -1,
    discard: DiscardPolicy.New,
    num_replicas: s.replicas,
    allow_direct: true,
    allow_rollup_hdrs: false,
    deny_delete: true,
    deny_purge: false,
    ...(s.ttl ? { max_age: s.ttl * 1_000_000 } : {}),
    ...(s.max_bytes ? { max_bytes: s.max_bytes } : {}),
  };
  try {
    await jsm.streams.add(config);
  } catch (e) {
    // Another node created it first (with this config, or an older node's): open what is there.
    if (!(e instanceof Error && /already in use/i.test(e.message))) throw e;
  }
}

/**
 * A worker-only node's buckets (`scope: "worker"`): `cluster` and `nodes` bound without a
 * request, reads by direct get of the exact key (the subject carries it, so the permission can
 * name it), writes by publishing to the key's subject; the rest refused locally. A read before a
 * scheduler has created the bucket fails as `unavailable` (no responders), which the caller
 * retries (node.ts `clusterPartitions`).
 */
async function workerBuckets(nc: NatsConnection, opts: BucketOptions): Promise<Buckets> {
  const bind = async (c: NatsConnection, suffix: string): Promise<KvStore> => {
    const muxed = withMuxedRequests(c);
    const js = jetstream(muxed, {
      timeout: LIBRARY_TIMEOUT_FACTOR * KV_TIMEOUT_MS,
      checkAPI: false,
    });
    const name = bucketName(opts.clusterName, suffix);
    const kv = await new Kvm(js).open(name, { allow_direct: true });
    return new NatsKv(name, kv, await jetstreamManager(muxed, { checkAPI: false }));
  };
  const control = opts.control ?? nc;
  const denied = (suffix: string) =>
    new DeniedKv(bucketName(opts.clusterName, suffix), "a worker's NATS identity");
  return {
    cluster: await bind(control, "cluster"),
    nodes: await bind(control, "nodes"),
    leases: denied("leases"),
    actors: denied("actors"),
    runs: denied("runs"),
    tenants: denied("tenants"),
    idempotency: denied("idem"),
  };
}

/** What `hardenBuckets` found of one bucket's stream. */
export interface BucketHardening {
  bucket: string;
  state: "hardened" | "already" | "missing";
}

/**
 * Turns rollup headers off on the streams of a cluster's buckets made by an older version (see
 * `ensureStream`): `kairos cluster harden-buckets`, as the NATS `admin`. Keys are kept; only the
 * stream's `allow_rollup_hdrs` changes. Idempotent.
 */
export async function hardenBuckets(
  jsm: JetStreamManager,
  clusterName: string,
): Promise<BucketHardening[]> {
  const out: BucketHardening[] = [];
  for (const suffix of BUCKET_SUFFIXES) {
    const bucket = bucketName(clusterName, suffix);
    let info;
    try {
      info = await jsm.streams.info(`KV_${bucket}`);
    } catch (e) {
      if (e instanceof Error && /stream not found/i.test(e.message)) {
        out.push({ bucket, state: "missing" });
        continue;
      }
      throw e;
    }
    if (!info.config.allow_rollup_hdrs) {
      out.push({ bucket, state: "already" });
      continue;
    }
    await jsm.streams.update(info.config.name, { ...info.config, allow_rollup_hdrs: false });
    out.push({ bucket, state: "hardened" });
  }
  return out;
}
