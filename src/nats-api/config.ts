/**
 * Configuration of the internal NATS API on an API node: options → defaults → one validated,
 * frozen object (units in the names). The environment is never read here (src/cli does).
 */
import { KairosError } from "../lib/errors.ts";
import { DEFAULT_MAX_BODY_BYTES } from "../http/body.ts";
import { DEFAULT_RATE_LIMITS } from "../http/rate-limit.ts";

export interface NatsApiConfig {
  /** Serve the NATS API on this API node (`kairos node --no-nats-api` turns it off). */
  readonly enabled: boolean;
  /** Largest request payload (the REST body limit, 64 KiB). */
  readonly maxBodyBytes: number;
  /** Requests handled at once by this node; past it: 429 `overloaded` at once. */
  readonly maxInFlight: number;
  /** Requests per second per tenant on this node, separate from REST's bucket (0: none). */
  readonly tenantPerSecond: number;
  readonly tenantBurst: number;
  /** How long a tenant record is trusted without a KV read (as the REST key cache). */
  readonly tenantCacheMs: number;
  /** Most cached tenant records. */
  readonly tenantCacheMax: number;
}

export const NATS_API_DEFAULTS: NatsApiConfig = Object.freeze({
  enabled: true,
  maxBodyBytes: DEFAULT_MAX_BODY_BYTES,
  maxInFlight: 256,
  tenantPerSecond: DEFAULT_RATE_LIMITS.tenantPerSecond,
  tenantBurst: DEFAULT_RATE_LIMITS.tenantBurst,
  tenantCacheMs: 5000,
  tenantCacheMax: 10_000,
});

/** Validates and freezes; throws `invalid_argument` naming the option. */
export function natsApiConfig(o: Partial<NatsApiConfig> = {}): NatsApiConfig {
  const c: NatsApiConfig = { ...NATS_API_DEFAULTS, ...o };
  const bad = (field: string, why: string) =>
    new KairosError("invalid_argument", `nats_api.${field}: ${why}`, {
      field: `nats_api.${field}`,
    });
  const intIn = (field: keyof NatsApiConfig, v: number, min: number, max: number): void => {
    if (!(Number.isInteger(v) && v >= min && v <= max))
      throw bad(field, `must be an integer ${min}-${max}, got ${String(v)}`);
  };
  if (typeof c.enabled !== "boolean") throw bad("enabled", "must be true or false");
  // NATS's own max_payload defaults to 1 MiB: a larger limit would never be reached.
  intIn("maxBodyBytes", c.maxBodyBytes, 1024, 1024 * 1024);
  intIn("maxInFlight", c.maxInFlight, 1, 100_000);
  if (!(Number.isFinite(c.tenantPerSecond) && c.tenantPerSecond >= 0))
    throw bad("tenantPerSecond", `must be a number >= 0, got ${String(c.tenantPerSecond)}`);
  intIn("tenantBurst", c.tenantBurst, 1, 1_000_000);
  intIn("tenantCacheMs", c.tenantCacheMs, 0, 60_000);
  intIn("tenantCacheMax", c.tenantCacheMax, 1, 1_000_000);
  return Object.freeze(c);
}
