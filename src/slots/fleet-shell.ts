/**
 * The fleet actor's shell: the core (fleet-actor.ts) is pure, so the capacity it shares — the
 * slots advertised by live workers, as the hosting node's worker directory sees them — is read
 * here and added to every message at handling time (what arrives on the bus carries none).
 * Shares are soft: nothing is written to KV.
 */
import type { ActorRegistration } from "../actors/host.ts";
import { makeFleetActor } from "./fleet-actor.ts";

export function fleetRegistration(capacity: () => number): ActorRegistration {
  const core = makeFleetActor();
  const definition: typeof core = {
    ...core,
    receive: (state, msg, ctx) => core.receive(state, { ...msg, capacity: capacity() }, ctx),
  };
  return { definition };
}
