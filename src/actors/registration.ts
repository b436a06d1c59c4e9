/**
 * What a node registers for an actor type with its host (host.ts): the pure definition
 * (actor.ts) and the shell around it — effect performers, and loaders for soft-state types and
 * for adjusting a persisted state read back. `ShellContext` is what the performers get.
 */
import type { AnyActorDefinition } from "./actor.ts";

/** Shell services available to type-specific effect performers. */
export interface ShellContext {
  readonly address: { type: string; id: string };
  readonly partition: number;
  readonly epoch: number;
  readonly nodeId: string;
  /** True while this node may still act for the actor (partition trusted, instance current). */
  stillOwner(): boolean;
  /**
   * The KV revision of the actor's state as this instance last read or wrote it (0: none yet). A
   * write that would replace what a later state's lineage wrote compares against it (see
   * run-index-store.ts). Absent where no stored state stands behind the context (tests).
   */
  stateRevision?(): number;
  /** Sends a message to this same actor (it queues behind the current one). */
  tell(msg: unknown): void;
}

/** How a type's own effects are performed: `pre` before the state write, `post` after it. */
export interface EffectPerformers {
  /**
   * Performs the decision's `pre` effects before the state write. May return follow-up messages,
   * which this actor processes next, before anything else in its mailbox. A rejection (a failure,
   * or an unknown outcome: some effects may have landed) fails the turn and drops the actor: the
   * next message reads back what is durable (through `reconcile`).
   */
  perform?(pre: readonly unknown[], ctx: ShellContext): Promise<readonly unknown[] | void>;
  /** Performs the decision's `post` effects after the state write (not awaited by the reply). */
  performPost?(post: readonly unknown[], ctx: ShellContext): void;
  /**
   * For soft-state types: `pre` effects are started in message order and the state applied at
   * once, so the next message does not wait for them; this message's reply, host effects (sends,
   * timers) and post effects wait until its `pre` effects are done. Durable before visible,
   * without one KV round trip per message in series (a tenant's grants in a burst).
   */
  readonly pipelinePre?: boolean;
}

/** How a state comes back: a soft one rebuilt, a persisted one reconciled with other keys. */
export interface StateLoaders {
  /**
   * For soft-state types (`persist: false`) whose state is rebuilt from elsewhere on activation
   * (e.g. a tenant's slot grants, one KV key each): resolves to the state to start from.
   */
  loadSoft?(id: string, partition: number): Promise<unknown>;
  /**
   * For persisted types: adjusts a state just read back from KV (after the definition's `onLoad`)
   * with what other keys say, before the actor's first decision and its `onActivate` — e.g. a
   * job's runs whose end was a deferred state change (their terminal records say they ended).
   * A failure fails the activation (retried like any load). `at` is a shell context of the
   * partition's current epoch, for the writes a reconciliation must make.
   */
  reconcile?(state: unknown, at: ShellContext): Promise<unknown>;
}

/** An actor type as a node registers it: its definition, its effect performers, its loaders. */
export interface ActorRegistration extends EffectPerformers, StateLoaders {
  readonly definition: AnyActorDefinition;
}
