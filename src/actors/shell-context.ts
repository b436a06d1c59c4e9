/**
 * The shell context of an actor instance under a partition epoch: what its effect performers and
 * its `reconcile` get (see registration.ts `ShellContext`).
 *
 * Pitfall: `stillOwner` compares the epoch captured here with the partition's current one, so a
 * context made before a hand-over stops being the owner's at once.
 */
import { isKairosError } from "../lib/errors.ts";
import type { HostCore } from "./host-core.ts";
import type { ShellContext } from "./registration.ts";
import type { Instance } from "./types.ts";

export function shellContextOf(
  c: HostCore,
  inst: Instance,
  epoch: number | undefined,
): ShellContext {
  const { o } = c;
  return {
    address: { type: inst.type, id: inst.id },
    partition: inst.partition,
    epoch: epoch ?? 0,
    nodeId: o.nodeId,
    stillOwner: () =>
      !inst.dropped &&
      c.accepting.has(inst.partition) &&
      o.isTrusted(inst.partition) &&
      o.epochOf(inst.partition) === epoch,
    stateRevision: () => inst.revision,
    tell: (m) => {
      c.parts.mailbox.deliver(inst.type, inst.id, m).catch((e: unknown) => {
        if (!isKairosError(e, "not_owner")) o.onError(`tell ${inst.type}/${inst.id}`, e);
      });
    },
  };
}
