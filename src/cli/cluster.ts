/**
 * `kairos cluster status`: nodes with roles, last heartbeat and clock offset from the cluster's
 * median (a warning when one is off by more than clock-skew.ts SKEW_WARN_MS), and each
 * partition's owner and epoch. `kairos cluster harden-buckets`: rollup headers off on the streams
 * of buckets an older version made (buckets.ts `hardenBuckets`).
 */
import type { Command } from "commander";
import { KairosError } from "../lib/errors.ts";
import { jetstreamManager } from "@nats-io/jetstream";
import { hardenBuckets, openBuckets, type BucketHardening } from "../cluster/buckets.ts";
import { decode } from "../cluster/codec.ts";
import { connectNats, type NatsAuthOptions } from "../cluster/nats.ts";
import type { LeaseValue } from "../cluster/partition-manager.ts";
import type { MemberInfo } from "../cluster/membership.ts";
import { clockOffsets, skewWarnings, type BeatSample } from "../cluster/clock-skew.ts";
import {
  natsAuthOptions,
  resolveNatsAuth,
  resolveNatsUrl,
  type NatsAuthFlags,
} from "./dev-file.ts";

export interface ClusterStatus {
  /** `clock_offset_ms`: the node's clock minus the median of the nodes heard (null: not heard while sampling). */
  nodes: {
    node_id: string;
    roles: string[];
    incarnation: string;
    last_heartbeat: string;
    clock_offset_ms: number | null;
  }[];
  partitions: { partition: number; owner: string | null; epoch: number | null }[];
  /** Clocks too far apart (clock-skew.ts `skewWarnings`). */
  warnings: string[];
}

/** How long `kairos cluster status` listens to heartbeats to judge clocks: over two intervals (500 ms). */
export const CLOCK_SAMPLE_MS = 1_200;

/** Listens to the cluster's membership heartbeats for `ms` (each carries its sender's clock). */
async function sampleBeats(
  nc: Awaited<ReturnType<typeof connectNats>>,
  clusterName: string,
  ms: number,
): Promise<BeatSample[]> {
  const out: BeatSample[] = [];
  if (ms <= 0) return out;
  const sub = nc.subscribe(`kairos.${clusterName}.node.hb.*`, {
    callback: (_e, m) => {
      try {
        const b = decode<{ nodeId?: unknown; sentMs?: unknown }>(m.data);
        if (typeof b.nodeId === "string" && typeof b.sentMs === "number" && out.length < 10_000)
          out.push({ nodeId: b.nodeId, sentMs: b.sentMs, heardMs: Date.now() });
      } catch {
        // not a heartbeat: ignored
      }
    },
  });
  await new Promise((r) => setTimeout(r, ms));
  sub.unsubscribe();
  return out;
}

/** `clockSampleMs`: how long to listen to heartbeats to judge clock skew (0: not judged). */
export async function readClusterStatus(
  natsUrl: string,
  clusterName: string,
  auth: NatsAuthOptions = {},
  clockSampleMs = 0,
): Promise<ClusterStatus> {
  const nc = await connectNats({ url: natsUrl, name: "kairos-cli", ...auth });
  try {
    const offsets = clockOffsets(await sampleBeats(nc, clusterName, clockSampleMs));
    const b = await openBuckets(nc, { clusterName, replicas: 1 });
    const cfg = await b.cluster.get("config");
    const partitions = cfg ? decode<{ partitions: number }>(cfg.value).partitions : 0;
    const nodes = (await b.nodes.list(">")).map((e) => {
      const n = decode<MemberInfo & { lastSeenMs: number }>(e.value);
      return {
        node_id: n.nodeId,
        roles: n.roles,
        incarnation: n.incarnation,
        last_heartbeat: new Date(n.lastSeenMs).toISOString(),
        clock_offset_ms: offsets.get(n.nodeId) ?? null,
      };
    });
    const leases = new Map(
      (await b.leases.list("p.*")).map((e) => [
        Number(e.key.slice(2)),
        decode<LeaseValue>(e.value),
      ]),
    );
    return {
      nodes: nodes.sort((a, b2) => a.node_id.localeCompare(b2.node_id)),
      partitions: Array.from({ length: partitions }, (_, p) => {
        const l = leases.get(p);
        return { partition: p, owner: l?.owner ?? null, epoch: l?.epoch ?? null };
      }),
      warnings: skewWarnings(offsets),
    };
  } finally {
    await nc.close();
  }
}

