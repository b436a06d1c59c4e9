/**
 * Test harness: real nats-server processes on free loopback ports, cleaned up after each suite.
 * `startNats()` gives one JetStream server; `startNatsCluster(3)` gives a routed cluster ready
 * for R3 buckets (waits until every server answers a JetStream API request).
 *
 * Authorization is always on, as in production: the account layout of src/cluster/nats-accounts.ts
 * (cluster account KAIROS, worker-only identities in WORKERS, tenant services in SERVICES, SYS;
 * the auth callout), each Kairos role
 * set with its own NATS user and least-privilege permissions (src/cluster/nats-permissions.ts) for
 * the given cluster names; `auth.sysCreds` is the system account's user.
 * Each worker id of `workers` (default `DEFAULT_TEST_WORKERS`) has its pinned user `worker-<id>`.
 * Connect with `fx.connect(name)` (admin: fixtures and assertions) and start nodes with
 * `fx.credsForNode(nodeId, roles)` (a worker-only node: its pinned user when it has one), so every
 * test exercises the permissions of the identities it runs. The shared `worker` user (any worker
 * id; `credsFor(["worker"])`) is generated too, for tests of that weaker identity.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { StorageType, jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Role } from "../../src/cluster/config.ts";
import { connectNats } from "../../src/cluster/nats.ts";
import { pinnedWorkerUser } from "../../src/cluster/nats-permissions.ts";
import {
  writeNatsAuthFiles,
  type NatsAuthFiles,
  type ServiceIdentity,
} from "../../src/dev/nats-auth-files.ts";
import {
  freePort,
  killServersOnSignal,
  launchNatsServer,
  type LaunchOptions,
  type NatsServerHandle,
} from "../../src/dev/nats-launcher.ts";

// A test runner that cancels this file by a signal must not leave its servers running.
killServersOnSignal();

export interface NatsFixture {
  readonly servers: NatsServerHandle[];
  /** Comma-separated client URLs of every server. */
  readonly url: string;
  readonly auth: NatsAuthFiles;
  /** The credentials file of a node with these roles (or of `admin`). */
  credsFor(roles: readonly Role[] | string): string;
  /** A node's credentials: a worker-only node's pinned user when generated, else its role set's. */
  credsForNode(nodeId: string, roles: readonly Role[] | string): string;
  /** The permission violations the servers logged so far (a Kairos node should cause none). */
  violations(): string[];
  /**
   * Resolves with the first violation line (logged before or after the call) that `match`
   * accepts; rejects after `timeoutMs`. The server writes its log after it answers the client,
   * so a test that saw the refusal must wait for the line, not read the log at once.
   */
  violationLogged(match: (line: string) => boolean, timeoutMs?: number): Promise<string>;
  /** A connection as `who` (default `admin`). */
  connect(name: string, who?: readonly Role[] | "admin"): Promise<NatsConnection>;
  /** A connection as the service user `service-<name>` (generated with `services`). */
  connectService(name: string): Promise<NatsConnection>;
  /** Freezes server `i` (SIGSTOP); resolves once the kernel reports it stopped. */
  pause(i: number): Promise<void>;
  /** Thaws server `i` (SIGCONT). */
  resume(i: number): void;
  /** Kills server `i` with SIGKILL (no clean shutdown) and waits for it to exit. */
  kill(i: number): Promise<void>;
  /**
   * Starts server `i` again on the same ports, name and store (after `kill`); resolves once it
   * answers JetStream requests. `servers[i]` is the new process from then on.
   */
  start(i: number): Promise<void>;
  stop(): Promise<void>;
}

export interface NatsFixtureOptions {
  /** Kairos cluster names whose subjects and buckets the role users may use (default ["kairos"]). */
  clusters?: readonly string[];
  /** Worker ids that get a user pinned to their own subjects (`auth.credsForWorker(id)`), besides `DEFAULT_TEST_WORKERS`. */
  workers?: readonly string[];
  /** Tenant services that get a NATS API user (`auth.credsForService(name)`, `connectService`). */
  services?: readonly ServiceIdentity[];
  /** Every stderr line of every server, with the server's index (after restarts too). */
  onLog?: (server: number, line: string) => void;
  /**
   * Worker ids whose pinned user (`worker-<id>`, in WORKERS) gets every permission (`>` to publish
   * and subscribe, responses): a misconfiguration on purpose, so a test can show what the account
   * boundary alone keeps from a worker identity (`widenUsers`).
   */
  wideOpenWorkers?: readonly string[];
  /**
   * Cluster members do not advertise each other's client URLs to clients (`--no_advertise`): a
   * client reached through proxies then never learns a direct URL to reconnect to.
   */
  noAdvertise?: boolean;
}

