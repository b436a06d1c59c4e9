/**
 * `kairos dev` (behind `npm start`): the embedded default. In order: a Docker engine (started
 * when `dockerd` is installed and none answers, unless --executor process|noop); the quick
 * start's `busybox:latest`, imported from the host's static busybox when missing; `nats-server
 * -js` on a free loopback port with data under `.kairos/nats` (unless --nats/KAIROS_NATS_URL),
 * with fresh per-role users on every start and one pinned user per `--workers` id; then one node
 * with every role and a dev tenant. `.kairos/dev.json` records the URLs, credentials map, API key
 * and tenant for other commands; `.kairos/secret.key` is the `task.secret_env` key and
 * `.kairos/run-token-keys.json` the key set that signs run tokens.
 *
 * Pitfalls: nats-server and dockerd run in their own process groups so the terminal's Ctrl-C
 * does not kill them under the node; Ctrl-C/SIGTERM stops the node, then nats-server, then
 * dockerd (if started here). Metrics listen on their own loopback port, never the API port.
 */
import type { Command } from "commander";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import Dockerode from "dockerode";
import { launchNatsServer, type NatsServerHandle } from "../dev/nats-launcher.ts";
import { moveGlobalAccountStreams } from "../dev/account-migration.ts";
import { CLUSTER_ACCOUNT } from "../cluster/nats-accounts.ts";
import { ensureDockerEngine, type DockerEngine } from "../dev/docker-engine.ts";
import { ensureQuickStartImage } from "../dev/busybox-image.ts";
import { DevConsole } from "../dev/console.ts";
import { setLogDestination } from "../lib/log.ts";
import { KvTenantDirectory, ensureDevTenant } from "../tenants/index.ts";
import { openBuckets } from "../cluster/buckets.ts";
import { connectNats, type NatsAuthOptions } from "../cluster/nats.ts";
import { systemClock } from "../lib/clock.ts";
import type { NodeConfig } from "../cluster/config.ts";
import { egressOptions, onShutdown, startProcess } from "./node.ts";
import { createTaskNetwork } from "../sandbox/index.ts";
import { isKairosError } from "../lib/errors.ts";
import { newRunTokenKeysFile } from "./run-token-keys.ts";
import { nodeConfigFromFlags, portFlag, type NodeFlags, type ProcessFlags } from "./node-flags.ts";
import {
  natsAuthOptions,
  parseWorkerIds,
  readDevFile,
  stateDir,
  writeDevFile,
} from "./dev-file.ts";

export const DEV_API_PORT = 7700;
/** The dev node's metrics listener (127.0.0.1); any free port if taken. */
export const DEV_METRICS_PORT = 9464;

const say = (m: string): void => console.error(`kairos dev: ${m}`);

/** Runs `fn` with a tenant directory over an admin connection, then disconnects. */
async function withTenantAdmin<T>(
  url: string,
  clusterName: string,
  auth: NatsAuthOptions,
  fn: (dir: KvTenantDirectory) => Promise<T>,
): Promise<T> {
  const nc = await connectNats({ url, name: "kairos-dev-admin", ...auth });
  try {
    const b = await openBuckets(nc, { clusterName, replicas: 1 });
    return await fn(new KvTenantDirectory(b.tenants, { clock: systemClock }));
  } finally {
    await nc.close();
  }
}

export function registerDevCommand(program: Command): void {
  const dev = natsAuthOptions(
    program
      .command("dev")
      .description("single-node dev cluster: embedded nats-server + one node with all roles")
      .option("--nats <url>", "use this NATS instead of starting one (env KAIROS_NATS_URL)"),
  )
    .option("--partitions <n>", "partition count when the cluster is first created", "16")
    .option(
      "--executor <kind>",
      "docker, process or noop (default: docker if an engine answers or can be started, else process)",
    )
    .option("--slots <n>", "worker slots", "4")
    .option(
      "--workers <ids>",
      "ids of extra worker nodes that may join (one pinned NATS user each, worker-<id>)",
      "w1,w2,w3",
    )
    .option("--api-port <port>", `API port (default ${DEV_API_PORT}, any free port if taken)`)
    .option(
      "--metrics-port <port>",
      `/healthz, /readyz and /metrics on 127.0.0.1 (default ${DEV_METRICS_PORT}, any free port if taken)`,
    )
    .option(
      "--metrics-token-file <path>",
      "/metrics answers only Authorization: Bearer <the token in this file>",
    )
    .option("--metrics-tenant-labels", "label the per-tenant metrics with the tenant id")
    .option(
      "--image-policy <entries>",
      "images the dev tenant may name, comma-separated (default: any)",
    )
    .option("--task-max-memory-mb <mb>", "the most memory a task may ask for (default 2048)")
    .option("--task-max-cpus <n>", "the most CPUs a task may ask for (default 2)")
    .option("--task-max-pids <n>", "the most processes a task may ask for (default 512)")
    .option("--webhook-allow-http", "allow plain-http dead-letter webhooks")
    .option(
      "--webhook-allow-private",
      "allow webhooks to loopback and private addresses (a receiver on this machine)",
    )
    .option(
      "--secret-key-file <path>",
      "the cluster key for task.secret_env (default: .kairos/secret.key, made on first start)",
    )
    .option(
      "--run-token-keys <path>",
      "the key set that signs KAIROS_RUN_TOKEN (default: .kairos/run-token-keys.json, made on first start)",
    )
    .option(
      "--drain-timeout-ms <ms>",
      "on Ctrl-C, how long running attempts may finish before they are handed back (default 0: at once)",
    );
  egressOptions(dev).action(runDev);
}

