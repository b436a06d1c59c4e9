/**
 * `kairos runs …` and `kairos jobs run` against a real Kairos (one node with every role, process
 * executor, real nats-server), in-process as the binary runs them: `runs wait` follows real runs
 * to each way a run ends and exits with its code (0 succeeded, 10 failed, 11 timed out,
 * 12 cancelled, 13 skipped, 14 still running at --timeout), printing progress as the run moves;
 * `runs list` (a job's, and the tenant's across its jobs) and `runs get` for people and scripts;
 * `runs cancel`; bad input and a wrong key.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { eventually, startKairosFixture, type KairosFixture } from "../support/kairos.ts";
import { kairos, startKairos, type CliResult } from "../support/cli.ts";

interface Run {
  run_id: string;
  job_id: string;
  status: string;
  attempt: number;
  attempts: {
    attempt: number;
    worker: string | null;
    exit_code: number | null;
    outcome: string | null;
  }[];
  result: { exit_code: number | null; output: string } | null;
  reason: string | null;
}

const json = <T>(r: CliResult): T => JSON.parse(r.stdout) as T;
const ok = (r: CliResult): void => assert.equal(r.code, 0, `exit ${r.code}\n${r.stderr}`);

describe("kairos runs (real cluster)", { timeout: 300_000 }, () => {
  let fx: KairosFixture;
  let env: Record<string, string>;
  const k = (args: string[], extra: Record<string, string> = {}) =>
    kairos(args, { env: { ...env, ...extra } });
  /** A job that never fires on its own (a daily cron), running `script`. */
  const job = async (script: string, ...flags: string[]): Promise<string> => {
    const r = await k([
      "jobs",
      "create",
      "--cron",
      "0 0 1 1 *",
      "--image",
      "busybox",
      "--command",
      script,
      "--timeout",
      "30",
      ...flags,
    ]);
    ok(r);
    return r.stdout.trim();
  };
  const runNow = async (jobId: string): Promise<string> => {
    const r = await k(["jobs", "run", jobId]);
    ok(r);
    assert.match(r.stderr, /: kairos runs wait \S+$/m);
    return r.stdout.trim();
  };

  before(async () => {
    fx = await startKairosFixture({ partitions: 4 });
    const url = await fx.apiUrl(fx.spawn("cli-r1", "api,scheduler,worker", ["--slots", "4"]));
    env = { KAIROS_API_URL: url, KAIROS_API_KEY: (await fx.newTenant("cli-runs")).api_key };
  });
  after(async () => {
    await fx?.stop();
  });

  it("runs wait: progress on stderr, the run on stdout, exit 0 when it succeeds", async () => {
    const runId = await runNow(await job("echo hello from $KAIROS_RUN_ID"));
    const r = await k(["runs", "wait", runId]);
    ok(r);
    assert.match(r.stderr, new RegExp(`^run ${runId}: succeeded attempt 1 exit 0$`, "m"));
    assert.match(r.stdout, new RegExp(`^run\\s+${runId}$`, "m"));
    assert.match(r.stdout, /^status\s+succeeded$/m);
    assert.match(r.stdout, /^ATTEMPT\s+WORKER\s+STARTED\s+FINISHED\s+EXIT\s+OUTCOME/m);
    assert.match(r.stdout, /^1\s+cli-r1\s+20\S+\s+20\S+\s+0\s+succeeded$/m);
    assert.match(r.stdout, new RegExp(`output \\(tail\\):\\nhello from ${runId}\\n$`));
    const j = await k(["runs", "wait", runId, "--json", "--quiet"]);
    ok(j);
    assert.equal(j.stderr, "");
    assert.equal(json<Run>(j).result?.output, `hello from ${runId}\n`);
  });

  it("jobs run --wait: fails after its retries (exit 10), retry_wait shown on the way", async () => {
    // A 3 s retry wait is longer than the slowest poll (2 s): the waiter sees it.
    const jobId = await job(
      "echo boom; exit 3",
      "--max-attempts",
      "2",
      "--backoff",
      "fixed",
      "--backoff-base",
      "3",
    );
    const r = await k(["jobs", "run", jobId, "--wait", "--json"]);
    assert.equal(r.code, 10, r.stderr);
    assert.match(r.stderr, /^started run \S+$/m);
    assert.match(r.stderr, /: retry_wait attempt \d \(last attempt failed, exit 3\) next at 20/);
    assert.match(r.stderr, /: failed attempt 2 exit 3 — dead-lettered after 2 attempt\(s\)/);
    const run = json<Run>(r);
    assert.deepEqual([run.status, run.attempts.length, run.result?.exit_code], ["failed", 2, 3]);
    const dead = await k(["runs", "list", "--dead-lettered", "--json"]);
    ok(dead);
    assert.ok(json<{ runs: Run[] }>(dead).runs.some((d) => d.run_id === run.run_id));
    const failed = await k(["runs", "list", jobId, "--status", "failed"]);
    ok(failed);
    assert.match(
      failed.stdout,
      new RegExp(`^${run.run_id}\\s+failed\\s+2\\s+20\\S+\\s+20\\S+\\s+3\\s+manual$`, "m"),
    );
  });

  it("runs wait: timed out (exit 11), cancelled by a delete (exit 12), --timeout (exit 14)", async () => {
    const slow = await runNow(await job("sleep 20", "--timeout", "1"));
    const timedOut = await k(["runs", "wait", slow]);
    assert.equal(timedOut.code, 11, timedOut.stderr);
    assert.match(timedOut.stdout, /^status\s+timed_out$/m);

    const jobId = await job("sleep 60");
    const runId = await runNow(jobId);
    const waiting = startKairos(["runs", "wait", runId], { env });
    await waiting.waitErr(/: running attempt 1 on cli-r1/, 30_000, "the run running");
    const gaveUp = await k(["runs", "wait", runId, "--timeout", "0.3"]);
    assert.equal(gaveUp.code, 14, gaveUp.stderr);
    assert.match(gaveUp.stderr, new RegExp(`gave up waiting: run ${runId} is still running`));
    ok(await k(["jobs", "delete", jobId]));
    const cancelled = await waiting.done;
    assert.equal(cancelled.code, 12, cancelled.stderr);
    assert.match(cancelled.stderr, /: cancelled attempt 1 — job deleted/);
    const badTimeout = await k(["runs", "wait", runId, "--timeout", "-1"]);
    assert.equal(badTimeout.code, 2);
    assert.match(badTimeout.stderr, /--timeout: must be a number of seconds/);
  });

  it("runs wait on a skipped run exits 13", async () => {
    const r = await k([
      "jobs",
      "create",
      "--cron",
      "* * * * * *",
      "--overlap",
      "skip",
      "--image",
      "busybox",
      "--command",
      "sleep 3",
      "--timeout",
      "10",
    ]);
    ok(r);
    const jobId = r.stdout.trim();
    const skipped = await eventually(
      async () =>
        json<{ runs: Run[] }>(await k(["runs", "list", jobId, "--status", "skipped", "--json"]))
          .runs[0],
      30_000,
      "a skipped run",
    );
    ok(await k(["jobs", "delete", jobId]));
    const w = await k(["runs", "wait", skipped.run_id]);
    assert.equal(w.code, 13, w.stderr);
    assert.match(w.stdout, /^reason\s+.*overlap/m);
  });

  it("runs cancel: a running run ends cancelled with the reason (again: the same); an ended run exit 5", async () => {
    const jobId = await job("sleep 30");
    const id = await runNow(jobId);
    const waiting = startKairos(["runs", "wait", id], { env });
    await waiting.waitErr(/: running attempt 1 on cli-r1/, 30_000, "the run running");
    const c = await k(["runs", "cancel", id, "--reason", "wrong input"]);
    ok(c);
    const waited = await waiting.done;
    assert.equal(waited.code, 12, `its waiter exits 12\n${waited.stderr}`);
    assert.match(
      waited.stderr,
      /: cancelled attempt 1 — cancelled by request of API key k\S+: wrong input$/m,
    );
    assert.match(c.stdout, /^status\s+cancelled$/m);
    assert.match(c.stdout, /^reason\s+cancelled by request of API key k\S+: wrong input$/m);
    const again = await k(["runs", "cancel", id, "--json"]);
    ok(again);
    assert.equal(json<Run>(again).status, "cancelled");
    const done = await runNow(await job("true"));
    ok(await k(["runs", "wait", done, "--quiet"]));
    const refused = await k(["runs", "cancel", done]);
    assert.equal(refused.code, 5, refused.stderr);
    assert.match(refused.stderr, /code: conflict \(HTTP 409\)/);
    const bad = await k(["runs", "cancel", id, "--reason", ""]);
    assert.equal(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /field: reason \(set with --reason\)/);
    assert.equal((await k(["runs", "cancel", "rnosuchrun"])).code, 4);
  });

  it("runs list without a job: the tenant's runs across its jobs, newest first", async () => {
    const ids: string[] = [];
    for (const script of ["echo one", "exit 4", "echo three"]) {
      const id = await runNow(await job(script, "--max-attempts", "1"));
      await k(["runs", "wait", id, "--quiet"]);
      ids.push(id);
    }
    const newest = [...ids].reverse();
    const page = await eventually(
      async () => {
        const r = await k(["runs", "list", "--limit", "3", "--json"]);
        ok(r);
        const p = json<{ runs: Run[]; next_cursor: string | null }>(r);
        return p.runs.map((x) => x.run_id).join() === newest.join() ? p : undefined;
      },
      10_000,
      "the three runs at the head of the tenant's runs",
    );
    assert.ok(page.next_cursor, "older runs of other jobs follow");
    const table = await k(["runs", "list", "--limit", "3"]);
    ok(table);
    assert.deepEqual(
      table.stdout
        .trimEnd()
        .split("\n")
        .slice(1)
        .map((l) => l.split(/\s+/)[0]),
      newest,
    );
    assert.match(table.stderr, /^more: --cursor \S+ \(or --all\)$/m);
    const failed = json<{ runs: Run[] }>(
      await k(["runs", "list", "--status", "failed", "--limit", "1", "--json"]),
    );
    assert.deepEqual(
      failed.runs.map((x) => x.run_id),
      [ids[1]],
    );
  });

  it("runs list and get: tables, paging, --json; bad input exit 2, unknown ids exit 4", async () => {
    const jobId = await job("echo listed");
    const ids = [await runNow(jobId), await runNow(jobId)];
    for (const id of ids) ok(await k(["runs", "wait", id, "--quiet"]));
    const table = await k(["runs", "list", jobId]);
    ok(table);
    const lines = table.stdout.trimEnd().split("\n");
    assert.match(
      lines[0]!,
      /^RUN ID\s+STATUS\s+ATTEMPT\s+SCHEDULED FOR \(UTC\)\s+FINISHED\s+EXIT\s+TRIGGER$/,
    );
    assert.deepEqual(
      lines.slice(1).map((l) => l.split(/\s+/)[0]),
      [...ids].reverse(),
      "newest first",
    );
    const first = await k(["runs", "list", jobId, "--limit", "1", "--json"]);
    ok(first);
    const page = json<{ runs: Run[]; next_cursor: string | null }>(first);
    assert.equal(page.runs[0]?.run_id, ids[1]);
    assert.ok(page.next_cursor);
    const next = json<{ runs: Run[] }>(
      await k(["runs", "list", jobId, "--cursor", page.next_cursor, "--json"]),
    );
    assert.deepEqual(
      next.runs.map((x) => x.run_id),
      [ids[0]],
    );
    const get = await k(["runs", "get", ids[0]!, "--json"]);
    ok(get);
    assert.deepEqual([json<Run>(get).job_id, json<Run>(get).status], [jobId, "succeeded"]);
    const human = await k(["runs", "get", ids[0]!]);
    assert.match(human.stdout, /^job\s+j\S+$/m);
    assert.match(human.stdout, /output \(tail\):\nlisted\n$/);

    const bad: [string[], number, RegExp][] = [
      [["runs", "list", "--status", "done"], 2, /Allowed choices are queued, leased/],
      [["runs", "list", jobId, "--dead-lettered"], 2, /not both/],
      [["runs", "list", jobId, "--status", "done"], 2, /Allowed choices are queued, leased/],
      [
        ["runs", "list", "--dead-lettered", "--status", "failed"],
        2,
        /--status: not with --dead-lettered/,
      ],
      [["runs", "list", jobId, "--limit", "0"], 2, /field: limit/],
      [["runs", "get"], 2, /missing required argument 'run_id'/],
      [["runs", "get", "rnosuchrun"], 4, /code: not_found \(HTTP 404\)/],
      [["runs", "wait", "rnosuchrun"], 4, /code: not_found \(HTTP 404\)/],
      [["runs", "list", "jnosuchjob00000000"], 4, /not_found/],
      [["runs", "frobnicate"], 2, /unknown command 'frobnicate'/],
    ];
    for (const [args, code, re] of bad) {
      const r = await k(args);
      assert.equal(r.code, code, `${args.join(" ")}: exit ${r.code}\n${r.stderr}`);
      assert.match(r.stderr, re, args.join(" "));
    }
    const wrong = { KAIROS_API_KEY: "kai_wrongwrongwrongwrongwrongwrongwrongwrongwro" };
    for (const args of [
      ["list", jobId],
      ["list"],
      ["list", "--dead-lettered"],
      ["get", ids[0]!],
      ["wait", ids[0]!],
      ["cancel", ids[0]!],
    ]) {
      const r = await k(["runs", ...args], wrong);
      assert.equal(r.code, 3, `${args.join(" ")}: exit ${r.code}\n${r.stderr}`);
      assert.match(r.stderr, /code: unauthenticated \(HTTP 401\)/);
      assert.equal(r.stdout, "");
    }
    const wrongJson = await k(["runs", "get", ids[0]!, "--json"], wrong);
    assert.equal(wrongJson.code, 3);
    assert.equal(
      (JSON.parse(wrongJson.stderr) as { error: { code: string } }).error.code,
      "unauthenticated",
    );
  });
});
