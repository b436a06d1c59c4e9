/**
 * Run tokens (src/secrets/run-token.ts, run-token-keys.ts): a minted token carries its attempt's
 * claims and verifies against the key set; it is refused once expired, with a tampered payload, a
 * foreign signature under a known kid, an unknown kid, another typ or issuer, or no kid. Rotation:
 * tokens of the earlier key still verify after it, and stop once that key is retired. The key-set
 * file is checked where it enters. Through real nodes: test/e2e/run-token.test.ts.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { SignJWT, decodeJwt, decodeProtectedHeader, importJWK } from "jose";
import { generateRunTokenKey } from "../../../src/cli/run-token-keys.ts";
import {
  parseRunTokenKeySet,
  publicJwks,
  retiredRunTokenKeySet,
  rotatedRunTokenKeySet,
  serialiseRunTokenKeySet,
  type RunTokenKeySet,
} from "../../../src/secrets/run-token-keys.ts";
import {
  DEFAULT_RUN_TOKEN_START_ALLOWANCE_MS,
  RUN_TOKEN_TYP,
  RunTokenError,
  RunTokenIssuer,
  RunTokenVerifier,
  runTokenConfig,
  type AttemptGrant,
  type RunTokenRefusal,
} from "../../../src/secrets/run-token.ts";
import { isKairosError } from "../../../src/lib/errors.ts";

const NOW = Date.parse("2026-03-01T00:00:00Z");
const ISSUER = "kairos:test";
const GRANT: AttemptGrant = {
  tenant: "ta",
  job: "job1",
  run: "run1",
  attempt: 2,
  fence: 41,
  startAtMs: NOW + 30_000,
  timeoutS: 600,
};

async function oneKeySet(): Promise<RunTokenKeySet> {
  return rotatedRunTokenKeySet(undefined, await generateRunTokenKey());
}

const cfg = (keys: RunTokenKeySet) => runTokenConfig({ keys, issuer: ISSUER });

async function refusal(p: Promise<unknown>): Promise<RunTokenRefusal> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof RunTokenError, `a RunTokenError, got ${String(e)}`);
    assert.equal(e.code, "unauthenticated");
    return e.refusal;
  }
  assert.fail("the token was accepted");
}

/** The token with its payload replaced (the signature kept). */
function withPayload(token: string, payload: Record<string, unknown>): string {
  const [h, , s] = token.split(".");
  return `${h}.${Buffer.from(JSON.stringify(payload)).toString("base64url")}.${s}`;
}

