/**
 * What the parts of a worker (start timing, heartbeats, self-fencing, the completion outbox) ask
 * of each other through the shared core (core.ts). A leaf of the worker area: the parts import
 * the core, so the core names them by these interfaces, not by their classes, or every part
 * would reach itself back through the core.
 */
import type { ExecutionResult } from "../sandbox/index.ts";
import type { Lease } from "./lease.ts";

/** When an attempt starts (start-timing.ts). */
export interface StartTimingPart {
  readonly skewDeferrals: number;
  enqueueStart(lease: Lease, atMs: number): void;
  run(lease: Lease): void;
}

/** The heartbeat loop and slot advert (heartbeat.ts). */
export interface HeartbeatsPart {
  stop(): void;
  stopSoon(): void;
  beat(): void;
  beatSoon(): void;
  heartbeatAll(periodic?: boolean): Promise<void>;
  stayHeard(): void;
  advertise(): void;
  advertiseSoon(): void;
}

/** Killing attempts whose validity ran out (self-fencing.ts). */
export interface SelfFencingPart {
  stop(): void;
  parkIfCovered(l: Lease): void;
  coveredThroughStart(l: Lease, validUntilMono: number, wallNow: number): boolean;
  enforce(): void;
  armFence(): void;
  fenceBy(leases: Iterable<Lease>): void;
}

/** Reporting how attempts ended (outbox.ts). */
export interface OutboxPart {
  stop(): void;
  complete(lease: Lease, r: ExecutionResult): Promise<void>;
  report(lease: Lease): void;
  reportCancelled(lease: Lease, r: ExecutionResult | null): Promise<void>;
}

export interface WorkerParts {
  readonly starts: StartTimingPart;
  readonly beats: HeartbeatsPart;
  readonly fencing: SelfFencingPart;
  readonly outbox: OutboxPart;
}
