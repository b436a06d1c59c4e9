/**
 * Ledger chaos on real processes (engine: ./ledger-harness.ts). Every execution of every attempt
 * is written down by the task itself (process executor) or taken from the Docker engine's event
 * stream (docker executor) while a seeded schedule of faults runs (kinds: ./ledger-types.ts):
 * here on a 3-server NATS cluster with R3 buckets, every kind once — schedulers and workers
 * killed, stopped and paused, a worker cut off from NATS, NATS servers restarted, killed (meta
 * leader, stream leader, follower) and paused, two faults at once, rolling restarts of every worker
 * (drained, killed -9) and every scheduler under their own ids — with a user's pause, schedule
 * change, delete or run-now during each. Afterwards (./ledger-checks.ts): (a) no attempt executed
 * twice, (b) no two executions of a run overlapping, (c) one run record per occurrence the job
 * calls for as the user's changes left it, (d) no run stuck, (e) no tenant above its
 * max_concurrent_runs, (f) no run executed again after an execution that ended by itself (the
 * at-least-once re-runs a hard fault on its worker or NATS excuses are counted apart), (g) no
 * outcome without an execution behind it, (h) no NATS permission violation by a node but a late
 * reply. The long version is
 * `npm run chaos -- --minutes 30 --nats-cluster 3`.
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
  checkAttempts,
  checkOccurrences,
  checkOutcomes,
  checkRunAgain,
  checkTenantCaps,
  closeOpen,
  expectAt,
  type JobRecords,
} from "./ledger-checks.ts";
import {
  formatReport,
  isLateReply,
  ledgerClockWorks,
  prng,
  runLedgerChaos,
  type ChaosOptions,
} from "./ledger-harness.ts";
import { executing } from "./ledger-readers.ts";
import { COMMAND_KINDS } from "./ledger-commands.ts";
import {
  FAULT_KINDS,
  type Exec,
  type FaultKind,
  type FaultRecord,
  type JobInfo,
  type JobPhase,
  type RunRec,
} from "./ledger-types.ts";
import { runIdFor } from "../../src/protocol/ids.ts";

const SEED = Number(process.env["KAIROS_CHAOS_SEED"] ?? 7321);

/** Every fault kind once, in an order drawn from the seed. */
function plan(seed: number): FaultKind[] {
  const rng = prng(seed ^ 0x5eed);
  const xs = [...FAULT_KINDS];
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
  return xs;
}

