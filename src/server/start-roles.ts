/**
 * The roles' parts of a Kairos process (startKairos in start.ts): the scheduler's actor
 * registrations, the worker and the metrics listener; the api role is in api-role.ts.
 */
import { systemClock } from "../lib/clock.ts";
import { createLogger } from "../lib/log.ts";
import { systemRandom } from "../lib/random.ts";
import type { NodeConfig } from "../cluster/config.ts";
import { KairosNode } from "./node.ts";
import { type JobActorConfig } from "../job-state/job-types.ts";
import { jobRegistration } from "../jobs/job-shell.ts";
import { tenantRegistration } from "../slots/tenant-shell.ts";
import { fleetRegistration } from "../slots/fleet-shell.ts";
import { FAIR_REPORT_MS } from "../slots/fleet-actor.ts";
import { WorkerDirectory } from "../slots/worker-directory.ts";
import { advertLimits } from "../slots/worker-trust.ts";
import { Worker } from "../worker/worker.ts";
import {
  createExecutor,
  taskLimits as resolveTaskLimits,
  type EgressOptions,
  type ExecutorKind,
  type ImagePolicy,
  type PullPolicy,
  type TaskLimits,
} from "../sandbox/index.ts";
import { WebhookSender, type WebhookPolicy, type WebhookTarget } from "../notify/webhook.ts";
import { DeadLetterOutbox } from "../notify/dead-letters.ts";
import type { Mailer, MailConfig } from "../notify/mail.ts";
import type { RunEvents } from "../notify/run-events.ts";
import { SecretEnvStore } from "../secrets/secret-env.ts";
import type { RegistryAuthLookup } from "../secrets/registry-credentials.ts";
import type { RunTokenConfig, RunTokenIssuer } from "../secrets/run-token.ts";
import { serveApi, type ApiServer } from "../http/index.ts";
import type { RateLimitOptions } from "../http/rate-limit.ts";
import { createOpsApp } from "../http/ops.ts";
import { nodeOps } from "./ops.ts";
import { RunMetrics } from "../history/run-metrics.ts";
import { type RetentionConfig } from "../history/retention.ts";
import { RunRetention } from "../history/run-retention.ts";
import { TenantRunLog } from "../history/tenant-run-log.ts";
import { KvTenantDirectory } from "../tenants/index.ts";
import { DEFAULT_MAX_WAITING_RUNS, type Tenant } from "../protocol/service.ts";
import { inboxModeFor } from "../cluster/reply-guard.ts";
import { natsApiConfig, type NatsApiConfig } from "../nats-api/config.ts";
import type { NatsApiService } from "../nats-api/service.ts";

export interface ProcessOptions {
  executor: ExecutorKind;
  workerSlots: number;
  /** The worker's prefetch (src/worker/slot-ledger.ts; default `defaultPrefetch(workerSlots)`). */
  workerPrefetch?: number;
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
  /**
   * worker, docker executor: when a task's image is pulled (src/sandbox/docker-image.ts); default
   * "if_missing".
   */
  pull?: PullPolicy;
  /** api: the operator's default image policy (default: any image). */
  imagePolicy?: ImagePolicy;
  /**
   * api and worker: the cluster's per-task resource maxima (default DEFAULT_TASK_LIMITS) — API
   * nodes refuse a task above them, workers' docker executors apply them; the same on every node.
   */
  taskLimits?: TaskLimits;
  /** api: per-tenant request limit and failed-authentication throttle (defaults: src/http/rate-limit.ts). */
  rateLimits?: Partial<RateLimitOptions>;
  /** scheduler: rules for webhook destinations (default: https, public addresses only). */
  webhook?: Partial<WebhookPolicy>;
  /** scheduler: run-event mails through this SMTP server (src/notify/mail.ts); none: no email. */
  mail?: Partial<MailConfig> & { smtpUrl: string };
  /**
   * worker: on stop, how long running attempts may go on finishing before they are handed back
   * (killed and reported as retryable errors); 0: hand back at once. Default `DEFAULT_DRAIN_TIMEOUT_MS`.
   */
  drainTimeoutMs?: number;
  /** scheduler: run-record retention per job and deleted-job purge (defaults: src/history/retention.ts). */
  retention?: Partial<RetentionConfig>;
  /** worker, docker executor: the task network and egress proxy (docs/security.md); none: no egress. */
  egress?: EgressOptions;
  /** worker, noop executor: how long each run takes (benchmarks); default 0. */
  noopDurationMs?: number;
  /**
   * api and scheduler: the cluster secret key (32 bytes) that seals and opens `task.secret_env`
   * (secret-env.ts); the same on every api and scheduler node. Without it secrets are refused.
   */
  secretKey?: Buffer;
  /**
   * scheduler and api: the run-token settings (src/secrets/run-token.ts): schedulers sign each
   * offered attempt's `KAIROS_RUN_TOKEN` with the current key, API nodes accept the token for its
   * own run and job and publish the public keys. None: no tokens, API keys only.
   */
  runTokens?: RunTokenConfig;
  /**
   * api: the internal NATS API (docs/nats-api.md; defaults in src/nats-api/config.ts: on, 64 KiB
   * payloads, 256 requests in flight). Its per-tenant rate defaults to `rateLimits`'.
   */
  natsApi?: Partial<NatsApiConfig>;
}

