/**
 * `kairos run-token-keys`: the operator's Ed25519 key set that signs `KAIROS_RUN_TOKEN`
 * (src/secrets/run-token-keys.ts; docs/security.md, "Per-run credentials").
 *
 *   kairos run-token-keys new <file>           a set of one new key (refuses an existing file)
 *   kairos run-token-keys rotate <file>        a new current key first; earlier keys verify only
 *   kairos run-token-keys retire <file> <kid>  drops an earlier key once its tokens have expired
 *   kairos run-token-keys public <file>        prints the public JWK Set (for API-only nodes)
 *
 * Files are written with mode 0600, through a temporary file renamed over the old one, so a
 * node reading the file at its start sees the old set or the new one, never half of one. Nodes
 * read the set once, at start: restart API nodes first after a rotation, then schedulers.
 */
import type { Command } from "commander";
import { generateKeyPairSync } from "node:crypto";
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { calculateJwkThumbprint } from "jose";
import { KairosError } from "../lib/errors.ts";
import {
  parseRunTokenKeySet,
  publicJwks,
  retiredRunTokenKeySet,
  rotatedRunTokenKeySet,
  runTokenKeyFromJwk,
  serialiseRunTokenKeySet,
  type RunTokenKey,
  type RunTokenKeySet,
} from "../secrets/run-token-keys.ts";

/** A fresh Ed25519 key; its kid is its RFC 7638 thumbprint. */
export async function generateRunTokenKey(): Promise<RunTokenKey> {
  const { privateKey } = generateKeyPairSync("ed25519");
  const jwk = privateKey.export({ format: "jwk" });
  const x = String(jwk.x);
  const kid = await calculateJwkThumbprint({ kty: "OKP", crv: "Ed25519", x });
  return runTokenKeyFromJwk({ x, d: String(jwk.d) }, kid);
}

/** Reads a key-set file (invalid_argument naming it when unreadable or invalid). */
export function readRunTokenKeysFile(path: string): RunTokenKeySet {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new KairosError(
      "invalid_argument",
      `--run-token-keys: cannot read ${path}: ${(e as Error).message}`,
      { field: "run-token-keys" },
    );
  }
  try {
    return parseRunTokenKeySet(text);
  } catch (e) {
    throw new KairosError("invalid_argument", `${path}: ${(e as Error).message}`, {
      field: "run-token-keys",
    });
  }
}

function writeSet(path: string, set: RunTokenKeySet, exclusive: boolean): void {
  if (exclusive) {
    writeFileSync(path, serialiseRunTokenKeySet(set), { mode: 0o600, flag: "wx" });
    return;
  }
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, serialiseRunTokenKeySet(set), { mode: 0o600, flag: "wx" });
  renameSync(tmp, path);
}

/** Creates `path` holding one new key (nothing if it exists and `ifMissing`). */
export async function newRunTokenKeysFile(path: string, ifMissing = false): Promise<string> {
  if (ifMissing && existsSync(path)) return path;
  writeSet(path, rotatedRunTokenKeySet(undefined, await generateRunTokenKey()), true);
  return path;
}

export function registerRunTokenKeysCommand(program: Command): void {
  const cmd = program
    .command("run-token-keys")
    .description("the Ed25519 key set that signs KAIROS_RUN_TOKEN (docs/security.md)");
  cmd
    .command("new <file>")
    .description("write a key set of one new key (mode 0600); refuses an existing file")
    .action(async (file: string) => {
      await newRunTokenKeysFile(file);
      console.log(`${file}: current key ${readRunTokenKeysFile(file).keys[0]!.kid}`);
    });
  cmd
    .command("rotate <file>")
    .description(
      "put a new current key first; earlier keys stay (public part only) to verify tokens they signed",
    )
    .action(async (file: string) => {
      const set = rotatedRunTokenKeySet(readRunTokenKeysFile(file), await generateRunTokenKey());
      writeSet(file, set, false);
      console.log(
        `${file}: current key ${set.keys[0]!.kid}; verifying also ${set.keys
          .slice(1)
          .map((k) => k.kid)
          .join(", ")}. Restart API nodes first, then schedulers.`,
      );
    });
  cmd
    .command("retire <file> <kid>")
    .description("drop an earlier key (once every token it signed has expired)")
    // A kid is base64url and may begin with "-": an operand here, not an unknown option.
    .allowUnknownOption()
    .action((file: string, kid: string) => {
      writeSet(file, retiredRunTokenKeySet(readRunTokenKeysFile(file), kid), false);
      console.log(`${file}: ${kid} retired`);
    });
  cmd
    .command("public <file>")
    .description("print the public keys as a JWK Set (a key-set file for API-only nodes)")
    .action((file: string) => {
      console.log(JSON.stringify(publicJwks(readRunTokenKeysFile(file)), null, 2));
    });
}