type DevFlags = NodeFlags & ProcessFlags & { workers: string };

/** What `kairos dev` started itself, stopped in reverse order on failure or shutdown. */
interface DevStarted {
  engine?: DockerEngine;
  nats?: NatsServerHandle;
}

type DevProcess = Awaited<ReturnType<typeof startProcess>>;

async function runDev(f: DevFlags): Promise<void> {
  const started: DevStarted = {};
  // Everything started so far, stopped in reverse order if start-up fails half-way.
  const undo = async (): Promise<void> => {
    await started.nats?.stop();
    await started.engine?.stop();
  };
  try {
    if (f.executor === undefined || f.executor === "docker") {
      await startDevDocker(started);
      const taskNetwork = await ensureDevTaskNetwork(f);
      if (taskNetwork !== undefined) f = { ...f, taskNetwork };
    }
    let url = f.nats ?? process.env["KAIROS_NATS_URL"];
    if (!url) url = await startDevNats(f, started);
    const nats = started.nats;
    const natsCreds = f.natsCreds ?? nats?.auth?.credsFor(["api", "scheduler", "worker"]);
    const config = nodeConfigFromFlags(
      {
        ...f,
        ...(natsCreds ? { natsCreds } : {}),
        nodeId: f.nodeId ?? "dev",
        roles: "api,scheduler,worker",
      },
      url,
    );
    const devConsole = process.stdout.isTTY ? new DevConsole() : undefined;
    setLogDestination(devConsole);
    const proc = await startDevNode(f, config);
    devConsole?.setPartitionCount(() => proc.node.partitions);
    // Tenants and keys are written as admin: the node's own identity may not mint keys.
    const tenant = nats?.auth
      ? await withTenantAdmin(
          url,
          config.clusterName,
          { credsFile: nats.auth.credsFor("admin") },
          (dir) => ensureDevTenant(dir, readDevFile()?.api_key),
        )
      : await ensureDevTenant(proc.tenants, readDevFile()?.api_key);
    announceDev(url, nats, config, proc, tenant);
    onShutdown(
      async () => {
        say("stopping node");
        await proc.stop();
        devConsole?.flush();
        if (nats) say("stopping nats-server");
        await nats?.stop();
        if (started.engine?.started) say("stopping dockerd");
        await started.engine?.stop();
        say("stopped");
      },
      () => proc.hurry(),
    );
  } catch (e) {
    await undo();
    throw e;
  }
}

/** A Docker engine (started if need be) and, on a usable one, the quick start image. */
async function startDevDocker(started: DevStarted): Promise<void> {
  const engine = await ensureDockerEngine({ stateDir: stateDir() });
  started.engine = engine;
  say(`docker: ${engine.note}`);
  if (engine.started || engine.note.startsWith("a Docker engine")) {
    try {
      say(`docker: ${await ensureQuickStartImage(new Dockerode())}`);
    } catch (e) {
      say(`docker: could not provide the quick start image busybox:latest: ${String(e)}`);
    }
  }
}

/** The dev cluster's task network (`kairos-tasks` unless --task-network names another). */
export const DEV_TASK_NETWORK = "kairos-tasks";

/**
 * Creates the task network with its firewall (task-network.ts); without the rights for the
 * firewall it is created anyway, with a warning. Its name, or undefined when it cannot be had.
 */
async function ensureDevTaskNetwork(f: DevFlags): Promise<string | undefined> {
  const name = f.taskNetwork ?? DEV_TASK_NETWORK;
  const proxyPort = portFlag(f.egressProxyPort, "egress-proxy-port") ?? 3128;
  const docker = new Dockerode();
  try {
    const net = await createTaskNetwork(docker, name, { proxyPort, firewall: true });
    say(`task network ${name} (${net.subnet}): egress proxy on ${net.gateway}:${proxyPort}`);
  } catch (e) {
    if (!(isKairosError(e) && e.code === "unavailable" && e.message.startsWith("nft"))) {
      say(`task network ${name}: ${String(e)}; tasks asking for network egress will fail`);
      return undefined;
    }
    await createTaskNetwork(docker, name, { proxyPort, firewall: false });
    say(
      `task network ${name}: WITHOUT its firewall (${e.message}); egress tasks can reach services of this machine listening on all addresses (docs/security.md)`,
    );
  }
  return name;
}