export type LogFn = (
  level: "info" | "warn" | "error",
  msg: string,
  extra?: Record<string, unknown>,
) => void;
export type Logger = ReturnType<typeof createLogger>;
export type NatsApiHandle = { service: NatsApiService; close: () => Promise<void> };

/** The listeners a process opens after its node starts, closed by its clean-up and stop. */
export interface Listeners {
  metrics?: ApiServer;
  api?: ApiServer;
  natsApi?: NatsApiHandle;
}

/** What the scheduler's actors share, handed to the registrations once the node is connected. */
export interface SchedulerParts {
  config: NodeConfig;
  jobCfg: JobActorConfig;
  retention: RetentionConfig;
  logFn: LogFn;
  directory: WorkerDirectory;
  runMetrics: RunMetrics;
  /** Every run record this node creates goes to its tenant's runs log (tenant-run-log.ts). */
  tenantLog: TenantRunLog;
  outbox: DeadLetterOutbox;
  /** Run events for the tenants' subscriptions, through the outbox (src/notify/run-events.ts). */
  runEvents: RunEvents;
  /** Run-event mails (`--smtp-url`); none: email subscriptions are not served by this node. */
  mailer: Mailer | undefined;
  webhooks: WebhookSender;
  secrets: SecretEnvStore | undefined;
  /** Opens tenants' registry credentials for offers (none without the secret key). */
  registryAuth: RegistryAuthLookup | undefined;
  /** Mints each offered attempt's run token (none: attempts get no token). */
  runTokens: RunTokenIssuer | undefined;
  setWebhookOf: (f: (tenantId: string) => Promise<WebhookTarget | undefined>) => void;
}

/** The NATS API's settings: its per-tenant rate defaults to the HTTP API's (`rateLimits`). */
export function natsApiConfigFor(opts: ProcessOptions): NatsApiConfig {
  return natsApiConfig({
    ...(opts.rateLimits?.tenantPerSecond !== undefined
      ? { tenantPerSecond: opts.rateLimits.tenantPerSecond }
      : {}),
    ...(opts.rateLimits?.tenantBurst !== undefined
      ? { tenantBurst: opts.rateLimits.tenantBurst }
      : {}),
    ...opts.natsApi,
  });
}

