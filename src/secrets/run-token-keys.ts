/**
 * The run-token key set: the operator's Ed25519 keys that sign and verify `KAIROS_RUN_TOKEN`
 * (run-token.ts). One JSON file in JWK Set form (RFC 7517), read once at start-up:
 *
 *   {"keys": [{"kty":"OKP","crv":"Ed25519","kid":"…","x":"…","d":"…"},   ← the current key: signs
 *             {"kty":"OKP","crv":"Ed25519","kid":"…","x":"…"}]}          ← earlier keys: verify only
 *
 * The first key is the current one; schedulers sign with it, so on a scheduler it must carry its
 * private part `d`. Every key verifies, and API nodes publish the public parts of all of them
 * (`GET /.well-known/jwks.json`): keep an earlier key in the set until every token it signed has
 * expired. Rotation (`kairos run-token-keys rotate`) puts a new key first and strips the private
 * parts of the others; `retire` drops one that is no longer needed.
 *
 * Every key is checked where it enters: its shape, a unique `kid`, and that its `d` belongs to its
 * `x` (node:crypto derives the public key from the private one). The parsed set is frozen.
 */
import { createPrivateKey, createPublicKey, type JsonWebKey as NodeJwk } from "node:crypto";
import { KairosError } from "../lib/errors.ts";

/** An Ed25519 public key as a JWK (what the JWKS publishes). */
export interface PublicRunTokenJwk {
  readonly kty: "OKP";
  readonly crv: "Ed25519";
  readonly kid: string;
  readonly x: string;
  readonly alg: "EdDSA";
  readonly use: "sig";
}

/** One key of the set: its public JWK and, for a signing key, its private part. */
export interface RunTokenKey {
  readonly kid: string;
  readonly publicJwk: PublicRunTokenJwk;
  /** The base64url private key (`d`); absent: this key only verifies. */
  readonly d?: string;
}

/** The parsed, frozen key set; `keys[0]` is the current key. */
export interface RunTokenKeySet {
  readonly keys: readonly RunTokenKey[];
}

/** Most keys in a set (the current one and the earlier ones still verifying). */
export const MAX_RUN_TOKEN_KEYS = 8;
/** Largest key-set file read. */
export const MAX_RUN_TOKEN_KEYS_BYTES = 64 * 1024;
const KID = /^[A-Za-z0-9._-]{1,128}$/;
/** 32 bytes, base64url without padding. */
const ED25519_PART = /^[A-Za-z0-9_-]{43}$/;

const bad = (why: string): KairosError =>
  new KairosError("invalid_argument", `run-token keys: ${why}`, { field: "run-token-keys" });

/** The public x that a private Ed25519 `d` belongs to (node:crypto derives it). */
function publicOf(d: string, x: string): string {
  try {
    const priv = createPrivateKey({
      key: { kty: "OKP", crv: "Ed25519", d, x } as NodeJwk,
      format: "jwk",
    });
    return String(createPublicKey(priv).export({ format: "jwk" }).x);
  } catch {
    return "";
  }
}

function parseKey(raw: unknown, i: number): RunTokenKey {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw))
    throw bad(`keys[${i}] must be a JWK object`);
  const k = raw as Record<string, unknown>;
  if (k["kty"] !== "OKP" || k["crv"] !== "Ed25519")
    throw bad(`keys[${i}] must be an Ed25519 key (kty "OKP", crv "Ed25519")`);
  const kid = k["kid"];
  if (typeof kid !== "string" || !KID.test(kid))
    throw bad(`keys[${i}].kid must be 1-128 characters of A-Z a-z 0-9 . _ -`);
  const x = k["x"];
  if (typeof x !== "string" || !ED25519_PART.test(x))
    throw bad(`keys[${i}].x must be a 32-byte base64url public key`);
  if (k["alg"] !== undefined && k["alg"] !== "EdDSA") throw bad(`keys[${i}].alg must be EdDSA`);
  if (k["use"] !== undefined && k["use"] !== "sig") throw bad(`keys[${i}].use must be sig`);
  const d = k["d"];
  if (d !== undefined) {
    if (typeof d !== "string" || !ED25519_PART.test(d))
      throw bad(`keys[${i}].d must be a 32-byte base64url private key`);
    if (publicOf(d, x) !== x) throw bad(`keys[${i}] (kid ${kid}): d does not belong to x`);
  }
  const publicJwk: PublicRunTokenJwk = Object.freeze({
    kty: "OKP",
    crv: "Ed25519",
    kid,
    x,
    alg: "EdDSA",
    use: "sig",
  });
  return Object.freeze(d === undefined ? { kid, publicJwk } : { kid, publicJwk, d });
}

