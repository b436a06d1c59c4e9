/**
 * `kairos cron next`: preview a schedule's next occurrences with the real engine.
 *
 *   kairos cron next "<expr>" --tz <zone> [--from <instant>] [--count N] [--json]
 *   kairos cron next --batch    (JSON lines in, exactly one JSON line out per input line)
 *
 * Batch protocol, for tools: each input line is {"cron", "tz", "from", "count"?} (count
 * defaults to 5, at most 1000); each output line is {"next": [UTC ISO, whole seconds, Z]}
 * or {"error": "<message>"}. A bad line (bad JSON, missing or unknown fields, bad types, bad
 * cron or zone, empty) gets an error line and the batch goes on; output order is input
 * order and writes wait for the pipe to drain, so huge batches stream in bounded memory.
 *
 * Exit codes: 0 ok, 2 bad input (usage errors included). The clock is read only here, for the
 * default `--from`; the engine itself never reads it.
 */
import { createInterface } from "node:readline";
import { Temporal } from "@js-temporal/polyfill";
import { CommanderError, type Command } from "commander";
import { KairosError, isKairosError } from "../lib/errors.ts";
import { compileSchedule, formatUtc, parseInstant } from "../schedule/index.ts";

/** Most occurrences one request may ask for. */
export const MAX_CLI_COUNT = 1000;
export const DEFAULT_CLI_COUNT = 5;
/** Longest batch line answered; longer lines get an error line. */
export const MAX_BATCH_LINE = 65_536;

interface NextOptions {
  tz: string;
  from?: string;
  count: string;
  json?: boolean;
  batch?: boolean;
}

/** Registers `kairos cron …`. */
export function registerCronCommands(program: Command): void {
  const cron = program.command("cron").description("schedule tools").exitOverride(usageExitCode2);
  cron
    .command("next")
    .description("print the next occurrences of a cron expression")
    .argument(
      "[expr]",
      "cron expression: 5 fields, 6 with leading seconds, or a macro such as @daily",
    )
    .option("--tz <zone>", "IANA time zone the expression is read in", "UTC")
    .option("--from <instant>", "ISO 8601 instant with offset or Z to start after (default: now)")
    .option("--count <n>", `how many occurrences, 1-${MAX_CLI_COUNT}`, String(DEFAULT_CLI_COUNT))
    .option("--json", 'print {"next": [...]} instead of a table')
    .option("--batch", "read JSON lines on stdin, write one JSON line per input line")
    .exitOverride(usageExitCode2)
    .action(async (expr: string | undefined, opts: NextOptions, cmd: Command) => {
      if (opts.batch === true) {
        const extra = ["tz", "from", "count", "json"].filter(
          (o) => cmd.getOptionValueSource(o) === "cli",
        );
        if (expr !== undefined || extra.length > 0)
          throw usage(
            `--batch reads everything from stdin; drop ${expr !== undefined ? "the expression" : `--${extra.join(", --")}`}`,
          );
        await runBatch(process.stdin, process.stdout);
        return;
      }
      if (expr === undefined)
        throw usage(
          'an expression is required, e.g. kairos cron next "0 9 * * 1-5" --tz Europe/London',
        );
      printNext(expr, opts);
    });
}

/** Commander's usage errors exit with 2 like every other bad input (help and version stay 0). */
function usageExitCode2(err: CommanderError): never {
  throw err.exitCode === 0 ? err : new CommanderError(2, err.code, err.message);
}

function usage(message: string): KairosError {
  return new KairosError("invalid_argument", message);
}

function parseCount(text: string): number {
  if (!/^\d+$/.test(text) || Number(text) < 1 || Number(text) > MAX_CLI_COUNT)
    throw usage(`--count must be an integer 1-${MAX_CLI_COUNT}, got "${text}"`);
  return Number(text);
}

function printNext(expr: string, opts: NextOptions): void {
  const count = parseCount(opts.count);
  const fromMs = opts.from === undefined ? Date.now() : parseFrom(opts.from, "--from");
  const times = compileSchedule({ cron: expr, time_zone: opts.tz }).next(fromMs, count);
  if (opts.json === true) {
    process.stdout.write(`${JSON.stringify({ next: times.map(formatUtc) })}\n`);
    return;
  }
  const lines = times.map((ms) => {
    const local = Temporal.Instant.fromEpochMilliseconds(ms).toZonedDateTimeISO(opts.tz);
    return `${formatUtc(ms)}  ${local.toPlainDate().toString()} ${local.toPlainTime().toString({ smallestUnit: "second" })} ${local.offset}`;
  });
  process.stdout.write(
    `next ${times.length} in ${opts.tz} after ${formatUtc(fromMs)} (UTC, then local time and offset):\n${lines.join("\n")}\n`,
  );
}