/** Worker ids every test server has a pinned user for (`worker-w1` …). */
export const DEFAULT_TEST_WORKERS = ["w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8"] as const;

/** The harness's users: per role set, admin, the shared worker, pinned workers, services. */
function writeAuth(dir: string, opts: NatsFixtureOptions): NatsAuthFiles {
  const wide = opts.wideOpenWorkers ?? [];
  const workers = [...new Set([...DEFAULT_TEST_WORKERS, ...(opts.workers ?? []), ...wide])];
  const auth = writeNatsAuthFiles(dir, opts.clusters, workers, opts.services, {
    sharedWorker: true,
  });
  if (wide.length > 0) widenUsers(auth.configFile, wide.map(pinnedWorkerUser));
  return auth;
}

/**
 * Rewrites the server config so that `users` may publish and subscribe anything in their account
 * (the config's `accounts` block is JSON: nats-accounts.ts `renderAccounts`). Fails when a user
 * is not there, so a test cannot widen nobody and pass.
 */
export function widenUsers(configFile: string, users: readonly string[]): void {
  const text = readFileSync(configFile, "utf8");
  const m = /^accounts: (\{[\s\S]*?\n\})\nsystem_account:/m.exec(text);
  if (!m) throw new Error(`${configFile}: no accounts block`);
  const accounts = JSON.parse(m[1]!) as Record<
    string,
    { users?: { user: string; permissions: unknown }[] }
  >;
  const found = new Set<string>();
  for (const a of Object.values(accounts)) {
    for (const u of a.users ?? []) {
      if (!users.includes(u.user)) continue;
      u.permissions = {
        publish: { allow: [">"] },
        subscribe: { allow: [">"] },
        allow_responses: true,
      };
      found.add(u.user);
    }
  }
  const missing = users.filter((u) => !found.has(u));
  if (missing.length > 0) throw new Error(`${configFile}: no user ${missing.join(", ")} to widen`);
  writeFileSync(configFile, text.replace(m[1]!, JSON.stringify(accounts, null, 2)), {
    mode: 0o600,
  });
}

/** `"api,scheduler"` or `["api", "scheduler"]` or `"admin"` → the credentials file. */
function credsOf(auth: NatsAuthFiles, roles: readonly Role[] | string): string {
  if (roles === "admin") return auth.credsFor("admin");
  const list =
    typeof roles === "string"
      ? (roles
          .split(",")
          .map((r) => r.trim())
          .filter(Boolean) as Role[])
      : roles;
  return auth.credsFor(list);
}

interface ViolationLog {
  onLog: (server: number) => (line: string) => void;
  lines: string[];
  /** Called with each violation line as it is logged (`violationLogged`). */
  waiters: Set<(line: string) => void>;
}

/** Collects the servers' "Publish Violation" / "Subscription Violation" log lines (and passes every line on, with its server). */
function violationLog(onLog?: (server: number, line: string) => void): ViolationLog {
  const lines: string[] = [];
  const waiters = new Set<(line: string) => void>();
  return {
    lines,
    waiters,
    onLog: (server) => (line) => {
      if (/Violation/.test(line) && lines.length < 1000) {
        lines.push(line);
        for (const w of [...waiters]) w(line);
      }
      onLog?.(server, line);
    },
  };
}

