/** Every actor type a scheduler node hosts. */
import type { ActorRegistration } from "./host.ts";
import { counterActor } from "./counter.ts";

export function actorRegistrations(): ActorRegistration[] {
  return [{ definition: counterActor }];
}
