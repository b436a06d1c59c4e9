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
import { DEFAULT_JOB_CONFIG, type JobActorConfig } from "../job-state/job-types.ts";
import { jobAddressGuard, tenantAddressGuard } from "./address-guard.ts";
import { JOB_ACTOR, TENANT_ACTOR } from "../protocol/ids.ts";
import { WORKER_TO_JOB_KINDS } from "../protocol/worker.ts";
import { WorkerDirectory } from "../slots/worker-directory.ts";
import { Worker } from "../worker/worker.ts";
import { taskLimits as resolveTaskLimits } from "../sandbox/index.ts";
import { WebhookSender, type WebhookTarget } from "../notify/webhook.ts";
import { DeadLetterOutbox } from "../notify/dead-letters.ts";
import { Mailer, mailConfig, type MailConfig } from "../notify/mail.ts";
import { RunEvents } from "../notify/run-events.ts";
import { SubscriptionLookup } from "../notify/subscriptions.ts";
import { SecretEnvStore } from "../secrets/secret-env.ts";
import { RegistryAuthLookup, RegistryCredentialStore } from "../secrets/registry-credentials.ts";
import { RunTokenIssuer } from "../secrets/run-token.ts";
import { type ApiServer } from "../http/index.ts";
import { nodeOps } from "./ops.ts";
import { ForecastService } from "./forecast.ts";
import { RunMetrics, prometheusSink, BASELINE_LIMIT } from "../history/run-metrics.ts";
import { RunsWaiting } from "../history/run-waiting.ts";
import { TenantSeries } from "../history/tenant-series.ts";
import { TenantRunLog } from "../history/tenant-run-log.ts";
import { StatsResponder } from "./stats-responder.ts";
import { nodeLiveRuns } from "./live-runs.ts";
import { inboxModeFor } from "../cluster/reply-guard.ts";
import { STATS_STEP_MS } from "../protocol/stats.ts";
import { retentionConfig } from "../history/retention.ts";
import { deadLetterRetention } from "../notify/dead-letter-retention.ts";
import { KvTenantDirectory } from "../tenants/index.ts";
import { NatsApiService } from "../nats-api/service.ts";

import {
  natsApiConfigFor,
  registerSchedulerActors,
  serveMetrics,
  startWorker,
  workerDirectory,
  type Listeners,
  type LogFn,
  type ProcessOptions,
  type SchedulerParts,
} from "./start-roles.ts";
import { serveApiRole } from "./api-role.ts";

export type { ProcessOptions } from "./start-roles.ts";

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

/**
 * Events logged at `debug`, not `info`: one line per actor activated or passivated — one per job
 * created, thousands when a partition is acquired (it activates every job of it).
 */
const PER_ACTOR_EVENTS: ReadonlySet<string> = new Set(["actor_activated", "actor_passivated"]);

