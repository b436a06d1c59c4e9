/** A test-side actor client: its own NATS connection and router, like an API node would have. */
import type { NatsConnection } from "@nats-io/transport-node";
import { systemClock } from "../../src/lib/clock.ts";
import { seededRandom } from "../../src/lib/random.ts";
import { connectNats } from "../../src/cluster/nats.ts";
import { ActorRouter } from "../../src/cluster/router.ts";

export interface TestClient {
  readonly nc: NatsConnection;
  readonly router: ActorRouter;
  close(): Promise<void>;
}

export async function testClient(natsUrl: string, partitions: number, deadlineMs = 20_000): Promise<TestClient> {
  const nc = await connectNats({ url: natsUrl, name: "test-client" });
  const router = new ActorRouter({
    nc, clusterName: "kairos", clock: systemClock, random: seededRandom(42), partitions,
    deadlineMs, attemptTimeoutMs: 1500,
  });
  return { nc, router, close: () => nc.close() };
}
