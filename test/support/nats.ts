/**
 * Test harness: real nats-server processes on free loopback ports, cleaned up after each suite.
 * `startNats()` gives one JetStream server; `startNatsCluster(3)` gives a routed cluster ready
 * for R3 buckets (waits until JetStream has a meta leader).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, launchNatsServer, type NatsServerHandle } from "../../src/dev/nats-launcher.ts";

export interface NatsFixture {
  readonly servers: NatsServerHandle[];
  /** Comma-separated client URLs of every server. */
  readonly url: string;
  stop(): Promise<void>;
}

export async function startNats(): Promise<NatsFixture> {
  const dir = mkdtempSync(join(tmpdir(), "kairos-nats-"));
  const server = await launchNatsServer({ storeDir: dir });
  return {
    servers: [server],
    url: server.url,
    async stop() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export async function startNatsCluster(size = 3): Promise<NatsFixture> {
  const dir = mkdtempSync(join(tmpdir(), "kairos-natsc-"));
  const routePorts = await Promise.all(Array.from({ length: size }, () => freePort()));
  const routes = routePorts.map((p) => `nats://127.0.0.1:${p}`);
  const servers = await Promise.all(
    routePorts.map((port, i) =>
      launchNatsServer({
        storeDir: join(dir, `s${i}`),
        serverName: `s${i}`,
        cluster: { name: "kairos-test", port, routes },
        readyPattern: /JetStream cluster new metadata leader|Self is new JetStream cluster metadata leader/,
        readyTimeoutMs: 30_000,
      }),
    ),
  ).catch(async (e: unknown) => {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  });
  return {
    servers,
    url: servers.map((s) => s.url).join(","),
    async stop() {
      await Promise.all(servers.map((s) => s.stop()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