/** Connects as `auth` (the NATS admin) and hardens the cluster's bucket streams. */
export async function hardenClusterBuckets(
  natsUrl: string,
  clusterName: string,
  auth: NatsAuthOptions = {},
): Promise<BucketHardening[]> {
  const nc = await connectNats({ url: natsUrl, name: "kairos-cli", ...auth });
  try {
    const out = await hardenBuckets(await jetstreamManager(nc), clusterName);
    if (out.every((b) => b.state === "missing"))
      throw new KairosError("not_found", `no bucket of cluster "${clusterName}" exists`, {
        field: "cluster",
      });
    return out;
  } finally {
    await nc.close();
  }
}

function requireNatsUrl(flag: string | undefined): string {
  const url = resolveNatsUrl(flag);
  if (!url)
    throw new KairosError(
      "invalid_argument",
      "no cluster found: pass --nats or start `kairos dev`",
      {
        field: "nats",
      },
    );
  return url;
}

export function registerClusterCommands(program: Command): void {
  const cluster = program.command("cluster").description("cluster inspection");
  natsAuthOptions(cluster.command("harden-buckets"))
    .description(
      "turn rollup headers off on buckets an older version made (as the NATS admin; keys are kept)",
    )
    .option("--nats <url>", "NATS URL (default: env KAIROS_NATS_URL or the dev cluster)")
    .option("--cluster <name>", "cluster name", "kairos")
    .option("--json", "machine-readable output")
    .action(async (f: { nats?: string; cluster: string; json?: boolean } & NatsAuthFlags) => {
      const url = requireNatsUrl(f.nats);
      const out = await hardenClusterBuckets(url, f.cluster, resolveNatsAuth(f, url, "admin"));
      if (f.json) {
        console.log(JSON.stringify(out));
        return;
      }
      for (const b of out) console.log(`${b.bucket.padEnd(28)} ${b.state}`);
    });
  natsAuthOptions(cluster.command("status"))
    .description("nodes and partition owners")
    .option("--nats <url>", "NATS URL (default: env KAIROS_NATS_URL or the dev cluster)")
    .option("--cluster <name>", "cluster name", "kairos")
    .option("--json", "machine-readable output")
    .action(async (f: { nats?: string; cluster: string; json?: boolean } & NatsAuthFlags) => {
      const url = requireNatsUrl(f.nats);
      const s = await readClusterStatus(
        url,
        f.cluster,
        resolveNatsAuth(f, url, "admin"),
        CLOCK_SAMPLE_MS,
      );
      if (f.json) {
        console.log(JSON.stringify(s));
        return;
      }
      console.log(
        "NODE                     ROLES                  LAST HEARTBEAT            CLOCK",
      );
      for (const n of s.nodes)
        console.log(
          `${n.node_id.padEnd(24)} ${n.roles.join(",").padEnd(22)} ${n.last_heartbeat.padEnd(25)} ${n.clock_offset_ms === null ? "-" : `${n.clock_offset_ms >= 0 ? "+" : ""}${n.clock_offset_ms} ms`}`,
        );
      for (const w of s.warnings) console.log(`WARNING: ${w}`);
      const byOwner = new Map<string, number[]>();
      for (const p of s.partitions) {
        const k = p.owner ?? "(none)";
        byOwner.set(k, [...(byOwner.get(k) ?? []), p.partition]);
      }
      console.log(`\nPARTITIONS (${s.partitions.length})`);
      for (const p of s.partitions)
        console.log(
          `  p${String(p.partition).padEnd(5)} owner ${p.owner ?? "(none)"}  epoch ${p.epoch ?? "-"}`,
        );
      console.log("\nBY OWNER");
      for (const [o, ps] of byOwner) console.log(`  ${o}: ${ps.length}`);
    });
}
