/**
 * The fresh-clone check (`npm run check:fresh-clone`, also test/e2e/fresh-clone.test.ts): what a
 * new user does in their first five minutes, run for real and checked.
 *
 * 1. `git clone` the repository's committed HEAD into a temp dir (no node_modules, no .kairos);
 * 2. the README's start command (`npm start`, read from the README) in its own session on a
 *    pseudo-terminal (`script -qefc`), as in a user's terminal: npm installs the packages, then
 *    `kairos dev` starts (and a Docker engine when none runs);
 * 3. ready = `.kairos/dev.json` exists and `<api_url>/readyz` answers 200 (polled, bounded);
 * 4. the README's quick-start block, extracted between `<!-- fresh-clone-check: quick-start -->`
 *    and `<!-- fresh-clone-check: end -->` and run verbatim with bash in the clone: the run must
 *    have the status, exit code and output the README's next paragraph says, and the engine's
 *    event log must show a container started for that run (label `kairos.run_id`);
 * 5. Ctrl-C: the interrupt character written to the terminal (its line discipline sends SIGINT to
 *    the foreground process group, npm and `kairos dev`); it must exit within 10 s with status 0
 *    or 130, the terminal output must have no JSON line and no `error` line, every process it
 *    started (kairos dev, nats-server, dockerd: pids from its output and dev.json) must be gone,
 *    nothing may still run in the clone, and the Docker engine must be as it was before (stopped
 *    again if `npm start` started it).
 *
 * Prints a line per step and, last, one JSON line `{ok, steps, seconds}`; exits 1 when a step
 * failed. The temp dir is removed (unless --keep). Whatever fails, what this started is stopped.
 * Usage: node --import tsx scripts/check-fresh-clone.ts [--repo <dir>] [--ref <rev>] [--keep]
 *
 * Gotchas: the child environment drops KAIROS_*, npm_* and NODE_TEST_CONTEXT (a user's terminal
 * has none of them; under `npm run` or `node --test` they would leak into the clone's npm and
 * node). Polling (readiness, process exit) is bounded by deadlines; there is no fixed sleep.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync, readdirSync, readlinkSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";

const exec = promisify(execFile);

export const MARK = {
  start: "<!-- fresh-clone-check: start",
  quickStart: "<!-- fresh-clone-check: quick-start -->",
  end: "<!-- fresh-clone-check: end -->",
} as const;

export interface Step {
  step: string;
  ok: boolean;
  seconds: number;
  detail: string;
}

export interface Report {
  ok: boolean;
  steps: Step[];
  seconds: number;
}

export interface CheckOptions {
  /** The repository to clone (default: the one this script is in). */
  repo?: string;
  /** The revision to check (default HEAD). */
  ref?: string;
  /** Keep the temp dir (for a post-mortem). */
  keep?: boolean;
  /** How long `npm start` may take to be ready, npm install included (default 6 min). */
  readyTimeoutMs?: number;
  /** Progress lines (default: stderr). */
  log?: (line: string) => void;
}

class StepFailed extends Error {}

const STOP_DEADLINE_MS = 10_000;

/** The environment of a user's terminal: no Kairos, npm-run or test-runner variables. */
export function userEnv(from: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(from)) {
    if (
      v === undefined ||
      /^(KAIROS_|npm_)/i.test(k) ||
      k === "NODE_TEST_CONTEXT" ||
      k === "INIT_CWD"
    )
      continue;
    env[k] = v;
  }
  env["TERM"] ??= "xterm";
  return env;
}

/**
 * Terminal output as a person sees it, roughly: lines of text, where a carriage return or a
 * "cursor to column 1" (npm's spinner: `⠙ ESC[1G ESC[0K`) lets what follows overwrite the line.
 */
