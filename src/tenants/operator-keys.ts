/**
 * Operator keys: the credential of the API's operator views (`/v1/admin/…`: nodes, partitions,
 * workers and slots, fair shares), apart from every tenant's API keys. Made and revoked by the
 * cluster's NATS admin (`kairos admin operator-key create|revoke`), checked by API nodes, which
 * only read them (their NATS permissions write nothing of these keys). Keys in the `tenants`
 * bucket: `op.<sha256(key)>` → OperatorKeyRecord, `opid.<key_id>` → `{hash}` (revoke by id);
 * written `opid.` first, as tenant keys are (directory.ts).
 *
 * A key is `kop_` + 43 base64url characters (256 random bits): a tenant key (`kai_…`) is never
 * one, so a tenant's key cannot be taken for an operator's whatever its record says. The plain
 * key is shown once and never stored. Successful checks are cached for `authCacheTtlMs` (5 s) in
 * a bounded LRU: a revoked key works up to that long more on API nodes that had just seen it.
 */
import { createHash, randomBytes } from "node:crypto";
import { decode, encode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import type { Clock } from "../lib/clock.ts";
import { casUpdate } from "../lib/cas-update.ts";
import { KairosError } from "../lib/errors.ts";
import { formatUtc } from "../schedule/index.ts";
import { newId } from "./directory.ts";
import { LruCache } from "./lru.ts";

/** What is stored under `op.<sha256 of the key>`. */
export interface OperatorKeyRecord {
  key_id: string;
  /** Who it is for (shown in `list`, named as the caller). */
  name: string;
  revoked: boolean;
  created_at: string;
}

export const OPERATOR_KEY = /^kop_[A-Za-z0-9_-]{43}$/;
const KEY_ID = /^o[a-z2-7]{16}$/;
const NAME = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,62}$/;
const CAS = { attempts: 10, encode, decode } as const;

const sha256 = (s: string): string => createHash("sha256").update(s).digest("hex");

export class KvOperatorKeys {
  readonly #cache: LruCache<string, { keyId: string; name: string; expiresAtMs: number }>;

  constructor(
    private readonly kv: KvStore,
    private readonly clock: Clock,
    private readonly authCacheTtlMs = 5_000,
  ) {
    this.#cache = new LruCache(1_000);
  }

  /** Whether a credential has an operator key's shape (no lookup). */
  static looksLike(credential: string): boolean {
    return credential.startsWith("kop_");
  }

  /** The key's id and name, or null (unknown, revoked, or not an operator key's shape). */
  async authenticate(key: string): Promise<{ keyId: string; name: string } | null> {
    if (!OPERATOR_KEY.test(key)) return null;
    const hash = sha256(key);
    const now = this.clock.now();
    const hit = this.#cache.get(hash);
    if (hit !== undefined && hit.expiresAtMs > now) return { keyId: hit.keyId, name: hit.name };
    const e = await this.kv.get(`op.${hash}`);
    if (e === null) return null;
    const rec = decode<OperatorKeyRecord>(e.value);
    if (rec.revoked) {
      this.#cache.delete(hash);
      return null;
    }
    this.#cache.set(hash, {
      keyId: rec.key_id,
      name: rec.name,
      expiresAtMs: now + this.authCacheTtlMs,
    });
    return { keyId: rec.key_id, name: rec.name };
  }

  /** A new key for `name` (shown once). */
  async create(name: string): Promise<{ key: string; keyId: string }> {
    if (!NAME.test(name))
      throw new KairosError(
        "invalid_argument",
        `name: 1-63 letters, digits, ".", "_", "@" or "-", starting with a letter or digit, got ${JSON.stringify(name.slice(0, 80))}`,
        { field: "name" },
      );
    const key = `kop_${randomBytes(32).toString("base64url")}`;
    const keyId = newId("o");
    const hash = sha256(key);
    const a = await this.kv.create(`opid.${keyId}`, encode({ hash }));
    if (!a.ok) throw new KairosError("conflict", `key id ${keyId} already exists; retry`);
    const rec: OperatorKeyRecord = {
      key_id: keyId,
      name,
      revoked: false,
      created_at: formatUtc(this.clock.now()),
    };
    const b = await this.kv.create(`op.${hash}`, encode(rec));
    if (!b.ok) throw new KairosError("conflict", "operator key collision; retry");
    return { key, keyId };
  }

  /** Revokes a key by id (idempotent); `not_found` for an unknown id. */
  async revoke(keyId: string): Promise<void> {
    const idEntry = KEY_ID.test(keyId) ? await this.kv.get(`opid.${keyId}`) : null;
    if (idEntry === null)
      throw new KairosError("not_found", `operator key ${keyId} not found`, { field: "key_id" });
    const { hash } = decode<{ hash: string }>(idEntry.value);
    this.#cache.delete(hash);
    await casUpdate<OperatorKeyRecord, void>(
      this.kv,
      `op.${hash}`,
      (rec) =>
        rec === null || rec.revoked
          ? { done: undefined }
          : { write: { ...rec, revoked: true }, result: undefined },
      { ...CAS, conflictMessage: `operator key ${keyId} kept changing; retry the revocation` },
    );
  }

  /** Every operator key's record (at most `max`), oldest first. */
  async list(max = 1_000): Promise<OperatorKeyRecord[]> {
    const out: OperatorKeyRecord[] = [];
    for (const e of await this.kv.list("op.*")) {
      if (out.length >= max) break;
      out.push(decode<OperatorKeyRecord>(e.value));
    }
    return out.sort((a, b) => a.created_at.localeCompare(b.created_at));
  }
}
