/**
 * Which destinations are inside the operator's network: the one address guard of Kairos, used
 * for tenant-chosen destinations — dead-letter webhooks (every resolved address) and the registry
 * host of a task's image (src/sandbox/image-policy.ts).
 *
 * Blocked: loopback, RFC 1918, link-local (incl. 169.254.169.254), CGNAT, "this network",
 * unspecified, multicast, reserved and documentation ranges, IPv6 unique/link-local, and every
 * IPv6 form carrying an IPv4 address (mapped, compatible, translated, NAT64, 6to4, Teredo), since
 * a gateway may turn them into that address. `localhost` and `*.localhost` are blocked as names.
 *
 * Pitfall: `isBlockedAddress` takes canonical literals only (`isIP`) and treats anything else as
 * blocked; `isInternalHost` first normalises other spellings (`0177.1`, `2130706433`,
 * `[0:0:0:0:0:ffff:127.0.0.1]`) with the WHATWG URL parser.
 */
import { BlockList, isIP } from "node:net";

/** Address ranges outside the public internet. */
const BLOCKED = (() => {
  // Two lists: a BlockList checks IPv4 addresses against IPv6 rules too (as ::ffff:a.b.c.d), so
  // the IPv4-mapped rule below would otherwise block every IPv4 address.
  const b = { v4: new BlockList(), v6: new BlockList() };
  const v4: [string, number][] = [
    ["0.0.0.0", 8], // "this network", unspecified
    ["10.0.0.0", 8],
    ["100.64.0.0", 10], // CGNAT
    ["127.0.0.0", 8],
    ["169.254.0.0", 16], // link-local, cloud metadata
    ["172.16.0.0", 12],
    ["192.0.0.0", 24], // IETF protocol assignments
    ["192.0.2.0", 24], // documentation
    ["192.88.99.0", 24], // 6to4 relay anycast (deprecated)
    ["192.168.0.0", 16],
    ["198.18.0.0", 15], // benchmarking
    ["198.51.100.0", 24],
    ["203.0.113.0", 24],
    ["224.0.0.0", 4], // multicast
    ["240.0.0.0", 4], // reserved, broadcast
  ];
  for (const [net, prefix] of v4) b.v4.addSubnet(net, prefix, "ipv4");
  const v6: [string, number][] = [
    ["::", 96], // unspecified, loopback, and IPv4-compatible (::a.b.c.d, deprecated)
    ["::ffff:0:0", 96], // IPv4-mapped: would reach any IPv4 address
    ["::ffff:0:0:0", 96], // IPv4-translated (SIIT)
    ["64:ff9b::", 96], // NAT64
    ["64:ff9b:1::", 48], // local-use NAT64
    ["100::", 64], // discard
    ["2001::", 32], // Teredo
    ["2001:db8::", 32], // documentation
    ["2002::", 16], // 6to4
    ["3fff::", 20], // documentation
    ["fc00::", 7], // unique local
    ["fe80::", 10], // link-local
    ["fec0::", 10], // site-local (deprecated)
    ["ff00::", 8], // multicast
  ];
  for (const [net, prefix] of v6) b.v6.addSubnet(net, prefix, "ipv6");
  return b;
})();

/** Whether a literal IP address is outside the public internet; anything not an address is. */
export function isBlockedAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 0) return true; // not an address: never connect to it
  return family === 4 ? BLOCKED.v4.check(address, "ipv4") : BLOCKED.v6.check(address, "ipv6");
}

/** Names of this machine in every resolver (RFC 6761 `localhost`, Debian's /etc/hosts names). */
const LOOPBACK_NAMES = new Set([
  "localhost",
  "localhost.localdomain",
  "ip6-localhost",
  "ip6-loopback",
]);

/**
 * Whether a host (a name, an IPv4 literal in any spelling a resolver accepts, or a bracketed
 * IPv6 literal) is inside the operator's network as written: a blocked address, or a loopback
 * name (`localhost`, `*.localhost`, in any case, with any trailing dots). A public-looking name
 * is not judged here: what it resolves to is checked where it is resolved.
 */
export function isInternalHost(host: string): boolean {
  const bare = host.replace(/^\[(.*)\]$/, "$1");
  if (isIP(bare) !== 0) return isBlockedAddress(bare);
  // Other spellings of an IPv4 address (`127.1`, `0x7f.1`, `2130706433`) are one to a resolver:
  // the URL parser gives their canonical form. A host it cannot parse is not judged safe.
  let canonical: string;
  try {
    canonical = new URL(`http://${bare}/`).hostname;
  } catch {
    return true;
  }
  if (isIP(canonical) !== 0) return isBlockedAddress(canonical);
  const name = canonical.replace(/\.+$/, "");
  return name === "" || LOOPBACK_NAMES.has(name) || name.endsWith(".localhost");
}
