/**
 * The pure parts of the customer commands: job spec flags (`--every`, merging over a file or the
 * job as it is, the secret-env guard, which flag an API field names), exit codes, tables.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  applySpecFlags,
  checkSecretsKept,
  everyToCron,
  specFlagOf,
} from "../../src/cli/job-spec-flags.ts";
import { EXIT, exitCodeOfError, exitCodeOfRun } from "../../src/cli/exit-codes.ts";
import { formatTable } from "../../src/cli/table.ts";
import { argsText } from "../../src/cli/job-format.ts";
import { ErrorCodes, type ErrorCode } from "../../src/lib/errors.ts";
import { RUN_STATUSES, type JobView } from "../../src/protocol/model.ts";

const JOB: JobView = {
  job_id: "jabc",
  tenant_id: "tabc",
  version: 3,
  name: "n",
  schedule: { cron: "0 1 * * *", time_zone: "UTC" },
  task: { image: "busybox", args: ["true"], env: { A: "1" }, timeout_s: 10 },
  retry: { max_attempts: 2, backoff: "fixed", base_s: 5, max_s: 3600 },
  overlap: "skip",
  misfire: { policy: "run_once", starting_deadline_s: null },
  flex_window_s: 0,
  enabled: true,
  created_at: "2026-01-01T00:00:00Z",
  updated_at: "2026-01-01T00:00:00Z",
  next_run_at: null,
};

describe("--every", () => {
  it("intervals that divide a minute, an hour or a day become cron", () => {
    assert.equal(everyToCron("1s"), "* * * * * *");
    assert.equal(everyToCron("30s"), "*/30 * * * * *");
    assert.equal(everyToCron("60s"), "* * * * *");
    assert.equal(everyToCron("5m"), "*/5 * * * *");
    assert.equal(everyToCron("60m"), "0 * * * *");
    assert.equal(everyToCron("6h"), "0 */6 * * *");
    assert.equal(everyToCron("24h"), "0 0 * * *");
    assert.equal(everyToCron("1d"), "0 0 * * *");
  });
  it("others are refused, naming --every", () => {
    for (const bad of ["7m", "45s", "5h", "2d", "90m", "0m", "5", "m", "1w", "-5m", ""])
      assert.throws(
        () => everyToCron(bad),
        (e: Error & { field?: string }) => e.field === "--every",
        bad,
      );
  });
});

