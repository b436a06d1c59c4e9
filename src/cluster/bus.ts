/**
 * The bus port: the only way Kairos sends messages between processes. A `NatsConnection`
 * satisfies it as it is; a node wraps its own with `muxedBus` (request-mux.ts: requests that
 * build no Error on success) in production, integration and chaos; the simulation's in-process bus
 * (test/sim/sim-bus.ts) injects loss, delay, duplication, reordering and partitions behind the
 * same interface. Both pass the same conformance suite (test/integration/bus-conformance.test.ts).
 *
 * Semantics every implementation keeps (they are NATS core semantics):
 * - `publish` is fire-and-forget, at most once; a message may be lost.
 * - `request` resolves with the first reply or rejects (timeout / no responders). A rejected
 *   request is an unknown outcome: the receiver may have acted on it.
 * - A subscription with a `queue` group delivers each message to one member of the group.
 */

export interface BusMsg {
  readonly subject: string;
  readonly data: Uint8Array;
  /**
   * The reply subject the sender chose (a request's inbox; none for a plain publish). Chosen by
   * the sender, so check it before answering (reply-guard.ts).
   */
  readonly reply?: string | undefined;
  /**
   * The message's headers, where the transport has them (NATS; the simulation's bus has none).
   * Read for `Nats-Request-Info`, which nats-server sets on a request crossing a service import
   * (reply-guard.ts).
   */
  readonly headers?: { get(key: string): string } | undefined;
  /** Replies to a request (no-op for a plain publish). */
  respond(data: Uint8Array): unknown;
}

export interface BusSubscription {
  unsubscribe(): void;
}

export interface BusSubscribeOptions {
  queue?: string;
  callback: (err: Error | null, msg: BusMsg) => void;
}

export interface Bus {
  publish(subject: string, data: Uint8Array): void;
  request(
    subject: string,
    data: Uint8Array,
    opts: { timeout: number },
  ): Promise<{ readonly data: Uint8Array }>;
  subscribe(subject: string, opts: BusSubscribeOptions): BusSubscription;
  /** Resolves once everything published so far has reached the server (or the peer). */
  flush(): Promise<void>;
  isClosed(): boolean;
}
