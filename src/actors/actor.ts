/**
 * What an actor type is: a pure behaviour `(state, message, context) → decision` plus how its
 * state is named and initialised (`ActorCore`), and four named policies for the host — arrival,
 * urgency, storage, residency. The host (src/actors/host.ts) is the imperative shell that loads
 * state, serialises messages, persists with CAS and performs the effects.
 *
 * Core actor files import nothing from nats, dockerode or hono, and never read the clock.
 */
import type { ErrorCode } from "../lib/errors.ts";

/**
 * Checks an actor message at the bus boundary before the host sees it: returns why it is refused
 * (e.g. its `tenant_id` is not the address's tenant), or undefined to admit it (see
 * `KairosNode.guard`, src/server/node.ts).
 */
export type MessageGuard = (id: string, msg: unknown) => string | undefined;

/** Effects every host performs; actor types add their own with `perform` (see ActorDefinition). */
export type HostEffect<M> =
  | { kind: "timer"; name: string; atMs: number; msg: M }
  | { kind: "cancel_timer"; name: string }
  | { kind: "send"; to: { type: string; id: string }; msg: unknown };

export interface ActorContext {
  readonly id: string;
  readonly nowMs: number;
  /**
   * When the host last saw a message with this arrival key (see `arrivalKey`) reach the node,
   * before it queued in the mailbox: liveness judged from arrivals cannot queue behind the
   * actor's own backlog ("busy is not dead").
   */
  arrivalMs?(key: string): number | undefined;
  /**
   * Whether a message with this coalesce key (see `coalesceKey`) waits in the mailbox — arrived,
   * its turn not begun. (The message whose turn this is no longer counts.)
   */
  pending?(coalesceKey: string): boolean;
}

export interface Decision<S, R, E> {
  /** The next state; return the same object to skip the write. */
  readonly state: S;
  readonly reply: R;
  /** When set, the caller gets this error instead of `reply` (after the state write, if any). */
  readonly fail?: { readonly code: ErrorCode; readonly message: string; readonly field?: string };
  /** Host effects, performed after the state write succeeded. */
  readonly effects?: readonly HostEffect<unknown>[];
  /**
   * Type-specific effects, performed by `perform` BEFORE the state write (so a crash between the
   * two repeats the effect, which must therefore be idempotent, e.g. a KV create).
   */
  readonly pre?: readonly E[];
  /** Type-specific effects performed AFTER the state write (sends that need the shell, I/O). */
  readonly post?: readonly E[];
  /**
   * The state change is recoverable if lost (its senders or timers redo it after a reload): keep
   * it in memory without a KV write; the next decision that writes carries it along. A drop or
   * passivation before then loses it, and the actor must be correct from the stored state alone.
   * Ignored for soft actors (`persist: false`), which never write.
   */
  readonly deferWrite?: boolean;
}

/** The core of a type: its name, its starting state, how a message is checked, its decision. */
export interface ActorCore<S, M, R, E> {
  readonly type: string;
  initialState(id: string): S;
  /** Validates a decoded message; throw a KairosError for bad input. */
  parse?(raw: unknown): M;
  /** Pure. Must not mutate `state`. */
  receive(state: S, msg: M, ctx: ActorContext): Decision<S, R, E>;
}

/**
 * What happens to a message as it arrives, before its turn: the mailbox bound, arrival times,
 * copies joining a queued request, answers from memory.
 */
export interface ArrivalPolicy<S, M, R> {
  /**
   * This type's mailbox bound, overriding the node's `mailboxLimit`: for a fan-in actor that every
   * job actor of a tenant writes to (a tenant's slot economy), sized to its own waiting bound, so
   * a burst queues up to what the actor accepts instead of failing at the node-wide default.
   */
  readonly mailboxLimit?: number;
  /** Messages whose arrival time the host records (keyed), e.g. lease heartbeats. */
  arrivalKey?(msg: M): string | undefined;
  /**
   * Messages that are the same request (a sender's retry of it, e.g. a worker's completion
   * report): one arriving while another with its key waits in the mailbox (not yet begun) is not
   * queued again; it gets that one's reply. Keyed messages must be idempotent, and whatever a
   * copy carries beyond the one it joins must be safe to lose (it is not handled): a heartbeat's
   * `started_at_ms` comes again with the next round (job-actor.ts).
   */
  coalesceKey?(msg: M): string | undefined;
  /**
   * A read-only answer from the last committed state, given at arrival without queueing (e.g. a
   * heartbeat for a lease already recorded). `undefined`: queue the message as usual. With
   * `alsoQueue` the message is queued as well (its reply then goes nowhere). `fail`: a definitive
   * refusal from memory (nothing the mailbox holds could change it), answered as that error.
   */
  query?(
    state: S,
    msg: M,
    ctx: ActorContext,
  ):
    | { reply: R; alsoQueue: boolean }
    | { fail: NonNullable<Decision<S, R, unknown>["fail"]> }
    | undefined;
  /**
   * Pure. Messages `query` may answer while a turn is in flight, from the state before it (the
   * fast path is otherwise shut then): reads whose callers take a state one turn old — an API
   * read of a job's runs — so they neither wait behind nor become a turn of a busy actor.
   * Never a message whose answer a worker or an owner acts on.
   */
  queryDuringTurn?(msg: M): boolean;
}

