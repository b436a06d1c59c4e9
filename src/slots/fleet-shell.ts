/**
 * The fleet actor's shell: the core (fleet-actor.ts) is pure, so the capacity it shares — the
 * slots advertised by live workers, as the hosting node's worker directory sees them — and the
 * attempts executing on them by tenant (undefined unless every such worker advertises them) are
 * read here and added to every message at handling time (what arrives on the bus carries
 * neither). Shares are soft: nothing is written to KV.
 */
import type { ActorRegistration } from "../actors/host.ts";
import { makeFleetActor } from "./fleet-actor.ts";

export function fleetRegistration(
  capacity: () => number,
  executing: () => ReadonlyMap<string, number> | undefined = () => undefined,
): ActorRegistration {
  const core = makeFleetActor();
  const definition: typeof core = {
    ...core,
    receive: (state, msg, ctx) =>
      core.receive(state, { ...msg, capacity: capacity(), executing: executing() }, ctx),
  };
  return { definition };
}
