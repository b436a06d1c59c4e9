/**
 * Per-run credentials: `KAIROS_RUN_TOKEN`, a JWT (RFC 7519) signed with EdDSA (Ed25519) by the
 * scheduler that offers the attempt, verified by API nodes and by the tenant's own services
 * against the public keys (`GET /.well-known/jwks.json`). The signing and checking is the `jose`
 * library's; this module fixes what a run token is:
 *
 *   header  {"alg":"EdDSA","kid":<key id>,"typ":"kairos-run+jwt"}
 *   claims  {"tenant","job","run","attempt","fence","iss","iat","exp"}
 *
 * `exp` is the attempt's deadline: its start time as offered plus its timeout, plus the late-start
 * allowance (a worker may start an attempt somewhat after its start time: it waits for an
 * acknowledgement, or for a free slot). A token is refused once `exp` has passed by the
 * verifier's clock (no tolerance), and when its `kid` is not in the key set, its signature does
 * not verify, its `typ` or `iss` is another, or a claim is missing or malformed — each with a
 * reason of its own (`RunTokenRefusal`).
 *
 * Gotchas: time comes in as arguments (`nowMs`), never from the host clock; `jose` is given the
 * verifier's `currentDate`. The key set is read once at start (run-token-keys.ts): a node sees a
 * rotation when it restarts.
 */
import {
  SignJWT,
  createLocalJWKSet,
  decodeProtectedHeader,
  errors as joseErrors,
  importJWK,
  jwtVerify,
  type JWTPayload,
} from "jose";
import { KairosError } from "../lib/errors.ts";
import { COMPACT_JWS, MAX_RUN_TOKEN_CHARS } from "../protocol/worker.ts";
import {
  publicJwks,
  signingKeyOf,
  type PublicRunTokenJwk,
  type RunTokenKeySet,
} from "./run-token-keys.ts";

/** The JWS `typ` of a run token (RFC 8725 §3.11: a type of its own, not any JWT of these keys). */
export const RUN_TOKEN_TYP = "kairos-run+jwt";
/** The only algorithm signed and accepted. */
export const RUN_TOKEN_ALG = "EdDSA";
export { MAX_RUN_TOKEN_CHARS };
/** Default late-start allowance added to an attempt's start time + timeout. */
export const DEFAULT_RUN_TOKEN_START_ALLOWANCE_MS = 5 * 60_000;

/** What a run token says. */
export interface RunTokenClaims {
  tenant: string;
  job: string;
  run: string;
  attempt: number;
  fence: number;
  iss: string;
  /** Seconds since the epoch. */
  iat: number;
  /** Seconds since the epoch: the attempt's deadline. */
  exp: number;
}

/** Why a token is refused (each answered 401 with its own message). */
export type RunTokenRefusal =
  | "malformed"
  | "unknown_key"
  | "bad_signature"
  | "expired"
  | "wrong_type"
  | "wrong_issuer"
  | "bad_claims";

/** A refused token: `unauthenticated`, with the reason in `refusal`. */
export class RunTokenError extends KairosError {
  constructor(
    readonly refusal: RunTokenRefusal,
    message: string,
  ) {
    super("unauthenticated", `run token refused: ${message}`);
  }
}

/** The run-token settings of a node (one validated, frozen object). */
export interface RunTokenConfig {
  readonly keys: RunTokenKeySet;
  /** The `iss` claim: `kairos:<cluster name>` unless the operator names another. */
  readonly issuer: string;
  /** Added to start time + timeout for `exp` (default DEFAULT_RUN_TOKEN_START_ALLOWANCE_MS). */
  readonly startAllowanceMs: number;
}

/** Checks and freezes the settings (where they enter: the node's start). */
export function runTokenConfig(c: {
  keys: RunTokenKeySet;
  issuer: string;
  startAllowanceMs?: number;
}): RunTokenConfig {
  if (c.issuer.length === 0 || c.issuer.length > 256)
    throw new KairosError("invalid_argument", "run-token issuer: 1-256 characters", {
      field: "run-token-issuer",
    });
  const startAllowanceMs = c.startAllowanceMs ?? DEFAULT_RUN_TOKEN_START_ALLOWANCE_MS;
  if (!Number.isInteger(startAllowanceMs) || startAllowanceMs < 0 || startAllowanceMs > 86_400_000)
    throw new KairosError("invalid_argument", "run-token start allowance: 0 to 86400000 ms", {
      field: "run-token-start-allowance-ms",
    });
  return Object.freeze({ keys: c.keys, issuer: c.issuer, startAllowanceMs });
}

/** What the scheduler knows of an attempt when it offers it. */
export interface AttemptGrant {
  tenant: string;
  job: string;
  run: string;
  attempt: number;
  fence: number;
  /** When the worker is to start it (epoch ms). */
  startAtMs: number;
  timeoutS: number;
}

type SigningKey = Awaited<ReturnType<typeof importJWK>>;

/** Mints run tokens with the current key (schedulers). */
export class RunTokenIssuer {
  readonly #cfg: RunTokenConfig;
  readonly #kid: string;
  readonly #key: SigningKey;

  private constructor(cfg: RunTokenConfig, kid: string, key: SigningKey) {
    this.#cfg = cfg;
    this.#kid = kid;
    this.#key = key;
  }

  /** Imports the current key; throws `invalid_argument` when it has no private part. */
  static async create(cfg: RunTokenConfig): Promise<RunTokenIssuer> {
    const k = signingKeyOf(cfg.keys);
    const key = await importJWK({ ...k.publicJwk, d: k.d }, RUN_TOKEN_ALG);
    return new RunTokenIssuer(cfg, k.kid, key);
  }

