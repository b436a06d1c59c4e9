/**
 * The generated NATS users (src/dev/nats-auth-files.ts) and how a node finds its own: workers
 * get one pinned user each by default, the shared `worker` user only on request, and a
 * worker-only node of the dev cluster picks its pinned user's credentials.
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeNatsAuthFiles } from "../../../src/dev/nats-auth-files.ts";
import { nodeConfigFromFlags } from "../../../src/cli/node-flags.ts";
import { parseWorkerIds } from "../../../src/cli/dev-file.ts";
import { isKairosError } from "../../../src/lib/errors.ts";

const dir = mkdtempSync(join(tmpdir(), "kairos-auth-files-"));
after(() => rmSync(dir, { recursive: true, force: true }));

describe("generated NATS users", () => {
  it("per-worker users by default; the shared worker user only with sharedWorker", () => {
    const a = writeNatsAuthFiles(join(dir, "a"), ["kairos"], ["w1", "w2"]);
    assert.deepEqual(
      Object.keys(a.creds)
        .filter((u) => u.startsWith("worker"))
        .sort(),
      ["worker-w1", "worker-w2"],
    );
    assert.throws(() => a.credsFor(["worker"]), /credsForWorker/);
    assert.ok(
      a.credsFor(["scheduler", "worker"]),
      "role sets with api or scheduler are generated as before",
    );
    const conf = readFileSync(a.configFile, "utf8");
    assert.match(conf, /"kairos\.kairos\.w\.\*\.w1"/);
    assert.doesNotMatch(conf, /"user": "worker"/);
    const b = writeNatsAuthFiles(join(dir, "b"), ["kairos"], [], [], { sharedWorker: true });
    assert.ok(b.credsFor(["worker"]));
  });

  it("--workers ids are validated", () => {
    assert.deepEqual(parseWorkerIds("w1, w2,w1"), ["w1", "w2"]);
    for (const bad of ["w.1", "w*", "a b", "x".repeat(65)])
      assert.throws(
        () => parseWorkerIds(bad),
        (e: unknown) => isKairosError(e, "invalid_argument"),
        bad,
      );
  });

  it("a worker-only node of the dev cluster uses its pinned user; other nodes their role set's", () => {
    const state = join(dir, "state");
    const files = writeNatsAuthFiles(join(state, "nats-auth"), ["kairos"], ["w1"]);
    const prev = process.env["KAIROS_STATE_DIR"];
    process.env["KAIROS_STATE_DIR"] = state;
    try {
      writeFileSync(
        join(state, "dev.json"),
        JSON.stringify({ nats_url: "nats://127.0.0.1:1", nats_creds: files.creds }),
      );
      assert.equal(
        nodeConfigFromFlags({ roles: "worker", nodeId: "w1" }, "nats://127.0.0.1:1").natsAuth
          .credsFile,
        files.creds["worker-w1"],
      );
      assert.equal(
        nodeConfigFromFlags({ roles: "scheduler,worker", nodeId: "w1" }, "nats://127.0.0.1:1")
          .natsAuth.credsFile,
        files.creds["scheduler_worker"],
      );
      // No pinned user for this id (and no shared one): no credentials, so the server refuses it.
      assert.equal(
        nodeConfigFromFlags({ roles: "worker", nodeId: "w9" }, "nats://127.0.0.1:1").natsAuth
          .credsFile,
        undefined,
      );
    } finally {
      if (prev === undefined) delete process.env["KAIROS_STATE_DIR"];
      else process.env["KAIROS_STATE_DIR"] = prev;
    }
  });
});