export async function startKairos(
  config: NodeConfig,
  opts: ProcessOptions,
): Promise<KairosProcess> {
  const log = createLogger(config.nodeId);
  const logFn: LogFn = (level, msg, extra) => log[level](extra ?? {}, msg);
  const node = new KairosNode(config, { clock: systemClock, random: systemRandom, log: logFn });
  node.events.on((e) => {
    if (!PER_ACTOR_EVENTS.has(e.type)) log.info({ evt: e.type, ...e }, e.type);
    else if (log.isLevelEnabled("debug")) log.debug({ evt: e.type, ...e }, e.type);
  });
  const jobCfg: JobActorConfig = { ...DEFAULT_JOB_CONFIG, ...opts.job };
  const retention = retentionConfig(opts.retention); // validated before anything starts
  const limits = resolveTaskLimits(opts.taskLimits); // validated before anything starts
  const natsApiCfg = natsApiConfigFor(opts);
  const mail = opts.mail ? mailConfig(opts.mail) : undefined; // validated before anything starts
  const webhooks = new WebhookSender(opts.webhook ?? {});
  const workerHeartbeatMs =
    opts.workerHeartbeatMs ?? Math.max(250, Math.floor(jobCfg.leaseTtlMs / 4));
  const directory = workerDirectory(node, workerHeartbeatMs);
  for (const r of actorRegistrations()) node.register(r);
  const { runsWaiting, series, runMetrics } = runPathMetrics(opts.metricsTenantLabels === true);
  // What arrives over NATS is checked before an actor sees it (docs/security.md, "The bus").
  node.guard(JOB_ACTOR, jobAddressGuard);
  node.guard(TENANT_ACTOR, tenantAddressGuard);
  node.allowFromWorkers(JOB_ACTOR, WORKER_TO_JOB_KINDS);
  const { secrets, registryAuth } = sealedStores(config, opts, node);
  // scheduler: the run tokens of offered attempts, signed with the current key (run-token.ts).
  const runTokens =
    opts.runTokens && config.roles.includes("scheduler")
      ? await RunTokenIssuer.create(opts.runTokens)
      : undefined;
  const parts = schedulerParts(node, mail, {
    config,
    jobCfg,
    retention,
    logFn,
    directory,
    runMetrics,
    webhooks,
    secrets,
    registryAuth,
    runTokens,
  });
  const { outbox, mailer, tenantLog } = parts;
  node.onConnected((n) => registerSchedulerActors(n, parts));
  await node.start();

  const tenants = new KvTenantDirectory(node.buckets.tenants, { clock: systemClock });
  const worker = config.roles.includes("worker")
    ? await startWorker(config, opts, node, { limits, workerHeartbeatMs, log, logFn })
    : undefined;
  // scheduler: the forecast, and the tenants' live figures it feeds (one stop for both).
  const forecast = startForecastAndStats(config, node, logFn, { series, runsWaiting, directory });
  if (config.roles.includes("scheduler")) startNotify(parts);
  const ops = nodeOps(
    node,
    config,
    worker ? { kind: opts.executor, draining: () => worker?.draining ?? false } : undefined,
    () => runsWaiting.count(systemClock.now()),
  );
  const listeners: Listeners = {};
  const stopNatsApi = async (): Promise<void> => {
    await listeners.natsApi?.service.stop();
    await listeners.natsApi?.close();
  };
  const { runEvents } = parts;
  const started = {
    ...{ node, worker, tenants, directory, forecast, outbox, mailer, runEvents, ops },
    tenantLog,
  };
  const cleanUp = (): Promise<void> => cleanUpAfterFailedStart(started, listeners, stopNatsApi);
  if (opts.metricsPort !== undefined) await serveMetrics(ops, opts, listeners, cleanUp, log);
  if (config.roles.includes("api")) {
    await serveApiRole(
      { config, opts, node, ops, tenants, limits, secrets, natsApiCfg, log, logFn },
      listeners,
      cleanUp,
    );
  }
  return processHandle(started, listeners, stopNatsApi, opts);
}

/**
 * What the cluster secret key opens (api and scheduler): task secrets, sealed at the API and opened
 * for an offer (secret-env.ts), and (schedulers) tenants' registry credentials, opened for the
 * offers of their images' registries (registry-credentials.ts). None without the key.
 */
function sealedStores(
  config: NodeConfig,
  opts: ProcessOptions,
  node: KairosNode,
): { secrets: SecretEnvStore | undefined; registryAuth: RegistryAuthLookup | undefined } {
  if (!opts.secretKey) return { secrets: undefined, registryAuth: undefined };
  const secrets = new SecretEnvStore(opts.secretKey, () => node.buckets.tenants);
  const registryAuth = config.roles.includes("scheduler")
    ? new RegistryAuthLookup(
        new RegistryCredentialStore(opts.secretKey, () => node.buckets.tenants, systemClock),
        systemClock,
      )
    : undefined;
  return { secrets, registryAuth };
}

/**
 * The scheduler's dead-letter outbox and what its actors share; the outbox finds a tenant's
 * webhook through the lookup the registrations install once the node is connected.
 */
