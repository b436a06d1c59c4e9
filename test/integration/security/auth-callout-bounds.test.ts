/**
 * The auth callout's bounds and expiry on a real nats-server (src/nats-api/auth-callout.ts), with
 * a callout of its own (no API node, so nothing else answers): past its rate a connection is
 * refused at once with "busy"; an oversize request is dropped and the connection refused by the
 * server's auth timeout; a failed lookup is refused at once and logged; an admitted connection is closed by the server when its user JWT
 * expires, and its reconnect is checked again (a revocation then keeps it out).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectNats, readNatsCredentials } from "../../../src/cluster/nats.ts";
import {
  ServiceAuthCallout,
  type CalloutOptions,
  type Lookup,
} from "../../../src/nats-api/auth-callout.ts";
import { systemClock } from "../../../src/lib/clock.ts";
import { startNats, type NatsFixture } from "../../support/nats.ts";

const T = "tboundsaaaaaaaaaa";
/** `p`, or a failure naming `what` after `ms` (the expectation's bound, not a pause). */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>(
    (_, reject) =>
      (timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms)),
  );
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}
const record = (name: string) => ({ name, tenant_id: T, hash: "", revoked: false, created_at: "" });

describe("auth callout bounds", { timeout: 120_000 }, () => {
  let nats: NatsFixture;
  let apiNc: NatsConnection;
  let callout: ServiceAuthCallout | undefined;
  const logs: { msg: string; extra?: Record<string, unknown> }[] = [];
  const open: NatsConnection[] = [];

  /** Replaces the running callout with one of these options. */
  const serve = async (
    o: Partial<CalloutOptions> & Pick<CalloutOptions, "lookup">,
  ): Promise<void> => {
    await callout?.stop();
    const creds = readNatsCredentials(nats.credsFor(["api"]));
    callout = new ServiceAuthCallout(apiNc, {
      clusterName: "kairos",
      issuerSeed: creds.callout_issuer_seed!,
      xkeySeed: creds.callout_xkey_seed!,
      clock: systemClock,
      log: (_l, msg, extra) => void logs.push({ msg, ...(extra ? { extra } : {}) }),
      ...o,
    });
    await callout.start();
  };
  const connectAs = async (user: string, password: string): Promise<NatsConnection> => {
    const f = join(nats.auth.configFile, "..", `${user}.json`);
    writeFileSync(f, JSON.stringify({ user, password }), { mode: 0o600 });
    const nc = await connectNats({
      url: nats.url,
      name: user,
      credsFile: f,
      connectTimeoutMs: 5000,
    });
    open.push(nc);
    return nc;
  };

  before(async () => {
    nats = await startNats();
    apiNc = await connectNats({
      url: nats.url,
      name: "bounds-api",
      credsFile: nats.credsFor(["api"]),
    });
  });

  after(async () => {
    for (const nc of open) if (!nc.isClosed()) await nc.close();
    await callout?.stop();
    await apiNc?.close();
    await nats?.stop();
  });

  it("past its rate, a connection is refused at once as busy", async () => {
    await serve({
      perSecond: 0.01,
      burst: 1,
      lookup: async (name): Promise<Lookup> => ({ ok: true, record: record(name) }),
    });
    await connectAs("service-first", "x");
    const t0 = Date.now();
    await assert.rejects(connectAs("service-second", "x"), /Authorization Violation/i);
    assert.ok(
      Date.now() - t0 < 1500,
      `refused in ${Date.now() - t0} ms, before the 2 s auth timeout`,
    );
    assert.ok(
      logs.some((l) => l.msg === "service identity refused" && l.extra?.["reason"] === "busy"),
      "logged as busy",
    );
  });

  it("past one address's rate, that address is refused at once as busy", async () => {
    await serve({
      perHostPerSecond: 0.01,
      perHostBurst: 1,
      lookup: async (name): Promise<Lookup> => ({ ok: true, record: record(name) }),
    });
    await connectAs("service-host-first", "x");
    const before = logs.length;
    await assert.rejects(connectAs("service-host-second", "x"), /Authorization Violation/i);
    assert.ok(
      logs
        .slice(before)
        .some(
          (l) =>
            l.msg === "service identity refused" &&
            l.extra?.["reason"] === "busy" &&
            l.extra?.["host"] === "127.0.0.1",
        ),
    );
  });

  it("an oversize request is dropped, and the server refuses the connection at its auth timeout", async () => {
    let looked = 0;
    await serve({
      maxRequestBytes: 1024,
      lookup: async (name): Promise<Lookup> => (looked++, { ok: true, record: record(name) }),
    });
    await assert.rejects(
      connectAs("service-big", "p".repeat(2000)),
      /Authorization Violation|timeout/i,
    );
    assert.equal(looked, 0, "never looked up");
    assert.ok(logs.some((l) => l.msg === "auth callout request dropped"));
  });

  it("a lookup that fails refuses the connection at once, with a clear log", async () => {
    await serve({
      lookup: async (): Promise<Lookup> => {
        throw new Error("tenants bucket: no responders");
      },
    });
    const t0 = Date.now();
    await assert.rejects(connectAs("service-kvdown", "x"), /Authorization Violation/i);
    assert.ok(
      Date.now() - t0 < 1500,
      `refused in ${Date.now() - t0} ms, before the 2 s auth timeout`,
    );
    assert.ok(
      logs.some(
        (l) =>
          l.msg === "auth callout lookup failed" &&
          String(l.extra?.["err"]).includes("no responders"),
      ),
    );
    assert.ok(
      logs.some(
        (l) => l.msg === "service identity refused" && l.extra?.["reason"] === "unavailable",
      ),
    );
  });

  it("an admitted connection is closed when its JWT expires; its reconnect is checked again", async () => {
    let revoked = false;
    await serve({
      userJwtTtlS: 2,
      lookup: async (name): Promise<Lookup> =>
        revoked ? { ok: false, reason: "revoked" } : { ok: true, record: record(name) },
    });
    const nc = await connectAs("service-short", "x");
    const disconnected = (async () => {
      for await (const s of nc.status()) if (s.type === "disconnect") return;
    })();
    revoked = true; // no kick: only the expiry ends the connection
    await within(disconnected, 10_000, "the server closes the connection when its 2 s JWT expires");
    const refusedAgain = (async () => {
      for await (const s of nc.status())
        if (s.type === "error" && /authorization/i.test(String(s.error))) return;
    })();
    await within(refusedAgain, 10_000, "the reconnect is refused");
    assert.ok(
      logs.some(
        (l) =>
          l.msg === "service identity refused" &&
          l.extra?.["user"] === "service-short" &&
          l.extra?.["reason"] === "revoked",
      ),
    );
  });
});