  /** The current key's id. */
  get kid(): string {
    return this.#kid;
  }

  /** The token of one attempt, issued at `nowMs`, expiring at its deadline. */
  async mint(g: AttemptGrant, nowMs: number): Promise<string> {
    const startMs = Math.max(g.startAtMs, nowMs);
    const expMs = startMs + g.timeoutS * 1000 + this.#cfg.startAllowanceMs;
    return new SignJWT({
      tenant: g.tenant,
      job: g.job,
      run: g.run,
      attempt: g.attempt,
      fence: g.fence,
    })
      .setProtectedHeader({ alg: RUN_TOKEN_ALG, kid: this.#kid, typ: RUN_TOKEN_TYP })
      .setIssuer(this.#cfg.issuer)
      .setIssuedAt(Math.floor(nowMs / 1000))
      .setExpirationTime(Math.ceil(expMs / 1000))
      .sign(this.#key);
  }
}

const ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Whether a bearer credential has the shape of a compact JWS (API keys are `kai_…`, no dots). */
export function looksLikeJws(credential: string): boolean {
  return credential.length <= MAX_RUN_TOKEN_CHARS && COMPACT_JWS.test(credential);
}

function claimsOf(p: JWTPayload): RunTokenClaims {
  const { tenant, job, run, attempt, fence, iss, iat, exp } = p as Record<string, unknown>;
  const ids = [tenant, job, run].every((v) => typeof v === "string" && ID.test(v));
  const ints = [attempt, fence].every((v) => Number.isSafeInteger(v) && (v as number) >= 1);
  if (
    !ids ||
    !ints ||
    typeof iss !== "string" ||
    typeof iat !== "number" ||
    typeof exp !== "number"
  )
    throw new RunTokenError(
      "bad_claims",
      "claims tenant, job, run (ids), attempt, fence (whole numbers ≥ 1), iat and exp are required",
    );
  return {
    tenant: tenant as string,
    job: job as string,
    run: run as string,
    attempt: attempt as number,
    fence: fence as number,
    iss,
    iat,
    exp,
  };
}

/** The refusal of a `jose` verification error. */
function refusalOf(e: unknown, kid: string): RunTokenError {
  if (e instanceof RunTokenError) return e;
  if (e instanceof joseErrors.JWTExpired) {
    const exp = (e.payload as { exp?: unknown }).exp;
    const at = typeof exp === "number" ? ` at ${new Date(exp * 1000).toISOString()}` : "";
    return new RunTokenError("expired", `expired${at}`);
  }
  if (e instanceof joseErrors.JWKSNoMatchingKey)
    return new RunTokenError(
      "unknown_key",
      `signed by an unknown key (kid ${JSON.stringify(kid)})`,
    );
  if (e instanceof joseErrors.JWSSignatureVerificationFailed)
    return new RunTokenError("bad_signature", "the signature does not verify");
  if (e instanceof joseErrors.JWTClaimValidationFailed) {
    if (e.claim === "typ") return new RunTokenError("wrong_type", `typ must be ${RUN_TOKEN_TYP}`);
    if (e.claim === "iss") return new RunTokenError("wrong_issuer", "issued by another issuer");
    return new RunTokenError("bad_claims", `claim ${e.claim}: ${e.reason}`);
  }
  if (e instanceof joseErrors.JOSEAlgNotAllowed)
    return new RunTokenError("malformed", `the algorithm must be ${RUN_TOKEN_ALG}`);
  return new RunTokenError("malformed", "not a valid signed token");
}

/** Verifies run tokens against every key of the set (API nodes); serves the public JWKS. */
export class RunTokenVerifier {
  readonly #issuer: string;
  readonly #jwks: { keys: PublicRunTokenJwk[] };
  readonly #keys: ReturnType<typeof createLocalJWKSet>;

  constructor(cfg: RunTokenConfig) {
    this.#issuer = cfg.issuer;
    this.#jwks = publicJwks(cfg.keys);
    this.#keys = createLocalJWKSet({ keys: this.#jwks.keys.map((k) => ({ ...k })) });
  }

  /** The public keys, as `GET /.well-known/jwks.json` serves them. */
  jwks(): { keys: PublicRunTokenJwk[] } {
    return { keys: this.#jwks.keys.map((k) => ({ ...k })) };
  }

  /** The claims of a valid token at `nowMs`; otherwise throws `RunTokenError` (401). */
  async verify(token: string, nowMs: number): Promise<RunTokenClaims> {
    if (!looksLikeJws(token)) throw new RunTokenError("malformed", "not a compact JWS");
    let kid: unknown;
    try {
      kid = decodeProtectedHeader(token).kid;
    } catch {
      throw new RunTokenError("malformed", "its header is not valid JSON");
    }
    if (typeof kid !== "string" || kid.length === 0)
      throw new RunTokenError("malformed", "its header has no kid");
    try {
      const { payload } = await jwtVerify(token, this.#keys, {
        algorithms: [RUN_TOKEN_ALG],
        typ: RUN_TOKEN_TYP,
        issuer: this.#issuer,
        currentDate: new Date(nowMs),
        requiredClaims: ["exp", "iat", "tenant", "job", "run", "attempt", "fence"],
      });
      return claimsOf(payload);
    } catch (e) {
      throw refusalOf(e, kid);
    }
  }
}
