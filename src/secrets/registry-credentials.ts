/**
 * Tenants' image registry credentials (`kairos admin tenant registry`): sealed with the cluster
 * secret key like task secrets (seal.ts), one key per tenant, `rc.<tenant>` in the tenants bucket,
 * holding per registry host its sealed `{username, password}` — the additional data names tenant
 * and registry, so a sealed credential moved to another tenant or registry does not open.
 *
 * Schedulers open a tenant's credential for the registry of the image an attempt is offered with
 * (`RegistryAuthLookup`, cached a few seconds), and the offer carries it to that one worker, which
 * uses it only to pull that image (src/sandbox/docker-image.ts). No API returns a credential; the
 * admin command shows registry names only. Never log a `RegistryAuth`.
 *
 * Pitfall: a change reaches schedulers within `AUTH_CACHE_TTL_MS`; a worker that already verified a
 * tenant's access to an image keeps running it for up to the executor's VERIFIED_TTL_MS (`if_missing`).
 */
import { randomBytes } from "node:crypto";
import { decode, encode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import { casUpdate } from "../lib/cas-update.ts";
import type { Clock } from "../lib/clock.ts";
import { KairosError } from "../lib/errors.ts";
import { parseImageRef, parseRegistry } from "../sandbox/image-policy.ts";
import type { RegistryAuth } from "../sandbox/index.ts";
import { openText, sealText } from "./seal.ts";
import { OrderedMap } from "../lib/ordered-map.ts";

/** Most registries one tenant holds credentials for. */
export const MAX_REGISTRIES_PER_TENANT = 16;
/** Longest user name and password (a registry token can be long). */
export const MAX_USERNAME_CHARS = 256;
export const MAX_PASSWORD_BYTES = 8192;
/** How long a scheduler trusts what it read of a tenant's credentials. */
export const AUTH_CACHE_TTL_MS = 5_000;
/** Most tenants whose credentials a scheduler keeps in memory. */
const AUTH_CACHE_MAX = 10_000;

interface StoredCredential {
  /** `sealText` of `{"username":…,"password":…}`, bound to `rc.<tenant>/<registry>`. */
  sealed: string;
  updated_at_ms: number;
}

/** What `rc.<tenant>` holds: registry host → its sealed credential. */
interface RegistryCredentialsRecord {
  registries: Record<string, StoredCredential>;
}

const CAS = { attempts: 10, encode, decode } as const;
const PRINTABLE = /^[\x21-\x7e]+$/;

export const registryCredentialsKey = (tenantId: string): string => `rc.${tenantId}`;
const aadOf = (tenantId: string, registry: string): string =>
  `${registryCredentialsKey(tenantId)}/${registry}`;

/** Validates a credential; `invalid_argument` naming the field. */
export function validateCredential(username: string, password: string): void {
  if (username.length === 0 || username.length > MAX_USERNAME_CHARS || !PRINTABLE.test(username))
    throw new KairosError(
      "invalid_argument",
      `username: 1-${MAX_USERNAME_CHARS} printable characters without spaces`,
      { field: "username" },
    );
  if (password.length === 0 || Buffer.byteLength(password) > MAX_PASSWORD_BYTES)
    throw new KairosError(
      "invalid_argument",
      `password: 1-${MAX_PASSWORD_BYTES} bytes (read from stdin, without its final newline)`,
      { field: "password" },
    );
  if (/[\r\n\0]/.test(password))
    throw new KairosError("invalid_argument", "password: must be one line", {
      field: "password",
    });
}

/** The registry hosts a tenant holds credentials for (no key needed; never the credentials). */
export async function registryNames(kv: KvStore, tenantId: string): Promise<string[]> {
  const e = await kv.get(registryCredentialsKey(tenantId));
  if (e === null) return [];
  return Object.keys(decode<RegistryCredentialsRecord>(e.value).registries).sort();
}

export class RegistryCredentialStore {
  readonly #key: Buffer;
  readonly #kv: () => KvStore;
  readonly #clock: Clock;
  readonly #random: (n: number) => Buffer;

  /** `key`: the cluster secret key (secret-env.ts `parseSecretKey`); `kv`: the tenants bucket. */
  constructor(
    key: Buffer,
    kv: () => KvStore,
    clock: Clock,
    random: (n: number) => Buffer = randomBytes,
  ) {
    this.#key = Buffer.from(key);
    this.#kv = kv;
    this.#clock = clock;
    this.#random = random;
  }

  /**
   * Seals and stores the tenant's credential for `registry` (a host[:port], normalised as image
   * references are: `index.docker.io` is `docker.io`), replacing one it had. Returns the host.
   */
  async set(
    tenantId: string,
    registry: string,
    username: string,
    password: string,
  ): Promise<string> {
    const host = parseRegistry(registry);
    validateCredential(username, password);
    const sealed = sealText(
      this.#key,
      aadOf(tenantId, host),
      JSON.stringify({ username, password }),
      this.#random,
    );
    await casUpdate<RegistryCredentialsRecord, void>(
      this.#kv(),
      registryCredentialsKey(tenantId),
      (cur) => {
        const registries = { ...(cur?.registries ?? {}) };
        if (!(host in registries) && Object.keys(registries).length >= MAX_REGISTRIES_PER_TENANT)
          throw new KairosError(
            "invalid_argument",
            `tenant ${tenantId} already holds credentials for ${MAX_REGISTRIES_PER_TENANT} registries; remove one first (--clear)`,
            { field: "registry", retryable: false },
          );
        registries[host] = { sealed, updated_at_ms: this.#clock.now() };
        return { write: { registries }, result: undefined };
      },
      { ...CAS, conflictMessage: `registry credentials of ${tenantId} keep changing; retry` },
    );
    return host;
  }

  /** Removes the tenant's credential for `registry`; false when it had none. */
  async remove(tenantId: string, registry: string): Promise<boolean> {
    const host = parseRegistry(registry);
    return casUpdate<RegistryCredentialsRecord, boolean>(
      this.#kv(),
      registryCredentialsKey(tenantId),
      (cur) => {
        if (cur === null || !(host in cur.registries)) return { done: false };
        const registries = { ...cur.registries };
        delete registries[host];
        return { write: { registries }, result: true };
      },
      { ...CAS, conflictMessage: `registry credentials of ${tenantId} keep changing; retry` },
    );
  }

  /** Every credential of a tenant, opened (schedulers, through `RegistryAuthLookup`). */
  async openAll(tenantId: string): Promise<Map<string, RegistryAuth>> {
    const out = new Map<string, RegistryAuth>();
    const e = await this.#kv().get(registryCredentialsKey(tenantId));
    if (e === null) return out;
    const rec = decode<RegistryCredentialsRecord>(e.value);
    for (const [registry, c] of Object.entries(rec.registries)) {
      const opened = openText(this.#key, aadOf(tenantId, registry), c.sealed);
      if (!opened.ok)
        throw new KairosError(
          "internal",
          `registry credential of tenant ${tenantId} for ${registry}: ${opened.why === "key" ? "does not decrypt with this node's secret key" : "unknown format"}`,
        );
      const { username, password } = JSON.parse(opened.text) as {
        username: string;
        password: string;
      };
      out.set(registry, { registry, username, password });
    }
    return out;
  }
}

/**
 * A scheduler's view of tenants' credentials for its offers: the credential of the tenant for the
 * registry of `image`, read through a short cache (AUTH_CACHE_TTL_MS, bounded). Answers at once
 * (no promise) when the tenant's entry is cached — offers of tenants without credentials keep their
 * timing — and concurrent lookups of one tenant share one read. A failed read rejects (the offer
 * waits; it is not made without the credential) and is not cached.
 */
export class RegistryAuthLookup {
  readonly #store: RegistryCredentialStore;
  readonly #clock: Clock;
  readonly #cache = new OrderedMap<string, { atMs: number; auths: Map<string, RegistryAuth> }>();
  /** Reads under way, one per tenant: a burst's offers of one tenant share one read. */
  readonly #loading = new Map<string, Promise<Map<string, RegistryAuth>>>();

  constructor(store: RegistryCredentialStore, clock: Clock) {
    this.#store = store;
    this.#clock = clock;
  }

  lookup(
    tenantId: string,
    image: string,
  ): RegistryAuth | undefined | Promise<RegistryAuth | undefined> {
    const hit = this.#cache.get(tenantId);
    if (hit !== undefined && this.#clock.now() - hit.atMs < AUTH_CACHE_TTL_MS)
      return pick(hit.auths, image);
    let loading = this.#loading.get(tenantId);
    if (loading === undefined) {
      loading = this.#store
        .openAll(tenantId)
        .then((auths) => {
          this.#cache.delete(tenantId);
          if (this.#cache.size >= AUTH_CACHE_MAX) {
            const oldest = this.#cache.oldest();
            if (oldest !== undefined) this.#cache.delete(oldest);
          }
          this.#cache.set(tenantId, { atMs: this.#clock.now(), auths });
          return auths;
        })
        .finally(() => this.#loading.delete(tenantId));
      this.#loading.set(tenantId, loading);
    }
    return loading.then((auths) => pick(auths, image));
  }
}

/** The credential for the registry of `image` (parsed only when the tenant holds any). */
function pick(auths: Map<string, RegistryAuth>, image: string): RegistryAuth | undefined {
  if (auths.size === 0) return undefined;
  const ref = parseImageRef(image);
  return typeof ref === "string" ? undefined : auths.get(ref.registry);
}