/** Output buffered beyond this many characters is written at once, even mid-burst. */
const FLUSH_AT_CHARS = 256 * 1024;

/**
 * Answers batch lines from `input` on `output`, one line each, in order. Answers to the lines
 * of one input chunk are written together (after the chunk, so an interactive caller gets
 * its answer at once, and a bulk caller is not charged a write per line); when `output` is
 * full, input is paused until it drains. Resolves when all answers are written or the reader
 * has gone away (EPIPE).
 */
export function runBatch(
  input: NodeJS.ReadableStream,
  output: NodeJS.WritableStream,
): Promise<void> {
  return new Promise((resolve) => {
    const lines = createInterface({ input, crlfDelay: Infinity });
    let pending: string[] = [];
    let pendingChars = 0;
    let flushScheduled = false;
    let waitingForDrain = false;
    let inputEnded = false;
    let finished = false;
    const finish = (): void => {
      if (finished) return;
      finished = true;
      lines.close();
      resolve();
    };
    const flush = (): void => {
      flushScheduled = false;
      if (finished || waitingForDrain) return;
      if (pending.length > 0) {
        const chunk = pending.join("");
        pending = [];
        pendingChars = 0;
        let ok: boolean;
        try {
          ok = output.write(chunk);
        } catch {
          finish(); // the reader went away
          return;
        }
        if (!ok) {
          waitingForDrain = true;
          lines.pause();
          output.once("drain", () => {
            waitingForDrain = false;
            lines.resume();
            flush();
          });
          return;
        }
      }
      if (inputEnded) finish();
    };
    const scheduleFlush = (): void => {
      if (!flushScheduled) {
        flushScheduled = true;
        setImmediate(flush);
      }
    };
    output.on("error", finish);
    lines.on("line", (line) => {
      const answer = `${answerBatchLine(line)}\n`;
      pending.push(answer);
      pendingChars += answer.length;
      if (pendingChars >= FLUSH_AT_CHARS) flush();
      else scheduleFlush();
    });
    lines.on("close", () => {
      inputEnded = true;
      scheduleFlush();
    });
  });
}

const BATCH_FIELDS = new Set(["cron", "tz", "from", "count"]);

/** The JSON output line for one batch input line; never throws. */
export function answerBatchLine(line: string): string {
  try {
    return JSON.stringify({ next: answer(line) });
  } catch (e) {
    const message = isKairosError(e)
      ? e.message
      : `internal error: ${e instanceof Error ? e.message : String(e)}`;
    return JSON.stringify({ error: message });
  }
}

function answer(line: string): string[] {
  if (line.length > MAX_BATCH_LINE)
    throw usage(`line too long (${line.length} characters, max ${MAX_BATCH_LINE})`);
  if (line.trim() === "") throw usage("empty line");
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch (e) {
    throw usage(`bad JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw usage('expected a JSON object {"cron", "tz", "from", "count"}');
  const req = value as Record<string, unknown>;
  const unknown = Object.keys(req).find((k) => !BATCH_FIELDS.has(k));
  if (unknown !== undefined)
    throw usage(`unknown field "${unknown}" (expected cron, tz, from, count)`);
  const cron = stringField(req, "cron");
  const tz = stringField(req, "tz");
  const from = stringField(req, "from");
  const count = req.count ?? DEFAULT_CLI_COUNT;
  if (typeof count !== "number" || !Number.isInteger(count) || count < 1 || count > MAX_CLI_COUNT) {
    throw usage(`count must be an integer 1-${MAX_CLI_COUNT}, got ${JSON.stringify(count)}`);
  }
  const schedule = compileSchedule({ cron, time_zone: tz });
  return schedule.next(parseFrom(from, "from"), count).map(formatUtc);
}

function parseFrom(text: string, label: string): number {
  try {
    return parseInstant(text, "from");
  } catch (e) {
    throw usage(`${label}: ${isKairosError(e) ? e.message : String(e)}`);
  }
}

function stringField(req: Record<string, unknown>, name: string): string {
  const v = req[name];
  if (v === undefined) throw usage(`missing field "${name}"`);
  if (typeof v !== "string")
    throw usage(`field "${name}" must be a string, got ${v === null ? "null" : typeof v}`);
  return v;
}
