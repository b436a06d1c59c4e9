/**
 * The api role of a Kairos process (startKairos in start.ts): the HTTP API, then the internal
 * NATS API on its own connection, which also answers nats-server's auth callout for service
 * identities when this node's credentials carry the callout issuer's seed.
 */
import { systemClock } from "../lib/clock.ts";
import { systemRandom } from "../lib/random.ts";
import type { NodeConfig } from "../cluster/config.ts";
import { connectNats, readNatsCredentials } from "../cluster/nats.ts";
import type { EventBus } from "../cluster/events.ts";
import { inboxModeFor } from "../cluster/reply-guard.ts";
import type { NatsConnection } from "@nats-io/transport-node";
import type { KairosNode } from "./node.ts";
import type { nodeOps } from "./ops.ts";
import type { Listeners, LogFn, Logger, NatsApiHandle, ProcessOptions } from "./start-roles.ts";
import { NatsJobsService } from "../service/nats-service.ts";
import type { taskLimits as resolveTaskLimits } from "../sandbox/index.ts";
import { ALLOW_ANY_IMAGE } from "../sandbox/image-policy.ts";
import type { SecretEnvStore } from "../secrets/secret-env.ts";
import { RunTokenVerifier } from "../secrets/run-token.ts";
import { createApp, serveApi, type ApiServer } from "../http/index.ts";
import { registerReadiness } from "../http/ops.ts";
import type { KvTenantDirectory } from "../tenants/index.ts";
import { KvServiceDirectory } from "../tenants/services.ts";
import { KvSubscriptions } from "../notify/subscriptions.ts";
import { createOperations } from "../app/operations.ts";
import type { NatsApiConfig } from "../nats-api/config.ts";
import { createNatsApiHandler } from "../nats-api/handler.ts";
import { NatsApiService } from "../nats-api/service.ts";
import { ServiceAuthCallout, type Lookup } from "../nats-api/auth-callout.ts";
import { StatsGatherer } from "./stats-responder.ts";
import { LiveRunsGatherer } from "./live-runs.ts";
import { OperatorView } from "./operator-view.ts";
import { KvOperatorKeys } from "../tenants/operator-keys.ts";
import type { OperatorDeps } from "../http/admin.ts";

/**
 * The api role: the HTTP API, then (unless disabled) the internal NATS API; on a failure, cleans
 * up what started and rethrows.
 */
export async function serveApiRole(
  a: {
    config: NodeConfig;
    opts: ProcessOptions;
    node: KairosNode;
    ops: ReturnType<typeof nodeOps>;
    tenants: KvTenantDirectory;
    limits: ReturnType<typeof resolveTaskLimits>;
    secrets: SecretEnvStore | undefined;
    natsApiCfg: NatsApiConfig;
    log: Logger;
    logFn: LogFn;
  },
  listeners: Listeners,
  cleanUp: () => Promise<void>,
): Promise<void> {
  const { opts, node, log, limits, tenants } = a;
  const jobs = new NatsJobsService(
    node.commandRouter,
    node.buckets,
    node.partitions,
    systemRandom,
    a.secrets,
    // The tenant's runs list shows runs not ended as the schedulers hold them (live-runs.ts).
    new LiveRunsGatherer({
      clusterName: a.config.clusterName,
      bus: () => node.control,
      schedulers: () => node.membership?.live("scheduler") ?? [],
    }),
  );
  const subscriptions = new KvSubscriptions(node.buckets.tenants, systemClock);
  const { stats, operator } = clusterReads(a.config, node);
  const app = createApp({
    jobs,
    tenants,
    subscriptions,
    stats,
    operator,
    clock: systemClock,
    taskLimits: limits,
    ...(opts.imagePolicy ? { imagePolicy: opts.imagePolicy } : {}),
    ...(opts.rateLimits ? { rateLimits: opts.rateLimits } : {}),
    ...(opts.runTokens ? { runTokens: new RunTokenVerifier(opts.runTokens) } : {}),
    logError: (err, req) => log.error({ err: String(err), ...req }, "api internal error"),
  });
  registerReadiness(app, a.ops); // /readyz for load balancers; /metrics only on the metrics listener
  let api: ApiServer;
  try {
    api = await serveApi(app, { host: opts.apiHost, port: opts.apiPort });
    listeners.api = api;
  } catch (e) {
    await cleanUp();
    throw e;
  }
  log.info({ evt: "api_listening", api_url: api.url }, "api listening");
  if (!a.natsApiCfg.enabled) return;
  let natsApi: NatsApiHandle;
  try {
    natsApi = await startNatsApi(a.config, a.natsApiCfg, {
      operations: createOperations({
        jobs,
        clock: systemClock,
        imagePolicy: opts.imagePolicy ?? ALLOW_ANY_IMAGE,
        taskLimits: limits,
        subscriptions,
      }),
      tenants,
      services: new KvServiceDirectory(node.buckets.tenants, systemClock),
      log: a.logFn,
      events: node.events,
    });
    listeners.natsApi = natsApi;
  } catch (e) {
    await cleanUp();
    throw e;
  }
  log.info({ evt: "nats_api_listening", subject: natsApi.service.subject }, "nats api listening");
}

