/**
 * Parses and validates a cron expression into the sets of allowed values per field. Grammar: 5
 * fields (minute hour day-of-month month day-of-week), 6 with a leading second, or a macro
 * (@yearly … @hourly). Items: `*`, a value, `a-b`, each with a step (`*\/n`, `a-b/n`, `a/n`), `?`
 * (= `*`, day fields only), `L` (last day, day-of-month only). JAN-DEC and SUN-SAT mix with
 * numbers (`2-JUL`); Sunday is 0 or 7.
 *
 * Why not cron-parser's sets: it rejects `2-JUL` and overlapping lists, expands `1/2` in
 * day-of-week with Sunday twice, accepts `?` anywhere and `H`, and its errors do not name the
 * field. This module is the source of truth; the unit tests use cron-parser as an oracle where
 * both agree.
 *
 * Pitfalls: a field is `restricted` unless its text starts with `*` or `?` (Vixie cron). In
 * day-of-week, `*\/n` runs to 6 and `a/n` through 7 = Sunday (`1/2` is Mon, Wed, Fri, Sun, as in
 * cronie and cron-parser); 7 is otherwise an alias of 0 as a value or range end.
 */
import { FIELD_CRON, scheduleError } from "./errors.ts";

/** The parsed expression: sorted, de-duplicated allowed values per field. */
export interface CronFields {
  /** True when the expression had six fields. */
  readonly hasSeconds: boolean;
  readonly second: readonly number[];
  readonly minute: readonly number[];
  readonly hour: readonly number[];
  /** Days 1-31 listed explicitly; `L` is in `lastDayOfMonth`. */
  readonly dayOfMonth: readonly number[];
  readonly lastDayOfMonth: boolean;
  readonly month: readonly number[];
  /** 0 = Sunday … 6 = Saturday (7 folded into 0). */
  readonly dayOfWeek: readonly number[];
  readonly dayOfMonthRestricted: boolean;
  readonly dayOfWeekRestricted: boolean;
}

/** Longest accepted expression; a limit on parser work and error-message size. */
export const MAX_CRON_LENGTH = 1000;

interface FieldSpec {
  readonly name: string;
  readonly min: number;
  readonly max: number;
  /** Upper end of `*` (6 for day-of-week, where 7 is an alias); `a/n` runs to `max`. */
  readonly stepMax: number;
  /** Names for min, min+1, … (upper case), when the field has names. */
  readonly names?: readonly string[];
  readonly allowQuestion?: boolean;
  readonly allowLast?: boolean;
}

const MONTH_NAMES = [
  "JAN",
  "FEB",
  "MAR",
  "APR",
  "MAY",
  "JUN",
  "JUL",
  "AUG",
  "SEP",
  "OCT",
  "NOV",
  "DEC",
];
const DAY_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const SECOND: FieldSpec = { name: "second", min: 0, max: 59, stepMax: 59 };
const MINUTE: FieldSpec = { name: "minute", min: 0, max: 59, stepMax: 59 };
const HOUR: FieldSpec = { name: "hour", min: 0, max: 23, stepMax: 23 };
const DAY_OF_MONTH: FieldSpec = {
  name: "day-of-month",
  min: 1,
  max: 31,
  stepMax: 31,
  allowQuestion: true,
  allowLast: true,
};
const MONTH: FieldSpec = { name: "month", min: 1, max: 12, stepMax: 12, names: MONTH_NAMES };
const DAY_OF_WEEK: FieldSpec = {
  name: "day-of-week",
  min: 0,
  max: 7,
  stepMax: 6,
  names: DAY_NAMES,
  allowQuestion: true,
};

const MACROS: Readonly<Record<string, string>> = {
  "@yearly": "0 0 1 1 *",
  "@annually": "0 0 1 1 *",
  "@monthly": "0 0 1 * *",
  "@weekly": "0 0 * * 0",
  "@daily": "0 0 * * *",
  "@midnight": "0 0 * * *",
  "@hourly": "0 * * * *",
};

function fail(message: string): never {
  throw scheduleError(FIELD_CRON, message);
}

/** Parses `expr`; throws `invalid_schedule` (field `schedule.cron`) naming field, token and why. */
export function parseCronFields(expr: string): CronFields {
  if (expr.length > MAX_CRON_LENGTH)
    fail(`cron expression is too long (${expr.length} characters, max ${MAX_CRON_LENGTH})`);
  const parts = expr
    .trim()
    .split(/\s+/)
    .filter((p) => p !== "");
  const first = parts[0];
  if (first === undefined) fail("cron expression is empty");
  if (first.startsWith("@")) return parseMacro(first, parts.length);
  if (parts.length !== 5 && parts.length !== 6) {
    fail(
      `expected 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading second field, got ${parts.length}`,
    );
  }
  const hasSeconds = parts.length === 6;
  const [sec, min, hour, dom, mon, dow] = hasSeconds ? parts : ["0", ...parts];
  const domField = parseField(DAY_OF_MONTH, dom ?? "");
  const dowField = parseField(DAY_OF_WEEK, dow ?? "");
  return {
    hasSeconds,
    second: parseField(SECOND, sec ?? "").values,
    minute: parseField(MINUTE, min ?? "").values,
    hour: parseField(HOUR, hour ?? "").values,
    dayOfMonth: domField.values,
    lastDayOfMonth: domField.last,
    month: parseField(MONTH, mon ?? "").values,
    dayOfWeek: [...new Set(dowField.values.map((d) => (d === 7 ? 0 : d)))].sort((a, b) => a - b),
    dayOfMonthRestricted: isRestricted(dom ?? ""),
    dayOfWeekRestricted: isRestricted(dow ?? ""),
  };
}

