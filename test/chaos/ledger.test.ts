/**
 * Ledger chaos on real processes (engine: ./ledger-harness.ts). Every execution of every attempt
 * is written down by the task itself (process executor) or taken from the Docker engine's event
 * stream (docker executor) while a seeded schedule of faults runs: kill -9 / SIGTERM of
 * schedulers, kill -9 and SIGSTOP of workers, a NATS server restart, and a worker cut off from
 * NATS through a TCP proxy. Afterwards: (a) no attempt executed twice, (b) no two executions of
 * a run overlapping, (c) exactly one run record per occurrence, (d) no run stuck, (e) no tenant
 * above its max_concurrent_runs, (f) no run executed again after an execution that ended by itself
 * (unless its worker or NATS had a fault in between). The long version is `npm run chaos -- --minutes 20`.
 *
 * KAIROS_CHAOS_SEED=<n> replays a fault schedule; KAIROS_CHAOS_KEEP=1 keeps the ledger folder.
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createConnection, createServer, type Socket } from "node:net";
import { once } from "node:events";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { dockerSkip, ensureTestImage } from "../support/docker-image.ts";
import { startTcpProxy } from "../support/tcp-proxy.ts";
import {
  FAULT_KINDS, checkAttempts, checkRunAgain, checkTenantCaps, closeOpen, executing, formatReport, ledgerClockWorks, prng, runLedgerChaos,
  type ChaosOptions, type Exec, type FaultKind, type FaultRecord,
} from "./ledger-harness.ts";

const SEED = Number(process.env["KAIROS_CHAOS_SEED"] ?? 7321);

/**
 * Every fault kind once, in an order drawn from the seed, then a second cut-off: a worker cut
 * from NATS while it holds claimed attempts is the likeliest way to run one twice.
 */
function plan(seed: number): FaultKind[] {
  const rng = prng(seed ^ 0x5eed);
  const xs = [...FAULT_KINDS];
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
  return [...xs, "cut_worker"];
}

