/**
 * A job spec from `kairos jobs create|edit` flags: the common fields as flags (`--cron`,
 * `--every`, `--image`, `--command`, …), the rest from `--file spec.json` (`-`: stdin), flags
 * winning over the file. Only what is plainly wrong is refused here (a number flag that is not a
 * number, `NAME=VALUE` without `=`, two schedules, an `--every` that no cron can say); ranges,
 * names and everything else are the API's to judge, so its rules live in one place.
 *
 * Gotcha (edit): the API replaces each top-level field it is sent as a whole, so a flag that
 * changes one field of `task` sends the whole task — built from the job as it is now. A job's
 * secret env values are never returned, so such a patch would drop them: `edit` refuses it unless
 * the patch carries `task.secret_env` itself (from `--file`).
 */
import { readFileSync, statSync } from "node:fs";
import { Option, type Command } from "commander";
import { assertNever } from "../lib/assert.ts";
import { KairosError } from "../lib/errors.ts";
import { BACKOFFS, MISFIRES, OVERLAPS, type JobView } from "../protocol/model.ts";
import type { CliIo } from "./io.ts";

/** The flags of `jobs create` and `jobs edit` (commander's camel-cased names). */
export interface JobSpecFlags {
  name?: string;
  cron?: string;
  every?: string;
  at?: string;
  tz?: string;
  image?: string;
  command?: string;
  env?: string[];
  unsetEnv?: string[];
  timeout?: string;
  memory?: string;
  cpus?: string;
  pids?: string;
  network?: string;
  maxAttempts?: string;
  backoff?: string;
  backoffBase?: string;
  backoffMax?: string;
  overlap?: string;
  misfire?: string;
  startingDeadline?: string;
  flexWindow?: string;
  file?: string;
}

type Obj = Record<string, unknown>;

/** The request body's limit (64 KiB): a bigger spec file could only be refused. */
export const MAX_SPEC_BYTES = 64 * 1024;

const usage = (flag: string, message: string): KairosError =>
  new KairosError("invalid_argument", `${flag}: ${message}`, { field: flag });

const collect = (v: string, prev: string[] = []): string[] => [...prev, v];

/** Adds the spec flags to `jobs create` / `jobs edit`. */
export function jobSpecOptions(cmd: Command, mode: "create" | "edit"): Command {
  cmd
    .option("-f, --file <path>", "the job spec as JSON (`-`: stdin); flags override its fields")
    .option("--name <name>", "the job's name")
    .option("--cron <expr>", 'a cron schedule ("0 9 * * 1-5"; 6 fields: seconds first)')
    .option(
      "--every <interval>",
      "a cron schedule every N s|m|h (dividing a minute, hour, day) or 1d",
    )
    .option("--at <instant>", "a one-shot schedule at an RFC 3339 instant")
    .option("--tz <zone>", "the cron schedule's IANA time zone (default UTC)")
    .option("--image <ref>", "the task's container image")
    .option("--command <shell>", "the task runs /bin/sh -c <shell> (or give its args after --)")
    .option("-e, --env <NAME=VALUE>", "an environment variable of the task (repeatable)", collect);
  if (mode === "edit")
    cmd.option("--unset-env <NAME>", "remove an environment variable (repeatable)", collect);
  return cmd
    .option("--timeout <seconds>", "the task's timeout (task.timeout_s)")
    .option("--memory <mb>", "memory limit in MiB (task.resources.memory_mb)")
    .option("--cpus <n>", "CPU limit (task.resources.cpus)")
    .option("--pids <n>", "process limit (task.resources.pids)")
    .option(
      "--network <mode>",
      "none (no network) or egress (through the worker's proxy, to the tenant's egress policy) (task.network)",
    )
    .option("--max-attempts <n>", "attempts per run, 1 = no retry (retry.max_attempts)")
    .addOption(new Option("--backoff <kind>", "retry backoff (retry.backoff)").choices(BACKOFFS))
    .option("--backoff-base <seconds>", "first retry wait (retry.base_s)")
    .option("--backoff-max <seconds>", "longest retry wait (retry.max_s)")
    .addOption(
      new Option("--overlap <policy>", "a run due while one is active (overlap)").choices(OVERLAPS),
    )
    .addOption(
      new Option("--misfire <policy>", "missed occurrences (misfire.policy)").choices(MISFIRES),
    )
    .option("--starting-deadline <seconds>", "misfire.starting_deadline_s")
    .option("--flex-window <seconds>", "runs may start up to this late (flex_window_s)");
}

const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

/** A number flag as a number (the API checks its range). */
function num(raw: string | undefined, flag: string): number | undefined {
  if (raw === undefined) return undefined;
  const t = raw.trim();
  const n = /^-?(?:\d+(?:\.\d*)?|\.\d+)$/.test(t) ? Number(t) : NaN;
  if (!Number.isFinite(n)) throw usage(flag, `must be a number, got ${JSON.stringify(raw)}`);
  return n;
}