describe("ledger chaos (real processes)", { timeout: 600_000 }, () => {
  const stops: (() => Promise<void>)[] = [];
  after(async () => {
    await Promise.all(stops.map((s) => s()));
  });

  it("a killed task that is still a zombie (its frozen worker has not reaped it) no longer executes", async () => {
    // `sleep 0.05` is a child of a shell that then execs `sleep 30`, which never reaps it.
    const parent = spawn("/bin/sh", ["-c", "sleep 0.05 & echo $!; exec sleep 30"], {
      stdio: ["ignore", "pipe", "ignore"],
    });
    try {
      const [line] = (await once(parent.stdout, "data")) as [Buffer];
      const pid = Number(line.toString().trim());
      assert.ok(executing(parent.pid!), "a live process executes");
      const deadline = Date.now() + 5000;
      const stateOf = () => {
        try {
          const st = readFileSync(`/proc/${pid}/stat`, "utf8");
          return st.slice(st.lastIndexOf(")") + 2, st.lastIndexOf(")") + 3);
        } catch {
          return "gone";
        }
      };
      while (stateOf() !== "Z" && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 10));
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

  const x = (
    run: string,
    fence: number,
    worker: string,
    startMs: number,
    endMs: number | undefined,
    tenant = "t",
  ): Exec => ({
    run,
    attempt: fence,
    fence,
    worker,
    tenant,
    key: `${run}/${fence}/${worker}/${startMs}`,
    startMs,
    endMs,
    how: endMs === undefined ? "open" : "end",
    endLine: endMs !== undefined,
  });
  const fault = (kind: FaultKind, target: string, atMs: number, hard = true): FaultRecord => ({
    kind,
    target,
    atMs,
    liftedMs: atMs + 100,
    recoveredMs: atMs + 200,
    detail: "",
    hits: [{ target, atMs, untilMs: atMs + 200, hard }],
  });
  const names = (vs: { text: string }[]) => vs.map((v) => v.text.split(":")[0]);

  it("the ledger checks flag what they must, and only that: (a), (b), (e), (f) and the at-least-once re-runs", () => {
    const execs = [
      x("r1", 1, "w1", 0, 1000),
      x("r1", 2, "w2", 1000, 2000), // back to back: fine
      x("r2", 1, "w1", 0, 3000),
      x("r2", 2, "w2", 2500, 4000), // overlap
      x("r3", 5, "w1", 0, 500),
      x("r3", 5, "w2", 600, 900), // one attempt twice, no overlap
      x("r4", 1, "w3", 0, undefined),
      x("r4", 2, "w1", 5000, 6000), // w3 killed at 4000: fine
    ];
    assert.equal(closeOpen(execs, new Map([["w3", [4000]]]), 10_000), 0);
    const { a, b } = checkAttempts(execs, [], 3000);
    assert.deepEqual(
      a.map((v) => v.text.split(" ")[1]),
      ["r3/5"],
    );
    assert.equal(b.length, 1);
    assert.match(
      b[0]!.text,
      /^run r2: .* by 500 ms \(a newer attempt started while an older execution was still running\)$/,
    );
    const caps = checkTenantCaps(
      [
        x("a", 1, "w1", 0, 100, "c"),
        x("b", 1, "w1", 50, 150, "c"),
        x("c", 1, "w2", 60, 70, "c"),
        x("c", 2, "w2", 100, 200, "c"),
      ],
      new Map([["c", 2]]),
      [],
      3000,
    );
    assert.equal(caps.max.get("c"), 3);
    assert.equal(caps.e.length, 1);
    // (f): r1 and r3 ran again after an execution that ended by itself; r2's second began before
    // the first ended (that is b), r4's first was killed with its worker.
    const again = (fs: FaultRecord[]) => checkRunAgain(execs, fs, 3000);
    assert.deepEqual(names(again([]).f), ["run r1", "run r3"]);
    assert.deepEqual(again([]).reruns, []);
    const stopped = again([fault("sigstop_worker", "w1", 300)]);
    assert.deepEqual(
      names(stopped.f),
      [],
      "a hard fault on the first worker between the two starts excuses both…",
    );
    assert.deepEqual(
      names(stopped.reruns),
      ["run r1", "run r3"],
      "…and each is counted as an at-least-once re-run",
    );
    const nats = again([fault("kill9_nats_follower", "nats:s1", 800)]);
    assert.deepEqual(
      [names(nats.f), names(nats.reruns)],
      [["run r3"], ["run r1"]],
      "a NATS fault excuses what it overlaps (r1: 0..1000), not r3 (0..600)",
    );
    assert.deepEqual(
      names(
        again([
          fault("kill9_scheduler", "s1", 300),
          fault("kill9_worker", "w2", 300),
          fault("sigstop_scheduler", "s2", 300),
        ]).f,
      ),
      ["run r1", "run r3"],
      "a scheduler's fault or another worker's excuses nothing",
    );
    assert.deepEqual(
      names(again([fault("rolling_workers_drain", "w1", 300, false)]).f),
      ["run r1", "run r3"],
      "a graceful drain of the worker excuses nothing: it reports what it finished",
    );
    const unrecovered: FaultRecord = {
      ...fault("sigstop_worker", "w1", -500),
      recoveredMs: undefined,
      hits: [{ target: "w1", atMs: -500, untilMs: undefined, hard: true }],
    };
    assert.deepEqual(
      again([unrecovered]).f,
      [],
      "a fault the cluster never recovered from stays open",
    );
    const later = [
      x("r5", 1, "w1", 0, 100),
      x("r5", 2, "w2", 200, 300),
      x("r5", 3, "w3", 400, 500),
    ];
    const r5 = checkRunAgain(later, [fault("kill9_worker", "w1", 50)], 3000);
    assert.deepEqual(
      [names(r5.f), names(r5.reruns)],
      [["run r5"], ["run r5"]],
      "a success excused by its worker's fault does not hide a later one (and the excused one is counted)",
    );
  });

  it("(g) flags an outcome with no execution behind it: success that never ended by itself, a dead letter that never executed", () => {
    const rec = (run_id: string, status: string, attempts: RunRec["attempts"] = []): RunRec => ({
      run_id,
      job_id: "j",
      scheduled_for: "2026-01-01T00:00:00.000Z",
      status,
      trigger: "schedule",
      attempts,
      reason: null,
    });
    const killedAtEnd: Exec = { ...x("k", 1, "w1", 0, 900), how: "killed", endLine: false };
    const execs = [x("ok", 1, "w1", 0, 1000), killedAtEnd, x("f", 1, "w1", 0, 500)];
    const attempt = (worker: string, started: string | null) => ({
      worker,
      started_at: started,
      finished_at: null,
      outcome: "lease_lost",
    });
    const started = Date.parse("2026-01-01T00:00:05.000Z");
    const g = checkOutcomes(
      [
        rec("ok", "succeeded"),
        rec("k", "succeeded"),
        rec("never", "succeeded"),
        rec("f", "failed"),
        rec("lost", "failed", [attempt("w2", null)]),
        rec("killed", "failed", [attempt("w3", "2026-01-01T00:00:05.000Z")]),
        rec("late", "failed", [attempt("w2", "2026-01-01T00:00:05.000Z")]),
        rec("c", "cancelled"),
      ],
      execs,
      new Map([
        ["w3", [started + 500]],
        ["w2", [started + 5000]],
      ]),
      [],
      3000,
    );
    assert.deepEqual(
      g.map((v) => v.text.split(" ")[1]),
      ["k", "never", "lost", "late"],
    );
  });

  it("(h) tells a late reply (refused once its one-time, two-minute permission lapsed) from a node reaching past its rights", () => {
    const line = (user: string, subject: string, kind = "Publish") =>
      `[4477] 2026/12/06 06:33:36.294229 [ERR] 127.0.0.1:49762 - cid:1201 - ${kind} Violation - User "${user}", Subject "${subject}"`;
    assert.equal(
      isLateReply(line("scheduler", "_INBOX_worker-w2.NfFkPGIPl4UDP4UfApADDf.33")),
      true,
    );
    assert.equal(
      isLateReply(line("api_scheduler", "_INBOX_scheduler.ZeaE65I9TB2vMgdIL8Ts4g.jf")),
      true,
    );
    assert.equal(isLateReply(line("worker-w1", "kairos.c.p.3")), false, "an actor command");
    assert.equal(isLateReply(line("worker-w1", "$JS.API.STREAM.PURGE.KV_c_idem")), false);
    assert.equal(
      isLateReply(line("worker-w1", "_INBOX_worker-w2.>", "Subscription")),
      false,
      "subscribing to another's inbox",
    );
    assert.equal(isLateReply(line("scheduler", "_INBOX.x")), false, "the shared inbox is no one's");
    assert.equal(
      isLateReply(line("scheduler", "_R_.aB3.xY9")),
      true,
      "a reply to a request that crossed an import",
    );
  });

  it("(c) follows the user's changes: an occurrence per instant called for, none (or cancelled, never executed) after a pause, a new schedule or a delete", () => {
    const s = (sec: number) => Date.UTC(2026, 0, 1, 0, 0, sec);
    const phase = (
      change: JobPhase["change"],
      sent: number,
      ack: number | undefined,
      p: Partial<JobPhase>,
    ): JobPhase => ({
      change,
      sentMs: sent,
      ackMs: ack,
      enabled: true,
      step: 3,
      deleted: false,
      ...p,
    });
    const job: JobInfo = {
      jobId: "jaaaaaaaaaaaaaaaa",
      tenant: "t",
      overlap: "skip",
      misfire: "skip",
      maxAttempts: 1,
      firstMs: s(0),
      lastCheckedMs: s(45),
      phases: [
        phase("create", s(0) - 500, s(0) - 400, {}),
        phase("pause", s(7), s(8), { enabled: false }), // :09 is ambiguous? no: after the ack
        phase("resume", s(16), s(17), {}),
        phase("patch", s(25), s(26), { step: 5 }),
      ],
      manual: { sent: 1, acked: [] },
    };
    assert.deepEqual(
      [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 35, 40, 45].map(
        (t) => expectAt(job, s(t)).expect,
      ),
      [
        "one",
        "one",
        "one",
        "none",
        "none",
        "none",
        "one",
        "one",
        "one",
        "none",
        "one",
        "none",
        "one",
        "one",
        "one",
      ],
    );
    assert.equal(
      expectAt(
        {
          ...job,
          phases: [job.phases[0]!, phase("pause", s(5) + 500, s(6) + 500, { enabled: false })],
        },
        s(6),
      ).expect,
      "maybe",
      "an instant between a change's send and its acknowledgement",
    );
    const recOf = (t: number, status: string, reason: string | null = null): RunRec => ({
      run_id: runIdFor(job.jobId, s(t)),
      job_id: job.jobId,
      scheduled_for: new Date(s(t)).toISOString(),
      status,
      trigger: "schedule",
      attempts: [],
      reason,
    });
    const good = [0, 3, 6, 18, 21, 24, 30, 35, 40, 45]
      .map((t) => recOf(t, "succeeded"))
      .concat([recOf(9, "cancelled", "job paused before the occurrence started")]);
    const records = (rs: RunRec[], manual = 0): Map<string, JobRecords> => {
      const bySched = new Map<number, RunRec[]>();
      for (const r of rs)
        bySched.set(Date.parse(r.scheduled_for), [
          ...(bySched.get(Date.parse(r.scheduled_for)) ?? []),
          r,
        ]);
      return new Map([[job.jobId, { bySched, manual, direct: new Map() }]]);
    };
    const check = (rs: RunRec[], execs: Exec[] = [], faults: FaultRecord[] = [], manual = 0) =>
      checkOccurrences([job], records(rs, manual), execs, faults, 3000);
    const ok = check(good);
    assert.deepEqual(ok.violations, []);
    assert.equal(ok.occurrences, 10);
    const missing = check(good.filter((r) => r.scheduled_for !== new Date(s(21)).toISOString()));
    assert.equal(missing.missing, 1);
    assert.equal(check([...good, recOf(3, "succeeded")]).duplicate, 1);
    assert.equal(
      check([...good, recOf(12, "succeeded")]).uncalled,
      1,
      "a paused occurrence that ran has a succeeded record",
    );
    assert.equal(
      check([...good, recOf(33, "cancelled", "schedule changed before the occurrence started")])
        .violations.length,
      0,
      "the old schedule's next occurrence, cancelled",
    );
    const ranPaused = x(runIdFor(job.jobId, s(12)), 1, "w1", s(12), s(13));
    assert.equal(check(good, [ranPaused]).uncalled, 1, "a paused occurrence executed");
    const cut = check(good, [ranPaused], [fault("cut_worker", "w1", s(7) + 500)]);
    assert.deepEqual(
      [cut.uncalled, cut.cancelledRanUnderFault],
      [0, 1],
      "…excused (and counted) when its worker was cut off since the pause",
    );
    const cancelled = (t: number, reason: string) =>
      good.map((r) =>
        r.scheduled_for === new Date(s(t)).toISOString() ? recOf(t, "cancelled", reason) : r,
      );
    assert.equal(
      check(cancelled(18, "job paused before it started")).cancelledByChange,
      1,
      "an occurrence after the resume, cancelled by the pause it was not next for",
    );
    assert.equal(
      check(cancelled(30, "schedule changed before it started")).cancelledByChange,
      1,
      "the new schedule's second occurrence, cancelled by the change",
    );
    // README, "stay cancelled": the occurrence that was next when the change applied.
    const quick: JobInfo = {
      ...job,
      phases: [
        job.phases[0]!,
        phase("pause", s(7), s(8), { enabled: false }),
        phase("resume", s(8) + 100, s(8) + 200, {}),
      ],
    };
    const quickRecs = [0, 3, 6, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 42, 45]
      .map((t) => recOf(t, "succeeded"))
      .concat([recOf(9, "cancelled", "job paused before it started")]);
    assert.deepEqual(
      checkOccurrences([quick], records(quickRecs), [], [], 3000).violations,
      [],
      "resumed before its due time, the occurrence prepared at the pause stays cancelled",
    );
    assert.equal(
      check(cancelled(27, "schedule changed before it started")).cancelledByChange,
      0,
      "…and the one next at a schedule change (:27, on the old grid)",
    );
    assert.equal(check(good, [], [], 2).manualExtra, 1, "two manual runs for one run-now request");
    // A pause cancels every run not started by then, however long due (a backlog).
    const final: JobInfo = { ...job, finalPause: { sentMs: s(44), ackMs: s(44) + 50 } };
    assert.equal(
      checkOccurrences(
        [final],
        records(cancelled(40, "job paused before it started")),
        [],
        [],
        3000,
      ).cancelledByChange,
      0,
      "the harness's own final pause",
    );
    // A run whose start had not reached the owner when the pause came is stopped too (killed).
    const inFlight = x(runIdFor(job.jobId, s(40)), 1, "w1", s(44) - 500, s(44) + 2000);
    assert.equal(
      checkOccurrences(
        [final],
        records(cancelled(40, "job paused before it started")),
        [inFlight],
        [],
        3000,
      ).cancelledByChange,
      0,
      "a start in flight at the pause, killed",
    );
    // An occurrence due just before a pause, not fired for a fault: no record, allowed and counted.
    const late: JobInfo = {
      ...job,
      phases: [job.phases[0]!, phase("pause", s(21) + 400, s(30), { enabled: false })],
    };
    const lateRecs = records([0, 3, 6, 9, 12, 15, 18].map((t) => recOf(t, "succeeded")));
    const noFault = checkOccurrences([{ ...late, lastCheckedMs: s(21) }], lateRecs, [], [], 3000);
    assert.equal(noFault.missing, 1, "without a fault it is lost");
    const faulted = checkOccurrences(
      [{ ...late, lastCheckedMs: s(21) }],
      lateRecs,
      [],
      [fault("kill9_nats_meta_leader", "nats:s0", s(20))],
      3000,
    );
    assert.deepEqual(
      [faulted.missing, faulted.unfiredAtChange],
      [0, 1],
      "with one it is counted apart",
    );
    assert.equal(
      checkOccurrences(
        [final],
        records(cancelled(40, "job paused before it started")),
        [x(runIdFor(job.jobId, s(40)), 1, "w1", s(40), s(44) + 10)],
        [],
        3000,
      ).cancelledByChange,
      1,
      "…not a run that had started before it",
    );
    const gone: JobInfo = {
      ...job,
      lastCheckedMs: s(30),
      phases: [job.phases[0]!, phase("delete", s(10), s(11), { deleted: true, enabled: false })],
    };
    const del = checkOccurrences(
      [gone],
      records([0, 3, 6, 9].map((t) => recOf(t, "succeeded"))),
      [x(runIdFor(job.jobId, s(15)), 1, "w2", s(15), s(16))],
      [],
      3000,
    );
    assert.deepEqual(
      [del.missing, del.uncalled, del.occurrences],
      [0, 1, 4],
      "a deleted job's occurrence executed after the delete",
    );
  });

  it(
    "process executor on a 3-server NATS cluster (R3): every fault kind once, a user's command during each; (a)–(h) hold",
    { timeout: 360_000 },
    async () => {
      assert.ok(ledgerClockWorks(), "`date +%s%3N` must print epoch milliseconds");
      const o: ChaosOptions = {
        seed: SEED,
        executor: "process",
        natsServers: 3,
        schedulers: 3,
        workers: 3,
        slots: 8,
        partitions: 16,
        tenants: [
          { name: "alpha", jobs: 9 },
          { name: "beta", jobs: 9 },
          { name: "capped", jobs: 4, cap: 2 },
        ],
        runLeaseTtlMs: 3000,
        faults: { list: plan(SEED) },
        faultEveryMs: 5000,
        commandShare: 1,
        commandOrder: COMMAND_KINDS,
        taskSeconds: [1, 2],
        longTasks: { every: 6, seconds: 4.5 },
        steps: [3, 4, 5, 6],
        log: (l) => console.log(`# ${l}`),
      };
      const r = await runLedgerChaos(o, (s) => stops.push(s));
      console.log(formatReport(r, 20));
      assert.deepEqual(
        Object.keys(r.faults).sort(),
        [...FAULT_KINDS].filter((k) => k !== "two_at_once").sort(),
        "every kind injected (two at once as its two kinds)",
      );
      assert.equal(r.pairs, 1);
      assert.ok(r.executions > 50, `enough executions: ${r.executions}`);
      for (const k of ["pause", "resume", "patch", "delete", "run_now"] as const)
        assert.ok(
          r.commands[k] >= 1,
          `a ${k} acknowledged during faults: ${JSON.stringify(r.commands)}`,
        );
      // A worker frozen by SIGSTOP cannot fence itself; its tasks' supervisor kills them (they
      // become zombies until the worker resumes — the ledger counts them ended, see `executing`).
      assert.deepEqual(
        r.examples.map((v) => `[${v.invariant}] ${v.text}`),
        [],
        "invariant violations (see the report above)",
      );
    },
  );

  it(
    "docker executor: kill -9 of workers; no attempt executed twice, no overlapping executions, no run again after its end (from engine events)",
    { skip: dockerSkip(), timeout: 180_000 },
    async () => {
      await ensureTestImage();
      const o: ChaosOptions = {
        seed: SEED,
        executor: "docker",
        schedulers: 2,
        workers: 2,
        slots: 4,
        partitions: 8,
        tenants: [{ name: "docker", jobs: 4 }],
        runLeaseTtlMs: 3000,
        faults: { list: ["kill9_worker", "kill9_worker"] },
        faultEveryMs: 10_000,
        taskSeconds: [2, 2],
        steps: [4, 5],
        log: (l) => console.log(`# ${l}`),
      };
      const r = await runLedgerChaos(o, (s) => stops.push(s));
      console.log(formatReport(r, 20));
      assert.ok(r.executions > 5, `enough container executions: ${r.executions}`);
      const abf = r.examples.filter(
        (v) => v.invariant === "a" || v.invariant === "b" || v.invariant === "f",
      );
      assert.deepEqual(
        abf.map((v) => `[${v.invariant}] ${v.text}`),
        [],
        "attempts executed twice / overlapping executions / runs again after their end (see the report above)",
      );
    },
  );
});