/** nats-server on a free loopback port with fresh per-role users: its URL. */
async function startDevNats(f: DevFlags, started: DevStarted): Promise<string> {
  if (moveGlobalAccountStreams(join(stateDir(), "nats")))
    say(
      `nats-server data: moved this folder's streams from the global account to ${CLUSTER_ACCOUNT} (the account layout, docs/security.md)`,
    );
  const workers = parseWorkerIds(f.workers);
  const nats = await launchNatsServer({
    storeDir: join(stateDir(), "nats"),
    detached: true,
    auth: { dir: join(stateDir(), "nats-auth"), workers },
  });
  started.nats = nats;
  say(
    `nats-server ${nats.url} (pid ${nats.pid}, data ${nats.storeDir}, authorization on: credentials in ${join(stateDir(), "nats-auth", "creds")})`,
  );
  return nats.url;
}

/** The node on the dev ports; when one is taken, the ports not given go to any free port. */
async function startDevNode(f: DevFlags, config: NodeConfig): Promise<DevProcess> {
  const withKey = {
    ...f,
    secretKeyFile: f.secretKeyFile ?? process.env["KAIROS_SECRET_KEY_FILE"] ?? ensureDevSecretKey(),
    runTokenKeys:
      f.runTokenKeys ??
      process.env["KAIROS_RUN_TOKEN_KEYS_FILE"] ??
      (await ensureDevRunTokenKeys()),
  };
  try {
    return await startProcess(
      config,
      { ...withKey, metricsPort: f.metricsPort ?? String(DEV_METRICS_PORT) },
      { apiPort: DEV_API_PORT, drainTimeoutMs: 0 },
      { processFallback: true },
    );
  } catch (e) {
    if (
      (f.apiPort !== undefined && f.metricsPort !== undefined) ||
      !String(e).includes("EADDRINUSE")
    )
      throw e;
    // A port taken: the ones not given explicitly go to any free port.
    return await startProcess(
      config,
      { ...withKey, apiPort: f.apiPort ?? "0", metricsPort: f.metricsPort ?? "0" },
      { apiPort: 0, drainTimeoutMs: 0 },
      { processFallback: true },
    );
  }
}

/** Records the dev cluster in `.kairos/dev.json` and tells the user where it is. */
function announceDev(
  url: string,
  nats: NatsServerHandle | undefined,
  config: NodeConfig,
  p: DevProcess,
  tenant: { tenant_id: string; api_key: string },
): void {
  const apiUrl = p.api!.url;
  const opsUrl = p.metrics!.url;
  writeDevFile({
    nats_url: url,
    ...(nats?.auth ? { nats_creds: { ...nats.auth.creds } } : {}),
    api_url: apiUrl,
    api_key: tenant.api_key,
    tenant_id: tenant.tenant_id,
    metrics_url: `${opsUrl}/metrics`,
    cluster: config.clusterName,
    pid: process.pid,
  });
  say(`node "${config.nodeId}" up; executor ${p.executor.kind} (${p.executor.reason})`);
  say(`API ${apiUrl}  key ${tenant.api_key}  (saved in ${join(stateDir(), "dev.json")})`);
  say(`dashboard ${dashboardLink(apiUrl, tenant.api_key)}  (signs this browser tab in)`);
  say(`health ${opsUrl}/readyz  metrics ${opsUrl}/metrics (this machine only)`);
  say(`try  curl -H "Authorization: Bearer ${tenant.api_key}" ${apiUrl}/v1/jobs`);
  say("or   bin/kairos.mjs jobs list   (the CLI reads the API and key from that file)");
}

/**
 * The dashboard's sign-in link: the API's `/` with the key in the fragment, which the browser
 * never sends to any server; the page moves it to sessionStorage and out of the address bar.
 */
export function dashboardLink(apiUrl: string, apiKey: string): string {
  return `${apiUrl}/#key=${encodeURIComponent(apiKey)}`;
}

/** The dev cluster's run-token key set (`.kairos/run-token-keys.json`), made once. */
async function ensureDevRunTokenKeys(): Promise<string> {
  mkdirSync(stateDir(), { recursive: true });
  return newRunTokenKeysFile(join(stateDir(), "run-token-keys.json"), true);
}

/** The dev cluster's secret key file (`.kairos/secret.key`), made once with 32 random bytes. */
function ensureDevSecretKey(): string {
  const path = join(stateDir(), "secret.key");
  if (!existsSync(path)) {
    mkdirSync(stateDir(), { recursive: true });
    writeFileSync(path, `${randomBytes(32).toString("base64")}\n`, { mode: 0o600, flag: "wx" });
  }
  return path;
}
