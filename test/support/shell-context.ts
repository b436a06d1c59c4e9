/** Shell contexts for unit tests of what a job shell does (record writes, dispatch). */
import type { ShellContext } from "../../src/actors/host.ts";

/**
 * The context of node `n1` owning `partition` at epoch 1 for the actor at `address`, which
 * stays the owner; what the shell tells the actor goes to `tell` (default: nowhere).
 */
export function ownerContext(
  address: ShellContext["address"],
  partition: number,
  tell: ShellContext["tell"] = () => undefined,
): ShellContext {
  return { address, partition, epoch: 1, nodeId: "n1", stillOwner: () => true, tell };
}