describe("run tokens", () => {
  it("carry the attempt's claims, the current kid and their type; exp is start + timeout + allowance", async () => {
    const keys = await oneKeySet();
    const token = await (await RunTokenIssuer.create(cfg(keys))).mint(GRANT, NOW);
    const header = decodeProtectedHeader(token);
    assert.deepEqual(header, { alg: "EdDSA", kid: keys.keys[0]!.kid, typ: RUN_TOKEN_TYP });
    const claims = await new RunTokenVerifier(cfg(keys)).verify(token, NOW);
    const exp = Math.ceil(
      (GRANT.startAtMs + GRANT.timeoutS * 1000 + DEFAULT_RUN_TOKEN_START_ALLOWANCE_MS) / 1000,
    );
    assert.deepEqual(claims, {
      tenant: "ta",
      job: "job1",
      run: "run1",
      attempt: 2,
      fence: 41,
      iss: ISSUER,
      iat: NOW / 1000,
      exp,
    });
    // An offer made after its start time (a late re-offer) counts from now.
    const late = await (await RunTokenIssuer.create(cfg(keys))).mint(GRANT, NOW + 60_000);
    assert.equal(
      decodeJwt(late).exp,
      Math.ceil((NOW + 60_000 + 600_000 + DEFAULT_RUN_TOKEN_START_ALLOWANCE_MS) / 1000),
    );
  });

  it("are refused once expired, by the verifier's clock", async () => {
    const keys = await oneKeySet();
    const token = await (await RunTokenIssuer.create(cfg(keys))).mint(GRANT, NOW);
    const v = new RunTokenVerifier(cfg(keys));
    const expMs = decodeJwt(token).exp! * 1000;
    await v.verify(token, expMs - 1000);
    assert.equal(await refusal(v.verify(token, expMs)), "expired");
    assert.equal(await refusal(v.verify(token, expMs + 3_600_000)), "expired");
    await assert.rejects(v.verify(token, expMs), /run token refused: expired at 20/);
  });

  it("are refused with a tampered payload, a foreign signature under a known kid, or an unknown kid", async () => {
    const keys = await oneKeySet();
    const v = new RunTokenVerifier(cfg(keys));
    const token = await (await RunTokenIssuer.create(cfg(keys))).mint(GRANT, NOW);
    const other = decodeJwt(token);
    assert.equal(
      await refusal(v.verify(withPayload(token, { ...other, run: "run2" }), NOW)),
      "bad_signature",
    );
    assert.equal(
      await refusal(v.verify(withPayload(token, { ...other, tenant: "tb" }), NOW)),
      "bad_signature",
    );
    // Another key that claims the current key's kid.
    const stranger = await generateRunTokenKey();
    const forged = await new SignJWT({ ...GRANT })
      .setProtectedHeader({ alg: "EdDSA", kid: keys.keys[0]!.kid, typ: RUN_TOKEN_TYP })
      .setIssuer(ISSUER)
      .setIssuedAt(NOW / 1000)
      .setExpirationTime(NOW / 1000 + 600)
      .sign(await importJWK({ ...stranger.publicJwk, d: stranger.d! }, "EdDSA"));
    assert.equal(await refusal(v.verify(forged, NOW)), "bad_signature");
    // The stranger's own kid is not in the set.
    const strangers = rotatedRunTokenKeySet(undefined, stranger);
    const unknown = await (await RunTokenIssuer.create(cfg(strangers))).mint(GRANT, NOW);
    assert.equal(await refusal(v.verify(unknown, NOW)), "unknown_key");
    await assert.rejects(v.verify(unknown, NOW), /unknown key \(kid "/);
  });

  it("are refused with another typ or issuer, without a kid, or when not a JWS at all", async () => {
    const keys = await oneKeySet();
    const k = keys.keys[0]!;
    const v = new RunTokenVerifier(cfg(keys));
    const key = await importJWK({ ...k.publicJwk, d: k.d! }, "EdDSA");
    const sign = (header: Record<string, unknown>, iss = ISSUER, over: object = {}) =>
      new SignJWT({ tenant: "ta", job: "job1", run: "run1", attempt: 1, fence: 1, ...over })
        .setProtectedHeader({ alg: "EdDSA", ...header })
        .setIssuer(iss)
        .setIssuedAt(NOW / 1000)
        .setExpirationTime(NOW / 1000 + 600)
        .sign(key);
    // The same signer with the right header is accepted: each refusal below is its one difference.
    assert.equal((await v.verify(await sign({ kid: k.kid, typ: RUN_TOKEN_TYP }), NOW)).run, "run1");
    assert.equal(
      await refusal(v.verify(await sign({ kid: k.kid, typ: "JWT" }), NOW)),
      "wrong_type",
    );
    assert.equal(
      await refusal(v.verify(await sign({ kid: k.kid, typ: RUN_TOKEN_TYP }, "kairos:other"), NOW)),
      "wrong_issuer",
    );
    assert.equal(await refusal(v.verify(await sign({ typ: RUN_TOKEN_TYP }), NOW)), "malformed");
    const good = { kid: k.kid, typ: RUN_TOKEN_TYP };
    for (const over of [
      { attempt: 0 },
      { fence: "1" },
      { run: "a/b" },
      { tenant: 7 },
      { job: undefined },
    ]) {
      const r = await refusal(v.verify(await sign(good, ISSUER, over), NOW));
      assert.ok(r === "bad_claims", `${JSON.stringify(over)}: ${r}`);
    }
    assert.equal(await refusal(v.verify("kai_abc", NOW)), "malformed");
    assert.equal(await refusal(v.verify("e30.e30.AAAA", NOW)), "malformed");
    // alg "none" is never accepted.
    const none = `${Buffer.from(JSON.stringify({ alg: "none", kid: k.kid, typ: RUN_TOKEN_TYP })).toString("base64url")}.${Buffer.from(JSON.stringify({ tenant: "ta" })).toString("base64url")}.x`;
    assert.equal(await refusal(v.verify(none, NOW)), "malformed");
  });

  it("rotation: the earlier key's tokens verify until it is retired; only the new key signs", async () => {
    const first = await oneKeySet();
    const old = await (await RunTokenIssuer.create(cfg(first))).mint(GRANT, NOW);
    const rotated = rotatedRunTokenKeySet(first, await generateRunTokenKey());
    assert.equal(rotated.keys.length, 2);
    assert.equal(rotated.keys[1]!.kid, first.keys[0]!.kid);
    assert.equal(rotated.keys[1]!.d, undefined, "the earlier key keeps no private part");
    const issuer = await RunTokenIssuer.create(cfg(rotated));
    assert.equal(issuer.kid, rotated.keys[0]!.kid);
    const fresh = await issuer.mint(GRANT, NOW);
    const v = new RunTokenVerifier(cfg(rotated));
    assert.equal((await v.verify(old, NOW)).run, "run1");
    assert.equal((await v.verify(fresh, NOW)).run, "run1");
    // A node still on the first set does not know the new kid.
    assert.equal(await refusal(new RunTokenVerifier(cfg(first)).verify(fresh, NOW)), "unknown_key");
    const retired = retiredRunTokenKeySet(rotated, first.keys[0]!.kid);
    assert.equal(await refusal(new RunTokenVerifier(cfg(retired)).verify(old, NOW)), "unknown_key");
    assert.equal((await new RunTokenVerifier(cfg(retired)).verify(fresh, NOW)).run, "run1");
    assert.throws(() => retiredRunTokenKeySet(rotated, rotated.keys[0]!.kid), /current key/);
    // The file round-trips; the JWKS has every key and no private part.
    const again = parseRunTokenKeySet(serialiseRunTokenKeySet(rotated));
    assert.deepEqual(again, rotated);
    const jwks = publicJwks(rotated);
    assert.deepEqual(
      jwks.keys.map((k) => k.kid),
      rotated.keys.map((k) => k.kid),
    );
    assert.ok(!JSON.stringify(jwks).includes('"d"'));
    assert.ok(!JSON.stringify(new RunTokenVerifier(cfg(rotated)).jwks()).includes('"d"'));
  });

  it("a scheduler needs the current key's private part; a public-only set still verifies", async () => {
    const keys = await oneKeySet();
    const token = await (await RunTokenIssuer.create(cfg(keys))).mint(GRANT, NOW);
    const publicOnly = parseRunTokenKeySet(JSON.stringify(publicJwks(keys)));
    await assert.rejects(RunTokenIssuer.create(cfg(publicOnly)), /no private part "d"/);
    assert.equal((await new RunTokenVerifier(cfg(publicOnly)).verify(token, NOW)).fence, 41);
  });

  it("key-set files are checked where they enter", async () => {
    const a = (await generateRunTokenKey()) as { kid: string; publicJwk: object; d: string };
    const b = (await generateRunTokenKey()) as { kid: string; publicJwk: object; d: string };
    const jwk = { ...a.publicJwk, d: a.d };
    const bad: [string, RegExp][] = [
      ["not json", /not JSON/],
      ["{}", /at least one key/],
      [JSON.stringify({ keys: [] }), /at least one key/],
      [JSON.stringify({ keys: [{ ...jwk, kty: "RSA" }] }), /Ed25519/],
      [JSON.stringify({ keys: [{ ...jwk, crv: "Ed448" }] }), /Ed25519/],
      [JSON.stringify({ keys: [{ ...jwk, kid: "" }] }), /kid/],
      [JSON.stringify({ keys: [{ ...jwk, kid: "a/b" }] }), /kid/],
      [JSON.stringify({ keys: [{ ...jwk, x: "short" }] }), /\.x/],
      [JSON.stringify({ keys: [{ ...jwk, d: b.d }] }), /d does not belong to x/],
      [JSON.stringify({ keys: [{ ...jwk, alg: "RS256" }] }), /alg/],
      [JSON.stringify({ keys: [jwk, { ...b.publicJwk, kid: a.kid }] }), /same kid/],
      [
        JSON.stringify({ keys: Array.from({ length: 9 }, (_, i) => ({ ...jwk, kid: `k${i}` })) }),
        /at most 8/,
      ],
      [" ".repeat(70_000), /over 65536 bytes/],
    ];
    for (const [text, why] of bad) {
      assert.throws(
        () => parseRunTokenKeySet(text),
        (e: unknown) => isKairosError(e) && e.code === "invalid_argument" && why.test(e.message),
        text.slice(0, 80),
      );
    }
    assert.throws(
      () =>
        runTokenConfig({ keys: parseRunTokenKeySet(JSON.stringify({ keys: [jwk] })), issuer: "" }),
      /issuer/,
    );
  });
});