describe("ledger chaos (real processes)", { timeout: 420_000 }, () => {
  const stops: (() => Promise<void>)[] = [];
  after(async () => {
    await Promise.all(stops.map((s) => s()));
  });

  it("a killed task that is still a zombie (its frozen worker has not reaped it) no longer executes", async () => {
    // `sleep 0.05` is a child of a shell that then execs `sleep 30`, which never reaps it.
    const parent = spawn("/bin/sh", ["-c", "sleep 0.05 & echo $!; exec sleep 30"], { stdio: ["ignore", "pipe", "ignore"] });
    try {
      const [line] = (await once(parent.stdout, "data")) as [Buffer];
      const pid = Number(line.toString().trim());
      assert.ok(executing(parent.pid!), "a live process executes");
      const deadline = Date.now() + 5000;
      const stateOf = () => { try { const st = readFileSync(`/proc/${pid}/stat`, "utf8"); return st.slice(st.lastIndexOf(")") + 2, st.lastIndexOf(")") + 3); } catch { return "gone"; } };
      while (stateOf() !== "Z" && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      assert.equal(stateOf(), "Z", "the child is a zombie");
      assert.doesNotThrow(() => process.kill(pid, 0), "kill(pid, 0) still succeeds on a zombie");
      assert.equal(executing(pid), false);
    } finally {
      parent.kill("SIGKILL");
    }
  });

  it("the TCP proxy forwards, black-holes (holding bytes until healed) and resets", async () => {
    const echo = createServer((s) => s.pipe(s));
    echo.listen(0, "127.0.0.1");
    await once(echo, "listening");
    const proxy = await startTcpProxy((echo.address() as { port: number }).port);
    const sockets: Socket[] = [];
    try {
      const client = createConnection({ port: proxy.port, host: "127.0.0.1" });
      sockets.push(client);
      await once(client, "connect");
      let got = "";
      client.setEncoding("utf8").on("data", (d: string) => (got += d));
      const received = async (want: string) => {
        const deadline = Date.now() + 5000;
        while (got !== want && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
        assert.equal(got, want);
      };
      client.write("a");
      await received("a");
      proxy.cut("blackhole");
      client.write("b");
      const late = createConnection({ port: proxy.port, host: "127.0.0.1" }); // accepted, never forwarded
      sockets.push(late);
      await once(late, "connect");
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(got, "a", "nothing crosses a cut");
      assert.deepEqual(proxy.stats(), { pairs: 1, blackholed: 1 });
      const lateClosed = once(late, "close");
      proxy.heal();
      await received("ab");
      await lateClosed;
      proxy.cut("reset");
      await once(client, "close");
      proxy.heal();
    } finally {
      for (const s of sockets) s.destroy();
      await proxy.close();
      echo.close();
    }
  });

  it("the ledger checks flag what they must, and only that", () => {
    const x = (run: string, fence: number, worker: string, startMs: number, endMs: number | undefined, tenant = "t"): Exec =>
      ({ run, attempt: fence, fence, worker, tenant, key: `${run}/${fence}/${worker}/${startMs}`, startMs, endMs, how: endMs === undefined ? "open" : "end" });
    const execs = [
      x("r1", 1, "w1", 0, 1000), x("r1", 2, "w2", 1000, 2000), // back to back: fine
      x("r2", 1, "w1", 0, 3000), x("r2", 2, "w2", 2500, 4000), // overlap
      x("r3", 5, "w1", 0, 500), x("r3", 5, "w2", 600, 900), // one attempt twice, no overlap
      x("r4", 1, "w3", 0, undefined), x("r4", 2, "w1", 5000, 6000), // w3 killed at 4000: fine
    ];
    assert.equal(closeOpen(execs, new Map([["w3", [4000]]]), 10_000), 0);
    const { a, b } = checkAttempts(execs, [], 3000);
    assert.deepEqual(a.map((v) => v.text.split(" ")[1]), ["r3/5"]);
    assert.equal(b.length, 1);
    assert.match(b[0]!.text, /^run r2: .* by 500 ms \(a newer attempt started while an older execution was still running\)$/);
    const caps = checkTenantCaps([x("a", 1, "w1", 0, 100, "c"), x("b", 1, "w1", 50, 150, "c"), x("c", 1, "w2", 60, 70, "c"), x("c", 2, "w2", 100, 200, "c")], new Map([["c", 2]]), [], 3000);
    assert.equal(caps.max.get("c"), 3);
    assert.equal(caps.e.length, 1);
    // (f): r1 and r3 ran again after an execution that ended by itself; r2's second began before
    // the first ended (that is b), r4's first was killed with its worker.
    assert.deepEqual(checkRunAgain(execs, [], 3000).map((v) => v.text.split(":")[0]), ["run r1", "run r3"]);
    const fault = (kind: FaultKind, target: string, atMs: number): FaultRecord => ({ kind, target, atMs, liftedMs: atMs + 100, recoveredMs: atMs + 200, detail: "" });
    assert.deepEqual(checkRunAgain(execs, [fault("sigstop_worker", "w1", 300)], 3000).map((v) => v.text.split(":")[0]), [], "a fault on the first worker between the two starts exempts both");
    assert.deepEqual(checkRunAgain(execs, [fault("nats_restart", "nats:1", 800)], 3000).map((v) => v.text.split(":")[0]), ["run r3"], "a NATS restart exempts what it overlaps (r1: 0..1000), not r3 (0..600)");
    assert.deepEqual(checkRunAgain(execs, [fault("kill9_scheduler", "s1", 300), fault("kill9_worker", "w2", 300)], 3000).map((v) => v.text.split(":")[0]), ["run r1", "run r3"], "a scheduler's fault or another worker's exempts nothing");
    const unrecovered: FaultRecord = { ...fault("sigstop_worker", "w1", -500), liftedMs: -400, recoveredMs: undefined };
    assert.deepEqual(checkRunAgain(execs, [unrecovered], 3000), [], "a fault the cluster never recovered from stays open");
    const later = [x("r5", 1, "w1", 0, 100), x("r5", 2, "w2", 200, 300), x("r5", 3, "w3", 400, 500)];
    assert.deepEqual(checkRunAgain(later, [fault("kill9_worker", "w1", 50)], 3000).map((v) => v.text.split(":")[0]), ["run r5"], "a success excused by its worker's fault does not hide a later one");
  });

  it("process executor: every fault kind once; attempts run once, runs never overlap, occurrences recorded once, nothing stuck, caps held, no run again after its end", { timeout: 240_000 }, async () => {
    assert.ok(ledgerClockWorks(), "`date +%s%3N` must print epoch milliseconds");
    const o: ChaosOptions = {
      seed: SEED, executor: "process", schedulers: 3, workers: 3, slots: 8, partitions: 16,
      tenants: [{ name: "alpha", jobs: 9 }, { name: "beta", jobs: 9 }, { name: "capped", jobs: 4, cap: 2 }],
      runLeaseTtlMs: 3000, faults: { list: plan(SEED) }, faultEveryMs: 10_000,
      taskSeconds: [1, 2], longTasks: { every: 6, seconds: 4.5 }, steps: [3, 4, 5, 6],
      log: (l) => console.log(`# ${l}`),
    };
    const r = await runLedgerChaos(o, (s) => stops.push(s));
    console.log(formatReport(r, 20));
    assert.equal(r.faultsTotal, FAULT_KINDS.length + 1);
    assert.ok(r.executions > 50, `enough executions: ${r.executions}`);
    // A worker frozen by SIGSTOP cannot fence itself; its tasks' supervisor kills them (they
    // become zombies until the worker resumes — the ledger counts them ended, see `executing`).
    assert.deepEqual(r.examples.map((v) => `[${v.invariant}] ${v.text}`), [], "invariant violations (see the report above)");
  });

  it("docker executor: kill -9 of workers; no attempt executed twice, no overlapping executions, no run again after its end (from engine events)", { skip: dockerSkip(), timeout: 180_000 }, async () => {
    await ensureTestImage();
    const o: ChaosOptions = {
      seed: SEED, executor: "docker", schedulers: 2, workers: 2, slots: 4, partitions: 8,
      tenants: [{ name: "docker", jobs: 4 }],
      runLeaseTtlMs: 3000, faults: { list: ["kill9_worker", "kill9_worker"] }, faultEveryMs: 10_000,
      taskSeconds: [2, 2], steps: [4, 5],
      log: (l) => console.log(`# ${l}`),
    };
    const r = await runLedgerChaos(o, (s) => stops.push(s));
    console.log(formatReport(r, 20));
    assert.ok(r.executions > 5, `enough container executions: ${r.executions}`);
    const abf = r.examples.filter((v) => v.invariant === "a" || v.invariant === "b" || v.invariant === "f");
    assert.deepEqual(abf.map((v) => `[${v.invariant}] ${v.text}`), [], "attempts executed twice / overlapping executions / runs again after their end (see the report above)");
  });
});
