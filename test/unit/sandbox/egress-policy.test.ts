/**
 * The egress policy (src/sandbox/egress-policy.ts): what a tenant's entries allow, what the
 * operator's internal-address guard lets through, and the spellings a task could use to slip by.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  addressAllowed,
  canonicalHost,
  egressAllows,
  NO_INTERNAL_ALLOWANCE,
  parseEgressPolicy,
  parseInternalAllowance,
} from "../../../src/sandbox/egress-policy.ts";
import { isKairosError } from "../../../src/lib/errors.ts";

const refused = (entries: string[]) =>
  assert.throws(
    () => parseEgressPolicy(entries),
    (e: unknown) => isKairosError(e) && e.code === "invalid_argument",
    JSON.stringify(entries),
  );

describe("egress policy", () => {
  it("host[:port] allows that host on that port; no port means 80 and 443", () => {
    const rules = parseEgressPolicy(["api.example.com:8443", "Example.ORG.", "192.0.2.7:25"]);
    assert.ok(egressAllows(rules, "api.example.com", 8443));
    assert.ok(!egressAllows(rules, "api.example.com", 443));
    assert.ok(egressAllows(rules, "example.org", 443));
    assert.ok(egressAllows(rules, "example.org", 80));
    assert.ok(!egressAllows(rules, "example.org", 22));
    assert.ok(!egressAllows(rules, "www.example.org", 443), "a host entry is not a wildcard");
    assert.ok(egressAllows(rules, "192.0.2.7", 25));
  });

  it("*.domain allows names below the domain, not the domain, nor lookalikes, nor addresses", () => {
    const rules = parseEgressPolicy(["*.example.com"]);
    assert.ok(egressAllows(rules, "a.example.com", 443));
    assert.ok(egressAllows(rules, "a.b.example.com", 80));
    assert.ok(!egressAllows(rules, "example.com", 443));
    assert.ok(!egressAllows(rules, "evilexample.com", 443));
    assert.ok(!egressAllows(rules, "example.com.evil.net", 443));
    assert.ok(!egressAllows(rules, "a.example.com", 8080));
  });

  it("refuses entries that are not destinations", () => {
    for (const bad of [
      "*",
      "*.com",
      "*.192.0.2.1",
      "http://example.com",
      "example.com/path",
      "example.com:0",
      "example.com:65536",
      "exa mple.com",
      "-bad.example.com",
      "[::1",
      "user@example.com",
      "",
    ])
      refused([bad]);
    refused([]);
    refused(Array.from({ length: 65 }, (_, i) => `h${i}.example.com`));
  });

  it("canonicalises hosts: case, trailing dot, IPv4 spellings, IPv6 brackets", () => {
    assert.equal(canonicalHost("API.Example.COM."), "api.example.com");
    assert.equal(canonicalHost("2130706433"), "127.0.0.1");
    assert.equal(canonicalHost("0x7f.1"), "127.0.0.1");
    assert.equal(canonicalHost("[0:0:0:0:0:0:0:1]"), "::1");
    assert.equal(canonicalHost("a:b"), undefined);
    assert.equal(canonicalHost("a/b"), undefined);
    // An entry for 127.0.0.1 matches a task's other spelling of it, after canonicalisation.
    const rules = parseEgressPolicy(["127.0.0.1:80"]);
    assert.ok(egressAllows(rules, canonicalHost("2130706433")!, 80));
  });

  it("the operator's guard: public addresses pass, internal ones only if allowed", () => {
    assert.ok(addressAllowed("93.184.216.34", NO_INTERNAL_ALLOWANCE));
    assert.ok(addressAllowed("2606:2800:220:1::1", NO_INTERNAL_ALLOWANCE));
    for (const a of ["127.0.0.1", "10.1.2.3", "169.254.169.254", "172.17.0.1", "::1", "fd00::1"])
      assert.ok(!addressAllowed(a, NO_INTERNAL_ALLOWANCE), a);
    assert.ok(!addressAllowed("::ffff:127.0.0.1", NO_INTERNAL_ALLOWANCE));
    assert.ok(!addressAllowed("not-an-address", NO_INTERNAL_ALLOWANCE));
    const allow = parseInternalAllowance(["127.0.0.1", "10.1.0.0/16"]);
    assert.ok(addressAllowed("127.0.0.1", allow));
    assert.ok(!addressAllowed("127.0.0.2", allow));
    assert.ok(addressAllowed("10.1.200.3", allow));
    assert.ok(!addressAllowed("10.2.0.1", allow));
    for (const bad of ["10.0.0.0/33", "host", "10.0.0.0/8/1", "10.0.0.0/x"])
      assert.throws(() => parseInternalAllowance([bad]), /egress-allow-internal/);
  });
});
