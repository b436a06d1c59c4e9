/**
 * The auth callout's pure parts and the service records: who is admitted, refused or left to the
 * server's timeout; requests whose signature does not hold are refused; secrets are stored hashed,
 * checked in constant time, and a revoked identity stays refused (src/nats-api/auth-callout.ts,
 * src/tenants/services.ts). The NATS side is tested on a real server in
 * test/integration/security/accounts.test.ts.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Algorithms, encode } from "@nats-io/jwt";
import { createServer, createUser } from "@nats-io/nkeys";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { decode as decodeValue } from "../../../src/cluster/codec.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { decide, parseCalloutRequest, serviceNameOf } from "../../../src/nats-api/auth-callout.ts";
import { KvServiceDirectory, type ServiceRecord } from "../../../src/tenants/services.ts";
import { rejectsWith } from "../../support/errors.ts";

const T = "tabcdefghijklmnop";

async function request(user: string, pass: string): Promise<Uint8Array> {
  const server = createServer();
  const claim = {
    iss: server.getPublicKey(),
    sub: server.getPublicKey(),
    aud: "nats-authorization-request",
    jti: "x",
    iat: 1,
    name: "",
    nats: {
      type: "authorization_request",
      version: 2,
      user_nkey: createUser().getPublicKey(),
      server_id: { id: server.getPublicKey(), name: "s" },
      client_info: { host: "127.0.0.1" },
      connect_opts: { user, pass },
    },
  };
  return new TextEncoder().encode(await encode(Algorithms.v2, claim, server));
}

describe("auth callout decisions", () => {
  it("admits a known, live identity; refuses a bad secret, a revoked one, a gone tenant; ignores the unknown", () => {
    const record = { name: "a", tenant_id: T, hash: "", revoked: false, created_at: "" };
    assert.deepEqual(decide("a", { ok: true, record }), { kind: "admit", name: "a", tenantId: T });
    assert.deepEqual(decide("a", { ok: false, reason: "bad_secret" }), {
      kind: "refuse",
      name: "a",
      reason: "bad_secret",
    });
    assert.deepEqual(decide("a", { ok: false, reason: "revoked" }), {
      kind: "refuse",
      name: "a",
      reason: "revoked",
    });
    assert.deepEqual(decide("a", { ok: true, record, tenantGone: true }), {
      kind: "refuse",
      name: "a",
      reason: "tenant_gone",
    });
    assert.deepEqual(decide("a", { ok: false, reason: "unknown_service" }), {
      kind: "ignore",
      why: "unknown_service",
    });
  });

  it("takes the service name only from `service-<name>`", () => {
    assert.equal(serviceNameOf("service-billing"), "billing");
    assert.equal(serviceNameOf("service-"), undefined);
    assert.equal(serviceNameOf("api"), undefined);
  });

  it("parses a server-signed request and refuses one whose signature does not hold", async () => {
    const req = parseCalloutRequest(await request("service-a", "pw"));
    assert.equal(req.user, "service-a");
    assert.equal(req.password, "pw");
    assert.match(req.userNkey, /^U/);
    assert.match(req.serverId, /^N/);
    const jwt = new TextDecoder().decode(await request("service-a", "pw"));
    const [h, p] = jwt.split(".");
    const forged = JSON.parse(Buffer.from(p!, "base64url").toString()) as {
      nats: { connect_opts: { user: string } };
    };
    forged.nats.connect_opts.user = "service-b";
    const tampered = `${h}.${Buffer.from(JSON.stringify(forged)).toString("base64url")}.${jwt.split(".")[2]}`;
    assert.throws(() => parseCalloutRequest(new TextEncoder().encode(tampered)));
    assert.throws(() => parseCalloutRequest(new TextEncoder().encode("not a jwt")));
  });
});

describe("service records", () => {
  const setup = () => {
    const kv = new MemoryKv("tenants");
    return {
      kv,
      dir: new KvServiceDirectory(kv, new FakeClock(Date.parse("2026-01-01T00:00:00Z"))),
    };
  };
  const exists = async (id: string) => id === T;

  it("stores only the secret's hash; checks it; refuses a wrong one", async () => {
    const { kv, dir } = setup();
    const { secret } = await dir.create("billing", T, exists);
    assert.match(secret, /^ksvc_[A-Za-z0-9_-]{43}$/);
    const stored = decodeValue<ServiceRecord>((await kv.get("svc.billing"))!.value);
    assert.ok(!JSON.stringify(stored).includes(secret.slice(5)), "the secret is not stored");
    assert.equal(stored.hash.length, 64);
    assert.deepEqual(await dir.check("billing", secret), { ok: true, record: stored });
    assert.deepEqual(await dir.check("billing", `ksvc_${"A".repeat(43)}`), {
      ok: false,
      reason: "bad_secret",
    });
    assert.deepEqual(await dir.check("billing", "short"), { ok: false, reason: "bad_secret" });
    assert.deepEqual(await dir.check("other", secret), { ok: false, reason: "unknown_service" });
  });

  it("revoked stays refused; the name can be issued again with a new secret; the old one stays refused", async () => {
    const { dir } = setup();
    const first = await dir.create("billing", T, exists);
    await rejectsWith(dir.create("billing", T, exists), "conflict", "name");
    await dir.revoke("billing");
    assert.deepEqual(await dir.check("billing", first.secret), { ok: false, reason: "revoked" });
    await dir.revoke("billing"); // idempotent
    const second = await dir.create("billing", T, exists);
    assert.equal((await dir.check("billing", second.secret)).ok, true);
    assert.deepEqual(await dir.check("billing", first.secret), { ok: false, reason: "bad_secret" });
  });

  it("lists identities, all or one tenant's, revoked ones marked", async () => {
    const { dir } = setup();
    await dir.create("a", T, exists);
    await dir.create("b", T, exists);
    await dir.revoke("a");
    const all = await dir.list();
    assert.deepEqual(all.services.map((r) => [r.name, r.revoked]).sort(), [
      ["a", true],
      ["b", false],
    ]);
    assert.equal(all.truncated, false);
    assert.deepEqual((await dir.list("tother00000000000")).services, []);
  });

  it("validates names and tenants", async () => {
    const { dir } = setup();
    await rejectsWith(dir.create("bad.name", T, exists), "invalid_argument", "name");
    await rejectsWith(dir.create("x".repeat(49), T, exists), "invalid_argument", "name");
    await rejectsWith(dir.create("ok", "tnotthereaaaaaaaa", exists), "not_found", "tenant_id");
    await rejectsWith(dir.create("ok", "not-an-id", exists), "not_found", "tenant_id");
    await rejectsWith(dir.revoke("nobody"), "not_found", "name");
  });
});
