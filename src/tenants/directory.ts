/**
 * Tenants and API keys over the `tenants` KV bucket (the KvStore port only). Keys: `t.<tenant>` →
 * TenantRecord; `n.<sha256(lower(name)) 32 hex>` → name claim; `k.<sha256(api key)>` →
 * KeyRecord; `kid.<key_id>` → `{hash, tenant_id}` (revoke by id); `jc.<tenant>` → the max_jobs
 * counter (src/slots/job-quota.ts); `svc.<name>` → a service identity (services.ts).
 *
 * The plain API key is returned once and never stored. Writes are ordered crash-safe without
 * transactions: tenant before name claim, `kid.` before `k.`; of two creates of one name exactly
 * one wins `create` of `n.…` and the other removes its orphan tenant record.
 *
 * Pitfall: successful authentications are cached for `authCacheTtlMs` (5 s) in a bounded LRU, so
 * a revoked key works up to that long on other API nodes. Failed lookups are not cached.
 */
import { createHash, randomBytes } from "node:crypto";
import { decode, encode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import {
  DEFAULT_MAX_WAITING_RUNS,
  MAX_WAITING_RUNS_LIMIT,
  type Tenant,
  type TenantDirectory,
} from "../protocol/service.ts";
import type { Clock } from "../lib/clock.ts";
import { casUpdate } from "../lib/cas-update.ts";
import { KairosError } from "../lib/errors.ts";
import { formatUtc } from "../schedule/index.ts";
import { LruCache } from "./lru.ts";
import { parseImagePolicy } from "../sandbox/image-policy.ts";
import { parseEgressPolicy } from "../sandbox/egress-policy.ts";

/** What is stored under `t.<tenant_id>`. */
export type TenantRecord = Tenant;

/** What is stored under `k.<sha256 of the key>`. */
export interface KeyRecord {
  tenant_id: string;
  key_id: string;
  revoked: boolean;
  created_at: string;
}

interface KeyIdRecord {
  hash: string;
  tenant_id: string;
}

/** Defaults of a new tenant. */
export const TENANT_DEFAULTS = {
  max_concurrent_runs: 100,
  max_jobs: 10_000,
  max_waiting_runs: DEFAULT_MAX_WAITING_RUNS,
  weight: 1,
  webhook_url: null,
} as const;

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;
const API_KEY = /^kai_[A-Za-z0-9_-]{43}$/;
const TENANT_ID = /^t[a-z2-7]{16}$/;
const KEY_ID = /^k[a-z2-7]{16}$/;
/** Read-modify-writes of tenant records: at most 10 tries, no pause (an operator's command). */
const CAS = { attempts: 10, encode, decode } as const;

/** A quota change: the fields to set (at least one). */
export interface QuotaUpdate {
  max_concurrent_runs?: number;
  max_jobs?: number;
  max_waiting_runs?: number;
  weight?: number;
}

/** Largest accepted weight. */
export const MAX_WEIGHT = 1000;

/** Throws `invalid_argument` naming the field unless every given quota value is valid. */
export function validateQuota(q: QuotaUpdate): void {
  const fields = Object.keys(q).filter((k) => q[k as keyof QuotaUpdate] !== undefined);
  if (fields.length === 0)
    throw new KairosError(
      "invalid_argument",
      "nothing to change: pass --max-concurrent, --max-jobs, --max-waiting and/or --weight",
      { field: "quota" },
    );
  for (const f of ["max_concurrent_runs", "max_jobs"] as const) {
    const v = q[f];
    if (v !== undefined && !(Number.isSafeInteger(v) && v >= 1)) {
      throw new KairosError(
        "invalid_argument",
        `${f}: must be a positive integer, got ${String(v)}`,
        { field: f },
      );
    }
  }
  const mw = q.max_waiting_runs;
  if (mw !== undefined && !(Number.isSafeInteger(mw) && mw >= 1 && mw <= MAX_WAITING_RUNS_LIMIT)) {
    throw new KairosError(
      "invalid_argument",
      `max_waiting_runs: must be a positive integer at most ${MAX_WAITING_RUNS_LIMIT}, got ${String(mw)}`,
      { field: "max_waiting_runs" },
    );
  }
  const w = q.weight;
  if (w !== undefined && !(Number.isFinite(w) && w > 0 && w <= MAX_WEIGHT)) {
    throw new KairosError(
      "invalid_argument",
      `weight: must be a positive number at most ${MAX_WEIGHT}, got ${String(w)}`,
      { field: "weight" },
    );
  }
}

/** The tenant record without secrets (what `kairos admin tenant get` shows). */
export function publicTenant(t: Tenant): Omit<Tenant, "webhook_secret"> {
  const {
    tenant_id,
    name,
    created_at,
    max_concurrent_runs,
    max_jobs,
    max_waiting_runs,
    weight,
    webhook_url,
    image_policy,
    egress_policy,
  } = t;
  const out: Omit<Tenant, "webhook_secret"> = {
    tenant_id,
    name,
    created_at,
    max_concurrent_runs,
    max_jobs,
    // A record made before the bound existed has the default.
    max_waiting_runs: max_waiting_runs ?? DEFAULT_MAX_WAITING_RUNS,
    weight,
    webhook_url,
  };
  if (image_policy) out.image_policy = image_policy;
  if (egress_policy) out.egress_policy = egress_policy;
  return out;
}

/** Tunables of the directory. */
export interface TenantDirectoryOptions {
  clock: Clock;
  /** How long a successful authentication is trusted without a KV read (default 5000). */
  authCacheTtlMs?: number;
  /** Most cached authentications (default 10000). */
  authCacheMax?: number;
}

/** `TenantDirectory` over the `tenants` bucket. */
export class KvTenantDirectory implements TenantDirectory {
  readonly #kv: KvStore;
  readonly #clock: Clock;
  readonly #ttlMs: number;
  readonly #cache: LruCache<string, { tenant: Tenant; keyId: string; expiresAtMs: number }>;

  constructor(kv: KvStore, opts: TenantDirectoryOptions) {
    this.#kv = kv;
    this.#clock = opts.clock;
    this.#ttlMs = opts.authCacheTtlMs ?? 5000;
    this.#cache = new LruCache(opts.authCacheMax ?? 10_000);
  }

  async authenticate(apiKey: string): Promise<Tenant | null> {
    return (await this.authenticateKey(apiKey))?.tenant ?? null;
  }

  async authenticateKey(apiKey: string): Promise<{ tenant: Tenant; keyId: string } | null> {
    if (!API_KEY.test(apiKey)) return null;
    const hash = sha256(apiKey);
    const now = this.#clock.now();
    const hit = this.#cache.get(hash);
    if (hit !== undefined && hit.expiresAtMs > now) return { tenant: hit.tenant, keyId: hit.keyId };
    // Read from the stream leader: a lagging replica (a server stopped and resumed) could answer
    // with a key's record from before its revocation for as long as it lags — unbounded — where
    // the cache bounds that to its TTL (5 s). Two leader reads per key per TTL per node.
    const entry = await this.#kv.get(`k.${hash}`);
    if (entry === null) return null;
    const key = decode<KeyRecord>(entry.value);
    if (key.revoked) {
      this.#cache.delete(hash);
      return null;
    }
    const t = TENANT_ID.test(key.tenant_id) ? await this.#kv.get(`t.${key.tenant_id}`) : null;
    const tenant = t === null ? null : decode<TenantRecord>(t.value);
    if (tenant === null) return null;
    this.#cache.set(hash, { tenant, keyId: key.key_id, expiresAtMs: now + this.#ttlMs });
    return { tenant, keyId: key.key_id };
  }

  async createTenant(name: string): Promise<{ tenant: Tenant; apiKey: string; keyId: string }> {
    if (!NAME.test(name)) {
      throw new KairosError(
        "invalid_argument",
        `tenant name must be 1-63 letters, digits, ".", "_" or "-", starting with a letter or digit, got ${JSON.stringify(name.slice(0, 80))}`,
        { field: "name" },
      );
    }
    const tenant: Tenant = {
      tenant_id: newId("t"),
      name,
      created_at: formatUtc(this.#clock.now()),
      ...TENANT_DEFAULTS,
    };
    const t = await this.#kv.create(`t.${tenant.tenant_id}`, encode(tenant));
    if (!t.ok)
      throw new KairosError("conflict", `tenant id ${tenant.tenant_id} already exists; retry`);
    const claim = await this.#kv.create(nameKey(name), encode({ tenant_id: tenant.tenant_id }));
    if (!claim.ok) {
      await this.#kv.delete(`t.${tenant.tenant_id}`, t.revision);
      throw new KairosError("conflict", `a tenant named ${JSON.stringify(name)} already exists`, {
        field: "name",
        retryable: false,
      });
    }
    const { apiKey, keyId } = await this.#writeKey(tenant.tenant_id);
    return { tenant, apiKey, keyId };
  }

  async createKey(tenantId: string): Promise<{ apiKey: string; keyId: string }> {
    if ((await this.getTenant(tenantId)) === null)
      throw new KairosError("not_found", `tenant ${tenantId} not found`, { field: "tenant_id" });
    return this.#writeKey(tenantId);
  }

  async revokeKey(keyId: string): Promise<void> {
    const idEntry = KEY_ID.test(keyId) ? await this.#kv.get(`kid.${keyId}`) : null;
    if (idEntry === null)
      throw new KairosError("not_found", `key ${keyId} not found`, { field: "key_id" });
    const { hash } = decode<KeyIdRecord>(idEntry.value);
    this.#cache.delete(hash);
    await casUpdate<KeyRecord, void>(
      this.#kv,
      `k.${hash}`,
      // Absent: the key was never completed (crash between the two writes).
      (rec) =>
        rec === null || rec.revoked
          ? { done: undefined }
          : { write: { ...rec, revoked: true }, result: undefined },
      { ...CAS, conflictMessage: `key ${keyId} kept changing; retry the revocation` },
    );
  }

  /** A replica's answer, or the leader's when the replica has no such key (see `authenticate`). */
  async getTenant(tenantId: string): Promise<Tenant | null> {
    if (!TENANT_ID.test(tenantId)) return null;
    const e = await this.#kv.get(`t.${tenantId}`);
    return e === null ? null : decode<TenantRecord>(e.value);
  }

  async setWebhook(tenantId: string, url: string | null): Promise<{ secret: string | null }> {
    if (url !== null) {
      let u: URL;
      try {
        u = new URL(url);
      } catch {
        throw new KairosError("invalid_argument", `webhook_url: "${url}" is not a URL`, {
          field: "webhook_url",
        });
      }
      if (u.protocol !== "https:" && u.protocol !== "http:") {
        throw new KairosError("invalid_argument", "webhook_url: must be http or https", {
          field: "webhook_url",
        });
      }
    }
    const secret = url === null ? null : `whsec_${randomBytes(24).toString("base64url")}`;
    await this.#updateTenant(tenantId, (t) => {
      const next: TenantRecord = { ...t, webhook_url: url };
      if (secret === null) delete next.webhook_secret;
      else next.webhook_secret = secret;
      return next;
    });
    return { secret };
  }

  /**
   * Sets quota fields of a tenant with CAS on its record (read, update at that revision, retry on
   * a concurrent change, at most 10 times). Returns the new record.
   */
  async setQuota(tenantId: string, q: QuotaUpdate): Promise<Tenant> {
    validateQuota(q);
    return this.#updateTenant(tenantId, (t) => {
      const next: TenantRecord = { ...t };
      if (q.max_concurrent_runs !== undefined) next.max_concurrent_runs = q.max_concurrent_runs;
      if (q.max_jobs !== undefined) next.max_jobs = q.max_jobs;
      if (q.max_waiting_runs !== undefined) next.max_waiting_runs = q.max_waiting_runs;
      if (q.weight !== undefined) next.weight = q.weight;
      return next;
    });
  }

  /**
   * Sets the tenant's image policy (validated: src/sandbox/image-policy.ts), or clears it with
   * null (back to the operator's default). CAS on the tenant record; returns the new record.
   * API nodes see the change within their authentication cache TTL (5 s).
   */
  async setImagePolicy(tenantId: string, entries: string[] | null): Promise<Tenant> {
    if (entries !== null) parseImagePolicy(entries);
    return this.#updateTenant(tenantId, (t) => {
      const next: TenantRecord = { ...t };
      if (entries === null) delete next.image_policy;
      else next.image_policy = [...entries];
      return next;
    });
  }

  /**
   * Sets the destinations the tenant's `egress` tasks may reach (validated:
   * src/sandbox/egress-policy.ts), or clears it with null (no egress: the API refuses `egress`,
   * and offers of existing egress jobs carry an empty policy, so their attempts reach nothing).
   * Schedulers read it through a 10 s cache, API nodes within their authentication cache TTL.
   */
  async setEgressPolicy(tenantId: string, entries: string[] | null): Promise<Tenant> {
    if (entries !== null) parseEgressPolicy(entries);
    return this.#updateTenant(tenantId, (t) => {
      const next: TenantRecord = { ...t };
      if (entries === null) delete next.egress_policy;
      else next.egress_policy = [...entries];
      return next;
    });
  }

  /** Changes a tenant's record with CAS (`casUpdate`); `not_found` when there is none. */
  #updateTenant(
    tenantId: string,
    change: (t: TenantRecord) => TenantRecord,
  ): Promise<TenantRecord> {
    const notFound = () =>
      new KairosError("not_found", `tenant ${tenantId} not found`, { field: "tenant_id" });
    if (!TENANT_ID.test(tenantId)) return Promise.reject(notFound());
    return casUpdate<TenantRecord, TenantRecord>(
      this.#kv,
      `t.${tenantId}`,
      (t) => {
        if (t === null) throw notFound();
        const next = change(t);
        return { write: next, result: next };
      },
      { ...CAS, conflictMessage: `tenant ${tenantId} keeps changing; retry` },
    );
  }

  async findTenantByName(name: string): Promise<Tenant | null> {
    if (!NAME.test(name)) return null;
    const e = await this.#kv.get(nameKey(name));
    if (e === null) return null;
    return this.getTenant(decode<{ tenant_id: string }>(e.value).tenant_id);
  }

  /** Writes `kid.` then `k.`: see the header for why this order. */
  async #writeKey(tenantId: string): Promise<{ apiKey: string; keyId: string }> {
    const apiKey = `kai_${randomBytes(32).toString("base64url")}`;
    const keyId = newId("k");
    const hash = sha256(apiKey);
    const a = await this.#kv.create(
      `kid.${keyId}`,
      encode({ hash, tenant_id: tenantId } satisfies KeyIdRecord),
    );
    if (!a.ok) throw new KairosError("conflict", `key id ${keyId} already exists; retry`);
    const rec: KeyRecord = {
      tenant_id: tenantId,
      key_id: keyId,
      revoked: false,
      created_at: formatUtc(this.#clock.now()),
    };
    const b = await this.#kv.create(`k.${hash}`, encode(rec));
    if (!b.ok) throw new KairosError("conflict", "API key collision; retry");
    return { apiKey, keyId };
  }
}

/** `prefix` + 16 random base32 characters (80 bits) from the OS CSPRNG. */
export function newId(prefix: string): string {
  const alphabet = "abcdefghijklmnopqrstuvwxyz234567";
  const bytes = randomBytes(16);
  let out = prefix;
  for (const b of bytes) out += alphabet.charAt(b & 31);
  return out;
}

function sha256(s: string): string {
  return createHash("sha256").update(s).digest("hex");
}

/** Names are unique ignoring case. */
function nameKey(name: string): string {
  return `n.${sha256(name.toLowerCase()).slice(0, 32)}`;
}
