/**
 * A loopback TCP proxy the test controls, to cut one process off from NATS: listens on
 * 127.0.0.1:<free port> and forwards every connection to `127.0.0.1:<targetPort>`.
 *
 * - `cut("blackhole")` (default): a silent partition. Established connections stay open but
 *   carry nothing in either direction (bytes are held, not lost: they flow again on `heal()`,
 *   like TCP retransmission after a short outage); new connections are accepted and then
 *   never forwarded. The client only notices through its own ping timeouts.
 * - `cut("reset")`: established connections are destroyed at once (the client sees a close and
 *   starts reconnecting); new ones are black-holed as above.
 * - `heal()`: frozen connections resume; black-holed new connections are closed (the client
 *   retries and gets through), so a reconnect does not wait for a connect timeout.
 * - `close()`: destroys everything and stops listening.
 *
 * The upstream connection is opened when a client connects; if the target is down (e.g. the
 * NATS server is restarting) the client side is closed, as a real connection would be refused.
 */
import { createConnection, createServer, type Server, type Socket } from "node:net";

export type CutMode = "blackhole" | "reset";

interface Pair {
  client: Socket;
  upstream: Socket;
  /** Bytes held while frozen: [to upstream, to client]. */
  held: [Buffer[], Buffer[]];
}

export interface TcpProxy {
  readonly port: number;
  readonly url: string;
  readonly isCut: boolean;
  cut(mode?: CutMode): void;
  heal(): void;
  close(): Promise<void>;
  /** Connections currently forwarded or frozen / black-holed (for tests of the proxy). */
  stats(): { pairs: number; blackholed: number };
}

export async function startTcpProxy(
  targetPort: number,
  targetHost = "127.0.0.1",
): Promise<TcpProxy> {
  const pairs = new Set<Pair>();
  const blackholed = new Set<Socket>();
  let cut = false;

  const forward = (p: Pair, from: Socket, to: Socket, heldIdx: 0 | 1): void => {
    from.on("data", (d: Buffer) => {
      if (cut) {
        p.held[heldIdx].push(d);
        return;
      }
      if (!to.write(d)) {
        from.pause();
        to.once("drain", () => from.resume());
      }
    });
  };

  const server: Server = createServer((client) => {
    client.on("error", () => undefined);
    if (cut) {
      blackholed.add(client);
      client.on("close", () => blackholed.delete(client));
      return; // accepted, never forwarded
    }
    const upstream = createConnection({ host: targetHost, port: targetPort });
    upstream.on("error", () => undefined);
    const p: Pair = { client, upstream, held: [[], []] };
    pairs.add(p);
    forward(p, client, upstream, 0);
    forward(p, upstream, client, 1);
    const end = () => {
      pairs.delete(p);
      client.destroy();
      upstream.destroy();
    };
    client.on("close", end);
    upstream.on("close", end);
  });
  server.on("error", () => undefined);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const addr = server.address();
  const port = typeof addr === "object" && addr ? addr.port : 0;

  return {
    port,
    url: `nats://127.0.0.1:${port}`,
    get isCut() {
      return cut;
    },
    cut(mode: CutMode = "blackhole") {
      cut = true;
      if (mode === "reset") {
        for (const p of [...pairs]) {
          pairs.delete(p);
          p.client.destroy();
          p.upstream.destroy();
        }
      }
    },
    heal() {
      cut = false;
      for (const p of pairs) {
        const [toUp, toClient] = p.held;
        p.held = [[], []];
        for (const d of toUp) p.upstream.write(d);
        for (const d of toClient) p.client.write(d);
      }
      for (const s of [...blackholed]) s.destroy();
      blackholed.clear();
    },
    async close() {
      cut = true;
      for (const p of pairs) {
        p.client.destroy();
        p.upstream.destroy();
      }
      pairs.clear();
      for (const s of blackholed) s.destroy();
      blackholed.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
    stats: () => ({ pairs: pairs.size, blackholed: blackholed.size }),
  };
}
