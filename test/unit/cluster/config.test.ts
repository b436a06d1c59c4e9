/** makeNodeConfig: defaults, freezing, and validation messages that name the offending field. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { DEFAULTS, makeNodeConfig, type NodeConfig } from "../../../src/cluster/config.ts";
import { isKairosError } from "../../../src/lib/errors.ts";

const base = { natsUrl: "nats://127.0.0.1:4222", nodeId: "n1" };

function rejects(o: Partial<NodeConfig>, field: string, text: RegExp): void {
  assert.throws(
    () => makeNodeConfig({ ...base, ...o }),
    (e: unknown) => {
      assert.ok(
        isKairosError(e, "invalid_argument"),
        `expected invalid_argument, got ${String(e)}`,
      );
      assert.equal(e.field, field);
      assert.ok(e.message.startsWith(`${field}:`), `message names the field: ${e.message}`);
      assert.match(e.message, text);
      assert.equal(e.retryable, false);
      return true;
    },
  );
}

describe("makeNodeConfig", () => {
  it("lease renewals: a thread by default; an unknown renewer or a main-loop stall limit below the lease TTL is refused", () => {
    assert.equal(makeNodeConfig(base).leaseRenewer, "thread");
    assert.equal(makeNodeConfig({ ...base, leaseRenewer: "inline" }).leaseRenewer, "inline");
    rejects(
      { leaseRenewer: "fiber" as NodeConfig["leaseRenewer"] },
      "lease_renewer",
      /thread or inline/,
    );
    rejects({ leaseMainStallMs: 1000 }, "lease_main_stall_ms", /at least the lease TTL/);
  });

  it("applies the defaults and returns a frozen object", () => {
    const c = makeNodeConfig(base);
    assert.equal(c.partitions, DEFAULTS.partitions);
    assert.equal(c.leaseTtlMs, DEFAULTS.leaseTtlMs);
    assert.deepEqual(c.roles, ["api", "scheduler", "worker"]);
    assert.ok(Object.isFrozen(c) && Object.isFrozen(c.roles));
  });

  it("copies the roles (the caller's array stays its own)", () => {
    const roles: ("api" | "scheduler" | "worker")[] = ["scheduler"];
    const c = makeNodeConfig({ ...base, roles });
    roles.push("api");
    assert.deepEqual(c.roles, ["scheduler"]);
  });

  it("rejects a bad node id", () => rejects({ nodeId: "no spaces" }, "node_id", /no spaces/));
  it("rejects an empty node id", () => rejects({ nodeId: "" }, "node_id", /1-64/));
  it("rejects a bad cluster name", () => rejects({ clusterName: "a.b" }, "cluster", /a\.b/));
  it("rejects no roles", () => rejects({ roles: [] }, "roles", /at least one/));
  it("rejects an unknown role", () =>
    rejects({ roles: ["chef" as "api"] }, "roles", /unknown role "chef"/));
  it("rejects 0 partitions", () => rejects({ partitions: 0 }, "partitions", /1-4096/));
  it("rejects 4097 partitions", () => rejects({ partitions: 4097 }, "partitions", /1-4096/));
  it("rejects fractional partitions", () => rejects({ partitions: 1.5 }, "partitions", /integer/));
  it("accepts 1 and 4096 partitions", () => {
    assert.equal(makeNodeConfig({ ...base, partitions: 1 }).partitions, 1);
    assert.equal(makeNodeConfig({ ...base, partitions: 4096 }).partitions, 4096);
  });
  it("rejects 2 replicas", () => rejects({ replicas: 2 }, "replicas", /1, 3 or 5/));
  it("rejects a renew interval that leaves no room for two renewals in the trust window", () =>
    rejects(
      { leaseTtlMs: 4000, leaseSafetyMarginMs: 1000, leaseRenewIntervalMs: 1501 },
      "lease_renew_interval_ms",
      /two renewals/,
    ));
  it("accepts a renew interval of exactly half the trust window", () => {
    assert.equal(
      makeNodeConfig({
        ...base,
        leaseTtlMs: 4000,
        leaseSafetyMarginMs: 1000,
        leaseRenewIntervalMs: 1500,
      }).leaseRenewIntervalMs,
      1500,
    );
  });
  it("rejects a failure timeout under two heartbeats", () =>
    rejects(
      { heartbeatIntervalMs: 500, failureTimeoutMs: 999 },
      "failure_timeout_ms",
      /two heartbeat/,
    ));
});