function parseMacro(macro: string, tokenCount: number): CronFields {
  const body = MACROS[macro.toLowerCase()];
  if (body === undefined)
    fail(`unknown macro "${macro}" (expected one of ${Object.keys(MACROS).join(" ")})`);
  if (tokenCount !== 1)
    fail(`macro "${macro}" must stand alone, got ${tokenCount - 1} more field(s)`);
  return parseCronFields(body);
}

/** Vixie cron: a day field restricts unless it starts with `*` or `?`. */
function isRestricted(text: string): boolean {
  return !(text.startsWith("*") || text.startsWith("?"));
}

interface ParsedField {
  values: number[];
  last: boolean;
}

function parseField(spec: FieldSpec, text: string): ParsedField {
  const allowed = new Set<number>();
  let last = false;
  for (const item of text.split(",")) {
    if (item === "") fail(`${spec.name}: empty item in list "${text}"`);
    if (parseItem(spec, item, allowed)) last = true;
  }
  return { values: [...allowed].sort((a, b) => a - b), last };
}

/** Adds the item's values to `into`; returns true when the item is `L`. */
function parseItem(spec: FieldSpec, item: string, into: Set<number>): boolean {
  const upper = item.toUpperCase();
  if (upper === "L") {
    if (spec.allowLast !== true) fail(`${spec.name}: "L" is only allowed in day-of-month`);
    return true;
  }
  if (item === "?") {
    if (spec.allowQuestion !== true)
      fail(`${spec.name}: "?" is only allowed in day-of-month and day-of-week`);
    addRange(into, spec.min, spec.stepMax, 1);
    return false;
  }
  const slash = item.split("/");
  if (slash.length > 2) fail(`${spec.name}: "${item}" has more than one "/"`);
  const [base = "", stepText] = slash;
  const step = stepText === undefined ? 1 : parseStep(spec, item, stepText);
  if (base === "*") {
    addRange(into, spec.min, spec.stepMax, step);
  } else if (base === "?" || base.toUpperCase() === "L") {
    fail(`${spec.name}: "${base}" cannot take a step in "${item}"`);
  } else if (base.includes("-")) {
    const [loText, hiText, extra] = base.split("-");
    if (
      loText === undefined ||
      hiText === undefined ||
      loText === "" ||
      hiText === "" ||
      extra !== undefined
    ) {
      fail(`${spec.name}: invalid range "${base}" (expected a-b)`);
    }
    const lo = parseValue(spec, loText);
    const hi = parseValue(spec, hiText);
    if (lo > hi) fail(`${spec.name}: range "${base}" is reversed (${lo} > ${hi})`);
    addRange(into, lo, hi, step);
  } else {
    const value = parseValue(spec, base);
    if (stepText === undefined) into.add(value);
    else addRange(into, value, spec.max, step); // day-of-week: through 7 = Sunday (cronie)
  }
  return false;
}

function parseStep(spec: FieldSpec, item: string, text: string): number {
  if (!/^\d+$/.test(text)) fail(`${spec.name}: step "${text}" in "${item}" is not a whole number`);
  const width = spec.stepMax - spec.min + 1;
  const step = Number(text);
  if (step < 1 || step > width)
    fail(`${spec.name}: step ${step} in "${item}" is out of range 1-${width}`);
  return step;
}

function parseValue(spec: FieldSpec, text: string): number {
  if (/^\d+$/.test(text)) {
    const n = Number(text);
    if (n < spec.min || n > spec.max)
      fail(`${spec.name}: ${n} is out of range ${spec.min}-${spec.max}`);
    return n;
  }
  if (spec.names !== undefined && /^[A-Za-z]+$/.test(text)) {
    const index = spec.names.indexOf(text.toUpperCase());
    if (index < 0)
      fail(`${spec.name}: unknown name "${text}" (expected one of ${spec.names.join(" ")})`);
    return spec.min + index;
  }
  if (text.toUpperCase() === "L") fail(`${spec.name}: "L" cannot be used in a range`);
  return fail(
    `${spec.name}: invalid value "${text}" (expected a number ${spec.min}-${spec.max}${spec.names === undefined ? "" : " or a name"})`,
  );
}

function addRange(into: Set<number>, lo: number, hi: number, step: number): void {
  for (let v = lo; v <= hi; v += step) into.add(v);
}
