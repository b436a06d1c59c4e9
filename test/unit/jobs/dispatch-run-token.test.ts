/**
 * The dispatcher signs each offered attempt's run token (src/runs/dispatcher.ts with
 * src/secrets/run-token.ts): with an issuer the offer carries `run_token`, whose claims are the
 * attempt's (tenant and job from the actor's address, run, attempt, fence) and whose expiry is its
 * start + timeout + the allowance; without one the offer carries none.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { ShellContext } from "../../../src/actors/host.ts";
import type { Bus } from "../../../src/cluster/bus.ts";
import { decode, encode } from "../../../src/cluster/codec.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { DEFAULT_JOB_CONFIG, type JobEffect } from "../../../src/job-state/job-types.ts";
import { jobRegistration } from "../../../src/jobs/job-shell.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { seededRandom } from "../../../src/lib/random.ts";
import { WorkerDirectory } from "../../../src/slots/worker-directory.ts";
import type { StartRequest } from "../../../src/protocol/worker.ts";
import { generateRunTokenKey } from "../../../src/cli/run-token-keys.ts";
import { rotatedRunTokenKeySet } from "../../../src/secrets/run-token-keys.ts";
import {
  DEFAULT_RUN_TOKEN_START_ALLOWANCE_MS,
  RunTokenIssuer,
  RunTokenVerifier,
  runTokenConfig,
} from "../../../src/secrets/run-token.ts";

const NOW = 1_000_000_000;

async function offered(issuer: RunTokenIssuer | undefined): Promise<StartRequest> {
  const clock = new FakeClock(NOW);
  const requests: StartRequest[] = [];
  const bus: Bus = {
    publish: () => undefined,
    async request(_subject, data) {
      requests.push(decode<StartRequest>(data));
      return { data: encode({ accepted: true }) };
    },
    subscribe: () => ({ unsubscribe: () => undefined }),
    flush: async () => undefined,
    isClosed: () => false,
  };
  const directory = new WorkerDirectory(clock, seededRandom(1), 60_000);
  directory.observe({ worker_id: "w1", slots: 4, free: 4, executor: "noop" });
  const reg = jobRegistration(DEFAULT_JOB_CONFIG, {
    log: () => undefined,
    clock,
    workers: { nc: bus, clusterName: "c", directory },
    history: { runs: new MemoryKv("runs") },
    slots: {
      router: () => {
        throw new Error("no router in this test");
      },
    },
    ...(issuer ? { runTokens: issuer } : {}),
  });
  let told: () => void = () => undefined;
  const done = new Promise<void>((r) => (told = r));
  const ctx: ShellContext = {
    address: { type: "job", id: "t1.j1" },
    partition: 1,
    epoch: 1,
    nodeId: "n1",
    stillOwner: () => true,
    tell: () => told(),
  };
  const fx: JobEffect = {
    kind: "dispatch",
    run_id: "r1",
    fence: 17,
    attempt: 3,
    start_at_ms: NOW + 60_000,
    scheduled_for_ms: NOW + 60_000,
    task: { image: "i", args: ["true"], env: {}, timeout_s: 30 },
  };
  reg.performPost!([fx], ctx);
  await done;
  assert.equal(requests.length, 1);
  return requests[0]!;
}

describe("dispatch: run tokens", () => {
  it("an offer carries the attempt's token, signed with the current key", async () => {
    const cfg = runTokenConfig({
      keys: rotatedRunTokenKeySet(undefined, await generateRunTokenKey()),
      issuer: "kairos:c",
    });
    const req = await offered(await RunTokenIssuer.create(cfg));
    assert.ok(req.run_token, "the offer has a run_token");
    const claims = await new RunTokenVerifier(cfg).verify(req.run_token, NOW);
    assert.deepEqual(
      { ...claims },
      {
        tenant: "t1",
        job: "j1",
        run: "r1",
        attempt: 3,
        fence: 17,
        iss: "kairos:c",
        iat: NOW / 1000,
        exp: (NOW + 60_000 + 30_000 + DEFAULT_RUN_TOKEN_START_ALLOWANCE_MS) / 1000,
      },
    );
  });

  it("without an issuer the offer carries no token", async () => {
    const req = await offered(undefined);
    assert.equal(req.run_token, undefined);
    assert.ok(!("run_token" in req));
  });
});
