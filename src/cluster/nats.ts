/**
 * NATS connection handling: reconnect forever with jitter, name the connection after the node,
 * and drain on shutdown so in-flight replies are delivered before the socket closes.
 */
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { KairosError } from "../lib/errors.ts";

export interface ConnectOptions {
  /** One URL or a comma-separated list (every server of the cluster). */
  url: string;
  name: string;
  /** How long the first connection may take before failing start-up. */
  connectTimeoutMs?: number;
}

export async function connectNats(opts: ConnectOptions): Promise<NatsConnection> {
  try {
    return await connect({
      servers: opts.url.split(",").map((s) => s.trim()).filter(Boolean),
      name: opts.name,
      timeout: opts.connectTimeoutMs ?? 5000,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 250,
      reconnectJitter: 250,
      pingInterval: 5000,
      maxPingOut: 3,
      // Without this, every request builds an Error up front for a possible async stack trace:
      // 21% of a scheduler's CPU in a 10,000-run burst (profile in BENCHMARKS.md).
      noAsyncTraces: true,
    });
  } catch (e) {
    throw new KairosError("unavailable", `cannot connect to NATS at ${opts.url}: ${(e as Error).message}`, { cause: e });
  }
}
