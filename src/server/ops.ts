/**
 * Operations wiring of one process: its readiness checks (by role) and the gauges read from the
 * node at scrape time (partitions held, actors active, runs waiting). `startKairos` builds it
 * once the node is up and serves it on the API port and/or `--metrics-port` (src/http/ops.ts).
 */
import type { KairosNode } from "./node.ts";
import { assign } from "../cluster/placement.ts";
import type { NodeConfig } from "../cluster/config.ts";
import { systemClock } from "../lib/clock.ts";
import {
  checkReadiness,
  executorCheck,
  natsCheck,
  partitionsCheck,
  type ReadinessCheck,
} from "../health/readiness.ts";

/** The worker's `executor` check; a draining worker (SIGTERM) fails it: it takes no new attempts. */
function workerCheck(kind: ExecutorKind, draining: () => boolean): ReadinessCheck {
  const inner = executorCheck(executorProbe(kind));
  return {
    name: inner.name,
    run: () =>
      draining()
        ? Promise.resolve({ ok: false, detail: "draining: taking no new attempts" })
        : inner.run(),
  };
}
import {
  addGaugeSource,
  addRunsWaitingSource,
  metricsText,
  type WaitReason,
} from "../metrics/index.ts";
import type { OpsDeps } from "../http/ops.ts";
import type { ExecutorKind } from "../sandbox/types.ts";
import { executorProbe } from "../sandbox/probe.ts";

export interface NodeOps extends OpsDeps {
  /** Removes this node's gauge sources (on stop). */
  close(): void;
}

/** The worker side of a node, for its readiness: the executor kind and whether it is draining. */
export interface WorkerOps {
  kind: ExecutorKind;
  draining: () => boolean;
}

/**
 * `runsWaiting`: the scheduler's runs waiting, by reason, read at scrape time (src/history/run-waiting.ts).
 */
export function nodeOps(
  node: KairosNode,
  config: NodeConfig,
  worker: WorkerOps | undefined,
  runsWaiting?: () => Record<WaitReason, number>,
): NodeOps {
  const checks: ReadinessCheck[] = [natsCheck(() => node.nc)];
  const removers: (() => void)[] = [];
  if (config.roles.includes("scheduler")) {
    checks.push(
      partitionsCheck(
        config.nodeId,
        () => assign(node.partitions, node.membership?.live("scheduler") ?? []),
        () => node.heldPartitions(),
      ),
    );
    removers.push(addGaugeSource("partitions_held", () => node.heldPartitions().length));
    removers.push(addGaugeSource("actors_active", () => node.host?.activeCount ?? 0));
    removers.push(addGaugeSource("mailbox_depth", () => node.host?.recentMailboxDepth ?? 0));
    if (runsWaiting) removers.push(addRunsWaitingSource(runsWaiting));
  }
  if (config.roles.includes("worker") && worker !== undefined) {
    checks.push(workerCheck(worker.kind, worker.draining));
  }
  return {
    readiness: () => checkReadiness(checks, systemClock),
    metrics: metricsText,
    close() {
      for (const r of removers.splice(0)) r();
    },
  };
}
