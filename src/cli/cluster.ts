/** `kairos cluster status`: nodes with roles and last heartbeat, and each partition's owner and epoch. */
import type { Command } from "commander";
import { KairosError } from "../lib/errors.ts";
import { openBuckets } from "../cluster/buckets.ts";
import { decode } from "../cluster/codec.ts";
import { connectNats, type NatsAuthOptions } from "../cluster/nats.ts";
import type { LeaseValue } from "../cluster/partition-manager.ts";
import type { MemberInfo } from "../cluster/membership.ts";
import { natsAuthOptions, resolveNatsAuth, resolveNatsUrl, type NatsAuthFlags } from "./dev-file.ts";

export interface ClusterStatus {
  nodes: { node_id: string; roles: string[]; incarnation: string; last_heartbeat: string }[];
  partitions: { partition: number; owner: string | null; epoch: number | null }[];
}

export async function readClusterStatus(natsUrl: string, clusterName: string, auth: NatsAuthOptions = {}): Promise<ClusterStatus> {
  const nc = await connectNats({ url: natsUrl, name: "kairos-cli", ...auth });
  try {
    const b = await openBuckets(nc, { clusterName, replicas: 1 });
    const cfg = await b.cluster.get("config");
    const partitions = cfg ? decode<{ partitions: number }>(cfg.value).partitions : 0;
    const nodes = (await b.nodes.list(">")).map((e) => {
      const n = decode<MemberInfo & { lastSeenMs: number }>(e.value);
      return { node_id: n.nodeId, roles: n.roles, incarnation: n.incarnation, last_heartbeat: new Date(n.lastSeenMs).toISOString() };
    });
    const leases = new Map((await b.leases.list("p.*")).map((e) => [Number(e.key.slice(2)), decode<LeaseValue>(e.value)]));
    return {
      nodes: nodes.sort((a, b2) => a.node_id.localeCompare(b2.node_id)),
      partitions: Array.from({ length: partitions }, (_, p) => {
        const l = leases.get(p);
        return { partition: p, owner: l?.owner ?? null, epoch: l?.epoch ?? null };
      }),
    };
  } finally {
    await nc.close();
  }
}

export function registerClusterCommands(program: Command): void {
  const cluster = program.command("cluster").description("cluster inspection");
  natsAuthOptions(cluster.command("status"))
    .description("nodes and partition owners")
    .option("--nats <url>", "NATS URL (default: env KAIROS_NATS_URL or the dev cluster)")
    .option("--cluster <name>", "cluster name", "kairos")
    .option("--json", "machine-readable output")
    .action(async (f: { nats?: string; cluster: string; json?: boolean } & NatsAuthFlags) => {
      const url = resolveNatsUrl(f.nats);
      if (!url) throw new KairosError("invalid_argument", "no cluster found: pass --nats or start `kairos dev`", { field: "nats" });
      const s = await readClusterStatus(url, f.cluster, resolveNatsAuth(f, url, "admin"));
      if (f.json) {
        console.log(JSON.stringify(s));
        return;
      }
      console.log("NODE                     ROLES                  LAST HEARTBEAT");
      for (const n of s.nodes) console.log(`${n.node_id.padEnd(24)} ${n.roles.join(",").padEnd(22)} ${n.last_heartbeat}`);
      const byOwner = new Map<string, number[]>();
      for (const p of s.partitions) {
        const k = p.owner ?? "(none)";
        byOwner.set(k, [...(byOwner.get(k) ?? []), p.partition]);
      }
      console.log(`\nPARTITIONS (${s.partitions.length})`);
      for (const p of s.partitions) console.log(`  p${String(p.partition).padEnd(5)} owner ${p.owner ?? "(none)"}  epoch ${p.epoch ?? "-"}`);
      console.log("\nBY OWNER");
      for (const [o, ps] of byOwner) console.log(`  ${o}: ${ps.length}`);
    });
}
