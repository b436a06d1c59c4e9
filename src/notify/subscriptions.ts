/**
 * Run-event subscriptions over the `tenants` KV bucket (the KvStore port only):
 * `sub.<tenant_id>.<subscription_id>` → SubscriptionRecord. The tenant is a key token, so a
 * tenant's subscriptions are one filtered list and no id reaches another tenant's.
 *
 * `KvSubscriptions` is the API's side (create, list, get, delete); `SubscriptionLookup` is the
 * schedulers' side: once started, ONE watch of `sub.>` per node keeps every tenant's
 * subscriptions in memory (a few hundred bytes each; at most 20 per tenant), changes pushed as
 * they are written, so a run's end costs no KV operation however many end at once. Until the
 * watch is ready (or if it cannot start), a tenant's list is read per tenant through a short
 * cache (default 10 s, at most 10,000 tenants).
 *
 * Pitfall: the per-tenant limit is checked by counting before the create; creates racing each
 * other may pass it by as many as race (each one a separate authenticated request).
 */
import { randomBytes } from "node:crypto";
import { decode, encode } from "../cluster/codec.ts";
import type { KvStore, KvWatch } from "../cluster/kv.ts";
import type { Clock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import {
  MAX_SUBSCRIPTIONS_PER_TENANT,
  type SubscriptionInput,
  type SubscriptionRecord,
  type SubscriptionService,
  type SubscriptionView,
} from "../protocol/events.ts";

export { MAX_SUBSCRIPTIONS_PER_TENANT };

const SUBSCRIPTION_ID = /^s[a-z2-7]{16}$/;
/** A tenant id as a KV key token (ids come from authentication; anything else reads nothing). */
const TENANT_TOKEN = /^[A-Za-z0-9_-]{1,64}$/;

export const subscriptionKey = (tenantId: string, id: string): string => `sub.${tenantId}.${id}`;

/** `s` + 16 random base32 characters (80 bits) from the OS CSPRNG. */
function newSubscriptionId(): string {
  const alphabet = "abcdefghijklmnopqrstuvwxyz234567";
  let out = "s";
  for (const b of randomBytes(16)) out += alphabet.charAt(b & 31);
  return out;
}

/** The view of a record (no secret). */
export function subscriptionView(r: SubscriptionRecord): SubscriptionView {
  return {
    subscription_id: r.subscription_id,
    tenant_id: r.tenant_id,
    events: [...r.events],
    job_id: r.job_id,
    webhook: r.webhook,
    email: r.email,
    created_at: r.created_at,
  };
}

/** Reads every subscription record of a tenant, oldest first (bounded by the limit on creates). */
export async function readSubscriptions(
  kv: KvStore,
  tenantId: string,
): Promise<SubscriptionRecord[]> {
  if (!TENANT_TOKEN.test(tenantId)) return [];
  const entries = await kv.list(`sub.${tenantId}.>`);
  return entries
    .sort((a, b) => a.revision - b.revision)
    .map((e) => decode<SubscriptionRecord>(e.value));
}

/** The API's subscriptions over the tenants bucket. */
export class KvSubscriptions implements SubscriptionService {
  readonly #kv: KvStore;
  readonly #clock: Clock;

  constructor(kv: KvStore, clock: Clock) {
    this.#kv = kv;
    this.#clock = clock;
  }

  async create(
    tenantId: string,
    input: SubscriptionInput,
  ): Promise<SubscriptionView & { secret?: string }> {
    const existing = await readSubscriptions(this.#kv, tenantId);
    if (existing.length >= MAX_SUBSCRIPTIONS_PER_TENANT) {
      throw new KairosError(
        "quota_exceeded",
        `a tenant may hold at most ${MAX_SUBSCRIPTIONS_PER_TENANT} subscriptions; delete one first`,
        { field: "subscriptions", retryable: false },
      );
    }
    const { channel } = input;
    const record: SubscriptionRecord = {
      subscription_id: newSubscriptionId(),
      tenant_id: tenantId,
      events: [...input.events],
      job_id: input.job_id,
      webhook: channel.kind === "webhook" ? { url: channel.url } : null,
      email: channel.kind === "email" ? { to: channel.to } : null,
      created_at: new Date(this.#clock.now()).toISOString(),
    };
    if (channel.kind === "webhook")
      record.secret = `whsec_${randomBytes(24).toString("base64url")}`;
    const w = await this.#kv.create(
      subscriptionKey(tenantId, record.subscription_id),
      encode(record),
    );
    if (!w.ok) throw new KairosError("conflict", "subscription id collision; retry");
    const view = subscriptionView(record);
    return record.secret === undefined ? view : { ...view, secret: record.secret };
  }

  async list(tenantId: string): Promise<SubscriptionView[]> {
    return (await readSubscriptions(this.#kv, tenantId)).map(subscriptionView);
  }

  async get(tenantId: string, subscriptionId: string): Promise<SubscriptionView> {
    const e = await this.#read(tenantId, subscriptionId);
    return subscriptionView(decode<SubscriptionRecord>(e.value));
  }

  async delete(tenantId: string, subscriptionId: string): Promise<void> {
    const e = await this.#read(tenantId, subscriptionId);
    await this.#kv.delete(e.key, e.revision);
  }

  async #read(tenantId: string, subscriptionId: string) {
    const e =
      TENANT_TOKEN.test(tenantId) && SUBSCRIPTION_ID.test(subscriptionId)
        ? await this.#kv.get(subscriptionKey(tenantId, subscriptionId))
        : null;
    if (e === null) throw new KairosError("not_found", "subscription not found");
    return e;
  }
}

/** Tunables of the schedulers' lookup. */
export interface SubscriptionLookupOptions {
  /** How long a tenant's list is trusted without a read (default 10 s). */
  ttlMs?: number;
  /** Most tenants cached (default 10,000; the whole cache is dropped past it). */
  maxTenants?: number;
}

/** A tenant's subscriptions as the notifier reads them: cached, one read in flight per tenant. */
export class SubscriptionLookup {
  readonly #kv: () => KvStore;
  readonly #clock: Clock;
  readonly #ttlMs: number;
  readonly #max: number;
  readonly #cache = new Map<string, { subs: SubscriptionRecord[]; atMs: number }>();
  readonly #reading = new Map<string, Promise<SubscriptionRecord[]>>();
  /** Every tenant's subscriptions, oldest first, once the watch is ready. */
  #watched: Map<string, SubscriptionRecord[]> | undefined;
  #watch: KvWatch | undefined;
  #stopped = false;

  constructor(kv: () => KvStore, clock: Clock, o: SubscriptionLookupOptions = {}) {
    this.#kv = kv;
    this.#clock = clock;
    this.#ttlMs = o.ttlMs ?? 10_000;
    this.#max = o.maxTenants ?? 10_000;
  }

  /**
   * Follows every subscription with one watch of `sub.>`; resolves once the current ones are
   * loaded. From then on `of` and `cached` answer from memory.
   */
  async start(): Promise<void> {
    type Held = Map<string, { rec: SubscriptionRecord; rev: number }>;
    const byTenant = new Map<string, Held>();
    await new Promise<void>((resolve, reject) => {
      this.#kv()
        .watch(
          "sub.>",
          (c) => {
            const tenantId = c.key.split(".")[1] ?? "";
            const subs: Held =
              byTenant.get(tenantId) ?? new Map<string, { rec: SubscriptionRecord; rev: number }>();
            if (c.value === null) subs.delete(c.key);
            else subs.set(c.key, { rec: decode<SubscriptionRecord>(c.value), rev: c.revision });
            if (subs.size === 0) byTenant.delete(tenantId);
            else byTenant.set(tenantId, subs);
            if (this.#watched) this.#watched.set(tenantId, ordered(subs));
            if (this.#watched && subs.size === 0) this.#watched.delete(tenantId);
          },
          () => {
            this.#watched = new Map([...byTenant].map(([t, subs]) => [t, ordered(subs)]));
            resolve();
          },
        )
        .then((w) => {
          this.#watch = w;
          if (this.#stopped) w.stop();
        }, reject);
    });
  }

  stop(): void {
    this.#stopped = true;
    this.#watch?.stop();
  }

  /** The tenant's subscriptions; a failed read throws (the caller retries later). */
  of(tenantId: string): Promise<SubscriptionRecord[]> {
    if (this.#watched) return Promise.resolve(this.#watched.get(tenantId) ?? []);
    const hit = this.#cache.get(tenantId);
    if (hit && this.#clock.monoMs() - hit.atMs < this.#ttlMs) return Promise.resolve(hit.subs);
    const inFlight = this.#reading.get(tenantId);
    if (inFlight) return inFlight;
    const p = readSubscriptions(this.#kv(), tenantId)
      .then((subs) => {
        if (this.#cache.size >= this.#max) this.#cache.clear();
        this.#cache.set(tenantId, { subs, atMs: this.#clock.monoMs() });
        return subs;
      })
      .finally(() => this.#reading.delete(tenantId));
    this.#reading.set(tenantId, p);
    return p;
  }

  /** The answer from memory only (no read): undefined when not watched, cached or fresh. */
  cached(tenantId: string): SubscriptionRecord[] | undefined {
    if (this.#watched) return this.#watched.get(tenantId) ?? [];
    const hit = this.#cache.get(tenantId);
    return hit && this.#clock.monoMs() - hit.atMs < this.#ttlMs ? hit.subs : undefined;
  }
}

/** A tenant's subscriptions from the watch, oldest first. */
function ordered(
  subs: Map<string, { rec: SubscriptionRecord; rev: number }>,
): SubscriptionRecord[] {
  return [...subs.values()].sort((a, b) => a.rev - b.rev).map((x) => x.rec);
}
