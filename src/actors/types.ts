/**
 * What the parts of an actor host (mailbox, turns, persistence, reminders, passivation) share and
 * ask of each other through the host core (host-core.ts): an actor in memory (`Instance`), a
 * queued message (`Envelope`), a state read back, a timer's payload, and each part's interface.
 * A leaf of the actors area (of the area it imports only registration.ts): the parts import the
 * core, so the core names them by these interfaces, not by their classes, or every part would
 * reach itself back through the core.
 */
import type { TimerQueue } from "../cluster/timer-queue.ts";
import type { WriteOptions, WriteResult } from "../cluster/kv.ts";
import type { ActorRegistration } from "./registration.ts";

export interface Envelope {
  msg: unknown;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
  /** Its `coalesceKey`: copies may join it until its turn begins (see `Instance.coalesced`). */
  coalesce?: string;
}

export interface Instance {
  readonly type: string;
  readonly id: string;
  readonly key: string;
  readonly partition: number;
  readonly reg: ActorRegistration;
  state: unknown;
  revision: number;
  /** Partition epoch stamped in the stored state (0: never written or unknown). */
  storedEpoch: number;
  loaded: boolean;
  /**
   * Arrival times by arrival key (bounded), see ActorContext.arrivalMs; made at the first (~180
   * bytes a job actor that has none).
   */
  arrivals?: Map<string, number>;
  mailbox: Envelope[];
  /**
   * Queued messages that copies may join, by `coalesceKey` (see ActorDefinition): registered
   * before the message can begin, removed as its turn begins (never later: a copy must not be
   * answered by a decision made before it arrived).
   */
  coalesced?: Map<string, { env: Envelope; reply: Promise<unknown> }>;
  running: boolean;
  /** A turn is being decided or performed (not merely waiting for admission, `TURNS_IN_FLIGHT`). */
  inTurn: boolean;
  dropped: boolean;
  lastActiveMs: number;
}

/**
 * A stored state read back (see `PersistencePart.readBack`): the state as the actor starts from it, and its epoch.
 */
export interface ReadBack {
  s: unknown;
  e: number;
}

export interface TimerPayload {
  type: string;
  id: string;
  msg: unknown;
  /** Failed deliveries so far (for backoff). */
  failures?: number;
}

/** Delivering messages to actors, one turn at a time (mailbox.ts). */
export interface MailboxPart {
  deliver(type: string, id: string, raw: unknown): Promise<unknown>;
  loadAhead(inst: Instance): Promise<unknown>;
  idle(inst: Instance): Promise<void>;
}

/** One turn of an actor: decide, persist, perform (turn.ts). */
export interface TurnsPart {
  turn(inst: Instance, env: Envelope): Promise<unknown>;
}

/** Actor state in the `actors` bucket, and the epoch fence (persistence.ts). */
export interface PersistencePart {
  activatePartition(partition: number): Promise<void>;
  readBack(inst: Instance, value: Uint8Array): Promise<ReadBack>;
  encodeState(state: unknown, epoch: number): Uint8Array;
  writeState(inst: Instance, value: Uint8Array, write: WriteOptions): Promise<WriteResult>;
  fence(inst: Instance, epoch: number, write: WriteOptions): Promise<void>;
  checkTrusted(inst: Instance, when: string): void;
  reloadSoon(inst: Instance, failures?: number): void;
}

/** Actor timers in the node's timer queues (reminders.ts). */
export interface RemindersPart {
  readonly timerTurns: { inFlight: number; held: boolean };
  readonly pending: number;
  queue(type: string): TimerQueue<TimerPayload>;
  arm(inst: Instance, name: string, atMs: number, msg: unknown): void;
  cancel(inst: Instance, name: string): void;
  dropPartition(partition: number): void;
  stop(): void;
}

/** Loading actors ahead of their warm timer and passivating idle ones (passivation.ts). */
export interface PassivationPart {
  readonly warmed: number;
  warmAhead(inst: Instance, atMs: number): void;
  cancelWarm(inst: Instance): void;
  sweep(): void;
  dropPartition(partition: number): void;
  stop(): void;
}

export interface HostParts {
  readonly mailbox: MailboxPart;
  readonly turns: TurnsPart;
  readonly persistence: PersistencePart;
  readonly reminders: RemindersPart;
  readonly passivation: PassivationPart;
}