export function terminalLines(raw: string): string[] {
  const plain = raw
    .replace(/\r\n/g, "\n")
    .replace(/\x1b\[1?G/g, "\r")
    .replace(/\x1b\[[0-9;?]*[ -/]*[@-~]/g, "")
    .replace(/\x1b[()][0-9A-Za-z]/g, "");
  return plain.split("\n").map((l) => l.split("\r").at(-1) ?? "");
}

/** What the README says to run and expect, found by its markers (the text the user reads). */
export interface QuickStart {
  startCommand: string;
  block: string;
  expect: { status: string; exitCode: number; output: string };
}

export function readQuickStart(readme: string): QuickStart {
  const fence = (from: number, what: string): { body: string; endAt: number } => {
    const open = readme.indexOf("```sh\n", from);
    if (open < 0 || readme.slice(from, open).trim().split("\n").length > 1)
      throw new Error(`README: no \`\`\`sh block right after the ${what} marker`);
    const close = readme.indexOf("\n```", open + 6);
    if (close < 0) throw new Error(`README: the ${what} block is not closed`);
    return { body: readme.slice(open + 6, close + 1), endAt: close + 4 };
  };
  const s = readme.indexOf(MARK.start);
  if (s < 0) throw new Error(`README: marker ${MARK.start} … --> not found`);
  const startBlock = fence(readme.indexOf("-->", s) + 3, "start");
  const startLine = startBlock.body.split("\n").find((l) => /^npm start\b/.test(l));
  if (!startLine) throw new Error("README: the start block has no `npm start` line");
  const startCommand = startLine.replace(/\s+#.*$/, "").trim();
  const q = readme.indexOf(MARK.quickStart);
  if (q < 0) throw new Error(`README: marker ${MARK.quickStart} not found`);
  const qs = fence(q + MARK.quickStart.length, "quick-start");
  const e = readme.indexOf(MARK.end, qs.endAt);
  if (e < 0 || readme.slice(qs.endAt, e).trim() !== "")
    throw new Error(`README: ${MARK.end} must follow the quick-start block`);
  // The paragraph after the block says what the user sees.
  const para =
    readme
      .slice(e + MARK.end.length)
      .trimStart()
      .split(/\n\s*\n/)[0] ?? "";
  const status = /"status":\s*"(\w+)"/.exec(para)?.[1];
  const exitCode = /"exit_code":\s*(\d+)/.exec(para)?.[1];
  const output = /"output":\s*"((?:[^"\\]|\\.)*)"/.exec(para)?.[1];
  if (status === undefined || exitCode === undefined || output === undefined) {
    throw new Error(
      `README: the paragraph after the quick start must name "status", "exit_code" and "output"; it reads: ${para.slice(0, 200)}`,
    );
  }
  return {
    startCommand,
    block: qs.body,
    expect: { status, exitCode: Number(exitCode), output: JSON.parse(`"${output}"`) as string },
  };
}

/** The top-level JSON values printed one after another (curl's and jq's output), in order. */
export function jsonValues(text: string): unknown[] {
  const out: unknown[] = [];
  let depth = 0;
  let start = -1;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"' && depth > 0) inString = true;
    else if (c === "{" || c === "[") {
      if (depth === 0) start = i;
      depth++;
    } else if ((c === "}" || c === "]") && depth > 0) {
      depth--;
      if (depth === 0) {
        try {
          out.push(JSON.parse(text.slice(start, i + 1)));
        } catch {
          /* not JSON: skipped */
        }
      }
    }
  }
  return out;
}

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Processes whose working directory is inside `dir` (what a started tree leaves behind). */
function processesIn(dir: string): { pid: number; cmd: string }[] {
  const found: { pid: number; cmd: string }[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const cwd = readlinkSync(`/proc/${name}/cwd`);
      if (cwd === dir || cwd.startsWith(dir + "/")) {
        found.push({
          pid: Number(name),
          cmd: readFileSync(`/proc/${name}/cmdline`, "utf8").replace(/\0/g, " ").trim(),
        });
      }
    } catch {
      /* gone, or not ours to read */
    }
  }
  return found;
}

async function engineAnswers(): Promise<boolean> {
  try {
    await exec("docker", ["info", "--format", "{{.ServerVersion}}"], { timeout: 15_000 });
    return true;
  } catch {
    return false;
  }
}

