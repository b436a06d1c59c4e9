/**
 * The composition root: builds one Kairos process from a node config and its role options —
 * the cluster node (every role), job and tenant actors (scheduler), the worker with its sandbox
 * executor (worker), and the HTTP API and the internal NATS API (api; both over the one set of
 * operations, src/app/operations.ts). `kairos node` and `kairos dev` both start here.
 */
import { systemClock } from "../lib/clock.ts";
import { createLogger } from "../lib/log.ts";
import { systemRandom } from "../lib/random.ts";
import type { NodeConfig } from "../cluster/config.ts";
import { KairosNode } from "./node.ts";
import { actorRegistrations } from "../actors/index.ts";
import { DEFAULT_JOB_CONFIG, type JobActorConfig } from "../jobs/job-types.ts";
import { jobRegistration } from "../jobs/job-shell.ts";
import { tenantRegistration } from "../slots/tenant-shell.ts";
import { fleetRegistration } from "../slots/fleet-shell.ts";
import { FAIR_REPORT_MS } from "../slots/fleet-actor.ts";
import { jobAddressGuard, tenantAddressGuard } from "../jobs/address-guard.ts";
import { JOB_ACTOR, TENANT_ACTOR } from "../protocol/ids.ts";
import { WORKER_TO_JOB_KINDS } from "../protocol/worker.ts";
import { NatsJobsService } from "../service/nats-service.ts";
import { WorkerDirectory } from "../slots/worker-directory.ts";
import { Worker } from "../worker/worker.ts";
import { createExecutor, taskLimits as resolveTaskLimits, type ExecutorKind, type ImagePolicy, type TaskLimits } from "../sandbox/index.ts";
import { WebhookSender, type WebhookPolicy, type WebhookTarget } from "../notify/webhook.ts";
import { DeadLetterOutbox } from "../notify/dead-letters.ts";
import { SecretEnvStore } from "../secrets/secret-env.ts";
import { createApp, serveApi, type ApiServer } from "../http/index.ts";
import type { RateLimitOptions } from "../http/rate-limit.ts";
import { createOpsApp, registerReadiness } from "../http/ops.ts";
import { nodeOps } from "./ops.ts";
import { ForecastService } from "./forecast.ts";
import { RunMetrics, prometheusSink, BASELINE_LIMIT } from "../history/run-metrics.ts";
import { RunsWaiting } from "../history/run-waiting.ts";
import { retentionConfig, type RetentionConfig } from "../history/retention.ts";
import { RunRetention } from "../history/run-retention.ts";
import { deadLetterRetention } from "../notify/dead-letter-retention.ts";
import { KvTenantDirectory } from "../tenants/index.ts";
import type { Tenant } from "../protocol/service.ts";
import { connectNats, readNatsCredentials } from "../cluster/nats.ts";
import type { EventBus } from "../cluster/events.ts";
import { inboxModeFor } from "../cluster/reply-guard.ts";
import { createOperations } from "../app/operations.ts";
import { ALLOW_ANY_IMAGE } from "../sandbox/image-policy.ts";
import { natsApiConfig, type NatsApiConfig } from "../nats-api/config.ts";
import { createNatsApiHandler } from "../nats-api/handler.ts";
import { NatsApiService } from "../nats-api/service.ts";
import { ServiceAuthCallout, type Lookup } from "../nats-api/auth-callout.ts";
import { KvServiceDirectory } from "../tenants/services.ts";