/**
 * What the API reads of the cluster beside jobs and runs: the tenants' live figures, asked of
 * the live schedulers on the control connection, and the operators' views behind operator keys
 * (src/http/admin.ts).
 */
function clusterReads(
  config: NodeConfig,
  node: KairosNode,
): { stats: StatsGatherer; operator: OperatorDeps } {
  const schedulers = () => node.membership?.live("scheduler") ?? [];
  return {
    stats: new StatsGatherer({
      clusterName: config.clusterName,
      bus: () => node.control,
      schedulers,
      clock: systemClock,
    }),
    operator: {
      keys: new KvOperatorKeys(node.buckets.tenants, systemClock),
      view: new OperatorView({
        clusterName: config.clusterName,
        bus: () => node.control,
        router: () => node.router,
        nodes: () => node.buckets.nodes,
        partitions: () => node.partitions,
        schedulers,
        clock: systemClock,
      }),
    },
  };
}

/** What the internal NATS API serves with. */
interface NatsApiDeps {
  operations: ReturnType<typeof createOperations>;
  tenants: KvTenantDirectory;
  services: KvServiceDirectory;
  events: EventBus;
  log: (level: "info" | "warn" | "error", msg: string, extra?: Record<string, unknown>) => void;
}

/**
 * The internal NATS API on its own connection (named `kairos-<node>-api`, the node's credentials):
 * its requests carry headers, which the node's bus port does not, and it drains on its own. When
 * the credentials carry the callout issuer's seed (`kairos nats-auth`, `kairos dev`), the same
 * connection answers nats-server's auth callout for service identities (auth-callout.ts).
 */
async function startNatsApi(
  config: NodeConfig,
  cfg: NatsApiConfig,
  deps: NatsApiDeps,
): Promise<{ service: NatsApiService; close: () => Promise<void> }> {
  const nc = await connectNats({
    url: config.natsUrl,
    name: `kairos-${config.nodeId}-api`,
    ...config.natsAuth,
  });
  const handler = createNatsApiHandler({
    clusterName: config.clusterName,
    operations: deps.operations,
    tenants: deps.tenants,
    clock: systemClock,
    config: cfg,
    logError: (err, op) => deps.log("error", "nats api internal error", { err: String(err), op }),
  });
  const service = new NatsApiService(nc, handler, {
    clusterName: config.clusterName,
    maxInFlight: cfg.maxInFlight,
    log: deps.log,
    inboxes: inboxModeFor(config.natsAuth),
    onRefused: (r) =>
      deps.events.emit({
        type: "reply_refused",
        responder: "nats_api",
        reason: r.reason,
        subject: r.subject,
      }),
  });
  const callout = serviceCallout(nc, config, deps);
  try {
    await service.start();
    await callout?.start();
  } catch (e) {
    await nc.close();
    throw e;
  }
  if (callout)
    deps.log("info", "serving the auth callout for service identities", {
      evt: "service_auth_listening",
    });
  else if (config.natsAuth.credsFile !== undefined) {
    deps.log(
      "warn",
      "no callout_issuer_seed in this node's NATS credentials: it does not admit service identities (kairos admin service create); regenerate them with kairos nats-auth",
      { evt: "service_auth_off" },
    );
  }
  return {
    service,
    close: async () => {
      await callout?.stop();
      if (!nc.isClosed()) await nc.drain();
    },
  };
}

/**
 * The auth callout for service identities, when this node's credentials carry the callout
 * issuer's seed (`kairos nats-auth`, `kairos dev`); undefined otherwise.
 */
function serviceCallout(
  nc: NatsConnection,
  config: NodeConfig,
  deps: Pick<NatsApiDeps, "tenants" | "services" | "log">,
): ServiceAuthCallout | undefined {
  const creds =
    config.natsAuth.credsFile !== undefined
      ? readNatsCredentials(config.natsAuth.credsFile)
      : undefined;
  const seed = creds?.callout_issuer_seed;
  return seed === undefined
    ? undefined
    : new ServiceAuthCallout(nc, {
        clusterName: config.clusterName,
        issuerSeed: seed,
        clock: systemClock,
        log: deps.log,
        ...(creds?.callout_xkey_seed !== undefined ? { xkeySeed: creds.callout_xkey_seed } : {}),
        lookup: async (name, secret): Promise<Lookup> => {
          const c = await deps.services.check(name, secret);
          if (!c.ok) return c;
          return (await deps.tenants.getTenant(c.record.tenant_id)) === null
            ? { ...c, tenantGone: true }
            : c;
        },
      });
}
