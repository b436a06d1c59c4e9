/**
 * The dispatcher carries the job's tenant's registry credential in an offer (src/runs/dispatcher.ts
 * with src/secrets/registry-credentials.ts): for the registry of the task's image only, and only
 * the tenant's own; a credential that cannot be opened holds the offer back (`dispatch_failed`)
 * instead of offering without it.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { dispatchOnce } from "../../support/dispatch.ts";
import { randomBytes } from "node:crypto";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import type { JobMsg } from "../../../src/job-state/job-types.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import type { StartRequest } from "../../../src/protocol/worker.ts";
import {
  RegistryAuthLookup,
  RegistryCredentialStore,
} from "../../../src/secrets/registry-credentials.ts";

const NOW = 1_000_000_000;
const KEY = randomBytes(32);
const REGISTRY = "registry.example.com:5000";

async function offered(
  lookup: RegistryAuthLookup,
  actorId: string,
  image: string,
): Promise<{ req: StartRequest | undefined; told: JobMsg }> {
  const { req, told } = await dispatchOnce({
    task: { image, args: ["true"], env: {}, timeout_s: 30 },
    actorId,
    deps: { registryAuth: lookup },
  });
  return { req, told };
}

async function lookupWith(tenantId: string, key = KEY): Promise<RegistryAuthLookup> {
  const kv = new MemoryKv("tenants");
  const clock = new FakeClock(NOW);
  await new RegistryCredentialStore(key, () => kv, clock).set(tenantId, REGISTRY, "u1", "p1");
  // The scheduler opens with the cluster key (KEY); a store sealed under another does not open.
  return new RegistryAuthLookup(new RegistryCredentialStore(KEY, () => kv, clock), clock);
}

describe("dispatch: registry credentials", () => {
  it("an offer of the tenant's image on that registry carries the tenant's credential", async () => {
    const { req, told } = await offered(await lookupWith("t1"), "t1.j1", `${REGISTRY}/team/app:1`);
    assert.equal(told.kind, "claimed");
    assert.deepEqual(req?.registry_auth, { registry: REGISTRY, username: "u1", password: "p1" });
  });

  it("another tenant's offer, or an image on another registry, carries none", async () => {
    const lookup = await lookupWith("t1");
    const other = await offered(lookup, "t2.j1", `${REGISTRY}/team/app:1`);
    assert.equal(other.told.kind, "claimed");
    assert.ok(other.req && !("registry_auth" in other.req), "no credential for t2");
    const hub = await offered(lookup, "t1.j1", "busybox:1");
    assert.ok(hub.req && !("registry_auth" in hub.req), "none for docker.io");
  });

  it("a credential that does not open holds the offer back", async () => {
    const { req, told } = await offered(
      await lookupWith("t1", randomBytes(32)),
      "t1.j1",
      `${REGISTRY}/team/app:1`,
    );
    assert.equal(req, undefined, "no offer");
    assert.equal(told.kind, "dispatch_failed");
    assert.match(told.reason, /registry credentials cannot be read/);
  });
});
