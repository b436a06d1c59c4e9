/**
 * Where a task with `network: "egress"` may connect (pure). Two layers, both checked by the
 * worker's egress proxy (egress-proxy.ts) on every connection:
 * - the tenant's egress policy (`kairos admin tenant egress`): entries `host[:port]` (a DNS name,
 *   an IPv4 literal or a bracketed IPv6 literal) and `*.domain[:port]` (any name below `domain`,
 *   not `domain` itself); an entry without a port allows ports 80 and 443. The API refuses
 *   `egress` for a tenant without a policy (422 `policy_denied`);
 * - the operator's guard: every address a destination resolves to is checked, and one outside the
 *   public internet (src/lib/net-address.ts, the webhook guard) is refused unless the operator's
 *   `--egress-allow-internal` CIDRs name it.
 *
 * Pitfall: a name is matched as written by the task, then resolved; the proxy connects to an
 * address it checked (no DNS-rebinding window). A wildcard never matches an IP literal, and IPv4
 * spellings (`0x7f.1`, `2130706433`) are canonicalised before any match (`canonicalHost`).
 */
import { BlockList, isIP } from "node:net";
import { KairosError } from "../lib/errors.ts";
import { isBlockedAddress } from "../lib/net-address.ts";

/** One entry of a tenant's egress policy, parsed. */
export interface EgressRule {
  /** Lower-case name or canonical IP literal (IPv6 without brackets); for a wildcard, the domain. */
  readonly host: string;
  readonly wildcard: boolean;
  /** The ports it allows. */
  readonly ports: readonly number[];
}

/** Most entries in one tenant's policy. */
export const MAX_EGRESS_ENTRIES = 64;
/** Ports an entry without a port allows. */
export const DEFAULT_EGRESS_PORTS: readonly number[] = Object.freeze([80, 443]);

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const MAX_NAME_CHARS = 253;

/** The canonical form of a destination host (as a task names it), or undefined if it is none. */
export function canonicalHost(host: string): string | undefined {
  const bare = host.replace(/^\[(.*)\]$/, "$1");
  if (isIP(bare) === 6) return new URL(`http://[${bare}]/`).hostname.slice(1, -1);
  if (!/^[A-Za-z0-9.-]{1,253}$/.test(bare)) return undefined; // no userinfo, port, path or escapes
  let canonical: string;
  try {
    canonical = new URL(`http://${bare}/`).hostname;
  } catch {
    return undefined;
  }
  if (isIP(canonical) !== 0) return canonical;
  const name = canonical.replace(/\.$/, "");
  if (name.length === 0 || name.length > MAX_NAME_CHARS) return undefined;
  return name.split(".").every((l) => LABEL.test(l)) ? name : undefined;
}

/** One entry, or a reason it is not one. */
function parseEntry(raw: string): EgressRule | string {
  if (typeof raw !== "string" || raw.length === 0 || raw.length > MAX_NAME_CHARS + 10)
    return "must be host[:port] or *.domain[:port]";
  const m = /^(\*\.)?(\[[0-9A-Fa-f:.]+\]|[^:]+)(?::([0-9]{1,5}))?$/.exec(raw);
  if (m === null) return "must be host[:port] or *.domain[:port] (IPv6 in brackets)";
  const wildcard = m[1] !== undefined;
  const port = m[3] === undefined ? undefined : Number(m[3]);
  if (port !== undefined && !(port >= 1 && port <= 65535)) return "the port must be 1-65535";
  const host = canonicalHost(m[2]!);
  if (host === undefined) return "is not a host name or IP address";
  if (wildcard && isIP(host) !== 0) return "a wildcard needs a domain, not an address";
  if (wildcard && !host.includes(".")) return "a wildcard needs a domain of two labels or more";
  return { host, wildcard, ports: port === undefined ? DEFAULT_EGRESS_PORTS : [port] };
}

/**
 * Validates a tenant's policy entries; throws `invalid_argument` naming the first bad one. An
 * empty list is refused: clearing the policy is `null` (`--clear`).
 */
export function parseEgressPolicy(entries: readonly string[], what = "egress"): EgressRule[] {
  const given: unknown = entries; // from a record or an offer: check it is a list at all
  if (!Array.isArray(given) || entries.length === 0)
    throw new KairosError("invalid_argument", `${what}: give at least one destination`, {
      field: "egress_policy",
    });
  if (entries.length > MAX_EGRESS_ENTRIES)
    throw new KairosError(
      "invalid_argument",
      `${what}: at most ${MAX_EGRESS_ENTRIES} entries, got ${entries.length}`,
      { field: "egress_policy" },
    );
  return entries.map((raw) => {
    const r = parseEntry(raw);
    if (typeof r === "string")
      throw new KairosError(
        "invalid_argument",
        `${what}: ${JSON.stringify(String(raw).slice(0, 100))} ${r}`,
        { field: "egress_policy" },
      );
    return r;
  });
}

/** Whether the rules allow `host` (canonical, see `canonicalHost`) on `port`. */
export function egressAllows(rules: readonly EgressRule[], host: string, port: number): boolean {
  const literal = isIP(host) !== 0;
  return rules.some(
    (r) =>
      r.ports.includes(port) &&
      (r.wildcard ? !literal && host.endsWith(`.${r.host}`) : r.host === host),
  );
}

/** The operator's exception to the internal-address guard: addresses the proxy may reach anyway. */
export interface InternalAllowance {
  readonly source: readonly string[];
  readonly list: BlockList;
}

/** `--egress-allow-internal`: CIDRs (`10.1.0.0/16`, `fd00::/8`) or single addresses. */
export function parseInternalAllowance(cidrs: readonly string[]): InternalAllowance {
  const list = new BlockList();
  for (const c of cidrs) {
    const [addr = "", prefix, ...rest] = c.split("/");
    const family = isIP(addr);
    const bits = prefix === undefined ? (family === 4 ? 32 : 128) : Number(prefix);
    const max = family === 4 ? 32 : 128;
    if (
      family === 0 ||
      rest.length > 0 ||
      !Number.isInteger(bits) ||
      bits < 0 ||
      bits > max ||
      (prefix !== undefined && !/^[0-9]{1,3}$/.test(prefix))
    )
      throw new KairosError(
        "invalid_argument",
        `egress-allow-internal: ${JSON.stringify(c.slice(0, 100))} is not an address or CIDR`,
        { field: "egress-allow-internal" },
      );
    list.addSubnet(addr, bits, family === 4 ? "ipv4" : "ipv6");
  }
  return Object.freeze({ source: Object.freeze([...cidrs]), list });
}

export const NO_INTERNAL_ALLOWANCE: InternalAllowance = parseInternalAllowance([]);

/**
 * Whether the proxy may connect to `address` (a resolved literal): a public address, or an
 * internal one the operator allows. Anything not an address is refused.
 */
export function addressAllowed(address: string, allowance: InternalAllowance): boolean {
  const family = isIP(address);
  if (family === 0) return false;
  if (!isBlockedAddress(address)) return true;
  return allowance.list.check(address, family === 4 ? "ipv4" : "ipv6");
}
