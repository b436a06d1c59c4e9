/**
 * Operations wiring of one process: its readiness checks (by role) and the gauges read from the
 * node at scrape time (partitions held, actors active). `startKairos` builds it once the node is
 * up and serves it on the API port and/or `--metrics-port` (src/http/ops.ts).
 */
import type { KairosNode } from "../cluster/node.ts";
import { assign } from "../cluster/placement.ts";
import type { NodeConfig } from "../cluster/config.ts";
import { checkReadiness, executorCheck, natsCheck, partitionsCheck, type ReadinessCheck } from "../health/readiness.ts";
import { addGaugeSource, metricsText } from "../metrics/index.ts";
import type { OpsDeps } from "../http/ops.ts";
import type { ExecutorKind } from "../sandbox/types.ts";
import { executorProbe } from "../sandbox/probe.ts";

export interface NodeOps extends OpsDeps {
  /** Removes this node's gauge sources (on stop). */
  close(): void;
}

export function nodeOps(node: KairosNode, config: NodeConfig, executor: ExecutorKind | undefined): NodeOps {
  const checks: ReadinessCheck[] = [natsCheck(() => node.nc)];
  const removers: (() => void)[] = [];
  if (config.roles.includes("scheduler")) {
    checks.push(partitionsCheck(config.nodeId, () => assign(node.partitions, node.membership?.live("scheduler") ?? []), () => node.heldPartitions()));
    removers.push(addGaugeSource("partitions_held", () => node.heldPartitions().length));
    removers.push(addGaugeSource("actors_active", () => node.host?.activeCount ?? 0));
  }
  if (config.roles.includes("worker") && executor !== undefined) checks.push(executorCheck(executorProbe(executor)));
  return {
    readiness: () => checkReadiness(checks),
    metrics: metricsText,
    close() {
      for (const r of removers.splice(0)) r();
    },
  };
}
