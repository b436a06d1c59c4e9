/**
 * `kairos jobs …` against a real Kairos (one node with every role on a real nats-server), run
 * in-process exactly as the binary runs it: stdout, stderr and the exit code of every command,
 * good input and bad, a wrong key, and where the API URL and key come from.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startKairosFixture, type KairosFixture } from "../support/kairos.ts";
import { emptyStateDir, kairos, type CliResult } from "../support/cli.ts";

interface Job {
  job_id: string;
  name: string | null;
  version: number;
  enabled: boolean;
  schedule: { cron?: string; time_zone?: string; at?: string };
  task: { image: string; args: string[]; env: Record<string, string>; timeout_s: number };
  retry: { max_attempts: number; backoff: string; base_s: number };
  overlap: string;
  next_runs?: string[];
}

const json = <T>(r: CliResult): T => JSON.parse(r.stdout) as T;
const ok = (r: CliResult): void => assert.equal(r.code, 0, `exit ${r.code}\n${r.stderr}`);

describe("kairos jobs (real cluster)", { timeout: 300_000 }, () => {
  let fx: KairosFixture;
  let env: Record<string, string>;
  let url: string;
  let key: string;
  const k = (args: string[], extra: Record<string, string> = {}, stdin?: string) =>
    kairos(args, { env: { ...env, ...extra }, ...(stdin !== undefined ? { stdin } : {}) });
  const create = async (...args: string[]): Promise<string> => {
    const r = await k(["jobs", "create", "--image", "busybox", "--timeout", "30", ...args]);
    ok(r);
    return r.stdout.trim();
  };

  before(async () => {
    fx = await startKairosFixture({ partitions: 4 });
    const keyFile = join(mkdtempSync(join(tmpdir(), "kairos-key-")), "secret.key");
    writeFileSync(keyFile, randomBytes(32).toString("base64"), { mode: 0o600 });
    url = await fx.apiUrl(
      fx.spawn("cli-1", "api,scheduler,worker", ["--secret-key-file", keyFile]),
    );
    key = (await fx.newTenant("cli-jobs")).api_key;
    env = { KAIROS_API_URL: url, KAIROS_API_KEY: key };
  });
  after(async () => {
    await fx?.stop();
  });

  it("create from flags: the id on stdout, the spec as given; get shows it", async () => {
    const r = await k([
      "jobs",
      "create",
      "--name",
      "report",
      "--cron",
      "0 9 * * 1-5",
      "--tz",
      "Asia/Kolkata",
      "--image",
      "busybox",
      "--command",
      "echo hi",
      "-e",
      "MODE=full",
      "--env",
      "A=b=c",
      "--timeout",
      "60",
      "--max-attempts",
      "3",
      "--backoff",
      "fixed",
      "--backoff-base",
      "5",
      "--overlap",
      "queue",
      "--memory",
      "64",
    ]);
    ok(r);
    const id = r.stdout.trim();
    assert.match(id, /^j[0-9a-z]+$/);
    assert.match(r.stderr, new RegExp(`created job ${id} \\(enabled\\), next run 20`));
    const got = await k(["jobs", "get", id, "--json"]);
    ok(got);
    const job = json<Job>(got);
    assert.equal(job.name, "report");
    assert.deepEqual(job.schedule, { cron: "0 9 * * 1-5", time_zone: "Asia/Kolkata" });
    assert.deepEqual(job.task.args, ["/bin/sh", "-c", "echo hi"]);
    assert.deepEqual(job.task.env, { MODE: "full", A: "b=c" });
    assert.equal(job.task.timeout_s, 60);
    assert.deepEqual(
      [job.retry.max_attempts, job.retry.backoff, job.retry.base_s],
      [3, "fixed", 5],
    );
    assert.equal(job.overlap, "queue");
    assert.equal(job.next_runs?.length, 5);
    const human = await k(["jobs", "get", id]);
    ok(human);
    assert.match(human.stdout, /^job\s+j/m);
    assert.match(human.stdout, /^schedule\s+cron "0 9 \* \* 1-5" in Asia\/Kolkata$/m);
    assert.match(human.stdout, /^args\s+\/bin\/sh -c 'echo hi'$/m);
    assert.match(human.stdout, /^retry\s+3 attempts, fixed backoff from 5 s/m);
    assert.equal(human.stdout.match(/^(next runs|\s+)\s+20\d\d-/gm)?.length, 5);
  });

  it("create: --every, args after --, --at, --paused", async () => {
    const every = json<Job>(
      await k(["jobs", "get", await create("--every", "15m", "--", "echo", "a b"), "--json"]),
    );
    assert.equal(every.schedule.cron, "*/15 * * * *");
    assert.deepEqual(every.task.args, ["echo", "a b"]);
    const at = new Date(Date.now() + 3_600_000).toISOString().replace(/\.\d+Z$/, "Z");
    const once = json<Job>(
      await k(["jobs", "get", await create("--at", at, "--paused", "--command", "true"), "--json"]),
    );
    assert.deepEqual(once.schedule, { at });
    assert.equal(once.enabled, false);
  });

  it("create --file (and - for stdin): flags override the file's fields", async () => {
    const dir = mkdtempSync(join(tmpdir(), "kairos-spec-"));
    const spec = {
      name: "from-file",
      schedule: { cron: "@daily", time_zone: "UTC" },
      task: { image: "busybox", args: ["true"], timeout_s: 10 },
      retry: { max_attempts: 2 },
    };
    writeFileSync(join(dir, "spec.json"), JSON.stringify(spec));
    const r = await k([
      "jobs",
      "create",
      "--file",
      join(dir, "spec.json"),
      "--name",
      "over",
      "--timeout",
      "20",
      "--json",
    ]);
    ok(r);
    const job = json<Job>(r);
    assert.deepEqual(
      [job.name, job.task.timeout_s, job.task.args, job.retry.max_attempts],
      ["over", 20, ["true"], 2],
    );
    const piped = await k(["jobs", "create", "-f", "-", "--json"], {}, JSON.stringify(spec));
    ok(piped);
    assert.equal(json<Job>(piped).name, "from-file");
    const bad = await k(["jobs", "create", "--file", join(dir, "missing.json")]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--file: cannot read/);
    const notJson = await k(["jobs", "create", "--file", "-"], {}, "{nope");
    assert.equal(notJson.code, 2);
    assert.match(notJson.stderr, /--file: stdin is not JSON/);
  });

  it("create --idempotency-key: a retry returns the same job", async () => {
    const args = [
      "jobs",
      "create",
      "--image",
      "busybox",
      "--timeout",
      "5",
      "--every",
      "1h",
      "--command",
      "true",
      "--idempotency-key",
      "cli-idem-1",
    ];
    const first = await k(args);
    ok(first);
    const again = await k(args);
    ok(again);
    assert.equal(again.stdout, first.stdout);
    assert.match(again.stderr, /already created \(same --idempotency-key\)/);
    const other = await k([...args.slice(0, -3), "false", "--idempotency-key", "cli-idem-1"]);
    assert.equal(other.code, 5, other.stderr);
    assert.match(other.stderr, /code: conflict \(HTTP 409\)/);
  });

  it("create with bad input: exit 2, the field and its flag named; nothing created", async () => {
    const before = json<{ jobs: Job[] }>(await k(["jobs", "list", "--all", "--json"])).jobs.length;
    const cases: [string[], RegExp][] = [
      // refused by the API: its field, and the flag that set it
      [
        ["--cron", "0 0 32 * *", "--timeout", "5"],
        /schedule\.cron: .*32.*\n {2}field: schedule\.cron \(set with --cron\)\n {2}code: \w+ \(HTTP 400\)/,
      ],
      [["--every", "1h"], /field: task\.timeout_s \(set with --timeout\)/],
      [
        ["--every", "1h", "--timeout", "5", "--tz", "Mars/Base"],
        /field: schedule\.time_zone \(set with --tz\)/,
      ],
      [
        ["--every", "1h", "--timeout", "5", "-e", "KAIROS_X=1"],
        /field: task\.env\.KAIROS_X \(set with --env\)/,
      ],
      [
        ["--every", "1h", "--timeout", "99999999"],
        /task\.timeout_s: .*\n {2}field: task\.timeout_s \(set with --timeout\)/,
      ],
      // plainly wrong: refused before any request
      [["--every", "7m", "--timeout", "5"], /--every: 7m does not divide an hour evenly/],
      [["--every", "1h", "--timeout", "soon"], /--timeout: must be a number, got "soon"/],
      [
        ["--every", "1h", "--at", "2030-01-01T00:00:00Z", "--timeout", "5"],
        /give one of --cron, --every and --at/,
      ],
      [["--every", "1h", "--timeout", "5", "-e", "NOEQUALS"], /--env: must be NAME=VALUE/],
      [
        ["--every", "1h", "--timeout", "5", "--overlap", "sometimes"],
        /--overlap.*sometimes.*Allowed choices are skip, queue, allow, replace/,
      ],
      [["--every", "1h", "--timeout", "5", "--no-such-flag"], /unknown option '--no-such-flag'/],
    ];
    for (const [args, re] of cases) {
      const r = await k(["jobs", "create", "--image", "busybox", "--command", "true", ...args]);
      assert.equal(r.code, 2, `${args.join(" ")}: exit ${r.code}\n${r.stderr}`);
      assert.match(r.stderr, re, args.join(" "));
      assert.equal(r.stdout, "", args.join(" "));
    }
    const j = await k(["jobs", "create", "--image", "busybox", "--every", "1h", "--json"]);
    assert.equal(j.code, 2);
    const e = (JSON.parse(j.stderr) as { error: Record<string, unknown> }).error;
    assert.equal(j.stderr.trimEnd().split("\n").length, 1, "one JSON line");
    assert.deepEqual([e["code"], e["status"]], ["invalid_argument", 400]);
    assert.match(String(e["field"]), /^task\.(args|timeout_s)$/);
    assert.match(String(e["message"]), /^task\.(args|timeout_s): required/);
    const after = json<{ jobs: Job[] }>(await k(["jobs", "list", "--all", "--json"])).jobs.length;
    assert.equal(after, before, "nothing was created");
  });

  it("list: a table, paging with --limit/--cursor, --all, --json", async () => {
    const ids = [
      await create("--every", "1h", "--name", "page-a", "--command", "true"),
      await create("--every", "1h", "--name", "page-b", "--command", "true"),
    ];
    const table = await k(["jobs", "list", "--all"]);
    ok(table);
    const lines = table.stdout.trimEnd().split("\n");
    assert.match(lines[0]!, /^JOB ID\s+NAME\s+STATE\s+SCHEDULE\s+NEXT RUN \(UTC\)$/);
    for (const id of ids)
      assert.match(
        table.stdout,
        new RegExp(`^${id}\\s+page-\\w\\s+enabled\\s+cron "0 \\* \\* \\* \\*" in UTC\\s+20`, "m"),
      );
    const all = json<{ jobs: Job[]; next_cursor: string | null }>(
      await k(["jobs", "list", "--all", "--json"]),
    );
    assert.equal(all.next_cursor, null);
    const first = await k(["jobs", "list", "--limit", "1"]);
    ok(first);
    assert.equal(first.stdout.trimEnd().split("\n").length, 2);
    const cursor = /more: --cursor (\S+)/.exec(first.stderr)?.[1];
    assert.ok(cursor, first.stderr);
    const rest = json<{ jobs: Job[] }>(
      await k(["jobs", "list", "--limit", "200", "--cursor", cursor, "--json"]),
    );
    assert.equal(rest.jobs.length, all.jobs.length - 1);
    const badLimit = await k(["jobs", "list", "--limit", "500"]);
    assert.equal(badLimit.code, 2);
    assert.match(badLimit.stderr, /field: limit\n/);
    const notNumber = await k(["jobs", "list", "--limit", "ten"]);
    assert.equal(notNumber.code, 2);
    assert.match(notNumber.stderr, /--limit: must be a whole number/);
    const badCursor = await k(["jobs", "list", "--cursor", "x".repeat(1025)]);
    assert.equal(badCursor.code, 2);
    assert.match(badCursor.stderr, /field: cursor/);
  });

  it("list --name/--state: the API's filters; a bad state is refused with its flag", async () => {
    const a = await create("--every", "1h", "--name", "Filter-Alpha", "--command", "true");
    const b = await create(
      "--every",
      "1h",
      "--name",
      "filter-beta",
      "--paused",
      "--command",
      "true",
    );
    const ids = (r: CliResult) =>
      json<{ jobs: Job[] }>(r)
        .jobs.map((j) => j.job_id)
        .sort();
    assert.deepEqual(ids(await k(["jobs", "list", "--name", "FILTER-", "--json"])), [a, b].sort());
    assert.deepEqual(
      ids(await k(["jobs", "list", "--name", "filter-", "--state", "paused", "--json"])),
      [b],
    );
    assert.deepEqual(
      ids(await k(["jobs", "list", "--name", "alpha", "--state", "enabled", "--json"])),
      [a],
    );
    const table = await k(["jobs", "list", "--name", "filter-beta"]);
    ok(table);
    assert.match(table.stdout, new RegExp(`^${b}\\s+filter-beta\\s+paused`, "m"));
    const bad = await k(["jobs", "list", "--state", "stopped"]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--state: must be enabled or paused/);
    const long = await k(["jobs", "list", "--name", "n".repeat(201)]);
    assert.equal(long.code, 2);
    assert.match(long.stderr, /field: name/);
  });

  it("edit: changes only what the flags name, at the version read", async () => {
    const id = await create(
      "--cron",
      "0 1 * * *",
      "--command",
      "echo one",
      "-e",
      "KEEP=1",
      "--name",
      "ed",
    );
    const r = await k([
      "jobs",
      "edit",
      id,
      "--tz",
      "Europe/Berlin",
      "-e",
      "NEW=2",
      "--max-attempts",
      "4",
      "--json",
    ]);
    ok(r);
    const job = json<Job>(r);
    assert.deepEqual(job.schedule, { cron: "0 1 * * *", time_zone: "Europe/Berlin" });
    assert.deepEqual(job.task.env, { KEEP: "1", NEW: "2" });
    assert.deepEqual(job.task.args, ["/bin/sh", "-c", "echo one"]);
    assert.equal(job.retry.max_attempts, 4);
    assert.equal(job.name, "ed");
    assert.equal(job.version, 2);
    const human = await k(["jobs", "edit", id, "--unset-env", "KEEP", "--", "echo", "two"]);
    ok(human);
    assert.match(human.stdout, /^version\s+3$/m);
    assert.match(human.stdout, /^args\s+echo two$/m);
    assert.match(human.stdout, /^env\s+NEW=2$/m);
    const none = await k(["jobs", "edit", id]);
    assert.equal(none.code, 2);
    assert.match(none.stderr, /nothing to change/);
    const bad = await k(["jobs", "edit", id, "--cron", "61 * * * *"]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /field: schedule\.cron \(set with --cron\)/);
    const tzOnAt = await k([
      "jobs",
      "edit",
      await create("--at", "2099-01-01T00:00:00Z", "--command", "true"),
      "--tz",
      "UTC",
    ]);
    assert.equal(tzOnAt.code, 2);
    assert.match(tzOnAt.stderr, /--tz: only with a cron schedule/);
    const missing = await k(["jobs", "edit", "jnosuchjob00000000", "--name", "x"]);
    assert.equal(missing.code, 4, missing.stderr);
    assert.match(missing.stderr, /code: not_found \(HTTP 404\)/);
  });

  it("edit keeps a job's secret env: a task change without them is refused", async () => {
    const spec = {
      schedule: { cron: "@daily", time_zone: "UTC" },
      task: { image: "busybox", args: ["true"], timeout_s: 10, secret_env: { TOKEN: "s3cret" } },
    };
    const c = await k(["jobs", "create", "-f", "-", "--name", "sec"], {}, JSON.stringify(spec));
    ok(c);
    const id = c.stdout.trim();
    const names = async (): Promise<unknown> =>
      (json<Job>(await k(["jobs", "get", id, "--json"])).task as { secret_env_names?: string[] })
        .secret_env_names;
    const refused = await k(["jobs", "edit", id, "--timeout", "20"]);
    assert.equal(refused.code, 2, refused.stderr);
    assert.match(refused.stderr, /task\.secret_env: the job has secret env \(TOKEN\)/);
    assert.deepEqual(await names(), ["TOKEN"]);
    ok(await k(["jobs", "edit", id, "--name", "renamed"]));
    assert.deepEqual(await names(), ["TOKEN"], "a change outside task keeps them");
    const withSecrets = JSON.stringify({ task: { ...spec.task, secret_env: { TOKEN: "new" } } });
    const r = await k(
      ["jobs", "edit", id, "-f", "-", "--timeout", "20", "--json"],
      {},
      withSecrets,
    );
    ok(r);
    assert.equal(json<Job>(r).task.timeout_s, 20);
    assert.deepEqual(await names(), ["TOKEN"]);
    assert.doesNotMatch(r.stdout, /s3cret|"new"/);
  });

  it("pause, resume, delete; a deleted job is not found (exit 4)", async () => {
    const id = await create("--every", "1h", "--command", "true");
    const p = await k(["jobs", "pause", id]);
    ok(p);
    assert.equal(p.stdout, `${id} paused\n`);
    assert.equal(json<Job>(await k(["jobs", "get", id, "--json"])).enabled, false);
    const r = await k(["jobs", "resume", id, "--json"]);
    ok(r);
    assert.equal(json<Job>(r).enabled, true);
    const d = await k(["jobs", "delete", id]);
    ok(d);
    assert.equal(d.stdout, `${id} deleted\n`);
    for (const cmd of ["get", "pause", "resume", "delete", "run"]) {
      const gone = await k(["jobs", cmd, id]);
      assert.equal(gone.code, 4, `${cmd}: ${gone.stderr}`);
      assert.match(gone.stderr, /not found/);
    }
    const usage = await k(["jobs", "get"]);
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /missing required argument 'job_id'/);
  });

  it("a wrong key: exit 3 for every command, nothing changed", async () => {
    const id = await create("--every", "1h", "--command", "true");
    const wrong = { KAIROS_API_KEY: "kai_wrongwrongwrongwrongwrongwrongwrongwrongwro" };
    for (const args of [
      ["list"],
      ["get", id],
      ["create", "--image", "busybox", "--every", "1h", "--timeout", "5", "--command", "true"],
      ["edit", id, "--name", "x"],
      ["pause", id],
      ["resume", id],
      ["run", id],
      ["delete", id],
    ]) {
      const r = await k(["jobs", ...args], wrong);
      assert.equal(r.code, 3, `${args[0]}: exit ${r.code}\n${r.stderr}`);
      assert.match(r.stderr, /code: unauthenticated \(HTTP 401\)/);
    }
    const stillThere = json<Job>(await k(["jobs", "get", id, "--json"]));
    assert.deepEqual([stillThere.version, stillThere.enabled], [1, true]);
  });

  it("URL and key: flags, then KAIROS_API_*, then the dev file (its key only for its URL)", async () => {
    const flags = await kairos(["jobs", "list", "--api-url", url, "--api-key", key], {
      env: { KAIROS_API_URL: "http://127.0.0.1:9", KAIROS_API_KEY: "kai_nope" },
    });
    ok(flags);
    const dir = emptyStateDir();
    writeFileSync(
      join(dir, "dev.json"),
      JSON.stringify({ nats_url: fx.nats.url, api_url: url, api_key: key }),
    );
    const dev = await kairos(["jobs", "list", "--json"], { env: { KAIROS_STATE_DIR: dir } });
    ok(dev);
    const envKey = await kairos(["jobs", "list"], {
      env: { KAIROS_STATE_DIR: dir, KAIROS_API_KEY: "kai_nope" },
    });
    assert.equal(envKey.code, 3, "the environment's key beats the dev file's");
    const elsewhere = await kairos(["jobs", "list"], {
      env: { KAIROS_STATE_DIR: dir, KAIROS_API_URL: url.replace("127.0.0.1", "localhost") },
    });
    assert.equal(elsewhere.code, 3);
    assert.match(
      elsewhere.stderr,
      /no API key for http:\/\/localhost:\d+: .*only sent to its own URL/,
    );
    const nothing = await kairos(["jobs", "list"]);
    assert.equal(nothing.code, 2);
    assert.match(
      nothing.stderr,
      /no API: pass --api-url, set KAIROS_API_URL or start `kairos dev`/,
    );
    const badUrl = await k(["jobs", "list", "--api-url", "ftp://x"]);
    assert.equal(badUrl.code, 2);
    assert.match(badUrl.stderr, /--api-url: must be an http\(s\) URL/);
    const down = await k(["jobs", "list", "--api-url", "http://127.0.0.1:9"]);
    assert.equal(down.code, 6, down.stderr);
    assert.match(down.stderr, /cannot reach the API at http:\/\/127\.0\.0\.1:9/);
  });
});