/** Polls `probe` until it returns a value, `abort` returns a reason, or the deadline passes. */
async function until<T>(
  what: string,
  timeoutMs: number,
  probe: () => Promise<T | undefined>,
  abort: () => string | undefined = () => undefined,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    const why = abort();
    if (why !== undefined) throw new StepFailed(`${what}: ${why}`);
    if (Date.now() > deadline)
      throw new StepFailed(`${what}: not within ${Math.round(timeoutMs / 1000)} s`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

export async function checkFreshClone(opts: CheckOptions = {}): Promise<Report> {
  const t0 = Date.now();
  const log = opts.log ?? ((l: string) => process.stderr.write(l + "\n"));
  const steps: Step[] = [];
  const repo = resolve(opts.repo ?? join(import.meta.dirname, ".."));
  const env = userEnv();
  let work: string | undefined;
  let clone = "";
  let term: ChildProcess | undefined;
  let termExit: Promise<number | null> | undefined;
  let exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  let raw = "";
  let engineBefore = false;
  const pids: Record<string, number> = {};
  let cleaned = false;

  const step = async (name: string, fn: () => Promise<string>): Promise<boolean> => {
    const s0 = Date.now();
    let ok = true;
    let detail: string;
    try {
      detail = await fn();
    } catch (e) {
      ok = false;
      detail =
        e instanceof StepFailed
          ? e.message
          : String(e instanceof Error ? (e.stack ?? e.message) : e);
    }
    const st = { step: name, ok, seconds: Math.round((Date.now() - s0) / 100) / 10, detail };
    steps.push(st);
    log(`fresh-clone: ${ok ? "ok  " : "FAIL"} ${name} (${st.seconds} s): ${detail}`);
    return ok;
  };
  const lines = (): string[] => terminalLines(raw);
  const tail = (n = 40): string => lines().slice(-n).join("\n");

  // A Ctrl-C of this check must not leave the clone's npm start (its own session) running.
  const onSignal = (): void => void cleanUp().finally(() => process.exit(130));
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    let qs: QuickStart | undefined;
    const cloned = await step("clone", async () => {
      const sha = (await exec("git", ["-C", repo, "rev-parse", opts.ref ?? "HEAD"])).stdout.trim();
      work = await mkdtemp(join(tmpdir(), "kairos-fresh-clone-"));
      clone = join(work, "kairos");
      await exec("git", ["clone", "--quiet", "--no-checkout", repo, clone]);
      await exec("git", ["-C", clone, "checkout", "--quiet", "--detach", sha]);
      if (existsSync(join(clone, "node_modules")) || existsSync(join(clone, ".kairos")))
        throw new StepFailed("the clone is not fresh (node_modules or .kairos exists)");
      qs = readQuickStart(readFileSync(join(clone, "README.md"), "utf8"));
      return `${sha.slice(0, 12)} into ${clone}; README: start \`${qs.startCommand}\`, quick start ${qs.block.split("\n").length - 1} lines, expects status ${qs.expect.status}, output ${JSON.stringify(qs.expect.output)}`;
    });
    if (!cloned || !qs) return finish();
    const quick = qs;

    await step("engine before", async () => {
      engineBefore = await engineAnswers();
      return engineBefore
        ? "a Docker engine is running (npm start must leave it running)"
        : "no Docker engine answers (npm start should start one and stop it on exit)";
    });

    let devFile: Record<string, unknown> = {};
    const ready = await step(`${quick.startCommand} ready`, async () => {
      // `script` gives npm a terminal of its own, in a new session; its stdin is the keyboard.
      term = spawn("script", ["-qefc", quick.startCommand, "/dev/null"], {
        cwd: clone,
        env,
        detached: true,
        stdio: ["pipe", "pipe", "pipe"],
      });
      const child = term;
      termExit = new Promise((res) =>
        child.once("exit", (code, signal) => {
          exited = { code, signal };
          res(code);
        }),
      );
      child.stdout?.on("data", (b: Buffer) => (raw += b.toString("utf8")));
      child.stderr?.on("data", (b: Buffer) => (raw += b.toString("utf8")));
      const devPath = join(clone, ".kairos", "dev.json");
      const url = await until(
        "`.kairos/dev.json` and /readyz 200",
        opts.readyTimeoutMs ?? 360_000,
        async () => {
          if (!existsSync(devPath)) return undefined;
          try {
            devFile = JSON.parse(readFileSync(devPath, "utf8")) as Record<string, unknown>;
          } catch {
            return undefined; // being written
          }
          const api = devFile["api_url"];
          if (typeof api !== "string") return undefined;
          try {
            const r = await fetch(`${api}/readyz`, { signal: AbortSignal.timeout(5000) });
            await r.text();
            return r.status === 200 ? api : undefined;
          } catch {
            return undefined;
          }
        },
        () => (exited ? `npm start exited (${JSON.stringify(exited)}):\n${tail()}` : undefined),
      );
      const text = lines().join("\n");
      const dockerd = /started dockerd \(pid (\d+)/.exec(text)?.[1];
      const nats = /nats-server nats:\/\/\S+ \(pid (\d+)/.exec(text)?.[1];
      if (dockerd) pids["dockerd"] = Number(dockerd);
      if (nats) pids["nats-server"] = Number(nats);
      if (typeof devFile["pid"] === "number") pids["kairos dev"] = devFile["pid"];
      const node = lines().find((l) => l.includes('kairos dev: node "dev" up'));
      if (!node) throw new StepFailed(`ready, but no 'node "dev" up' line:\n${tail()}`);
      if (!/executor docker\b/.test(node))
        throw new StepFailed(`the dev node does not use the Docker executor: ${node}`);
      if (!engineBefore && !dockerd)
        throw new StepFailed(`no engine was running, and npm start did not start one:\n${tail()}`);
      // The dashboard link it prints: the API's own `/`, signing in with the dev key.
      const link = /kairos dev: dashboard (\S+)/.exec(text)?.[1] ?? "";
      const key = String(devFile["api_key"]);
      if (link !== `${String(devFile["api_url"])}/#key=${encodeURIComponent(key)}`)
        throw new StepFailed(`no dashboard link with the API URL and key:\n${tail()}`);
      const page = await fetch(link.replace(/#.*$/, ""), { signal: AbortSignal.timeout(5000) });
      const html = await page.text();
      if (page.status !== 200 || !html.includes("/dashboard/app.js"))
        throw new StepFailed(`the dashboard at ${link.replace(/#.*$/, "")}: ${page.status}`);
      return `${url}/readyz 200; ${node.replace(/^.*kairos dev: /, "")}; pids ${JSON.stringify(pids)}`;
    });

    if (ready) {
      let runId = "";
      const t1 = Math.floor(Date.now() / 1000) - 2;
      await step("quick start", async () => {
        const r = await new Promise<{ code: number | null; stdout: string; stderr: string }>(
          (res) => {
            const b = spawn("bash", ["-c", quick.block], {
              cwd: clone,
              env,
              stdio: ["ignore", "pipe", "pipe"],
            });
            let stdout = "";
            let stderr = "";
            b.stdout.on("data", (d: Buffer) => (stdout += d.toString("utf8")));
            b.stderr.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
            const t = setTimeout(() => b.kill("SIGKILL"), 60_000);
            b.once("exit", (code) => {
              clearTimeout(t);
              res({ code, stdout, stderr });
            });
          },
        );
        const shown = `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`;
        if (r.code !== 0) throw new StepFailed(`the quick start exited ${r.code}; ${shown}`);
        const values = jsonValues(r.stdout);
        const started = values.find((v) => isRecord(v) && typeof v["run_id"] === "string");
        const last = values[values.length - 1];
        if (!isRecord(started) || !isRecord(last))
          throw new StepFailed(
            `expected the run-now answer and the run's {status, result}; ${shown}`,
          );
        runId = String(started["run_id"]);
        const result = isRecord(last["result"]) ? last["result"] : {};
        const want = {
          status: quick.expect.status,
          exit_code: quick.expect.exitCode,
          output: quick.expect.output.replace("<run id>", runId),
        };
        const got = {
          status: last["status"],
          exit_code: result["exit_code"],
          output: result["output"],
        };
        if (JSON.stringify(got) !== JSON.stringify(want))
          throw new StepFailed(
            `the README says ${JSON.stringify(want)}, the quick start printed ${JSON.stringify(got)}; ${shown}`,
          );
        return `run ${runId}: ${JSON.stringify(got)}`;
      });

      if (runId) {
        await step("ran in a container", async () => {
          const { stdout } = await exec(
            "docker",
            [
              "events",
              "--since",
              String(t1),
              "--until",
              String(Math.ceil(Date.now() / 1000) + 1),
              "--filter",
              "type=container",
              "--filter",
              `label=kairos.run_id=${runId}`,
              "--format",
              "{{json .}}",
            ],
            { timeout: 20_000 },
          );
          const evs = stdout
            .split("\n")
            .filter(Boolean)
            .map(
              (l) =>
                JSON.parse(l) as {
                  Action?: string;
                  Actor?: { ID?: string; Attributes?: Record<string, string> };
                },
            );
          const start = evs.find((e) => e.Action === "start");
          const die = evs.find((e) => e.Action === "die");
          if (!start)
            throw new StepFailed(
              `the engine has no container start for run ${runId} (events: ${stdout.trim() || "none"})`,
            );
          const a = start.Actor?.Attributes ?? {};
          if (die && die.Actor?.Attributes?.["exitCode"] !== "0")
            throw new StepFailed(
              `the container died with exit code ${die.Actor?.Attributes?.["exitCode"]}`,
            );
          const consoleSaw = lines().some((l) => l.includes(`run ${runId} attempt 1 completed`));
          if (!consoleSaw)
            throw new StepFailed(
              `the terminal shows no 'run ${runId} attempt 1 completed' line:\n${tail()}`,
            );
          return `container ${String(start.Actor?.ID).slice(0, 12)} image ${a["image"]} (worker ${a["kairos.worker_id"]}, attempt ${a["kairos.attempt"]}) ${evs.map((e) => e.Action).join(" → ")}; the terminal shows the attempt`;
        });
      }
    }

    if (term && !exited) {
      await step("Ctrl-C", async () => {
        const s0 = Date.now();
        term?.stdin?.write("\x03"); // the terminal's interrupt character: SIGINT to its foreground group
        const timer = new Promise<"late">((r) =>
          setTimeout(() => r("late"), STOP_DEADLINE_MS).unref(),
        );
        if ((await Promise.race([termExit, timer])) === "late" && !exited)
          throw new StepFailed(
            `still running ${STOP_DEADLINE_MS / 1000} s after Ctrl-C:\n${tail()}`,
          );
        const took = (Date.now() - s0) / 1000;
        const code = exited?.code;
        if (code !== 0 && code !== 130)
          throw new StepFailed(
            `exit status ${code} (signal ${exited?.signal}); want 0 or 130:\n${tail()}`,
          );
        return `exited ${code} after ${took.toFixed(1)} s`;
      });
    }

    if (ready) {
      await step("terminal output", async () => {
        const ls = lines();
        const json = ls.filter((l) => /^\s*\{.*\}\s*$/.test(l));
        const errors = ls.filter((l) => /\berror\b|\bERR!/i.test(l));
        const unformatted = ls.filter((l) => /\bundefined\b|\[object Object\]/.test(l));
        const problems = [
          ...json.map((l) => `JSON line: ${l}`),
          ...errors.map((l) => `error line: ${l}`),
          ...unformatted.map((l) => `badly formatted line: ${l}`),
        ];
        // Ctrl-C stops the node, then nats-server, then dockerd (if it started it), and nothing
        // of the node's is printed once nats-server is being stopped.
        const at = (s: string): number => ls.findIndex((l) => l.endsWith(`kairos dev: ${s}`));
        const order = [
          "stopping node",
          "stopping nats-server",
          ...(pids["dockerd"] ? ["stopping dockerd"] : []),
          "stopped",
        ];
        const idx = order.map(at);
        if (idx.some((i) => i < 0) || idx.some((i, k) => k > 0 && i <= (idx[k - 1] ?? -1))) {
          problems.push(
            `Ctrl-C should print ${order.map((o) => `'kairos dev: ${o}'`).join(", ")} in this order`,
          );
        }
        const afterNats = ls
          .slice(at("stopping nats-server") + 1)
          .filter((l) => l.trim() && !/^kairos dev: /.test(l));
        if (at("stopping nats-server") >= 0 && afterNats.length > 0)
          problems.push(`printed after 'stopping nats-server': ${afterNats.join(" | ")}`);
        if (problems.length > 0)
          throw new StepFailed(`${problems.join("\n")}\n--- terminal:\n${tail(60)}`);
        const warns = ls.filter((l) => /\bWARN\b/.test(l)).length;
        return `${ls.filter((l) => l.trim()).length} lines, no JSON line, no error line${warns ? `, ${warns} WARN line(s)` : ""}; last: ${ls.filter((l) => l.trim()).slice(-1)[0] ?? ""}`;
      });
    }

    if (exited) {
      await step("nothing left running", async () => {
        // Stopped processes may take a moment to be reaped by init.
        const left = (): string[] => [
          ...Object.entries(pids)
            .filter(([, p]) => alive(p))
            .map(([n, p]) => `${n} (pid ${p})`),
          ...processesIn(clone).map(
            (p) => `${p.cmd} (pid ${p.pid}, working directory in the clone)`,
          ),
        ];
        await until("processes gone", 5000, async () =>
          left().length === 0 ? true : undefined,
        ).catch(() => {
          throw new StepFailed(`still running: ${left().join(", ")}`);
        });
        return `gone: ${Object.entries(pids)
          .map(([n, p]) => `${n} ${p}`)
          .join(", ")}; no process in the clone`;
      });
      await step("engine after", async () => {
        const now = await engineAnswers();
        if (now !== engineBefore)
          throw new StepFailed(
            engineBefore
              ? "the Docker engine that was running no longer answers"
              : "npm start started a Docker engine and left it running",
          );
        return engineBefore ? "still running, as before" : "stopped again, as before";
      });
    }
    return finish();
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    await cleanUp();
  }

  function finish(): Report {
    const ok = steps.length > 0 && steps.every((s) => s.ok);
    return { ok, steps, seconds: Math.round((Date.now() - t0) / 1000) };
  }

  /** Whatever happened, stop what this started (by the pids recorded) and remove the temp dir. */
  async function cleanUp(): Promise<void> {
    if (cleaned) return;
    cleaned = true;
    if (term?.pid !== undefined && !exited) {
      log("fresh-clone: cleaning up: Ctrl-C, then SIGKILL to the terminal's process group");
      term.stdin?.write("\x03");
      const late = new Promise<"late">((r) => setTimeout(() => r("late"), 20_000).unref());
      if ((await Promise.race([termExit, late])) === "late") {
        try {
          process.kill(-term.pid, "SIGKILL");
        } catch {
          /* gone */
        }
      }
    }
    term?.stdin?.destroy();
    if (work && raw) writeFileSync(join(work, "terminal.log"), raw);
    // nats-server and dockerd run in their own process groups: stop them by their pids.
    for (const name of ["kairos dev", "nats-server", "dockerd"]) {
      const pid = pids[name];
      if (pid === undefined || !alive(pid)) continue;
      log(`fresh-clone: cleaning up: SIGTERM to ${name} (pid ${pid})`);
      process.kill(pid, "SIGTERM");
      await until(`${name} gone`, 30_000, async () => (alive(pid) ? undefined : true)).catch(() => {
        if (alive(pid)) process.kill(pid, "SIGKILL");
      });
    }
    if (work && !opts.keep) await rm(work, { recursive: true, force: true });
    else if (work) log(`fresh-clone: kept ${work}`);
  }
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const opt = (name: string): string | undefined => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const repo = opt("--repo");
  const ref = opt("--ref");
  const report = await checkFreshClone({
    ...(repo ? { repo } : {}),
    ...(ref ? { ref } : {}),
    keep: args.includes("--keep"),
  });
  const failed = report.steps.filter((s) => !s.ok);
  console.log(
    `fresh-clone check: ${report.ok ? "PASSED" : `FAILED (${failed.map((s) => s.step).join(", ")})`} in ${report.seconds} s`,
  );
  const steps = report.steps.map((s) => ({
    step: s.step,
    ok: s.ok,
    seconds: s.seconds,
    ...(s.ok ? {} : { detail: s.detail.split("\n")[0]?.slice(0, 300) }),
  }));
  console.log(JSON.stringify({ ok: report.ok, steps, seconds: report.seconds }));
  process.exitCode = report.ok ? 0 : 1;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === import.meta.filename)
  await main();
