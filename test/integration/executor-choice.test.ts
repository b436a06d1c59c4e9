/**
 * A `kairos node` worker never falls back to running tenant code unisolated: without
 * `--executor` it uses docker and, when no engine answers, refuses to start (exit ≠ 0, the
 * reason on stderr). `--executor process` is the explicit choice and prints a loud warning.
 * Only `kairos dev` may fall back (chooseExecutor's `processFallback`).
 */
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chooseExecutor } from "../../src/cli/node.ts";
import { startNats, type NatsFixture } from "../support/nats.ts";
import { openBuckets } from "../../src/cluster/buckets.ts";
import { encode } from "../../src/cluster/codec.ts";

/** Runs `kairos node` until it prints `until` on stdout (then SIGTERM) or exits; returns its exit code and stderr. */
function runNode(
  nats: NatsFixture,
  extra: string[],
  env: Record<string, string>,
  until?: RegExp,
): Promise<{ code: number | null; stderr: string; matched: boolean }> {
  const child = spawn(
    process.execPath,
    [
      "--import",
      "tsx",
      "src/cli/main.ts",
      "node",
      "--nats",
      nats.url,
      "--nats-creds",
      nats.credsFor(["worker"]),
      "--roles",
      "worker",
      "--node-id",
      `choice-${process.pid}`,
      ...extra,
    ],
    {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, ...env },
    },
  );
  let stderr = "";
  let matched = false;
  const kill = setTimeout(() => child.kill("SIGKILL"), 60_000);
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  child.stdout.setEncoding("utf8").on("data", (d: string) => {
    if (until && !matched && until.test(d)) {
      matched = true;
      child.kill("SIGTERM");
    }
  });
  return new Promise((resolve) =>
    child.on("exit", (code) => {
      clearTimeout(kill);
      resolve({ code, stderr, matched });
    }),
  );
}

describe("executor choice", { timeout: 120_000 }, () => {
  let nats: NatsFixture;
  before(async () => {
    nats = await startNats();
    // A worker identity may not create the cluster: a scheduler (here, admin) does it first.
    const nc = await nats.connect("executor-choice-admin");
    const b = await openBuckets(nc, { clusterName: "kairos", replicas: 1 });
    await b.cluster.create("config", encode({ partitions: 4 }));
    await nc.close();
  });
  after(async () => {
    await nats?.stop();
  });

  it("kairos node without --executor and without an engine refuses to start; no process fallback", async () => {
    const r = await runNode(nats, [], {
      DOCKER_HOST: "unix:///nonexistent/kairos-test-docker.sock",
    });
    assert.notEqual(r.code, 0, r.stderr);
    assert.match(r.stderr, /the docker executor needs a Docker engine, but none answered/);
  });

  it("--executor process starts, with a loud warning", async () => {
    const r = await runNode(nats, ["--executor", "process"], {}, /"evt":"node_started"/);
    assert.ok(r.matched, r.stderr);
    assert.match(r.stderr, /WITHOUT ANY ISOLATION/);
  });

  it("only dev mode detects and may fall back", async () => {
    assert.equal((await chooseExecutor(undefined)).kind, "docker");
    const prev = process.env["DOCKER_HOST"];
    process.env["DOCKER_HOST"] = "unix:///nonexistent/kairos-test-docker.sock";
    try {
      const dev = await chooseExecutor(undefined, { processFallback: true });
      assert.equal(dev.kind, "process");
      assert.match(dev.reason, /WITHOUT ANY ISOLATION/);
    } finally {
      if (prev === undefined) delete process.env["DOCKER_HOST"];
      else process.env["DOCKER_HOST"] = prev;
    }
  });
});
