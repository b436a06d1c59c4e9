/**
 * `kairos cron next` end to end: the real CLI in a child process (human form, --json, usage
 * errors with exit code 2, and the --batch protocol: one answer per input line, in order,
 * never stopping early, flushed for large inputs).
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { compileSchedule, formatUtc } from "../../src/schedule/index.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

function kairos(args: string[], stdin = ""): Promise<Result> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", "src/cli/main.ts", ...args], {
      cwd: ROOT,
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => {
      stdout += d;
    });
    child.stderr.setEncoding("utf8").on("data", (d: string) => {
      stderr += d;
    });
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(stdin);
  });
}

const NY_ARGS = [
  "cron",
  "next",
  "30 2 * * *",
  "--tz",
  "America/New_York",
  "--from",
  "2026-03-07T12:00:00Z",
  "--count",
  "2",
];

describe("kairos cron next", () => {
  it("prints UTC instants with local wall time and offset beside them", async () => {
    const r = await kairos(NY_ARGS);
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.trim().split("\n");
    assert.equal(lines.length, 3);
    assert.match(lines[0]!, /America\/New_York after 2026-03-07T12:00:00Z/);
    assert.equal(lines[1], "2026-03-08T07:00:00Z  2026-03-08 03:00:00 -04:00");
    assert.equal(lines[2], "2026-03-09T06:30:00Z  2026-03-09 02:30:00 -04:00");
  });

  it("--json prints {next: [...]}", async () => {
    const r = await kairos([...NY_ARGS, "--json"]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, '{"next":["2026-03-08T07:00:00Z","2026-03-09T06:30:00Z"]}\n');
  });

  it("defaults: UTC, from now, 5 occurrences", async () => {
    const r = await kairos(["cron", "next", "@hourly", "--json"]);
    assert.equal(r.code, 0, r.stderr);
    const next = (JSON.parse(r.stdout) as { next: string[] }).next;
    assert.equal(next.length, 5);
    for (const t of next) assert.match(t, /^\d{4}-\d{2}-\d{2}T\d{2}:00:00Z$/);
  });

  it("bad input: message on stderr, exit code 2", async () => {
    const cases: [string[], RegExp][] = [
      [["cron", "next", "0 0 32 * *"], /day-of-month: 32 is out of range 1-31/],
      [["cron", "next", "* * * * *", "--tz", "Mars/Base"], /unknown time zone "Mars\/Base"/],
      [["cron", "next", "* * * * *", "--count", "1001"], /--count must be an integer 1-1000/],
      [
        ["cron", "next", "* * * * *", "--from", "yesterday"],
        /--from: "yesterday" is not an ISO 8601 instant/,
      ],
      [["cron", "next", "0 0 30 2 *"], /schedule never fires \(searched 8 years ahead\)/],
      [["cron", "next"], /an expression is required/],
      [["cron", "next", "* * * * *", "--bogus"], /unknown option '--bogus'/],
      [["cron", "next", "* * * * *", "--batch"], /--batch reads everything from stdin/],
    ];
    const results = await Promise.all(cases.map(([args]) => kairos(args)));
    results.forEach((r, i) => {
      const [args, message] = cases[i]!;
      assert.equal(r.code, 2, `${args.join(" ")}: exit ${r.code}`);
      assert.match(r.stderr, message);
      assert.equal(r.stdout, "");
    });
  });
});

describe("kairos cron next --batch", () => {
  it("answers the documented example", async () => {
    const r = await kairos(
      ["cron", "next", "--batch"],
      '{"cron":"30 2 * * *","tz":"America/New_York","from":"2026-03-07T12:00:00Z","count":2}\n',
    );
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, '{"next":["2026-03-08T07:00:00Z","2026-03-09T06:30:00Z"]}\n');
  });

  it("writes one line per input line, in order, good and bad mixed, never stopping", async () => {
    const from = "2026-01-01T00:00:00Z";
    const input = [
      JSON.stringify({ cron: "@daily", tz: "UTC", from, count: 1 }),
      "",
      "not json",
      "[1,2]",
      JSON.stringify({ cron: "0 0 32 * *", tz: "UTC", from }),
      JSON.stringify({ cron: "* * * * *", tz: "Mars/Base", from }),
      JSON.stringify({ cron: "* * * * *", tz: "UTC" }),
      JSON.stringify({ cron: 5, tz: "UTC", from }),
      JSON.stringify({ cron: "* * * * *", tz: "UTC", from, count: "2" }),
      JSON.stringify({ cron: "* * * * *", tz: "UTC", from: "2026-01-01", count: 1 }),
      JSON.stringify({ cron: "* * * * *", tz: "UTC", from, count: 1, extra: true }),
      JSON.stringify({ cron: "0 0 30 2 *", tz: "UTC", from }),
      JSON.stringify({
        cron: "*/30 * * * * *",
        tz: "Asia/Kolkata",
        from: "2026-01-01T05:30:00+05:30",
        count: 2,
      }),
    ].join("\r\n"); // CRLF, and no newline after the last line
    const r = await kairos(["cron", "next", "--batch"], input);
    assert.equal(r.code, 0, r.stderr);
    const out = r.stdout.split("\n");
    assert.equal(out.pop(), "");
    assert.deepEqual(
      out.map((l) => JSON.parse(l) as unknown),
      [
        { next: ["2026-01-02T00:00:00Z"] },
        { error: "empty line" },
        { error: `bad JSON: Unexpected token 'o', "not json" is not valid JSON` },
        { error: 'expected a JSON object {"cron", "tz", "from", "count"}' },
        { error: "day-of-month: 32 is out of range 1-31" },
        { error: 'unknown time zone "Mars/Base"' },
        { error: 'missing field "from"' },
        { error: 'field "cron" must be a string, got number' },
        { error: 'count must be an integer 1-1000, got "2"' },
        {
          error:
            'from: "2026-01-01" is not an ISO 8601 instant with an offset or Z, e.g. 2026-03-07T12:00:00Z',
        },
        { error: 'unknown field "extra" (expected cron, tz, from, count)' },
        { error: "schedule never fires (searched 8 years ahead)" },
        { next: ["2026-01-01T00:00:30Z", "2026-01-01T00:01:00Z"] },
      ],
    );
  });

  it("streams a large batch completely and in order", async () => {
    const n = 30_000;
    const lines: string[] = [];
    const expected: string[] = [];
    const s = compileSchedule({ cron: "*/7 * * * *", time_zone: "America/New_York" });
    for (let i = 0; i < n; i++) {
      const fromMs = Date.UTC(2026, 2, 1) + i * 60_000;
      if (i % 10 === 3) {
        lines.push(`{"cron": "bad", "tz": "UTC", "from": "${i}"}`);
        expected.push(
          '{"error":"expected 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading second field, got 1"}',
        );
      } else {
        lines.push(
          JSON.stringify({
            cron: "*/7 * * * *",
            tz: "America/New_York",
            from: formatUtc(fromMs),
            count: 3,
          }),
        );
        expected.push(JSON.stringify({ next: s.next(fromMs, 3).map(formatUtc) }));
      }
    }
    const r = await kairos(["cron", "next", "--batch"], `${lines.join("\n")}\n`);
    assert.equal(r.code, 0, r.stderr);
    const out = r.stdout.split("\n");
    assert.equal(out.pop(), "");
    assert.equal(out.length, n);
    assert.deepEqual(out, expected);
  });
});
