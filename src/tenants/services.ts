/**
 * Tenant service identities: the NATS users a tenant's internal services connect with to speak
 * the NATS API, issued and revoked at run time (`kairos admin service create|revoke`) with no
 * server reload. Stored in the `tenants` bucket, like API keys:
 *
 *   svc.<name> → ServiceRecord { name, tenant_id, hash: sha256(secret), revoked, created_at }
 *
 * The secret is 256 random bits, returned once and never stored; the record holds its SHA-256.
 * API nodes read the record when nats-server asks them to authenticate a connection (the auth
 * callout, src/nats-api/auth-callout.ts) — on every connection, with no cache, so a revocation
 * is seen by the next connection attempt.
 *
 * A revoked name may be created again (a new secret, the record replaced at its revision); the
 * old secret stays refused because its hash is gone.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { decode, encode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import type { Clock } from "../lib/clock.ts";
import { casUpdate } from "../lib/cas-update.ts";
import { KairosError } from "../lib/errors.ts";
import { formatUtc } from "../schedule/index.ts";

/** What is stored under `svc.<name>`. */
export interface ServiceRecord {
  name: string;
  tenant_id: string;
  /** hex SHA-256 of the secret. */
  hash: string;
  revoked: boolean;
  created_at: string;
  revoked_at?: string;
}

/** 1-48 of [A-Za-z0-9_-]: the NATS user is `service-<name>` (at most 56 characters). */
export const SERVICE_NAME = /^[A-Za-z0-9_-]{1,48}$/;
/** `ksvc_` and 43 base64url characters (32 bytes). */
const SECRET = /^ksvc_[A-Za-z0-9_-]{43}$/;
const TENANT_ID = /^t[a-z2-7]{16}$/;
/** Read-modify-writes of a service record: at most 10 tries, no pause (an operator's command). */
const CAS = { attempts: 10, encode, decode } as const;
/** Most records `list` reads, and its page size. */
export const MAX_LISTED = 10_000;
const LIST_PAGE = 1000;

/** Why a service's credentials were refused (closed set: logs and callout answers name it). */
export type ServiceRefusal = "unknown_service" | "bad_secret" | "revoked";

export type ServiceCheck =
  { ok: true; record: ServiceRecord } | { ok: false; reason: ServiceRefusal };

function serviceKey(name: string): string {
  return `svc.${name}`;
}

function sha256(s: string): string {
  return createHash("sha256").update(s).digest("hex");
}

/** Throws `invalid_argument` unless `name` is a valid service name. */
export function validateServiceName(name: string): void {
  if (!SERVICE_NAME.test(name)) {
    throw new KairosError(
      "invalid_argument",
      `service name must be 1-48 of [A-Za-z0-9_-], got ${JSON.stringify(name.slice(0, 80))}`,
      { field: "name" },
    );
  }
}

/** Service identities over the `tenants` bucket (the KvStore port only). */
export class KvServiceDirectory {
  readonly #kv: KvStore;
  readonly #clock: Clock;

  constructor(kv: KvStore, clock: Clock) {
    this.#kv = kv;
    this.#clock = clock;
  }

  /**
   * Issues identity `name` for `tenantId` (which must exist: `tenantExists`); returns the secret,
   * shown once. A live identity of that name is a `conflict`; a revoked one is replaced.
   */
  async create(
    name: string,
    tenantId: string,
    tenantExists: (id: string) => Promise<boolean>,
  ): Promise<{ record: ServiceRecord; secret: string }> {
    validateServiceName(name);
    if (!TENANT_ID.test(tenantId) || !(await tenantExists(tenantId))) {
      throw new KairosError("not_found", `tenant ${tenantId.slice(0, 80)} not found`, {
        field: "tenant_id",
      });
    }
    const secret = `ksvc_${randomBytes(32).toString("base64url")}`;
    const record: ServiceRecord = {
      name,
      tenant_id: tenantId,
      hash: sha256(secret),
      revoked: false,
      created_at: formatUtc(this.#clock.now()),
    };
    return casUpdate<ServiceRecord, { record: ServiceRecord; secret: string }>(
      this.#kv,
      serviceKey(name),
      (cur) => {
        if (cur !== null && !cur.revoked) {
          throw new KairosError(
            "conflict",
            `service ${name} already exists; revoke it first (kairos admin service revoke ${name})`,
            { field: "name", retryable: false },
          );
        }
        return { write: record, result: { record, secret } };
      },
      { ...CAS, conflictMessage: `service ${name} kept changing; retry` },
    );
  }

  /** Marks `name` revoked (CAS). Returns the record; `not_found` if there is none. Idempotent. */
  async revoke(name: string): Promise<ServiceRecord> {
    validateServiceName(name);
    return casUpdate<ServiceRecord, ServiceRecord>(
      this.#kv,
      serviceKey(name),
      (rec) => {
        if (rec === null)
          throw new KairosError("not_found", `service ${name} not found`, { field: "name" });
        if (rec.revoked) return { done: rec };
        const next: ServiceRecord = {
          ...rec,
          revoked: true,
          revoked_at: formatUtc(this.#clock.now()),
        };
        return { write: next, result: next };
      },
      { ...CAS, conflictMessage: `service ${name} kept changing; retry the revocation` },
    );
  }

  /** The record of `name`, or null (an invalid name is null too). */
  async get(name: string): Promise<ServiceRecord | null> {
    if (!SERVICE_NAME.test(name)) return null;
    const e = await this.#kv.get(serviceKey(name));
    return e === null ? null : decode<ServiceRecord>(e.value);
  }

  /**
   * The identities (of `tenantId`, or all), in the order they were last written; at most
   * `MAX_LISTED` (`truncated` past it). Read in pages, so the cost is bounded too.
   */
  async list(tenantId?: string): Promise<{ services: ServiceRecord[]; truncated: boolean }> {
    const services: ServiceRecord[] = [];
    let after = 0;
    for (let read = 0; read < MAX_LISTED;) {
      const page = await this.#kv.scan("svc.>", after, LIST_PAGE);
      read += page.entries.length;
      for (const e of page.entries) {
        const r = decode<ServiceRecord>(e.value);
        if (tenantId === undefined || r.tenant_id === tenantId) services.push(r);
      }
      if (page.next === null) return { services, truncated: false };
      after = page.next;
    }
    return { services, truncated: true };
  }

  /** Checks a connection's credentials against the stored record (constant-time hash compare). */
  async check(name: string, secret: string): Promise<ServiceCheck> {
    const rec = await this.get(name);
    if (rec === null) return { ok: false, reason: "unknown_service" };
    if (
      !SECRET.test(secret) ||
      !timingSafeEqual(Buffer.from(sha256(secret), "hex"), Buffer.from(rec.hash, "hex"))
    )
      return { ok: false, reason: "bad_secret" };
    if (rec.revoked) return { ok: false, reason: "revoked" };
    return { ok: true, record: rec };
  }
}
