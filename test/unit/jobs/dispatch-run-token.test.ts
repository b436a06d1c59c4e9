/**
 * The dispatcher signs each offered attempt's run token (src/runs/dispatcher.ts with
 * src/secrets/run-token.ts): with an issuer the offer carries `run_token`, whose claims are the
 * attempt's (tenant and job from the actor's address, run, attempt, fence) and whose expiry is its
 * start + timeout + the allowance; without one the offer carries none.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { dispatchOnce } from "../../support/dispatch.ts";
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
  const { req, offers } = await dispatchOnce({
    task: { image: "i", args: ["true"], env: {}, timeout_s: 30 },
    attempt: 3,
    deps: issuer ? { runTokens: issuer } : {},
  });
  assert.equal(offers, 1);
  return req!;
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
