/**
 * `kairos completion bash` run by a real bash: the script completes commands, options, fixed
 * option values and file names, as a user's Tab would. And the binary end to end (a child
 * process through bin/kairos.mjs): the customer commands' exit codes reach the shell.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { emptyStateDir, kairos } from "../support/cli.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const run = promisify(execFile);

describe("kairos completion bash", () => {
  let script = "";
  /** What Tab offers after `line` (the cursor at its end; a trailing space: a new word). */
  const complete = async (line: string, cwd = ROOT): Promise<string[]> => {
    const words = line.split(" ");
    const dir = mkdtempSync(join(tmpdir(), "kairos-compl-"));
    writeFileSync(join(dir, "kairos.bash"), script);
    const { stdout } = await run(
      "bash",
      [
        "-c",
        `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _kairos; printf '%s\\n' "\${COMPREPLY[@]}"`,
        "bash",
        join(dir, "kairos.bash"),
        ...words,
      ],
      { cwd },
    );
    return stdout.split("\n").filter(Boolean).sort();
  };

  it("prints a script that completes commands, options and their values", async () => {
    const r = await kairos(["completion", "bash"]);
    assert.equal(r.code, 0, r.stderr);
    script = r.stdout;
    assert.match(script, /^complete -F _kairos kairos$/m);
    const top = await complete("kairos ");
    for (const c of ["jobs", "runs", "completion", "cron", "admin", "dev"])
      assert.ok(top.includes(c), c);
    assert.deepEqual(await complete("kairos j"), ["jobs"]);
    assert.deepEqual(await complete("kairos jobs "), [
      "create",
      "delete",
      "edit",
      "get",
      "list",
      "pause",
      "resume",
      "run",
    ]);
    assert.deepEqual(await complete("kairos runs w"), ["wait"]);
    assert.deepEqual(await complete("kairos runs list --dead"), ["--dead-lettered"]);
    assert.ok((await complete("kairos jobs create --")).includes("--idempotency-key"));
    assert.deepEqual(await complete("kairos jobs create --overlap "), [
      "allow",
      "queue",
      "replace",
      "skip",
    ]);
    assert.deepEqual(await complete("kairos runs list j1 --status f"), ["failed"]);
    assert.deepEqual(
      await complete("kairos jobs edit j1 --name "),
      [],
      "a free value: nothing offered",
    );
    const dir = mkdtempSync(join(tmpdir(), "kairos-files-"));
    writeFileSync(join(dir, "spec.json"), "{}");
    assert.deepEqual(await complete("kairos jobs create --file sp", dir), ["spec.json"]);
    assert.deepEqual(
      await complete("kairos jobs create --image x -- "),
      [],
      "after --: the task's own args",
    );
  });

  it("another shell is a usage error", async () => {
    const r = await kairos(["completion", "fish"]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /only bash is supported, got "fish"/);
  });
});

describe("the kairos binary: exit codes reach the shell", () => {
  const bin = (args: string[], env: Record<string, string>) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
      const child = spawn(process.execPath, ["bin/kairos.mjs", ...args], {
        cwd: ROOT,
        env: { PATH: process.env["PATH"] ?? "", KAIROS_STATE_DIR: emptyStateDir(), ...env },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
      child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
      child.on("error", reject);
      child.on("close", (code) => resolve({ code, stdout, stderr }));
    });

  it("usage 2, no key 3, unreachable API 6 (--json: one JSON line), help 0", async () => {
    const [usage, noKey, down, help] = await Promise.all([
      bin(["jobs", "create", "--overlap", "never"], {}),
      bin(["runs", "get", "r1"], { KAIROS_API_URL: "http://127.0.0.1:9" }),
      bin(["jobs", "list", "--json"], {
        KAIROS_API_URL: "http://127.0.0.1:9",
        KAIROS_API_KEY: "kai_x",
      }),
      bin(["jobs", "--help"], {}),
    ]);
    assert.equal(usage.code, 2, usage.stderr);
    assert.match(usage.stderr, /Allowed choices are skip, queue, allow, replace/);
    assert.equal(noKey.code, 3, noKey.stderr);
    assert.match(
      noKey.stderr,
      /no API key for http:\/\/127\.0\.0\.1:9: pass --api-key or set KAIROS_API_KEY/,
    );
    assert.equal(down.code, 6, down.stderr);
    const e = JSON.parse(down.stderr) as { error: { code: string; message: string } };
    assert.equal(e.error.code, "unavailable");
    assert.equal(down.stdout, "");
    assert.equal(help.code, 0, help.stderr);
    assert.match(help.stdout, /create \[options\] \[args\.\.\.\]/);
  });
});
