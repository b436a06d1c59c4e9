/**
 * The lock-down of the docker executor, checked from inside real containers: memory limit
 * (OOM reported as such), pids limit (fork bomb contained), read-only root with a noexec
 * /tmp, no network (only lo; the host's loopback services are unreachable), non-root user
 * without capabilities.
 */
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:net";
import {
  createExecutor,
  isRetryable,
  type Executor,
  type TaskSpec,
} from "../../../src/sandbox/index.ts";
import { dockerSkip, ensureTestImage, removeWorkerContainers } from "../../support/docker-image.ts";
import { identity, uniqueWorkerId } from "./fixtures.ts";
import { MARK_OOM } from "../../../src/sandbox/supervisor.ts";

const workerId = uniqueWorkerId("w-docker-lock");
const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

describe("docker executor: lock-down", { skip: dockerSkip() }, () => {
  let ex: Executor;
  let image: string;
  const t = (args: string[], extra: Partial<TaskSpec> = {}): TaskSpec => ({
    image,
    args,
    env: {},
    timeoutS: 30,
    ...extra,
  });
  const run = (args: string[], extra: Partial<TaskSpec> = {}) =>
    ex.start(t(args, extra), identity(workerId)).result;

  before(async () => {
    image = await ensureTestImage();
    ex = await createExecutor("docker", { workerId });
  });
  after(async () => {
    await ex?.close();
    await removeWorkerContainers(workerId);
  });

  it("reports a memory hog over its limit as oom, retryable", async () => {
    const r = await run(["sh", "-c", "x=$(yes | head -c 200000000); echo ${#x}"], {
      resources: { memoryMb: 32 },
    });
    assert.equal(r.outcome, "oom", JSON.stringify(r));
    assert.equal(isRetryable(r), true);
    assert.match(r.output, /out of memory \(OOM, limit 32 MiB\)/);
    // The supervisor's own reading of the cgroup's counter, which holds when the engine's flag
    // misses the kill (its OOM event after the exit event: docker-lockdown failed so, once, in CI).
    // A writer still filling the pipe can draw a second kill (count 2) before the first frees.
    assert.match(r.output, new RegExp(`${escape(MARK_OOM)}[12]\n`), r.output);
  });

  it("takes the supervisor's marker for an OOM kill when the engine's flag says none", async () => {
    // The engine saw no OOM here; the marker alone must decide, as when its OOM event comes late.
    const r = await run(["sh", "-c", `printf '%s1\\n' '${MARK_OOM}' >&2; exit 137`], {
      resources: { memoryMb: 32 },
    });
    assert.equal(r.outcome, "oom", JSON.stringify(r));
    assert.equal(r.exitCode, 137);
  });

  it("marks no OOM for a task that failed otherwise, nor for one that survived a killed child", async () => {
    const failed = await run(["sh", "-c", "echo no-memory-trouble; exit 3"], {
      resources: { memoryMb: 32 },
    });
    assert.equal(failed.outcome, "exited", JSON.stringify(failed));
    assert.equal(failed.exitCode, 3);
    assert.ok(!failed.output.includes(MARK_OOM), failed.output);
    // One hog process, no pipe: a writer left allocating could draw a second kill, which the
    // kernel may give the surviving shell itself (a task process, like the child).
    const hog = `awk 'BEGIN { s = "x"; while (1) s = s s }'`;
    const survived = await run(["sh", "-c", `(${hog}); echo survived`], {
      resources: { memoryMb: 32 },
    });
    assert.equal(survived.outcome, "exited", JSON.stringify(survived));
    assert.equal(survived.exitCode, 0);
    assert.match(survived.output, /survived/);
    assert.ok(!survived.output.includes(MARK_OOM), survived.output);
  });

  it("contains a fork bomb with the pids limit", async () => {
    const r = await run(
      ["sh", "-c", "for i in $(seq 1 200); do sleep 5 & done; wait; echo all-forked"],
      { resources: { pids: 16 }, timeoutS: 20 },
    );
    assert.match(r.output, /can't fork|Resource temporarily unavailable/, JSON.stringify(r));
    assert.doesNotMatch(r.output, /all-forked/);
    assert.ok(r.outcome === "exited" || r.outcome === "timed_out", r.outcome);
    assert.ok(r.outcome === "timed_out" || r.exitCode !== 0);
  });

  it("makes the root filesystem read-only and /tmp writable but not executable", async () => {
    const r = await run([
      "sh",
      "-c",
      "touch /etc/x || echo ROOT-DENIED; touch /tmp/x && echo TMP-OK; cp /bin/busybox /tmp/bb && chmod +x /tmp/bb && { /tmp/bb true || echo TMP-NOEXEC; }",
    ]);
    assert.equal(r.outcome, "exited", JSON.stringify(r));
    assert.match(r.output, /Read-only file system/);
    assert.match(r.output, /ROOT-DENIED/);
    assert.match(r.output, /TMP-OK/);
    assert.match(r.output, /TMP-NOEXEC/);
  });

  it("has no network: only lo, and the host's loopback services are unreachable", async () => {
    let connections = 0;
    const server: Server = createServer((s) => {
      connections++;
      s.destroy();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as { port: number }).port;
    try {
      const r = await run([
        "sh",
        "-c",
        `echo IFACES=$(ls /sys/class/net); echo LINKS=$(ip -o link | wc -l) LO=$(ip -o link | grep -c ': lo:'); ` +
          `echo hi | nc -w 2 127.0.0.1 ${port}; echo NC_HOST=$?; echo hi | nc -w 2 10.255.255.1 80; echo NC_OUT=$?; wget -q -T 2 -O- http://10.255.255.1/ >/dev/null 2>&1; echo WGET=$?`,
      ]);
      assert.match(r.output, /IFACES=lo\n/, r.output);
      assert.match(r.output, /LINKS=1 LO=1\n/, "ip link lists lo and nothing else");
      assert.match(r.output, /NC_HOST=[1-9]/);
      assert.match(r.output, /Network is unreachable/);
      assert.match(r.output, /NC_OUT=[1-9]/);
      assert.match(r.output, /WGET=[1-9]/);
      assert.equal(connections, 0, "the container reached a host loopback service");
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it("mounts the deadline supervisor's busybox read-only", async () => {
    const r = await run([
      "sh",
      "-c",
      "echo x > /.kairos/busybox || echo BB-RO; grep -c ' /.kairos/busybox ' /proc/self/mounts; grep ' /.kairos/busybox ' /proc/self/mounts",
    ]);
    assert.equal(r.outcome, "exited", JSON.stringify(r));
    assert.match(r.output, /Read-only file system/);
    assert.match(r.output, /BB-RO/);
    assert.match(r.output, /^1$/m);
    assert.match(r.output, /\/\.kairos\/busybox \S+ ro[ ,]/);
  });

  it("runs as nobody without capabilities and with no-new-privileges", async () => {
    const r = await run([
      "sh",
      "-c",
      "echo uid=$(id -u) gid=$(id -g); grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status",
    ]);
    assert.match(r.output, /uid=65534 gid=65534/);
    assert.match(r.output, /CapEff:\s+0000000000000000/);
    assert.match(r.output, /CapBnd:\s+0000000000000000/);
    assert.match(r.output, /NoNewPrivs:\s+1/);
  });
});
