/**
 * Clock skew across a cluster, judged from membership heartbeats (pure). Each heartbeat carries
 * its sender's wall clock (`sentMs`); an observer notes when it arrived by its own (`heardMs`).
 * `sentMs − heardMs` is the sender's clock minus the observer's, less the one-way latency. Taking
 * every node's offset from the MEDIAN of those makes the result independent of the observer's
 * own clock (a CLI on a laptop with a wrong clock still sees which node is off).
 */
import { START_SKEW_TOLERANCE_MS } from "../protocol/worker.ts";

/** A node is reported once its clock is this far from the cluster's median: half the start tolerance. */
export const SKEW_WARN_MS = START_SKEW_TOLERANCE_MS / 2;

export interface BeatSample {
  nodeId: string;
  sentMs: number;
  heardMs: number;
}

/** Each node's clock offset from the median of the nodes heard, in ms (its latest sample). */
export function clockOffsets(samples: readonly BeatSample[]): Map<string, number> {
  const latest = new Map<string, number>();
  for (const s of samples)
    if (Number.isFinite(s.sentMs) && Number.isFinite(s.heardMs))
      latest.set(s.nodeId, s.sentMs - s.heardMs);
  const sorted = [...latest.values()].sort((a, b) => a - b);
  if (sorted.length === 0) return new Map();
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  return new Map([...latest].map(([id, off]) => [id, Math.round(off - median)]));
}

/** A warning per node whose clock is more than SKEW_WARN_MS from the median (sorted by node id). */
export function skewWarnings(offsets: ReadonlyMap<string, number>): string[] {
  return [...offsets]
    .filter(([, off]) => Math.abs(off) > SKEW_WARN_MS)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(
      ([id, off]) =>
        `node ${id}: clock ${off > 0 ? "ahead of" : "behind"} the cluster's median by ${Math.abs(off)} ms (warned above ${SKEW_WARN_MS} ms; workers start runs by their owner's clock and defer starts more than ${START_SKEW_TOLERANCE_MS} ms early) — check its NTP`,
    );
}
