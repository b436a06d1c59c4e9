/**
 * `kairos node`: run one node with the given roles against an existing NATS (cluster).
 * Also the shared start-up used by `kairos dev`.
 */
import type { Command } from "commander";
import { systemClock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import { createLogger } from "../lib/log.ts";
import { systemRandom } from "../lib/random.ts";
import { makeNodeConfig, ROLES, type NodeConfig, type Role } from "../cluster/config.ts";
import { KairosNode } from "../cluster/node.ts";
import { actorRegistrations } from "../actors/index.ts";
import { resolveNatsUrl } from "./dev-file.ts";
import { hostname } from "node:os";

export interface NodeFlags {
  nats?: string;
  roles?: string;
  nodeId?: string;
  cluster?: string;
  partitions?: string;
  replicas?: string;
  leaseTtlMs?: string;
}

function int(v: string | undefined, field: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n)) throw new KairosError("invalid_argument", `--${field}: "${v}" is not an integer`, { field });
  return n;
}

export function nodeConfigFromFlags(f: NodeFlags, natsUrl: string): NodeConfig {
  const roles = (f.roles ?? ROLES.join(",")).split(",").map((r) => r.trim()).filter(Boolean) as Role[];
  const partitions = int(f.partitions, "partitions");
  const replicas = int(f.replicas, "replicas");
  const leaseTtlMs = int(f.leaseTtlMs, "lease-ttl-ms");
  return makeNodeConfig({
    natsUrl,
    nodeId: f.nodeId ?? `${hostname().replace(/[^A-Za-z0-9_-]/g, "-").slice(0, 40)}-${process.pid}`,
    roles,
    ...(f.cluster ? { clusterName: f.cluster } : {}),
    ...(partitions !== undefined ? { partitions } : {}),
    ...(replicas !== undefined ? { replicas } : {}),
    ...(leaseTtlMs !== undefined
      ? { leaseTtlMs, leaseRenewIntervalMs: Math.floor(leaseTtlMs / 4), leaseSafetyMarginMs: Math.floor(leaseTtlMs / 4) }
      : {}),
  });
}

/** Starts a node, logging its events as JSON lines; resolves once started. */
export async function startNode(config: NodeConfig): Promise<KairosNode> {
  const log = createLogger(config.nodeId);
  const node = new KairosNode(config, {
    clock: systemClock,
    random: systemRandom,
    log: (level, msg, extra) => log[level](extra ?? {}, msg),
  });
  for (const r of actorRegistrations()) node.register(r);
  node.events.on((e) => log.info({ evt: e.type, ...e }, e.type));
  await node.start();
  return node;
}

/** Stops `stop` on the first SIGINT/SIGTERM, then exits. */
export function onShutdown(stop: () => Promise<void>): void {
  let stopping = false;
  const handler = (sig: string) => {
    if (stopping) return;
    stopping = true;
    stop().then(
      () => process.exit(0),
      (e: unknown) => {
        console.error(`kairos: error during ${sig} shutdown:`, e);
        process.exit(1);
      },
    );
  };
  process.on("SIGINT", () => handler("SIGINT"));
  process.on("SIGTERM", () => handler("SIGTERM"));
}

export function registerNodeCommand(program: Command): void {
  program
    .command("node")
    .description("run one Kairos node against an existing NATS cluster")
    .option("--nats <url>", "NATS URL(s), comma-separated (env KAIROS_NATS_URL)")
    .option("--roles <list>", "roles: any of api,scheduler,worker", "api,scheduler,worker")
    .option("--node-id <id>", "stable node id (default: host-pid)")
    .option("--cluster <name>", "cluster name (bucket and subject prefix)", "kairos")
    .option("--partitions <n>", "partition count when the cluster is first created")
    .option("--replicas <n>", "KV replicas (1, or 3 on a 3-server NATS cluster)")
    .option("--lease-ttl-ms <ms>", "partition lease TTL")
    .action(async (f: NodeFlags) => {
      const url = resolveNatsUrl(f.nats);
      if (!url) throw new KairosError("invalid_argument", "--nats is required (or KAIROS_NATS_URL, or a running `kairos dev`)", { field: "nats" });
      const node = await startNode(nodeConfigFromFlags(f, url));
      onShutdown(() => node.stop());
    });
}