function schedulerParts(
  node: KairosNode,
  mail: MailConfig | undefined,
  p: Omit<SchedulerParts, "outbox" | "setWebhookOf" | "runEvents" | "mailer" | "tenantLog">,
): SchedulerParts {
  // scheduler: run events by email through the operator's SMTP server (mail.ts).
  const mailer =
    mail && p.config.roles.includes("scheduler")
      ? new Mailer(mail, { clock: systemClock, log: p.logFn })
      : undefined;
  // Tenants' run-event subscriptions, read through a 10 s cache (subscriptions.ts).
  const subscriptions = new SubscriptionLookup(() => node.buckets.tenants, systemClock);
  // scheduler: dead letters' webhook deliveries, kept in KV until done (dead-letters.ts).
  let webhookOf: ((tenantId: string) => Promise<WebhookTarget | undefined>) | undefined;
  const outbox = new DeadLetterOutbox({
    runs: () => node.buckets.runs,
    held: () => node.heldPartitions(),
    clock: systemClock,
    log: p.logFn,
    webhook: async (id) => webhookOf?.(id),
    subscriptions: (id) => subscriptions.of(id),
    webhookSender: p.webhooks,
    ...(mailer ? { mailer } : {}),
    // Dead letters age out with the run records (--keep-runs-days); at most 10,000 per tenant.
    retention: deadLetterRetention({ maxAgeMs: p.retention.maxAgeMs }),
  });
  return {
    ...p,
    outbox,
    // The tenants' runs logs (GET /v1/runs), fed by the records this node's job actors create.
    tenantLog: new TenantRunLog(() => node.buckets.runs, systemClock, p.logFn),
    runEvents: new RunEvents(subscriptions, outbox),
    mailer,
    setWebhookOf: (f) => {
      webhookOf = f;
    },
  };
}

/**
 * scheduler: the outbox's sweeper and the subscriptions' watch. A watch that cannot start is
 * logged: lookups then read per tenant (subscriptions.ts), nothing is lost.
 */
function startNotify(parts: SchedulerParts): void {
  parts.outbox.start();
  parts.runEvents.start().catch((e: unknown) =>
    parts.logFn("warn", "run-event subscriptions: watch not started; reading per tenant", {
      err: String(e),
    }),
  );
}

/** The started process: its parts, and a stop that drains the worker before the rest. */
function processHandle(
  r: {
    node: KairosNode;
    worker: Worker | undefined;
    tenants: KvTenantDirectory;
    directory: WorkerDirectory;
    forecast: { stop(): void } | undefined;
    outbox: DeadLetterOutbox;
    mailer: Mailer | undefined;
    runEvents: RunEvents;
    ops: ReturnType<typeof nodeOps>;
    tenantLog: TenantRunLog;
  },
  listeners: Listeners,
  stopNatsApi: () => Promise<void>,
  opts: ProcessOptions,
): KairosProcess {
  const { node, worker, tenants, directory, forecast, outbox, mailer, runEvents, ops, tenantLog } =
    r;
  const { api, metrics } = listeners;
  return {
    node,
    api,
    worker,
    tenants,
    metrics,
    get natsApi() {
      return listeners.natsApi?.service;
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
      runEvents.stop();
      mailer?.stop();
      // The runs created up to now into their tenants' logs, while NATS is still there.
      await tenantLog.close();
      await node.stop();
      await metrics?.close();
      ops.close();
    },
    hurry() {
      worker?.hurry();
    },
  };
}

/** scheduler: kairos_forecast_runs_due over the jobs of the partitions held here, started. */
function startForecast(
  config: NodeConfig,
  node: KairosNode,
  logFn: LogFn,
): ForecastService | undefined {
  const forecast = config.roles.includes("scheduler")
    ? new ForecastService({
        actors: () => node.buckets.actors,
        held: () => node.heldPartitions(),
        events: node.events,
        clock: systemClock,
        log: logFn,
      })
    : undefined;
  forecast?.start();
  return forecast;
}

/**
 * Run-path metrics from the run records and effects of this node's job actors; each first start
 * also goes to its tenant's live series (GET /v1/stats).
 */
