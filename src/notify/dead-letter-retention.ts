/**
 * Dead-letter retention: a tenant's dead-letter list (`dl.<tenant>.<run_id>`, dead-letters.ts)
 * keeps its newest `keepPerTenant` entries and none older than `maxAgeMs` (by occurrence time);
 * without it a job failing every second would add 2.6 million a month.
 *
 * The keys are written once, so revisions order them. A pass lists every key (headers only) and,
 * per tenant, drops the longest droppable prefix in revision order with ONE purge of
 * `dl.<tenant>.>` below the first kept revision (no delete markers). Passes run daily per
 * scheduler node, the first a minute after start, and are idempotent (several may overlap).
 *
 * Pitfall: an old run dead-lettered after a newer one is dropped only once everything before it
 * is — never a kept entry.
 */
import { KairosError } from "../lib/errors.ts";
import { kvKeys, kvPurge, type KvKey, type KvStore } from "../cluster/kv.ts";
import { parseRunId } from "../protocol/ids.ts";

export interface DeadLetterRetention {
  /** Newest dead letters kept per tenant; 0: no count limit. */
  readonly keepPerTenant: number;
  /** Dead letters whose occurrence is older than this are dropped; 0: no age limit. */
  readonly maxAgeMs: number;
}

export const DEFAULT_DEAD_LETTER_RETENTION: DeadLetterRetention = Object.freeze({
  keepPerTenant: 10_000,
  maxAgeMs: 30 * 86_400_000,
});

/** Defaults overridden and validated (whole numbers, bounded), frozen. */
export function deadLetterRetention(o: Partial<DeadLetterRetention> = {}): DeadLetterRetention {
  const c = { ...DEFAULT_DEAD_LETTER_RETENTION, ...o };
  if (!Number.isInteger(c.keepPerTenant) || c.keepPerTenant < 0 || c.keepPerTenant > 10_000_000) {
    throw new KairosError(
      "invalid_argument",
      `dead-letter keepPerTenant: ${c.keepPerTenant} is not a whole number 0-10000000`,
      { field: "keepPerTenant" },
    );
  }
  if (!Number.isInteger(c.maxAgeMs) || c.maxAgeMs < 0 || c.maxAgeMs > 10 * 365 * 86_400_000) {
    throw new KairosError(
      "invalid_argument",
      `dead-letter maxAgeMs: ${c.maxAgeMs} is not a whole number of ms up to 10 years`,
      { field: "maxAgeMs" },
    );
  }
  return Object.freeze(c);
}

/**
 * Pure: for each tenant with something to drop, the revision to purge below (its first kept
 * entry's, or one past its last when all go) and how many entries that drops. Keys that are not
 * `dl.<tenant>.<run_id>` with a parseable run id are never dropped and stop the prefix.
 */
export function deadLetterCuts(
  keys: readonly KvKey[],
  cfg: DeadLetterRetention,
  nowMs: number,
): Map<string, { beforeRevision: number; dropped: number }> {
  const byTenant = new Map<string, { revision: number; ms: number | null }[]>();
  for (const k of keys) {
    const parts = k.key.split(".");
    if (parts.length !== 3 || parts[0] !== "dl") continue;
    const tenant = parts[1]!;
    const id = parseRunId(parts[2]!);
    let list = byTenant.get(tenant);
    if (!list) byTenant.set(tenant, (list = []));
    list.push({ revision: k.revision, ms: id ? id.ms : null });
  }
  const cuts = new Map<string, { beforeRevision: number; dropped: number }>();
  for (const [tenant, list] of byTenant) {
    list.sort((a, b) => a.revision - b.revision);
    const overCount = cfg.keepPerTenant > 0 ? Math.max(0, list.length - cfg.keepPerTenant) : 0;
    let n = 0;
    while (n < list.length) {
      const e = list[n]!;
      const old = cfg.maxAgeMs > 0 && e.ms !== null && e.ms < nowMs - cfg.maxAgeMs;
      if (!(n < overCount || old) || e.ms === null) break;
      n++;
    }
    if (n > 0)
      cuts.set(tenant, {
        beforeRevision: n < list.length ? list[n]!.revision : list[n - 1]!.revision + 1,
        dropped: n,
      });
  }
  return cuts;
}

/** One pass (see the module header). Returns the number of dead letters dropped. */
export async function pruneDeadLetters(
  runs: KvStore,
  cfg: DeadLetterRetention,
  nowMs: number,
): Promise<number> {
  if (cfg.keepPerTenant === 0 && cfg.maxAgeMs === 0) return 0;
  const cuts = deadLetterCuts(await kvKeys(runs, "dl.>"), cfg, nowMs);
  let dropped = 0;
  for (const [tenant, cut] of cuts) {
    await kvPurge(runs, `dl.${tenant}.>`, cut.beforeRevision);
    dropped += cut.dropped;
  }
  return dropped;
}