/** What goes ahead: turns admitted before the others waiting, timers fired on their own queue. */
export interface UrgencyPolicy<M> {
  /**
   * Pure. Messages whose turn is admitted ahead of every waiting non-urgent turn (the node's
   * `TURNS_IN_FLIGHT` bound, host.ts), and whose fence and state update go ahead in the KV
   * store's in-flight bound (`KvStore.update` `urgent`); the mailbox stays in order. (Reads of
   * an actor loaded by such a turn stay plain.) For a message with a deadline
   * that others lack: a worker's claim of an offer dies after lease TTL − margin, while a
   * completion report can wait with its lease kept (its arrival is the lease's heartbeat). The
   * case it targets: a burst's claims waiting behind completion turns until their offers expire. An
   * urgent message behind a non-urgent one in the same mailbox still waits for that one.
   */
  urgent?(msg: M): boolean;
  /**
   * This type's timers go to the node's urgent timer queue, fired on their own: a control-plane
   * actor's timer (a tenant's demand report) must not wait behind a burst's overdue preparation
   * timers in the one queue (it did: 97 s in a 200,000-run burst).
   */
  readonly urgentTimers?: boolean;
}

/**
 * Where the state lives and how it comes back: persisted or soft, adjusted when read back,
 * activated with its partition.
 */
export interface StoragePolicy<S, M = unknown> {
  /**
   * `false`: the state is soft and lives in memory only (never written to KV); it starts from
   * `initialState` after every activation. For state that is rebuilt by its senders (slot grants).
   * A soft core may mutate its state in place and return it (O(1) per message instead of a copy):
   * the host never rolls a soft decision back — any failure after `receive` (a failed write, a
   * lapsed trust window) drops the actor, so the next message reloads what is durable.
   */
  readonly persist?: boolean;
  /**
   * Pure. Adjusts a state just read from KV before its first use (e.g. moves counters past what
   * deferred writes of an earlier incarnation may have handed out). Persisted actors only.
   */
  onLoad?(state: S): S;
  /** Effects to perform on activation (e.g. re-arm timers from persisted state). */
  onActivate?(state: S, ctx: ActorContext): readonly HostEffect<unknown>[];
  /** Whether this type's actors are loaded when a partition is acquired (they carry reminders). */
  readonly loadOnAcquire?: boolean;
  /**
   * Pure. A message sent to an id nobody used yet (a create under a fresh id): an actor not in
   * memory is activated from `initialState` without reading KV, so its write is a KV `create`.
   * Should a state exist after all, that create fails, or the turn writes nothing or has `pre`
   * effects: the actor is dropped unanswered (`not_owner`) and the sender's retry reads it back.
   * Persisted actors only; saves the read of a state that is not there. Pitfall: `onActivate` of
   * `initialState` must arm nothing — timers are keyed by actor and name, and one armed for a
   * guess that fails would replace a timer of the actor that exists.
   */
  assumeNew?(msg: M): boolean;
}

/** How long an actor stays in memory: kept while its state says so, loaded ahead of a timer. */
export interface ResidencyPolicy<S> {
  /**
   * Pure. While this says true the actor is not passivated, however long it is idle: for a state
   * whose deferred changes (`Decision.deferWrite`) are worth keeping — a job with an active run
   * holds its grant, offer and start in memory only, and a prepared run idles until its due time.
   * Passivated, it would lose them and redo each one at the due second, in the burst.
   */
  keepLoaded?(state: S): boolean;
  /**
   * The name of the timer whose actor is read back ahead of it: a passivated actor is loaded
   * `HostOptions.warmMs` before this timer fires, a few at a time while the node has the time,
   * and an actor is not passivated while the timer is that close. A burst of them (the `fire`s
   * before a top-of-the-hour) then finds its actors in memory instead of reading each one back
   * in its busiest minute.
   */
  readonly warmTimer?: string;
  /**
   * Pure. Whether this actor, idle, may leave memory after a few seconds (passivation.ts
   * `EARLY_IDLE_MS`) instead of the host's idle time, when its `warmTimer` is further off than
   * `warmMs` and the host's idle time together: only for a state no message but its own commands
   * can be on its way to (a job that never had a run — no worker, tenant or dispatcher holds
   * anything of it). Read back within seconds of a write, a state below the revision it left at
   * is refused for a while (`HostCore.rememberEarly`). Absent: the host's idle time.
   */
  passivateEarly?(state: S): boolean;
}

/**
 * An actor type: its core and four policies (arrival, urgency, storage, residency), each member
 * optional but the core's. A definition is one object literal with any of these members.
 */
export interface ActorDefinition<S, M, R, E = never>
  extends
    ActorCore<S, M, R, E>,
    ArrivalPolicy<S, M, R>,
    UrgencyPolicy<M>,
    StoragePolicy<S, M>,
    ResidencyPolicy<S> {}

/** Type-erased definition, as the host registry stores them. */
export type AnyActorDefinition = ActorDefinition<unknown, unknown, unknown, unknown>;