/** Parses and checks a key-set file's text; throws `invalid_argument` naming the problem. */
export function parseRunTokenKeySet(text: string): RunTokenKeySet {
  if (Buffer.byteLength(text, "utf8") > MAX_RUN_TOKEN_KEYS_BYTES)
    throw bad(`the file is over ${MAX_RUN_TOKEN_KEYS_BYTES} bytes`);
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw bad('not JSON (a JWK Set: {"keys": [...]})');
  }
  const list = (doc as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(list) || list.length === 0)
    throw bad('must be a JWK Set with at least one key: {"keys": [...]}');
  if (list.length > MAX_RUN_TOKEN_KEYS) throw bad(`at most ${MAX_RUN_TOKEN_KEYS} keys`);
  const keys = list.map(parseKey);
  const kids = new Set(keys.map((k) => k.kid));
  if (kids.size !== keys.length) throw bad("two keys have the same kid");
  return Object.freeze({ keys: Object.freeze(keys) });
}

/** The current (signing) key's private part, or a clear error for a node that must sign. */
export function signingKeyOf(set: RunTokenKeySet): RunTokenKey & { d: string } {
  const k = set.keys[0]!;
  if (k.d === undefined)
    throw bad(
      `the current key (the first, kid ${k.kid}) has no private part "d": a scheduler signs with it`,
    );
  return k as RunTokenKey & { d: string };
}

/** The public JWK Set of every key (what API nodes publish). */
export function publicJwks(set: RunTokenKeySet): { keys: PublicRunTokenJwk[] } {
  return { keys: set.keys.map((k) => ({ ...k.publicJwk })) };
}

/** The file text of a set: JWKs, the current key with its private part. */
export function serialiseRunTokenKeySet(set: RunTokenKeySet): string {
  return `${JSON.stringify(
    { keys: set.keys.map((k) => (k.d === undefined ? k.publicJwk : { ...k.publicJwk, d: k.d })) },
    null,
    2,
  )}\n`;
}

/**
 * The set after a rotation: `fresh` (a new key with its private part) first; the earlier keys
 * kept to verify, without their private parts, the oldest dropped past MAX_RUN_TOKEN_KEYS.
 */
export function rotatedRunTokenKeySet(
  set: RunTokenKeySet | undefined,
  fresh: RunTokenKey,
): RunTokenKeySet {
  if (fresh.d === undefined) throw bad("a new current key needs its private part");
  const earlier = (set?.keys ?? [])
    .filter((k) => k.kid !== fresh.kid)
    .map((k) => Object.freeze({ kid: k.kid, publicJwk: k.publicJwk }));
  return Object.freeze({
    keys: Object.freeze([fresh, ...earlier].slice(0, MAX_RUN_TOKEN_KEYS)),
  });
}

/** The set without the key `kid`; the current key cannot be retired (rotate first). */
export function retiredRunTokenKeySet(set: RunTokenKeySet, kid: string): RunTokenKeySet {
  if (set.keys[0]!.kid === kid)
    throw bad(`${kid} is the current key: rotate first, then retire it`);
  if (!set.keys.some((k) => k.kid === kid)) throw bad(`no key with kid ${kid}`);
  return Object.freeze({ keys: Object.freeze(set.keys.filter((k) => k.kid !== kid)) });
}

/** A key from a freshly generated Ed25519 key's JWK (kid: its RFC 7638 thumbprint, given). */
export function runTokenKeyFromJwk(jwk: { x: string; d: string }, kid: string): RunTokenKey {
  return parseKey({ kty: "OKP", crv: "Ed25519", kid, x: jwk.x, d: jwk.d }, 0);
}
