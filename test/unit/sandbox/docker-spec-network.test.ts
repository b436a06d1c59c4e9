/**
 * The container's network settings (src/sandbox/docker-spec.ts): a task without egress has no
 * network at all; an egress task is on the task network only, with IPv6 off and the proxy
 * variables (carrying the attempt's credential) overriding any of the task's own.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { containerSpec } from "../../../src/sandbox/docker-spec.ts";
import { resolveExecutorOptions } from "../../../src/sandbox/options.ts";
import type { RunIdentity, TaskSpec } from "../../../src/sandbox/types.ts";

const cfg = resolveExecutorOptions({ workerId: "w1" }).docker;
const id: RunIdentity = {
  runId: "r1",
  attempt: 1,
  jobId: "j1",
  tenantId: "t1",
  scheduledFor: "2026-01-01T00:00:00Z",
  workerId: "w1",
  fence: 1,
};
const limits = { memoryMb: 64, cpus: 1, pids: 32 };
const task: TaskSpec = {
  image: "busybox",
  args: ["true"],
  env: { HTTP_PROXY: "http://evil.example:8080", A: "1" },
  timeoutS: 10,
};
const run = { command: ["true"], deadlineAtMs: 0 };

describe("container network", () => {
  it("without egress: no network at all, no proxy variables of ours", () => {
    const spec = containerSpec(task, id, limits, cfg, "w1", run);
    assert.equal(spec.NetworkDisabled, true);
    assert.equal(spec.HostConfig?.NetworkMode, "none");
    assert.equal(spec.HostConfig?.Sysctls, undefined);
    assert.ok(spec.Env?.includes("HTTP_PROXY=http://evil.example:8080"), "the task's own value");
  });

  it("with egress: the task network only, IPv6 off, the proxy with the attempt's credential", () => {
    const proxyUrl = "http://r1-1:secret@172.30.0.1:3128";
    const spec = containerSpec(
      { ...task, egress: { allow: ["example.com"] } },
      id,
      limits,
      cfg,
      "w1",
      {
        ...run,
        egress: { network: "kairos-tasks", proxyUrl },
      },
    );
    assert.equal(spec.NetworkDisabled, false);
    assert.equal(spec.HostConfig?.NetworkMode, "kairos-tasks");
    assert.equal(spec.HostConfig?.Sysctls?.["net.ipv6.conf.all.disable_ipv6"], "1");
    const env = new Map(
      spec.Env?.map((e) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)]),
    );
    for (const k of ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"])
      assert.equal(env.get(k), proxyUrl, k);
    assert.equal(env.get("NO_PROXY"), "localhost,127.0.0.1,::1");
    assert.equal(env.get("A"), "1");
    assert.equal(spec.Env?.filter((e) => e.startsWith("HTTP_PROXY=")).length, 1);
    assert.deepEqual(spec.HostConfig?.CapDrop, ["ALL"], "still no capability to change the routes");
  });
});
