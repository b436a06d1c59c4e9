/**
 * Sealing with the cluster secret key: AES-256-GCM, a fresh 96-bit IV per value, the name of the
 * place the value is stored under as additional data — a sealed value copied to another key (another
 * job's secrets, another tenant's registry credential) does not open. Text form
 * `v1.<iv base64url>.<ciphertext+tag base64url>`. Used by task secrets (secret-env.ts) and tenants'
 * registry credentials (registry-credentials.ts).
 */
import { createCipheriv, createDecipheriv } from "node:crypto";

const TAG_BYTES = 16;

/** Seals `plain` bound to `aad` (the storage key's name). */
export function sealText(
  key: Buffer,
  aad: string,
  plain: string,
  random: (n: number) => Buffer,
): string {
  const iv = random(12);
  const c = createCipheriv("aes-256-gcm", key, iv);
  c.setAAD(Buffer.from(aad));
  const ct = Buffer.concat([c.update(plain, "utf8"), c.final(), c.getAuthTag()]);
  return `v1.${iv.toString("base64url")}.${ct.toString("base64url")}`;
}

/** What `openText` found: the text, or why not — not a sealed value, or it does not open. */
export type Opened = { ok: true; text: string } | { ok: false; why: "format" | "key" };

/**
 * Opens what `sealText` sealed under the same key and `aad`: "format" when the text is not a
 * sealed value, "key" when it does not open (another key, another place, altered).
 */
export function openText(key: Buffer, aad: string, sealed: string): Opened {
  const [v, iv, body, ...rest] = sealed.split(".");
  if (v !== "v1" || !iv || !body || rest.length > 0) return { ok: false, why: "format" };
  const raw = Buffer.from(body, "base64url");
  if (raw.length < TAG_BYTES) return { ok: false, why: "format" };
  try {
    const d = createDecipheriv("aes-256-gcm", key, Buffer.from(iv, "base64url"));
    d.setAAD(Buffer.from(aad));
    d.setAuthTag(raw.subarray(raw.length - TAG_BYTES));
    const plain = Buffer.concat([d.update(raw.subarray(0, raw.length - TAG_BYTES)), d.final()]);
    return { ok: true, text: plain.toString("utf8") };
  } catch {
    return { ok: false, why: "key" };
  }
}