/** `--every 5m` as a cron expression: the interval must divide a minute, an hour or a day. */
export function everyToCron(raw: string): string {
  const m = /^([1-9]\d{0,3})([smhd])$/.exec(raw.trim());
  const bad = (why: string): KairosError =>
    usage("--every", `${why}, got ${JSON.stringify(raw)} (use --cron for other schedules)`);
  if (!m) throw bad("must be N followed by s, m, h or d (30s, 5m, 2h, 1d)");
  const n = Number(m[1]);
  const unit = m[2] as "s" | "m" | "h" | "d";
  const per = { s: 60, m: 60, h: 24, d: 1 }[unit];
  if (unit === "d" && n > 1) throw bad("a cron schedule cannot repeat every few days");
  if (n === per && unit !== "d") return everyToCron(`1${{ s: "m", m: "h", h: "d" }[unit]}`);
  if (per % n !== 0 || n > per)
    throw bad(
      `${n}${unit} does not divide ${{ s: "a minute", m: "an hour", h: "a day", d: "" }[unit]} evenly`,
    );
  const step = n === 1 ? "*" : `*/${n}`;
  switch (unit) {
    case "s":
      return `${step} * * * * *`;
    case "m":
      return `${step} * * * *`;
    case "h":
      return `0 ${step} * * *`;
    case "d":
      return "0 0 * * *";
    default:
      return assertNever(unit);
  }
}

/** `NAME=VALUE` entries as an object (the API checks the names and values). */
function envEntries(list: readonly string[], flag: string): Obj {
  const env: Obj = {};
  for (const e of list) {
    const i = e.indexOf("=");
    if (i <= 0) throw usage(flag, `must be NAME=VALUE, got ${JSON.stringify(e.slice(0, 80))}`);
    env[e.slice(0, i)] = e.slice(i + 1);
  }
  return env;
}

/** The schedule the flags set, or undefined; `current`: the job's (for `--tz` alone). */
function scheduleOf(f: JobSpecFlags, current: unknown): Obj | undefined {
  const given = [f.cron, f.every, f.at].filter((v) => v !== undefined).length;
  if (given > 1) throw usage("--cron", "give one of --cron, --every and --at");
  if (f.at !== undefined) {
    if (f.tz !== undefined) throw usage("--tz", "a one-shot --at instant carries its own offset");
    return { at: f.at };
  }
  const cron = f.cron ?? (f.every !== undefined ? everyToCron(f.every) : undefined);
  // A new cron keeps the time zone it replaces unless --tz says another.
  const tz = f.tz ?? (isObj(current) ? current["time_zone"] : undefined);
  if (cron !== undefined) return { cron, ...(tz !== undefined ? { time_zone: tz } : {}) };
  if (f.tz === undefined) return undefined;
  if (!isObj(current) || typeof current["cron"] !== "string")
    throw usage("--tz", "only with a cron schedule (--cron or --every)");
  return { cron: current["cron"], time_zone: f.tz };
}

/** Sets `obj[key]` when `v` is defined. */
function put(obj: Obj, key: string, v: unknown): void {
  if (v !== undefined) obj[key] = v;
}

/** The task with the flags applied over `base` (the file's, or the job's as it is now). */
function taskOf(f: JobSpecFlags, args: readonly string[], base: Obj): Obj | undefined {
  const res = {
    memory_mb: num(f.memory, "--memory"),
    cpus: num(f.cpus, "--cpus"),
    pids: num(f.pids, "--pids"),
  };
  const touched =
    f.image !== undefined ||
    f.command !== undefined ||
    args.length > 0 ||
    f.env !== undefined ||
    f.unsetEnv !== undefined ||
    f.timeout !== undefined ||
    f.network !== undefined ||
    Object.values(res).some((v) => v !== undefined);
  if (!touched) return undefined;
  if (f.command !== undefined && args.length > 0)
    throw usage("--command", "give the command either as --command or as args after --, not both");
  const { secret_env_names: _names, ...task } = base;
  put(task, "image", f.image);
  put(
    task,
    "args",
    f.command !== undefined
      ? ["/bin/sh", "-c", f.command]
      : args.length > 0
        ? [...args]
        : undefined,
  );
  put(task, "timeout_s", num(f.timeout, "--timeout"));
  put(task, "network", f.network);
  if (f.env !== undefined || f.unsetEnv !== undefined) {
    const env: Obj = {
      ...(isObj(task["env"]) ? task["env"] : {}),
      ...envEntries(f.env ?? [], "--env"),
    };
    for (const n of f.unsetEnv ?? []) delete env[n];
    task["env"] = env;
  }
  if (Object.values(res).some((v) => v !== undefined)) {
    const r: Obj = { ...(isObj(task["resources"]) ? task["resources"] : {}) };
    for (const [k, v] of Object.entries(res)) put(r, k, v);
    task["resources"] = r;
  }
  return task;
}

/** A group (`retry`, `misfire`) with the given fields set, over `base`; undefined if none is. */
function groupOf(base: Obj, fields: Obj): Obj | undefined {
  const set = Object.entries(fields).filter(([, v]) => v !== undefined);
  return set.length === 0 ? undefined : { ...base, ...Object.fromEntries(set) };
}

