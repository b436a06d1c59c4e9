/**
 * The fresh-clone check's parsing (scripts/check-fresh-clone.ts): it finds the README's start
 * command, quick-start block and promised result by their markers, reads curl's and jq's output
 * as JSON values, and reads terminal output as a person sees it. The check itself runs in
 * test/e2e/fresh-clone.test.ts.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import {
  jsonValues,
  readQuickStart,
  terminalLines,
  userEnv,
} from "../../../scripts/check-fresh-clone.ts";

describe("fresh-clone check: parsing", () => {
  it("finds the README's start command, quick start and promised result", () => {
    const q = readQuickStart(readFileSync(new URL("../../../README.md", import.meta.url), "utf8"));
    assert.equal(q.startCommand, "npm start");
    assert.match(
      q.block,
      /^export KAIROS_API=.*\n[\s\S]*jq '\.runs\[0\] \| \{status, result\}'\n$/,
    );
    assert.deepEqual(q.expect, {
      status: "succeeded",
      exitCode: 0,
      output: "hello from <run id>\n",
    });
  });

  it("fails loudly when a marker or the promised result is missing", () => {
    assert.throws(() => readQuickStart("# no markers\n"), /marker <!-- fresh-clone-check: start/);
    const md =
      "<!-- fresh-clone-check: start -->\n```sh\nnpm start\n```\n<!-- fresh-clone-check: quick-start -->\n```sh\necho hi\n```\n<!-- fresh-clone-check: end -->\n\nIt prints hi.\n";
    assert.throws(() => readQuickStart(md), /must name "status", "exit_code" and "output"/);
  });

  it("reads JSON values printed back to back", () => {
    assert.deepEqual(
      jsonValues(
        '{"run_id":"r1","x":"}{"}{\n  "status": "succeeded",\n  "result": {"output": "a\\"b"}\n}\n',
      ),
      [
        { run_id: "r1", x: "}{" },
        { status: "succeeded", result: { output: 'a"b' } },
      ],
    );
  });

  it("reads terminal output as a person sees it", () => {
    assert.deepEqual(
      terminalLines(
        "a\r\n⠙\x1b[1G\x1b[0K⠹\x1b[1G\x1b[0Kadded 3\r\n\x1b[1mbold\x1b[0m\r\n⠙\x1b[1G\x1b[0K",
      ),
      ["a", "added 3", "bold", ""],
    );
  });

  it("gives the clone a user's environment", () => {
    const env = userEnv({
      PATH: "/bin",
      KAIROS_API: "x",
      npm_lifecycle_event: "test",
      NODE_TEST_CONTEXT: "child",
      HOME: "/root",
    });
    assert.deepEqual(env, { PATH: "/bin", HOME: "/root", TERM: "xterm" });
  });
});