/** The workers' adverts as the job actors see them. */
export function workerDirectory(node: KairosNode, workerHeartbeatMs: number): WorkerDirectory {
  // Optimistic offers between heartbeats: with fair shares a granted run usually has its slot.
  return new WorkerDirectory(systemClock, systemRandom, workerHeartbeatMs * 3, {
    optimistic: true,
    limits: advertLimits(node.config),
    // An advert naming another worker than its subject's (worker-directory.ts).
    onRefused: (subject, reason) =>
      node.events.emit({
        type: "message_refused",
        actor: `worker/${subject.slice(subject.lastIndexOf(".") + 1)}`,
        reason,
      }),
    // Adverts above the operator's limits, and workers that sat on offers (worker-trust.ts).
    onClamped: (worker, fields, a) =>
      node.events.emit({
        type: "worker_advert_clamped",
        worker,
        fields,
        slots: a.slots,
        free: a.free,
        prefetch: a.prefetch ?? null,
      }),
    onStanding: (worker, s) => {
      if (s.kind === "benched")
        node.events.emit({
          type: "worker_benched",
          worker,
          strikes: s.strikes,
          until_ms: s.until_ms,
        });
      else if (s.kind === "trusted")
        node.events.emit({ type: "worker_trusted", worker, strikes: s.strikes });
    },
  });
}

/**
 * Tenant records through a 10 s cache (bounded; they change rarely): `tenant` reads once per tenant
 * at a time (a burst's callers at an expiry share the read); `tenantWeightNow` never waits.
 */
function tenantReads(quotas: KvTenantDirectory): {
  tenant: (tenantId: string) => Promise<Tenant | null>;
  tenantWeightNow: (tenantId: string) => number | undefined;
} {
  const cache = new Map<string, { t: Tenant | null; atMs: number }>();
  // One read per tenant at a time: a burst's callers at a cache expiry share it.
  const loading = new Map<string, Promise<Tenant | null>>();
  const tenant = async (tenantId: string): Promise<Tenant | null> => {
    const hit = cache.get(tenantId);
    if (hit && systemClock.now() - hit.atMs < 10_000) return hit.t;
    // A failed read is not cached and not guessed: the caller fails (a slot request without its
    // cap would let a freshly activated tenant actor apply the default) and asks again later.
    let read = loading.get(tenantId);
    if (read === undefined) {
      read = quotas.getTenant(tenantId).then((t) => {
        if (cache.size > 10_000) cache.clear();
        cache.set(tenantId, { t, atMs: systemClock.now() });
        return t;
      });
      loading.set(tenantId, read);
      void read.then(
        () => loading.delete(tenantId),
        () => loading.delete(tenantId),
      );
    }
    return read;
  };
  // The weight as held now (an offer never waits for a read); stale or unknown: read behind.
  const tenantWeightNow = (tenantId: string): number | undefined => {
    const hit = cache.get(tenantId);
    if (!hit || systemClock.now() - hit.atMs >= 10_000)
      void tenant(tenantId).catch(() => undefined);
    return hit?.t?.weight;
  };
  return { tenant, tenantWeightNow };
}

/**
 * Once NATS and the buckets are ready: the worker directory (schedulers), the tenant lookups and
 * the job, tenant and fleet actors' registrations.
 */