/**
 * The body the flags make: `base` (the `--file` object, or {}) with every group a flag touches
 * replaced by that group — taken from `base`, else from `current` (the job, for `edit`) — with the
 * flags' fields set.
 */
export function applySpecFlags(
  base: Obj,
  f: JobSpecFlags,
  args: readonly string[],
  current?: JobView,
): Obj {
  const cur = (current ?? {}) as unknown as Obj;
  const from = (k: string): Obj => (isObj(base[k]) ? base[k] : isObj(cur[k]) ? cur[k] : {});
  const out: Obj = { ...base };
  put(out, "name", f.name);
  put(out, "schedule", scheduleOf(f, base["schedule"] ?? cur["schedule"]));
  put(out, "task", taskOf(f, args, from("task")));
  put(
    out,
    "retry",
    groupOf(from("retry"), {
      max_attempts: num(f.maxAttempts, "--max-attempts"),
      backoff: f.backoff,
      base_s: num(f.backoffBase, "--backoff-base"),
      max_s: num(f.backoffMax, "--backoff-max"),
    }),
  );
  put(
    out,
    "misfire",
    groupOf(from("misfire"), {
      policy: f.misfire,
      starting_deadline_s: num(f.startingDeadline, "--starting-deadline"),
    }),
  );
  put(out, "overlap", f.overlap);
  put(out, "flex_window_s", num(f.flexWindow, "--flex-window"));
  return out;
}

/**
 * `edit`'s guard: a patch that replaces `task` of a job with secret env but does not send
 * `task.secret_env` would delete the secrets.
 */
export function checkSecretsKept(patch: Obj, job: JobView): void {
  const names = job.task.secret_env_names ?? [];
  const task = patch["task"];
  if (names.length === 0 || !isObj(task) || task["secret_env"] !== undefined) return;
  throw new KairosError(
    "invalid_argument",
    `task.secret_env: the job has secret env (${names.join(", ")}), whose values are never returned; a change to task replaces them, so send them again: --file with task.secret_env`,
    { field: "task.secret_env" },
  );
}

/** The `--file` JSON object (`-`: stdin), at most 64 KiB. */
export async function readSpecFile(path: string, io: CliIo): Promise<Obj> {
  let text: string;
  if (path === "-") text = await io.readStdin(MAX_SPEC_BYTES);
  else {
    try {
      if (statSync(path).size > MAX_SPEC_BYTES) throw usage("--file", `${path} is over 64 KiB`);
      text = readFileSync(path, "utf8");
    } catch (e) {
      if (e instanceof KairosError) throw e;
      throw usage("--file", `cannot read ${path}: ${(e as Error).message}`);
    }
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw usage("--file", `${path === "-" ? "stdin" : path} is not JSON: ${(e as Error).message}`);
  }
  if (!isObj(v)) throw usage("--file", "must hold a JSON object (the job spec)");
  return v;
}

const FLAGS: readonly (readonly [RegExp, keyof JobSpecFlags, string])[] = [
  [/^name$/, "name", "--name"],
  [/^schedule\.cron$/, "cron", "--cron"],
  [/^schedule\.cron$/, "every", "--every"],
  [/^schedule\.at$/, "at", "--at"],
  [/^schedule\.time_zone$/, "tz", "--tz"],
  [/^task\.image$/, "image", "--image"],
  [/^task\.args\b/, "command", "--command"],
  [/^task\.env\b/, "env", "--env"],
  [/^task\.timeout_s$/, "timeout", "--timeout"],
  [/^task\.resources\.memory_mb$/, "memory", "--memory"],
  [/^task\.resources\.cpus$/, "cpus", "--cpus"],
  [/^task\.resources\.pids$/, "pids", "--pids"],
  [/^task\.network$/, "network", "--network"],
  [/^retry\.max_attempts$/, "maxAttempts", "--max-attempts"],
  [/^retry\.backoff$/, "backoff", "--backoff"],
  [/^retry\.base_s$/, "backoffBase", "--backoff-base"],
  [/^retry\.max_s$/, "backoffMax", "--backoff-max"],
  [/^overlap$/, "overlap", "--overlap"],
  [/^misfire\.policy$/, "misfire", "--misfire"],
  [/^misfire\.starting_deadline_s$/, "startingDeadline", "--starting-deadline"],
  [/^flex_window_s$/, "flexWindow", "--flex-window"],
];

/**
 * The flag to name beside an API field in an error: the flag given for it; else `--file` if the
 * spec came from one; else the flag that would set it (a required field left out).
 */
export function specFlagOf(f: JobSpecFlags): (field: string) => string | undefined {
  return (field) => {
    const rows = FLAGS.filter(([re]) => re.test(field));
    const given = rows.find(([, key]) => f[key] !== undefined);
    if (given) return given[2];
    if (field === "Idempotency-Key") return "--idempotency-key";
    if (f.file !== undefined) return "--file";
    return rows[0]?.[2];
  };
}
