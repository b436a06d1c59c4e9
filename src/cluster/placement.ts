/**
 * Placement: pure functions from (actor, partitions, live nodes) to an owner.
 *
 * - An actor's partition is `hash32("<type>/<id>") mod partitions`; the partition count is fixed
 *   when the cluster is created (stored in KV) because changing it moves every actor.
 * - A partition's owner is chosen by rendezvous (highest random weight) hashing over the live
 *   scheduler nodes: the node with the largest `hash32("<node>#<partition>")` wins (node id breaks
 *   ties). A join or leave moves only the partitions whose winner changed: about 1/n of them.
 */
import { hash32 } from "./hash.ts";

export interface ActorAddress {
  readonly type: string;
  readonly id: string;
}

export function partitionOf(addr: ActorAddress, partitions: number): number {
  return hash32(`${addr.type}/${addr.id}`) % partitions;
}

export function ownerOf(partition: number, nodes: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestScore = -1;
  for (const n of nodes) {
    const score = hash32(`${n}#${partition}`);
    if (score > bestScore || (score === bestScore && best !== undefined && n < best)) {
      best = n;
      bestScore = score;
    }
  }
  return best;
}

/** The whole assignment: partition index → owner node (undefined when no node is live). */
export function assign(partitions: number, nodes: readonly string[]): (string | undefined)[] {
  return Array.from({ length: partitions }, (_, p) => ownerOf(p, nodes));
}
