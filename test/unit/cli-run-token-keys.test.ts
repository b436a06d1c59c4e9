/**
 * `kairos run-token-keys new|rotate|retire|public` and `--run-token-keys` (src/cli/run-token-keys.ts,
 * src/cli/node.ts): files made with mode 0600 holding a valid set, rotation puts a new signing key
 * first and keeps the earlier one public-only, retire drops it (never the current key), public
 * prints no private part, and the node flag reads the set into the node's config (issuer
 * `kairos:<cluster>`), refusing an unreadable or malformed file with a message naming the flag.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Command } from "commander";
import { readRunTokenKeysFile, registerRunTokenKeysCommand } from "../../src/cli/run-token-keys.ts";
import { runTokensFromFlag } from "../../src/cli/node.ts";
import { isKairosError } from "../../src/lib/errors.ts";

async function kairos(...args: string[]): Promise<string> {
  const program = new Command("kairos").exitOverride();
  registerRunTokenKeysCommand(program);
  const out: string[] = [];
  const log = console.log;
  console.log = (...a: unknown[]) => out.push(a.join(" "));
  try {
    await program.parseAsync(["node", "kairos", ...args]);
  } finally {
    console.log = log;
  }
  return out.join("\n");
}

describe("kairos run-token-keys", () => {
  it("retires a key whose kid begins with a dash (base64url thumbprints can)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "kairos-rtk-"));
    const file = join(dir, "keys.json");
    await kairos("run-token-keys", "new", file);
    await kairos("run-token-keys", "rotate", file);
    const set = JSON.parse(readFileSync(file, "utf8")) as { keys: { kid: string }[] };
    set.keys[1]!.kid = "-dashed_kid";
    writeFileSync(file, JSON.stringify(set), { mode: 0o600 });
    assert.match(
      await kairos("run-token-keys", "retire", file, "-dashed_kid"),
      /-dashed_kid retired/,
    );
    assert.deepEqual(
      readRunTokenKeysFile(file).keys.map((k) => k.kid),
      [set.keys[0]!.kid],
    );
  });

  it("new, rotate, public and retire", async () => {
    const dir = mkdtempSync(join(tmpdir(), "kairos-rtk-"));
    const file = join(dir, "keys.json");
    await kairos("run-token-keys", "new", file);
    assert.equal(statSync(file).mode & 0o777, 0o600);
    const first = readRunTokenKeysFile(file);
    assert.equal(first.keys.length, 1);
    assert.ok(first.keys[0]!.d, "the new key has its private part");
    await assert.rejects(kairos("run-token-keys", "new", file), /EEXIST/);

    await kairos("run-token-keys", "rotate", file);
    assert.equal(statSync(file).mode & 0o777, 0o600);
    const rotated = readRunTokenKeysFile(file);
    assert.deepEqual(
      rotated.keys.map((k) => k.kid),
      [rotated.keys[0]!.kid, first.keys[0]!.kid],
    );
    assert.notEqual(rotated.keys[0]!.kid, first.keys[0]!.kid);
    assert.ok(rotated.keys[0]!.d);
    assert.equal(rotated.keys[1]!.d, undefined, "the earlier key is public-only after a rotation");

    const pub = JSON.parse(await kairos("run-token-keys", "public", file)) as {
      keys: Record<string, unknown>[];
    };
    assert.equal(pub.keys.length, 2);
    assert.ok(pub.keys.every((k) => !("d" in k)));

    await assert.rejects(
      kairos("run-token-keys", "retire", file, rotated.keys[0]!.kid),
      /current key: rotate first/,
    );
    await kairos("run-token-keys", "retire", file, first.keys[0]!.kid);
    assert.deepEqual(
      readRunTokenKeysFile(file).keys.map((k) => k.kid),
      [rotated.keys[0]!.kid],
    );
  });

  it("--run-token-keys reads the set into the config; a bad file is refused naming the flag", async () => {
    const dir = mkdtempSync(join(tmpdir(), "kairos-rtk-"));
    const file = join(dir, "keys.json");
    await kairos("run-token-keys", "new", file);
    assert.deepEqual(runTokensFromFlag(undefined, "c1"), {});
    const cfg = runTokensFromFlag(file, "c1").runTokens!;
    assert.equal(cfg.issuer, "kairos:c1");
    assert.equal(cfg.keys.keys.length, 1);
    assert.ok(Object.isFrozen(cfg) && Object.isFrozen(cfg.keys));
    const bad = join(dir, "bad.json");
    writeFileSync(bad, '{"keys": [{"kty": "RSA"}]}');
    for (const path of [join(dir, "missing.json"), bad]) {
      assert.throws(
        () => runTokensFromFlag(path, "c1"),
        (e: unknown) =>
          isKairosError(e, "invalid_argument") &&
          e.field === "run-token-keys" &&
          e.message.includes(path),
        path,
      );
    }
  });
});
