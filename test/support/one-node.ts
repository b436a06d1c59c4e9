/**
 * Single-node set-ups.
 * - `startOneNode`: one in-process node (scheduler + worker, noop executor, 8 partitions) on a
 *   fresh nats-server, with the admin's tenant directory to create tenants and set their quotas,
 *   and a jobs service on the node's router to create jobs and ask for runs: the set-up of the
 *   single-node tests of shares and backlogs (test/integration/fairness, backlog, slot-reuse).
 *   Each test passes its own process options (slots, prefetch, run duration, heartbeat, job
 *   config).
 * - `spawnOneNode`: one `kairos node` process on a fresh e2e fixture, driven over HTTP as one new
 *   tenant: the set-up of the single-node e2e tests (test/e2e/jobs, task-rules, image-policy,
 *   docker-jobs). Each test passes its roles and flags.
 */
import type { NatsConnection } from "@nats-io/transport-node";
import { systemClock } from "../../src/lib/clock.ts";
import { systemRandom } from "../../src/lib/random.ts";
import { openBuckets } from "../../src/cluster/buckets.ts";
import { makeNodeConfig } from "../../src/cluster/config.ts";
import { NatsJobsService } from "../../src/service/nats-service.ts";
import { startKairos, type KairosProcess, type ProcessOptions } from "../../src/server/start.ts";
import { KvTenantDirectory } from "../../src/tenants/index.ts";
import { startNats, type NatsFixture } from "./nats.ts";
import {
  apiClient,
  eventually,
  startKairosFixture,
  type Api,
  type KairosFixture,
} from "./kairos.ts";
import type { NodeProc } from "./nodes.ts";

export interface OneNode {
  readonly nats: NatsFixture;
  readonly proc: KairosProcess;
  readonly tenants: KvTenantDirectory;
  /** Creates jobs and asks for runs as the API would, through the node's router. */
  readonly jobs: NatsJobsService;
  /** Resolves once the node holds every partition and its worker runs. */
  ready(): Promise<void>;
  /** Stops the node, the admin connection and the nats-server. */
  stop(): Promise<void>;
}

/**
 * Starts nats-server, then node `nodeId` with the `api, scheduler, worker` credentials, the
 * scheduler and worker roles and the noop executor, its HTTP API on a free loopback port, and
 * `opts` over that.
 */
export async function startOneNode(
  nodeId: string,
  opts: Omit<ProcessOptions, "executor" | "apiHost" | "apiPort">,
): Promise<OneNode> {
  const nats = await startNats();
  let admin: NatsConnection | undefined;
  let proc: KairosProcess | undefined;
  const stop = async () => {
    await proc?.stop();
    await admin?.close();
    await nats.stop();
  };
  try {
    admin = await nats.connect(`${nodeId}-admin`);
    const tenants = new KvTenantDirectory(
      (await openBuckets(admin, { clusterName: "kairos", replicas: 1 })).tenants,
      { clock: systemClock },
    );
    proc = await startKairos(
      makeNodeConfig({
        natsUrl: nats.url,
        natsAuth: { credsFile: nats.credsFor(["api", "scheduler", "worker"]) },
        nodeId,
        roles: ["scheduler", "worker"],
        partitions: 8,
      }),
      { apiHost: "127.0.0.1", apiPort: 0, ...opts, executor: "noop" },
    );
    const p = proc;
    const jobs = new NatsJobsService(
      p.node.router,
      p.node.buckets,
      p.node.partitions,
      systemRandom,
    );
    const ready = async () => {
      await eventually(
        async () =>
          p.node.heldPartitions().length === p.node.partitions && p.worker ? true : undefined,
        20_000,
        "all partitions held",
      );
    };
    return { nats, proc: p, tenants, jobs, ready, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

export interface SpawnedNode {
  readonly fx: KairosFixture;
  readonly node: NodeProc;
  /** The node's HTTP API. */
  readonly url: string;
  /** The new tenant's client of `url`. */
  readonly api: Api;
}

/**
 * Starts the e2e fixture (nats-server; nodes run the process executor unless `flags` say
 * otherwise: the later flag wins), spawns `kairos node` `nodeId` with `roles` and `flags`, waits
 * for its API and creates tenant `tenant`. Stop with `fx.stop()`; on a failure here the fixture
 * is stopped before the error is thrown.
 */
export async function spawnOneNode(o: {
  nodeId: string;
  roles: string;
  flags?: string[];
  tenant: string;
}): Promise<SpawnedNode> {
  const fx = await startKairosFixture();
  try {
    const node = fx.spawn(o.nodeId, o.roles, o.flags);
    const url = await fx.apiUrl(node);
    const api = apiClient(url, (await fx.newTenant(o.tenant)).api_key);
    return { fx, node, url, api };
  } catch (e) {
    await fx.stop();
    throw e;
  }
}