function runPathMetrics(tenantLabels: boolean): {
  runsWaiting: RunsWaiting;
  series: TenantSeries;
  runMetrics: RunMetrics;
} {
  const runsWaiting = new RunsWaiting(() => systemClock.now());
  const series = new TenantSeries();
  const prometheus = prometheusSink(tenantLabels);
  const runMetrics = new RunMetrics(
    {
      ...prometheus,
      dispatchLag: (tenant, seconds) => {
        prometheus.dispatchLag(tenant, seconds);
        series.started(tenant, systemClock.now(), seconds * 1000);
      },
    },
    BASELINE_LIMIT,
    runsWaiting,
  );
  return { runsWaiting, series, runMetrics };
}

/** scheduler: the forecast service and the tenants' live figures, with one stop for both. */
function startForecastAndStats(
  config: NodeConfig,
  node: KairosNode,
  logFn: LogFn,
  p: { series: TenantSeries; runsWaiting: RunsWaiting; directory: WorkerDirectory },
): { stop(): void } | undefined {
  const forecast = startForecast(config, node, logFn);
  const stats = startStats(config, node, { ...p, forecast });
  if (forecast === undefined && stats === undefined) return undefined;
  return {
    stop() {
      forecast?.stop();
      stats?.stop();
    },
  };
}

/**
 * scheduler: the tenants' live figures — runs waiting sampled into each tenant's series at every
 * 5 s step (one pass over the runs waiting), and the answers to API nodes (stats-responder.ts),
 * with this node's part of the operators' view.
 */
function startStats(
  config: NodeConfig,
  node: KairosNode,
  p: {
    series: TenantSeries;
    runsWaiting: RunsWaiting;
    forecast: ForecastService | undefined;
    directory: WorkerDirectory;
  },
): { stop(): void } | undefined {
  if (!config.roles.includes("scheduler")) return undefined;
  const responder = new StatsResponder({
    clusterName: config.clusterName,
    nodeId: config.nodeId,
    inboxes: inboxModeFor(config.natsAuth),
    series: p.series,
    forecast: (tenantId) => p.forecast?.tenantForecast(tenantId),
    clock: systemClock,
    events: node.events,
    // The operators' view (operator-view.ts): this node's part, from memory.
    overview: () => {
      const w = p.runsWaiting.count(systemClock.now());
      return {
        partitions: node.heldPartitions(),
        actors_active: node.host?.activeCount ?? 0,
        mailbox_depth: node.host?.recentMailboxDepth ?? 0,
        runs_waiting: [w.slot, w.worker],
        workers: p.directory.list(),
      };
    },
    // The tenant's runs list's live overlay: from the loaded job actors' memory (live-runs.ts).
    liveRuns: (tenantId, runIds) =>
      nodeLiveRuns((type, id) => node.host?.peek(type, id), tenantId, runIds),
  });
  responder.start(node.control);
  let cancel: (() => void) | undefined;
  let stopped = false;
  const sample = (): void => {
    if (stopped) return;
    const now = systemClock.now();
    p.series.sampleWaiting(p.runsWaiting.countByTenant(now), now);
    // Just past the next step's start, so the sample lands in the step it describes.
    cancel = systemClock.setTimer(STATS_STEP_MS - (now % STATS_STEP_MS) + 50, sample);
  };
  sample();
  return {
    stop() {
      stopped = true;
      cancel?.();
      responder.stop();
    },
  };
}

type ProcessParts = Parameters<typeof processHandle>[0];

/** A listener failed to start: stops everything started so far, the listeners first. */
async function cleanUpAfterFailedStart(
  r: ProcessParts,
  listeners: Listeners,
  stopNatsApi: () => Promise<void>,
): Promise<void> {
  const { node, worker, directory, forecast, outbox, mailer, runEvents, ops } = r;
  await listeners.api?.close();
  await stopNatsApi();
  forecast?.stop();
  outbox.stop();
  runEvents.stop();
  mailer?.stop();
  await listeners.metrics?.close();
  await worker?.stop();
  directory.stop();
  ops.close();
  await node.stop();
}