function fixture(
  servers: NatsServerHandle[],
  auth: NatsAuthFiles,
  dir: string,
  log: ViolationLog,
  launch: readonly LaunchOptions[],
): NatsFixture {
  const url = servers.map((s) => s.url).join(",");
  const at = (i: number): NatsServerHandle =>
    servers[i] ?? assert.fail(`no nats server ${i} (of ${servers.length})`);
  return {
    servers,
    url,
    auth,
    violations: () => [...log.lines],
    violationLogged: (match, timeoutMs = 10_000) =>
      new Promise<string>((resolve, reject) => {
        const seen = log.lines.find(match);
        if (seen !== undefined) return resolve(seen);
        const timer = setTimeout(() => {
          log.waiters.delete(waiter);
          reject(new Error(`no matching violation logged within ${timeoutMs} ms`));
        }, timeoutMs);
        const waiter = (line: string): void => {
          if (!match(line)) return;
          clearTimeout(timer);
          log.waiters.delete(waiter);
          resolve(line);
        };
        log.waiters.add(waiter);
      }),
    credsFor: (roles) => credsOf(auth, roles),
    credsForNode: (nodeId, roles) => {
      const list = typeof roles === "string" ? roles.split(",").map((r) => r.trim()) : roles;
      const pinned =
        list.length === 1 && list[0] === "worker"
          ? auth.creds[pinnedWorkerUser(nodeId)]
          : undefined;
      return pinned ?? credsOf(auth, roles);
    },
    connect: (name, who = "admin") => connectNats({ url, name, credsFile: credsOf(auth, who) }),
    connectService: (name) =>
      connectNats({ url, name: `svc-${name}`, credsFile: auth.credsForService(name) }),
    async pause(i) {
      const s = at(i);
      s.signal("SIGSTOP");
      // kill(2) returns before every thread has stopped: wait until /proc says so (state T), so
      // no reply can still be on its way.
      await awaitProcessStopped(s.pid);
    },
    resume: (i) => at(i).signal("SIGCONT"),
    async kill(i) {
      const s = at(i);
      s.signal("SIGKILL");
      await s.exited;
    },
    async start(i) {
      const old = at(i);
      const s = await launchNatsServer({ ...launch[i]!, port: old.port, readyTimeoutMs: 30_000 });
      servers[i] = s;
      await awaitJetStream(s, auth, 30_000);
    },
    async stop() {
      await Promise.all(servers.map((s) => s.stop()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Resolves once /proc reports `pid` stopped (state T); fails after `timeoutMs`. */
export async function awaitProcessStopped(pid: number, timeoutMs = 5000): Promise<void> {
  const state = () => {
    const st = readFileSync(`/proc/${pid}/stat`, "utf8");
    return st.slice(st.lastIndexOf(")") + 2, st.lastIndexOf(")") + 3);
  };
  const deadline = Date.now() + timeoutMs;
  while (state() !== "T") {
    if (Date.now() > deadline)
      assert.fail(`process ${pid} is not stopped after SIGSTOP (state ${state()})`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

export async function startNats(opts: NatsFixtureOptions = {}): Promise<NatsFixture> {
  const dir = mkdtempSync(join(tmpdir(), "kairos-nats-"));
  const auth = writeAuth(join(dir, "auth"), opts);
  const log = violationLog(opts.onLog);
  const launch: LaunchOptions = { storeDir: join(dir, "data"), auth, onLog: log.onLog(0) };
  const server = await launchNatsServer(launch).catch((e: unknown) => {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  });
  return fixture([server], auth, dir, log, [launch]);
}

/**
 * Fresh clusters tried before giving up (see `startNatsCluster`): nats-server 2.10 can leave a
 * routed cluster whose meta leader never sees every peer as current — R3 placement then fails
 * with "no suitable peers for placement" for as long as one waits (22 s, 30 s and 72 s seen —
 * not the peer-stats delay that heals by ~32 s; one start in eight to twelve under a loaded CPU,
 * scratch loops of 2026-12-05; all three servers agreed on the meta leader). A new cluster
 * forms normally. A start that fails otherwise (a server not ready, a first connection refused:
 * a free port taken by another process between `freePort` and the server's bind, seen under
 * parallel test files) is retried the same way, on fresh ports.
 */
const CLUSTER_STARTS = 3;
/** How long one start may take to place an R3 stream before a fresh cluster is tried. */
const PLACEMENT_WAIT_MS = 12_000;

/** The cluster's meta leader never placed an R3 stream in time (see `CLUSTER_STARTS`). */
class PlacementError extends Error {}

export async function startNatsCluster(
  size = 3,
  opts: NatsFixtureOptions = {},
): Promise<NatsFixture> {
  const failures: string[] = [];
  for (let attempt = 1; ; attempt++) {
    try {
      return await startClusterOnce(size, opts);
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      failures.push(`start ${attempt}: ${why}`);
      if (attempt >= CLUSTER_STARTS)
        throw new Error(
          `nats cluster not ready after ${attempt} start(s):\n${failures.join("\n")}`,
          { cause: e },
        );
      // Said aloud, not hidden: the run's log shows each cluster that never formed.
      process.stderr.write(
        `nats cluster fixture: ${why}; starting a fresh cluster (${attempt + 1} of ${CLUSTER_STARTS})\n`,
      );
    }
  }
}

async function startClusterOnce(size: number, opts: NatsFixtureOptions): Promise<NatsFixture> {
  const dir = mkdtempSync(join(tmpdir(), "kairos-natsc-"));
  let auth: NatsAuthFiles;
  let routePorts: number[];
  try {
    auth = writeAuth(join(dir, "auth"), opts);
    routePorts = await Promise.all(Array.from({ length: size }, () => freePort()));
  } catch (e) {
    rmSync(dir, { recursive: true, force: true }); // no folder left behind on any path
    throw e;
  }
  const log = violationLog(opts.onLog);
  const routes = routePorts.map((p) => `nats://127.0.0.1:${p}`);
  const launch = routePorts.map((port, i): LaunchOptions => ({
    storeDir: join(dir, `s${i}`),
    serverName: `s${i}`,
    cluster: {
      name: "kairos-test",
      port,
      routes,
      ...(opts.noAdvertise ? { noAdvertise: true } : {}),
    },
    readyTimeoutMs: 30_000,
    auth,
    onLog: log.onLog(i),
  }));
  // allSettled: a server that did start is stopped, not left behind, when another did not.
  const launched = await Promise.allSettled(launch.map((o) => launchNatsServer(o)));
  const servers = launched.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  try {
    const failed = launched.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed) throw failed.reason;
    await Promise.all(servers.map((s) => awaitJetStream(s, auth, 30_000)));
    await awaitPlacement(servers[0]!, auth, size, PLACEMENT_WAIT_MS);
  } catch (e) {
    await Promise.all(servers.map((s) => s.stop()));
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return fixture(servers, auth, dir, log, launch);
}

/**
 * Waits until the cluster can place a stream on `replicas` servers: every server answering the
 * JetStream API is not enough — a peer not yet current in the meta group makes an R3 bucket's
 * creation fail with "no suitable peers for placement" (the KV conformance suite's cluster case
 * failed so once, 2026-12-04). Creates and deletes a small in-memory stream until one is placed;
 * a `PlacementError` when none is in `timeoutMs`.
 */
async function awaitPlacement(
  server: NatsServerHandle,
  auth: NatsAuthFiles,
  replicas: number,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const nc = await connectNats({
    url: server.url,
    name: "fixture-placement",
    credsFile: auth.credsFor("admin"),
  });
  let last = "no answer";
  try {
    const jsm = await jetstreamManager(nc, { timeout: 5000 });
    for (;;) {
      try {
        await jsm.streams.add({
          name: "fixture_placement",
          subjects: ["fixture.placement"],
          num_replicas: replicas,
          storage: StorageType.Memory,
        });
        await jsm.streams.delete("fixture_placement");
        return;
      } catch (e) {
        last = e instanceof Error ? e.message : String(e);
      }
      if (Date.now() > deadline)
        throw new PlacementError(
          `nats cluster: no stream placed on ${replicas} servers in ${timeoutMs} ms (last: ${last})`,
        );
      await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    await nc.close();
  }
}

/**
 * Waits until this server answers a JetStream API request (it knows the meta leader and its
 * routes are up). A log line is not enough: a server that joins after the election, or whose
 * routes raced ("Duplicate Route"), may never log one, and the wait then timed out at random.
 */
async function awaitJetStream(
  server: NatsServerHandle,
  auth: NatsAuthFiles,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const nc = await connectNats({
    url: server.url,
    name: "fixture-ready",
    credsFile: auth.credsFor("admin"),
  });
  let last = "no answer";
  try {
    for (;;) {
      try {
        const jsm = await jetstreamManager(nc, { timeout: 2000 });
        await jsm.getAccountInfo();
        return;
      } catch (e) {
        last = e instanceof Error ? e.message : String(e);
      }
      if (Date.now() > deadline)
        throw new Error(
          `nats-server ${server.url}: JetStream not ready in ${timeoutMs} ms (last: ${last})`,
        );
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    await nc.close();
  }
}
