/**
 * Write-only task secrets (`task.secret_env`): encrypted at rest with the cluster's secret key,
 * never returned (a job shows their names only), gone when the job is deleted. Each version is
 * one key `sk.<tenant>.<job>.<ref>` in the tenants bucket (history 1) holding AES-256-GCM
 * ciphertext with the key name as additional data, so a value copied to another key does not
 * decrypt; the job stores only `task.sealed_env = {names, ref}`.
 *
 * API nodes seal, schedulers open when they offer an attempt; workers never hold the key and
 * learn only the secrets of tasks they are offered (docs/security.md, "Secrets").
 *
 * Pitfalls: deleting a job deletes its `sk.` keys (a retried delete too); a patch replacing the
 * task writes a new version, then deletes older ones except the one in use.
 */
import { createHmac, randomBytes } from "node:crypto";
import { KairosError } from "../lib/errors.ts";
import { decode, encode } from "../cluster/codec.ts";
import type { KvStore } from "../cluster/kv.ts";
import type { JobView } from "../protocol/model.ts";
import { openText, sealText } from "./seal.ts";

/** What a job stores of its secrets. */
export interface SealedEnvRef {
  /** The variable names, sorted (shown by the API). */
  names: string[];
  /** Which `sk.<tenant>.<job>.<ref>` key holds the values. */
  ref: string;
}

export const SECRET_KEY_BYTES = 32;

/** Parses the cluster secret key: 32 bytes, base64 (44 characters) or hex (64). */
export function parseSecretKey(text: string): Buffer {
  const t = text.trim();
  const key = /^[0-9a-fA-F]{64}$/.test(t) ? Buffer.from(t, "hex") : Buffer.from(t, "base64");
  if (
    key.length !== SECRET_KEY_BYTES ||
    (!/^[0-9a-fA-F]{64}$/.test(t) && key.toString("base64") !== t)
  ) {
    throw new KairosError(
      "invalid_argument",
      `secret key: must be ${SECRET_KEY_BYTES} random bytes, base64 or hex (e.g. openssl rand -base64 32)`,
    );
  }
  return key;
}

export const secretKeyPrefix = (tenantId: string, jobId: string): string =>
  `sk.${tenantId}.${jobId}`;

/** Canonical JSON of an env map (sorted names), so equal maps seal and hash equally. */
function canonicalEnv(env: Record<string, string>): string {
  return JSON.stringify(
    Object.fromEntries(Object.entries(env).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))),
  );
}

export class SecretEnvStore {
  readonly #key: Buffer;
  readonly #kv: () => KvStore;
  readonly #random: (n: number) => Buffer;

  /** `key`: the cluster secret key (parseSecretKey); `kv`: the tenants bucket. */
  constructor(key: Buffer, kv: () => KvStore, random: (n: number) => Buffer = randomBytes) {
    if (key.length !== SECRET_KEY_BYTES)
      throw new KairosError("invalid_argument", "secret key: must be 32 bytes");
    this.#key = Buffer.from(key);
    this.#kv = kv;
    this.#random = random;
  }

  /**
   * A keyed digest of the values, for idempotency hashes: equal secrets give equal digests, and
   * the digest (stored in the idem bucket) cannot be brute-forced without the cluster key.
   */
  digest(env: Record<string, string>): string {
    return createHmac("sha256", this.#key).update(canonicalEnv(env)).digest("base64url");
  }

  /** Encrypts and stores a new version of a job's secrets; returns what the job keeps. */
  async seal(tenantId: string, jobId: string, env: Record<string, string>): Promise<SealedEnvRef> {
    const ref = this.#random(9)
      .toString("base64url")
      .replace(/[^A-Za-z0-9]/g, "x");
    const key = `${secretKeyPrefix(tenantId, jobId)}.${ref}`;
    const r = await this.#kv().create(
      key,
      encode(sealText(this.#key, key, canonicalEnv(env), this.#random)),
    );
    if (!r.ok)
      throw new KairosError("conflict", "secret_env: a version with this reference exists; retry");
    return { names: Object.keys(env).sort(), ref };
  }

  /** Reads and decrypts a job's secrets (schedulers, when they offer an attempt). */
  async open(
    tenantId: string,
    jobId: string,
    sealed: SealedEnvRef,
  ): Promise<Record<string, string>> {
    const key = `${secretKeyPrefix(tenantId, jobId)}.${sealed.ref}`;
    const e = await this.#kv().get(key);
    if (!e) throw new KairosError("not_found", `secret_env of job ${jobId}: not stored (deleted?)`);
    const opened = openText(this.#key, key, decode<string>(e.value));
    if (!opened.ok)
      throw new KairosError(
        "internal",
        opened.why === "format"
          ? `secret_env of job ${jobId}: unknown format`
          : `secret_env of job ${jobId}: does not decrypt with this node's secret key`,
      );
    return JSON.parse(opened.text) as Record<string, string>;
  }
}

/**
 * Deletes stored versions of a job's secrets: all of them (a job's delete), all but `keep` (a
 * patch that changed them), or `only` one (a version sealed for a create or patch that did not
 * happen). Needs no key. With one revision kept per key, the delete marker replaces the value.
 */
export async function purgeSecretEnv(
  kv: KvStore,
  tenantId: string,
  jobId: string,
  which: { keep?: string; only?: string } = {},
): Promise<void> {
  const prefix = secretKeyPrefix(tenantId, jobId);
  if (which.only !== undefined) {
    await kv.delete(`${prefix}.${which.only}`);
    return;
  }
  for (const e of await kv.list(`${prefix}.*`)) {
    if (which.keep !== undefined && e.key === `${prefix}.${which.keep}`) continue;
    await kv.delete(e.key);
  }
}

/** A job as the API shows it: its secrets' names, never their values or where they are. */
export function publicJob(job: JobView): JobView {
  if ((job.task as JobView["task"] | undefined) === undefined) return job;
  const { secret_env: _plain, sealed_env: sealed, secret_env_names: _names, ...task } = job.task;
  return { ...job, task: sealed ? { ...task, secret_env_names: [...sealed.names] } : task };
}
