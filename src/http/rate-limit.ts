/**
 * Abuse limits of the API (per API node, in memory): a token bucket per tenant for requests
 * (`tenantPerSecond`, bursts of `tenantBurst`; past it 429 `rate_limited` with `Retry-After`),
 * and one per client address for failed authentications (`authFailuresPerSecond`/`Burst`: an
 * empty bucket gets 429 *before* the key is looked up, so guessing keys costs no KV read).
 *
 * Pitfalls: the limit is per node — behind N nodes a tenant gets N times it. The address is the
 * TCP peer: behind a proxy everyone shares the proxy's bucket (raise the limit, or set 0 and
 * throttle in the proxy). Both maps are bounded LRUs (`maxKeys`); an evicted bucket starts full.
 */
import { KairosError } from "../lib/errors.ts";
import { OrderedMap } from "../lib/ordered-map.ts";

export interface RateLimitOptions {
  /** Requests per second per tenant (0: no limit). Default 100. */
  tenantPerSecond: number;
  /** Largest burst per tenant. Default 200. */
  tenantBurst: number;
  /** Failed authentications per second per client address (0: no throttling). Default 10. */
  authFailuresPerSecond: number;
  /** Largest burst of failed authentications per client address. Default 50. */
  authFailuresBurst: number;
}

export const DEFAULT_RATE_LIMITS: RateLimitOptions = Object.freeze({
  tenantPerSecond: 100,
  tenantBurst: 200,
  authFailuresPerSecond: 10,
  authFailuresBurst: 50,
});

/** Most keys (tenants or addresses) a limiter remembers. */
export const MAX_LIMITER_KEYS = 100_000;

interface Bucket {
  tokens: number;
  atMs: number;
}

/** Token buckets by key; time comes in as an argument (monotonic milliseconds). */
export class TokenBuckets {
  readonly #buckets = new OrderedMap<string, Bucket>();
  constructor(
    private readonly perSecond: number,
    private readonly burst: number,
    private readonly maxKeys = MAX_LIMITER_KEYS,
  ) {
    if (!(Number.isFinite(perSecond) && perSecond >= 0))
      throw new KairosError(
        "invalid_argument",
        `rate limit: ${perSecond} per second is not a number >= 0`,
        { field: "rate_limit" },
      );
    if (perSecond > 0 && !(Number.isInteger(burst) && burst >= 1))
      throw new KairosError(
        "invalid_argument",
        `rate limit burst: ${burst} is not an integer >= 1`,
        { field: "rate_limit_burst" },
      );
  }

  get enabled(): boolean {
    return this.perSecond > 0;
  }

  /** Milliseconds until `key` has a token (0: it has one now). Does not take it. */
  waitMs(key: string, nowMs: number): number {
    if (!this.enabled) return 0;
    const b = this.#refill(key, nowMs);
    return b.tokens >= 1 ? 0 : Math.ceil(((1 - b.tokens) / this.perSecond) * 1000);
  }

  /** Takes a token: 0 when taken, else the milliseconds until one is back (nothing taken). */
  take(key: string, nowMs: number): number {
    const wait = this.waitMs(key, nowMs);
    if (wait === 0 && this.enabled) this.#buckets.get(key)!.tokens -= 1;
    return wait;
  }

  /** Takes a token even if none is left (the bucket goes negative, down to -burst). */
  charge(key: string, nowMs: number): void {
    if (!this.enabled) return;
    const b = this.#refill(key, nowMs);
    b.tokens = Math.max(-this.burst, b.tokens - 1);
  }

  get size(): number {
    return this.#buckets.size;
  }

  #refill(key: string, nowMs: number): Bucket {
    let b = this.#buckets.get(key);
    if (b === undefined) {
      b = { tokens: this.burst, atMs: nowMs };
      if (this.#buckets.size >= this.maxKeys) this.#buckets.delete(this.#buckets.oldest()!);
    } else {
      this.#buckets.delete(key); // re-inserted below: Map order is least recently used first
      b.tokens = Math.min(
        this.burst,
        b.tokens + (Math.max(0, nowMs - b.atMs) / 1000) * this.perSecond,
      );
      b.atMs = nowMs;
    }
    this.#buckets.set(key, b);
    return b;
  }
}

/** The 429 for a limit: `retryAfterMs` becomes the `Retry-After` header (whole seconds, ≥ 1). */
export function rateLimited(what: string, retryAfterMs: number): KairosError {
  return new KairosError(
    "rate_limited",
    `${what}; retry after ${Math.max(1, Math.ceil(retryAfterMs / 1000))} s`,
    { retryAfterMs },
  );
}