export function registerSchedulerActors(n: KairosNode, p: SchedulerParts): void {
  const { config, logFn, directory } = p;
  // Only job actors (schedulers) pick workers; other identities may not read the adverts. They
  // are read on the control connection, never behind the run path's backlog on the data
  // connection (worker-directory.ts, "Busy is not dead"); workers send them on their data one.
  if (config.roles.includes("scheduler")) directory.start(n.control, config.clusterName);
  const quotas = new KvTenantDirectory(n.buckets.tenants, { clock: systemClock });
  const { tenant, tenantWeightNow } = tenantReads(quotas);
  const webhookOf = async (id: string): Promise<WebhookTarget | undefined> => {
    const t = await tenant(id);
    return t?.webhook_url && t.webhook_secret
      ? { url: t.webhook_url, secret: t.webhook_secret, sender: p.webhooks }
      : undefined;
  };
  p.setWebhookOf(webhookOf);
  n.register(
    jobRegistration(p.jobCfg, {
      log: logFn,
      clock: systemClock,
      workers: { nc: n.nc, clusterName: config.clusterName, directory },
      history: {
        runs: n.buckets.runs,
        metrics: p.runMetrics,
        tenantLog: p.tenantLog,
        retention: new RunRetention(p.retention, {
          runs: n.buckets.runs,
          actors: n.buckets.actors,
          nowMs: () => systemClock.now(),
          log: logFn,
        }),
      },
      slots: {
        router: () => n.router,
        tenantMaxConcurrent: async (id) => (await tenant(id))?.max_concurrent_runs,
        tenantMaxWaiting: async (id) => {
          const t = await tenant(id);
          return t === null ? undefined : (t.max_waiting_runs ?? DEFAULT_MAX_WAITING_RUNS);
        },
        tenantWeight: async (id) => (await tenant(id))?.weight,
        tenantWeightNow,
      },
      deadLetters: { outbox: p.outbox, tenantWebhook: webhookOf },
      runEvents: p.runEvents,
      ...(p.secrets ? { secrets: p.secrets } : {}),
      ...(p.registryAuth ? { registryAuth: p.registryAuth } : {}),
      ...(p.runTokens ? { runTokens: p.runTokens } : {}),
      egressPolicy: async (id) => (await tenant(id))?.egress_policy ?? null,
    }),
  );
  // Weighted max-min shares of the fleet's slots: tenants report demand to one fleet actor.
  n.register(
    tenantRegistration(n.buckets.actors, undefined, { reportMs: FAIR_REPORT_MS }, systemClock),
  );
  n.register(
    fleetRegistration(
      () => directory.capacity(),
      () => directory.executingByTenant(),
    ),
  );
}

/** The worker role: its executor, then the worker on the node's worker plane, started. */
export async function startWorker(
  config: NodeConfig,
  opts: ProcessOptions,
  node: KairosNode,
  w: {
    limits: ReturnType<typeof resolveTaskLimits>;
    workerHeartbeatMs: number;
    log: Logger;
    logFn: LogFn;
  },
): Promise<Worker> {
  const { limits, log, logFn } = w;
  const executor = await createExecutor(opts.executor, {
    workerId: config.nodeId,
    clock: systemClock,
    log: logFn,
    ...(opts.noopDurationMs ? { noop: { durationMs: opts.noopDurationMs } } : {}),
    docker: {
      maxMemoryMb: limits.maxMemoryMb,
      maxCpus: limits.maxCpus,
      maxPids: limits.maxPids,
      ...(opts.egress !== undefined ? { egress: opts.egress } : {}),
      pull: opts.pull ?? "if_missing",
    },
  });
  const worker = new Worker({
    workerId: config.nodeId,
    clusterName: config.clusterName,
    slots: opts.workerSlots,
    ...(opts.workerPrefetch !== undefined ? { prefetch: opts.workerPrefetch } : {}),
    heartbeatIntervalMs: w.workerHeartbeatMs,
    completionDeadlineMs: 60_000,
    nc: node.nc,
    router: node.workerRouter,
    executor,
    clock: systemClock,
    random: systemRandom,
    log: logFn,
    onEvent: (e) => log.info({ evt: `worker_${e.type}`, ...e }, `worker_${e.type}`),
    inboxes: inboxModeFor(config.natsAuth),
    onRefused: (r) =>
      node.events.emit({
        type: "reply_refused",
        responder: "worker",
        reason: r.reason,
        subject: r.subject,
      }),
  });
  await worker.start();
  return worker;
}

/** The metrics listener (`--metrics-port`); on failure, cleans up what started and rethrows. */
export async function serveMetrics(
  ops: ReturnType<typeof nodeOps>,
  opts: ProcessOptions,
  listeners: Listeners,
  cleanUp: () => Promise<void>,
  log: Logger,
): Promise<void> {
  let metrics: ApiServer;
  try {
    const app = createOpsApp(
      ops,
      opts.metricsToken !== undefined ? { metricsToken: opts.metricsToken } : {},
    );
    metrics = await serveApi(app, {
      host: opts.metricsHost ?? "127.0.0.1",
      port: opts.metricsPort!,
    });
    listeners.metrics = metrics;
  } catch (e) {
    await cleanUp();
    throw e;
  }
  log.info(
    { evt: "metrics_listening", metrics_url: `${metrics.url}/metrics` },
    "metrics listening",
  );
}
