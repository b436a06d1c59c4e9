/**
 * nats-server version rules. Before 2.9.21 the revision check of a KV
 * update is not serialized on replicated buckets (nats-server #4320): two CAS writes with the same
 * expected revision can both win, which would break every fence Kairos relies on.
 */
import { KairosError } from "../lib/errors.ts";

export const MIN_SERVER_FOR_REPLICATED = "2.9.21";
export const RECOMMENDED_SERVER = "2.10.23";

/** Compares dotted versions numerically (`2.10.1` > `2.9.30`); ignores suffixes like `-beta`. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split(/[.-]/).map((x) => Number.parseInt(x, 10) || 0);
  const pb = b.split(/[.-]/).map((x) => Number.parseInt(x, 10) || 0);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  return 0;
}

/**
 * Throws when `replicas > 1` on a server with the CAS bug. Returns a warning string when the
 * server is older than the recommended version (fsync and stream-recovery fixes), else null.
 */
export function checkServerVersion(version: string, replicas: number): string | null {
  if (replicas > 1 && compareVersions(version, MIN_SERVER_FOR_REPLICATED) < 0) {
    throw new KairosError(
      "unsupported",
      `nats-server ${version} cannot serialize KV revision checks on replicated buckets (nats-server #4320); ` +
        `use ${RECOMMENDED_SERVER} or later, or replicas=1`,
    );
  }
  if (compareVersions(version, RECOMMENDED_SERVER) < 0) {
    return `nats-server ${version} is older than ${RECOMMENDED_SERVER}: acknowledged writes may be lost on an OS crash`;
  }
  return null;
}