export interface ProcessOptions {
  executor: ExecutorKind;
  workerSlots: number;
  apiHost: string;
  apiPort: number;
  job?: Partial<JobActorConfig>;
  workerHeartbeatMs?: number;
  /**
   * The node's metrics listener: /healthz, /readyz and /metrics (0: any free port); unset: none.
   * /metrics is served nowhere else (API nodes answer /healthz and /readyz on the API port too).
   */
  metricsPort?: number;
  /** Address of the metrics listener (default 127.0.0.1, whatever `apiHost` is). */
  metricsHost?: string;
  /** The metrics listener's /metrics answers only `Authorization: Bearer <metricsToken>`. */
  metricsToken?: string;
  /** scheduler: name the tenant in the per-tenant metrics' `tenant` label (default: left out). */
  metricsTenantLabels?: boolean;
  /** api: the operator's default image policy (default: any image). */
  imagePolicy?: ImagePolicy;
  /**
   * api and worker: the cluster's per-task resource maxima (default DEFAULT_TASK_LIMITS) — API
   * nodes refuse a task above them, workers' docker executors apply them; the same on every node.
   */
  taskLimits?: TaskLimits;
  /** api: per-tenant request limit and failed-authentication throttle (defaults: src/http/rate-limit.ts). */
  rateLimits?: Partial<RateLimitOptions>;
  /** scheduler: rules for dead-letter webhook destinations (default: https, public addresses only). */
  webhook?: Partial<WebhookPolicy>;
  /**
   * worker: on stop, how long running attempts may go on finishing before they are handed back
   * (killed and reported as retryable errors); 0: hand back at once. Default `DEFAULT_DRAIN_TIMEOUT_MS`.
   */
  drainTimeoutMs?: number;
  /** scheduler: run-record retention per job and deleted-job purge (defaults: src/history/retention.ts). */
  retention?: Partial<RetentionConfig>;
  /** worker, noop executor: how long each run takes (benchmarks); default 0. */
  noopDurationMs?: number;
  /**
   * api and scheduler: the cluster secret key (32 bytes) that seals and opens `task.secret_env`
   * (secret-env.ts); the same on every api and scheduler node. Without it secrets are refused.
   */
  secretKey?: Buffer;
  /**
   * api: the internal NATS API (docs/nats-api.md; defaults in src/nats-api/config.ts: on, 64 KiB
   * payloads, 256 requests in flight). Its per-tenant rate defaults to `rateLimits`'.
   */
  natsApi?: Partial<NatsApiConfig>;
}

/** How long a stopping worker lets running attempts finish (docs/operations.md, "Drain"). */
export const DEFAULT_DRAIN_TIMEOUT_MS = 60_000;

export interface KairosProcess {
  readonly node: KairosNode;
  readonly api: ApiServer | undefined;
  readonly worker: Worker | undefined;
  readonly tenants: KvTenantDirectory;
  /** The metrics listener (`--metrics-port`), when one was asked for. */
  readonly metrics: ApiServer | undefined;
  /** The internal NATS API's responder (api nodes, unless disabled). */
  readonly natsApi: NatsApiService | undefined;
  /** Drains the worker (if any), then stops everything. */
  stop(): Promise<void>;
  /** During `stop()`: hand running attempts back now instead of waiting for the drain timeout. */
  hurry(): void;
}

