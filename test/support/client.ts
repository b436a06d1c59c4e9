/**
 * A test-side actor client: its own NATS connection (as the `api` user) and router, like an API
 * node would have.
 */
import type { NatsConnection } from "@nats-io/transport-node";
import { systemClock } from "../../src/lib/clock.ts";
import { seededRandom } from "../../src/lib/random.ts";
import { connectNats } from "../../src/cluster/nats.ts";
import type { NatsFixture } from "./nats.ts";
import { ActorRouter } from "../../src/cluster/router.ts";

export interface TestClient {
  readonly nc: NatsConnection;
  readonly router: ActorRouter;
  close(): Promise<void>;
}

export async function testClient(
  nats: Pick<NatsFixture, "url" | "credsFor">,
  partitions: number,
  deadlineMs = 20_000,
): Promise<TestClient> {
  const nc = await connectNats({
    url: nats.url,
    name: "test-client",
    credsFile: nats.credsFor(["api"]),
  });
  const router = new ActorRouter({
    nc,
    clusterName: "kairos",
    clock: systemClock,
    random: seededRandom(42),
    partitions,
    deadlineMs,
    attemptTimeoutMs: 1500,
  });
  return { nc, router, close: () => nc.close() };
}