describe("spec flags", () => {
  it("create: flags over the file's fields, groups merged", () => {
    const spec = applySpecFlags(
      { name: "file", task: { image: "x", args: ["a"], timeout_s: 5 }, retry: { max_attempts: 4 } },
      { name: "flag", timeout: "7", backoff: "fixed", env: ["K=v=w"], memory: "64" },
      [],
    );
    assert.deepEqual(spec, {
      name: "flag",
      task: {
        image: "x",
        args: ["a"],
        timeout_s: 7,
        env: { K: "v=w" },
        resources: { memory_mb: 64 },
      },
      retry: { max_attempts: 4, backoff: "fixed" },
    });
  });
  it("edit: a touched group is the job's with the flags set; the view-only names dropped", () => {
    const job = { ...JOB, task: { ...JOB.task, secret_env_names: [] } };
    const patch = applySpecFlags(
      {},
      { tz: "Europe/Berlin", unsetEnv: ["A"], env: ["B=2"] },
      ["echo", "x"],
      job,
    );
    assert.deepEqual(patch, {
      schedule: { cron: "0 1 * * *", time_zone: "Europe/Berlin" },
      task: { image: "busybox", args: ["echo", "x"], env: { B: "2" }, timeout_s: 10 },
    });
    assert.deepEqual(applySpecFlags({}, {}, [], JOB), {}, "no flag, nothing to patch");
    const kolkata = { ...JOB, schedule: { cron: "0 9 * * *", time_zone: "Asia/Kolkata" } };
    assert.deepEqual(
      applySpecFlags({}, { every: "1h" }, [], kolkata),
      {
        schedule: { cron: "0 * * * *", time_zone: "Asia/Kolkata" },
      },
      "a new cron keeps the job's time zone",
    );
  });
  it("plain mistakes are refused before any request", () => {
    const cases: [Parameters<typeof applySpecFlags>[1], string[], string][] = [
      [{ cron: "* * * * *", at: "2030-01-01T00:00:00Z" }, [], "--cron"],
      [{ at: "2030-01-01T00:00:00Z", tz: "UTC" }, [], "--tz"],
      [{ tz: "UTC" }, [], "--tz"],
      [{ command: "x" }, ["y"], "--command"],
      [{ timeout: "1e3" }, [], "--timeout"],
      [{ cpus: "two" }, [], "--cpus"],
      [{ env: ["=x"] }, [], "--env"],
    ];
    for (const [f, args, field] of cases)
      assert.throws(
        () => applySpecFlags({}, f, args),
        (e: Error & { field?: string }) => e.field === field,
        field,
      );
  });
  it("a task change on a job with secret env must carry them", () => {
    const secret = { ...JOB, task: { ...JOB.task, secret_env_names: ["TOKEN"] } };
    const patch = applySpecFlags({}, { timeout: "20" }, [], secret);
    assert.throws(
      () => checkSecretsKept(patch, secret),
      /task\.secret_env: the job has secret env \(TOKEN\)/,
    );
    checkSecretsKept(applySpecFlags({}, { name: "x" }, [], secret), secret);
    checkSecretsKept(
      applySpecFlags({ task: { secret_env: { TOKEN: "t" } } }, { timeout: "20" }, [], secret),
      secret,
    );
    checkSecretsKept(patch, JOB);
  });
  it("an API field names the flag given for it, else --file, else the flag that sets it", () => {
    assert.equal(specFlagOf({ every: "1h" })("schedule.cron"), "--every");
    assert.equal(specFlagOf({ cron: "x" })("schedule.cron"), "--cron");
    assert.equal(specFlagOf({ env: ["A=1"] })("task.env.A"), "--env");
    assert.equal(specFlagOf({ file: "s.json" })("task.timeout_s"), "--file");
    assert.equal(specFlagOf({})("task.timeout_s"), "--timeout");
    assert.equal(specFlagOf({})("task.args[0]"), "--command");
    assert.equal(specFlagOf({})("Idempotency-Key"), "--idempotency-key");
    assert.equal(specFlagOf({})("body"), undefined);
  });
});

describe("exit codes", () => {
  it("every error code and run status has one; the documented values", () => {
    for (const c of Object.keys(ErrorCodes) as ErrorCode[]) assert.ok(exitCodeOfError(c) >= 1);
    assert.deepEqual(
      [
        "invalid_argument",
        "unauthenticated",
        "not_found",
        "conflict",
        "quota_exceeded",
        "unavailable",
        "rate_limited",
        "internal",
      ].map((c) => exitCodeOfError(c as ErrorCode)),
      [2, 3, 4, 5, 5, 6, 6, 1],
    );
    assert.deepEqual(
      RUN_STATUSES.map((s) => exitCodeOfRun(s) ?? null),
      [null, null, null, null, 0, 10, 11, 12, 13, 13, 13],
    );
    assert.equal(EXIT.waitTimedOut, 14);
  });
});

describe("tables", () => {
  it("aligns columns, keeps cells on one line and cuts long ones", () => {
    const t = formatTable(
      [
        { a: "x", b: "line\nbreak" },
        { a: "longer", b: "y".repeat(20) },
      ],
      [
        { header: "A", cell: (r) => r.a },
        { header: "B", cell: (r) => r.b, max: 10 },
      ],
    );
    assert.equal(t, "A       B\nx       line break\nlonger  yyyyyyyyy…\n");
  });
  it("quotes args the way a shell needs them", () => {
    assert.equal(argsText(["/bin/sh", "-c", "echo 'hi' $X"]), `/bin/sh -c 'echo '\\''hi'\\'' $X'`);
  });
});