export async function startKairos(config: NodeConfig, opts: ProcessOptions): Promise<KairosProcess> {
  const log = createLogger(config.nodeId);
  const logFn = (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => log[level](extra ?? {}, msg);
  const node = new KairosNode(config, { clock: systemClock, random: systemRandom, log: logFn });
  node.events.on((e) => log.info({ evt: e.type, ...e }, e.type));
  const jobCfg: JobActorConfig = { ...DEFAULT_JOB_CONFIG, ...opts.job };
  const retention = retentionConfig(opts.retention); // validated before anything starts
  const limits = resolveTaskLimits(opts.taskLimits); // validated before anything starts
  const natsApiCfg = natsApiConfig({
    ...(opts.rateLimits?.tenantPerSecond !== undefined ? { tenantPerSecond: opts.rateLimits.tenantPerSecond } : {}),
    ...(opts.rateLimits?.tenantBurst !== undefined ? { tenantBurst: opts.rateLimits.tenantBurst } : {}),
    ...opts.natsApi,
  });
  const webhooks = new WebhookSender(opts.webhook ?? {});
  const workerHeartbeatMs = opts.workerHeartbeatMs ?? Math.max(250, Math.floor(jobCfg.leaseTtlMs / 4));
  // Optimistic offers between heartbeats: with fair shares a granted run usually has its slot.
  const directory = new WorkerDirectory(systemClock, systemRandom, workerHeartbeatMs * 3, {
    optimistic: true,
    // An advert naming another worker than its subject's (worker-directory.ts).
    onRefused: (subject, reason) => node.events.emit({ type: "message_refused", actor: `worker/${subject.slice(subject.lastIndexOf(".") + 1)}`, reason }),
  });
  for (const r of actorRegistrations()) node.register(r);
  // Run-path metrics from the run records and effects of this node's job actors.
  const runsWaiting = new RunsWaiting(() => systemClock.now());
  const runMetrics = new RunMetrics(prometheusSink(opts.metricsTenantLabels === true), BASELINE_LIMIT, runsWaiting);
  // What arrives over NATS is checked before an actor sees it (docs/security.md, "The bus").
  node.guard(JOB_ACTOR, jobAddressGuard);
  node.guard(TENANT_ACTOR, tenantAddressGuard);
  node.allowFromWorkers(JOB_ACTOR, WORKER_TO_JOB_KINDS);
  // api and scheduler: task secrets, sealed at the API and opened for an offer (secret-env.ts).
  const secrets = opts.secretKey ? new SecretEnvStore(opts.secretKey, () => node.buckets.tenants) : undefined;
  // scheduler: dead letters' webhook deliveries, kept in KV until done (dead-letters.ts).
  let webhookOf: ((tenantId: string) => Promise<WebhookTarget | undefined>) | undefined;
  const outbox = new DeadLetterOutbox({
    runs: () => node.buckets.runs, held: () => node.heldPartitions(), clock: systemClock, log: logFn,
    webhook: async (id) => webhookOf?.(id),
    // Dead letters age out with the run records (--keep-runs-days); at most 10,000 per tenant.
    retention: deadLetterRetention({ maxAgeMs: retention.maxAgeMs }),
  });
  node.onConnected((n) => {
    // Only job actors (schedulers) pick workers; other identities may not read the adverts. They
    // are read on the control connection, never behind the run path's backlog on the data
    // connection (worker-directory.ts, "Busy is not dead"); workers send them on their data one.
    if (config.roles.includes("scheduler")) directory.start(n.control, config.clusterName);
    const quotas = new KvTenantDirectory(n.buckets.tenants, { clock: systemClock });
    // Tenant records change rarely: read through a 10 s cache (bounded).
    const cache = new Map<string, { t: Tenant | null; atMs: number }>();
    const tenant = async (tenantId: string): Promise<Tenant | null> => {
      const hit = cache.get(tenantId);
      if (hit && systemClock.now() - hit.atMs < 10_000) return hit.t;
      // A failed read is not cached and not guessed: the caller fails (a slot request without its
      // cap would let a freshly activated tenant actor apply the default) and asks again later.
      const t = await quotas.getTenant(tenantId);
      if (cache.size > 10_000) cache.clear();
      cache.set(tenantId, { t, atMs: systemClock.now() });
      return t;
    };
    webhookOf = async (id) => {
      const t = await tenant(id);
      return t?.webhook_url && t.webhook_secret ? { url: t.webhook_url, secret: t.webhook_secret, sender: webhooks } : undefined;
    };
    n.register(jobRegistration(jobCfg, {
      log: logFn,
      clock: systemClock,
      workers: { nc: n.nc, clusterName: config.clusterName, directory },
      history: {
        runs: n.buckets.runs,
        metrics: runMetrics,
        retention: new RunRetention(retention, { runs: n.buckets.runs, actors: n.buckets.actors, nowMs: () => systemClock.now(), log: logFn }),
      },
      slots: {
        router: () => n.router,
        tenantMaxConcurrent: async (id) => (await tenant(id))?.max_concurrent_runs,
        tenantWeight: async (id) => (await tenant(id))?.weight,
      },
      deadLetters: { outbox, tenantWebhook: webhookOf },
      ...(secrets ? { secrets } : {}),
    }));
    // Weighted max-min shares of the fleet's slots: tenants report demand to one fleet actor.
    n.register(tenantRegistration(n.buckets.actors, undefined, { reportMs: FAIR_REPORT_MS }, systemClock));
    n.register(fleetRegistration(() => directory.capacity()));
  });
  await node.start();

  const tenants = new KvTenantDirectory(node.buckets.tenants, { clock: systemClock });
  let worker: Worker | undefined;
  if (config.roles.includes("worker")) {
    const executor = await createExecutor(opts.executor, {
      workerId: config.nodeId, clock: systemClock, log: logFn, ...(opts.noopDurationMs ? { noop: { durationMs: opts.noopDurationMs } } : {}),
      docker: { maxMemoryMb: limits.maxMemoryMb, maxCpus: limits.maxCpus, maxPids: limits.maxPids },
    });
    worker = new Worker({
      workerId: config.nodeId, clusterName: config.clusterName, slots: opts.workerSlots,
      heartbeatIntervalMs: workerHeartbeatMs, completionDeadlineMs: 60_000,
      nc: node.nc, router: node.workerRouter, executor, clock: systemClock, log: logFn,
      onEvent: (e) => log.info({ evt: `worker_${e.type}`, ...e }, `worker_${e.type}`),
      inboxes: inboxModeFor(config.natsAuth),
      onRefused: (r) => node.events.emit({ type: "reply_refused", responder: "worker", reason: r.reason, subject: r.subject }),
    });
    await worker.start();
  }
  // scheduler: kairos_forecast_runs_due over the jobs of the partitions held here.
  const forecast = config.roles.includes("scheduler")
    ? new ForecastService({ actors: () => node.buckets.actors, held: () => node.heldPartitions(), events: node.events, clock: systemClock, log: logFn })
    : undefined;
  forecast?.start();
  if (config.roles.includes("scheduler")) outbox.start();
  const ops = nodeOps(node, config, worker ? { kind: opts.executor, draining: () => worker?.draining ?? false } : undefined, () => runsWaiting.count(systemClock.now()));
  let metrics: ApiServer | undefined;
  let api: ApiServer | undefined;
  let natsApi: { service: NatsApiService; close: () => Promise<void> } | undefined;
  const stopNatsApi = async (): Promise<void> => {
    await natsApi?.service.stop();
    await natsApi?.close();
  };
  const cleanUp = async (): Promise<void> => {
    await api?.close();
    await stopNatsApi();
    forecast?.stop();
    outbox.stop();
    await metrics?.close();
    await worker?.stop();
    directory.stop();
    ops.close();
    await node.stop();
  };
  if (opts.metricsPort !== undefined) {
    try {
      const app = createOpsApp(ops, opts.metricsToken !== undefined ? { metricsToken: opts.metricsToken } : {});
      metrics = await serveApi(app, { host: opts.metricsHost ?? "127.0.0.1", port: opts.metricsPort });
    } catch (e) {
      await cleanUp();
      throw e;
    }
    log.info({ evt: "metrics_listening", metrics_url: `${metrics.url}/metrics` }, "metrics listening");
  }
  if (config.roles.includes("api")) {
    const jobs = new NatsJobsService(node.router, node.buckets, node.partitions, systemRandom, secrets);
    const app = createApp({ jobs, tenants, clock: systemClock, taskLimits: limits, ...(opts.imagePolicy ? { imagePolicy: opts.imagePolicy } : {}), ...(opts.rateLimits ? { rateLimits: opts.rateLimits } : {}), logError: (err, req) => log.error({ err: String(err), ...req }, "api internal error") });
    registerReadiness(app, ops); // /readyz for load balancers; /metrics only on the metrics listener
    try {
      api = await serveApi(app, { host: opts.apiHost, port: opts.apiPort });
    } catch (e) {
      await cleanUp();
      throw e;
    }
    log.info({ evt: "api_listening", api_url: api.url }, "api listening");
    if (natsApiCfg.enabled) {
      try {
        natsApi = await startNatsApi(config, natsApiCfg, {
          operations: createOperations({ jobs, clock: systemClock, imagePolicy: opts.imagePolicy ?? ALLOW_ANY_IMAGE, taskLimits: limits }),
          tenants, services: new KvServiceDirectory(node.buckets.tenants, systemClock), log: logFn, events: node.events,
        });
      } catch (e) {
        await cleanUp();
        throw e;
      }
      log.info({ evt: "nats_api_listening", subject: natsApi.service.subject }, "nats api listening");
    }
  }
  return {
    node, api, worker, tenants, metrics,
    get natsApi() {
      return natsApi?.service;
    },
    async stop() {
      await api?.close();
      await stopNatsApi();
      // Drain first: the scheduler side (if this node has it) and NATS keep serving the attempts'
      // heartbeats and completions meanwhile.
      await worker?.drain(opts.drainTimeoutMs ?? DEFAULT_DRAIN_TIMEOUT_MS);
      await worker?.stop();
      directory.stop();
      forecast?.stop();
      outbox.stop();
      await node.stop();
      await metrics?.close();
      ops.close();
    },
    hurry() {
      worker?.hurry();
    },
  };
}

/**
 * The internal NATS API on its own connection (named `kairos-<node>-api`, the node's credentials):
 * its requests carry headers, which the node's bus port does not, and it drains on its own. When
 * the credentials carry the callout issuer's seed (`kairos nats-auth`, `kairos dev`), the same
 * connection answers nats-server's auth callout for service identities (auth-callout.ts).
 */
async function startNatsApi(
  config: NodeConfig, cfg: NatsApiConfig,
  deps: {
    operations: ReturnType<typeof createOperations>; tenants: KvTenantDirectory; services: KvServiceDirectory; events: EventBus;
    log: (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;
  },
): Promise<{ service: NatsApiService; close: () => Promise<void> }> {
  const nc = await connectNats({ url: config.natsUrl, name: `kairos-${config.nodeId}-api`, ...config.natsAuth });
  const handler = createNatsApiHandler({
    clusterName: config.clusterName, operations: deps.operations, tenants: deps.tenants, clock: systemClock, config: cfg,
    logError: (err, op) => deps.log("error", "nats api internal error", { err: String(err), op }),
  });
  const service = new NatsApiService(nc, handler, {
    clusterName: config.clusterName, maxInFlight: cfg.maxInFlight, log: deps.log, inboxes: inboxModeFor(config.natsAuth),
    onRefused: (r) => deps.events.emit({ type: "reply_refused", responder: "nats_api", reason: r.reason, subject: r.subject }),
  });
  const creds = config.natsAuth.credsFile !== undefined ? readNatsCredentials(config.natsAuth.credsFile) : undefined;
  const seed = creds?.callout_issuer_seed;
  const callout = seed === undefined ? undefined : new ServiceAuthCallout(nc, {
    clusterName: config.clusterName, issuerSeed: seed, clock: systemClock, log: deps.log,
    ...(creds?.callout_xkey_seed !== undefined ? { xkeySeed: creds.callout_xkey_seed } : {}),
    lookup: async (name, secret): Promise<Lookup> => {
      const c = await deps.services.check(name, secret);
      if (!c.ok) return c;
      return (await deps.tenants.getTenant(c.record.tenant_id)) === null ? { ...c, tenantGone: true } : c;
    },
  });
  try {
    await service.start();
    await callout?.start();
  } catch (e) {
    await nc.close();
    throw e;
  }
  if (callout) deps.log("info", "serving the auth callout for service identities", { evt: "service_auth_listening" });
  else if (config.natsAuth.credsFile !== undefined) {
    deps.log("warn", "no callout_issuer_seed in this node's NATS credentials: it does not admit service identities (kairos admin service create); regenerate them with kairos nats-auth", { evt: "service_auth_off" });
  }
  return {
    service,
    close: async () => {
      await callout?.stop();
      if (!nc.isClosed()) await nc.drain();
    },
  };
}
