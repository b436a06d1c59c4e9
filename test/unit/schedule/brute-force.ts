/**
 * An independent oracle for `next`: a cron AST generator (rendered to text with random names,
 * case, Sunday as 0 or 7) whose allowed sets are computed here from the AST, never by the
 * engine's parser, and a brute-force enumeration of local wall times that applies the match
 * rules directly and maps each wall time with Temporal itself (not the engine's zone cache):
 *   exists once → that instant; twice → the earlier; not at all → the transition after it.
 *
 * Assumptions, true of every zone in ZONES: offsets change by less than 3 hours at a time
 * (so wall times more than 3 h before the local time of `after` cannot map after it, and
 * results 3 h of wall time past the N-th cannot precede it), and gap/overlap edges fall on
 * whole minutes (so a minute's mapping is memoised and seconds add to it).
 */
import fc from "fast-check";
import { Temporal } from "@js-temporal/polyfill";

export const ZONES = [
  "UTC",
  "America/New_York",
  "Europe/London",
  "Australia/Lord_Howe",
  "Pacific/Chatham",
  "America/Santiago",
  "Asia/Beirut",
  "America/Havana",
  "Asia/Kolkata",
  "America/St_Johns",
  "Africa/Casablanca",
  "Antarctica/Troll",
  "Australia/Sydney",
] as const;

export type Item =
  | { kind: "star"; step?: number }
  | { kind: "question" }
  | { kind: "value"; v: number; step?: number }
  | { kind: "range"; a: number; b: number; step?: number }
  | { kind: "last" };

export interface FieldDef {
  readonly min: number;
  readonly max: number;
  readonly stepMax: number;
  readonly names?: readonly string[];
  readonly day?: "dom" | "dow";
}

export const FIELDS = {
  second: { min: 0, max: 59, stepMax: 59 },
  minute: { min: 0, max: 59, stepMax: 59 },
  hour: { min: 0, max: 23, stepMax: 23 },
  dom: { min: 1, max: 31, stepMax: 31, day: "dom" },
  month: {
    min: 1,
    max: 12,
    stepMax: 12,
    names: ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
  },
  dow: {
    min: 0,
    max: 7,
    stepMax: 6,
    names: ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    day: "dow",
  },
} as const satisfies Record<string, FieldDef>;

export interface CronAst {
  second?: Item[];
  minute: Item[];
  hour: Item[];
  dom: Item[];
  month: Item[];
  dow: Item[];
}

/** Allowed values of one field (dow folded to 0-6); `last` for `L`. */
export function fieldSet(
  def: FieldDef,
  items: readonly Item[],
): { values: Set<number>; last: boolean; restricted: boolean } {
  const values = new Set<number>();
  let last = false;
  const add = (lo: number, hi: number, step: number): void => {
    for (let v = lo; v <= hi; v += step) values.add(def.day === "dow" && v === 7 ? 0 : v);
  };
  for (const it of items) {
    if (it.kind === "star") add(def.min, def.stepMax, it.step ?? 1);
    else if (it.kind === "question") add(def.min, def.stepMax, 1);
    else if (it.kind === "last") last = true;
    else if (it.kind === "value") add(it.v, it.step === undefined ? it.v : def.max, it.step ?? 1);
    else add(it.a, it.b, it.step ?? 1);
  }
  const first = items[0];
  const restricted = !(first !== undefined && (first.kind === "star" || first.kind === "question"));
  return { values, last, restricted };
}

function renderValue(def: FieldDef, v: number, useName: boolean, lower: boolean): string {
  const name = def.names?.[v - def.min];
  if (useName && name !== undefined) return lower ? name.toLowerCase() : name;
  return String(v);
}

/** Arbitrary items of one field, rendered with `renderItem`. */
function itemArb(def: FieldDef, small: boolean): fc.Arbitrary<Item> {
  const lo = def.min;
  const hi = def.max;
  const width = def.stepMax - def.min + 1;
  const step = fc.option(fc.integer({ min: 1, max: Math.min(width, 20) }), { nil: undefined });
  const value = fc.integer({ min: lo, max: hi });
  const options: fc.Arbitrary<Item>[] = [
    value.map((v) => ({ kind: "value" as const, v })),
    fc
      .tuple(value, value, step)
      .map(([a, b, s]) =>
        s === undefined
          ? { kind: "range" as const, a: Math.min(a, b), b: Math.max(a, b) }
          : { kind: "range" as const, a: Math.min(a, b), b: Math.max(a, b), step: s },
      ),
    fc
      .tuple(value, fc.integer({ min: 1, max: Math.min(width, 20) }))
      .map(([v, s]) => ({ kind: "value" as const, v, step: s })),
  ];
  if (!small)
    options.push(
      step.map((s) =>
        s === undefined ? { kind: "star" as const } : { kind: "star" as const, step: s },
      ),
    );
  else
    options.push(
      fc
        .integer({ min: 5, max: Math.min(width, 30) })
        .map((s) => ({ kind: "star" as const, step: s })),
    );
  if (def.day !== undefined) options.push(fc.constant({ kind: "question" as const }));
  if (def.day === "dom") options.push(fc.constant({ kind: "last" as const }));
  return fc.oneof(...options);
}

function fieldArb(def: FieldDef, small = false): fc.Arbitrary<Item[]> {
  return fc.array(itemArb(def, small), { minLength: 1, maxLength: 3 });
}

/** Random cron ASTs; `withSeconds` adds a sparse seconds field (so brute force stays fast). */
export function cronAstArb(withSeconds: boolean): fc.Arbitrary<CronAst> {
  const base = {
    minute: fieldArb(FIELDS.minute),
    hour: fieldArb(FIELDS.hour),
    dom: fc.oneof(fc.constant<Item[]>([{ kind: "star" }]), fieldArb(FIELDS.dom)),
    month: fc.oneof(fc.constant<Item[]>([{ kind: "star" }]), fieldArb(FIELDS.month)),
    dow: fc.oneof(fc.constant<Item[]>([{ kind: "star" }]), fieldArb(FIELDS.dow)),
  };
  if (!withSeconds) return fc.record(base);
  return fc.record({
    ...base,
    second: fieldArb(FIELDS.second, true),
    minute: fieldArb(FIELDS.minute, true),
  });
}

/** Renders an AST as cron text, with random spellings chosen by `style` bits. */
export function renderCron(ast: CronAst, style: number): string {
  let bit = 0;
  const flip = (): boolean => ((style >> (bit++ % 30)) & 1) === 1;
  const render = (def: FieldDef, items: readonly Item[]): string =>
    items
      .map((it) => {
        switch (it.kind) {
          case "star":
            return it.step === undefined ? "*" : `*/${it.step}`;
          case "question":
            return "?";
          case "last":
            return flip() ? "L" : "l";
          case "value": {
            const v = def.day === "dow" && it.v === 0 && it.step === undefined && flip() ? 7 : it.v;
            return (
              renderValue(def, v, flip(), flip()) + (it.step === undefined ? "" : `/${it.step}`)
            );
          }
          case "range":
            return `${renderValue(def, it.a, flip(), flip())}-${renderValue(def, it.b, flip(), flip())}${it.step === undefined ? "" : `/${it.step}`}`;
        }
      })
      .join(",");
  const parts = [
    render(FIELDS.minute, ast.minute),
    render(FIELDS.hour, ast.hour),
    render(FIELDS.dom, ast.dom),
    render(FIELDS.month, ast.month),
    render(FIELDS.dow, ast.dow),
  ];
  return (ast.second === undefined ? parts : [render(FIELDS.second, ast.second), ...parts]).join(
    " ",
  );
}

/** Instant of a wall time by the DST rule, straight from Temporal. */
export function wallToInstant(pdt: Temporal.PlainDateTime, tz: string): number {
  const earlier = pdt.toZonedDateTime(tz, { disambiguation: "earlier" });
  if (Temporal.PlainDateTime.compare(earlier.toPlainDateTime(), pdt) === 0)
    return earlier.epochMilliseconds;
  const transition = earlier.getTimeZoneTransition("next");
  if (transition === null) throw new Error(`no transition after gap at ${pdt.toString()} in ${tz}`);
  return transition.epochMilliseconds;
}

/** First `count` occurrences after `afterMs` by enumerating wall times; at most `years` searched. */
export function bruteNext(
  ast: CronAst,
  tz: string,
  afterMs: number,
  count: number,
  years = 9,
): number[] {
  const sec = fieldSet(FIELDS.second, ast.second ?? [{ kind: "value", v: 0 }]);
  const min = fieldSet(FIELDS.minute, ast.minute);
  const hour = fieldSet(FIELDS.hour, ast.hour);
  const dom = fieldSet(FIELDS.dom, ast.dom);
  const month = fieldSet(FIELDS.month, ast.month);
  const dow = fieldSet(FIELDS.dow, ast.dow);
  const sorted = (s: Set<number>): number[] => [...s].sort((a, b) => a - b);
  const [secs, mins, hours] = [sorted(sec.values), sorted(min.values), sorted(hour.values)];
  const start = Temporal.Instant.fromEpochMilliseconds(afterMs)
    .toZonedDateTimeISO(tz)
    .toPlainDateTime()
    .subtract({ hours: 3 });
  const endDate = start.toPlainDate().add({ years });
  const found = new Set<number>();
  let stopAt: Temporal.PlainDateTime | undefined;
  for (
    let date = start.toPlainDate();
    Temporal.PlainDate.compare(date, endDate) <= 0;
    date = date.add({ days: 1 })
  ) {
    if (!month.values.has(date.month)) continue;
    const domOk = dom.values.has(date.day) || (dom.last && date.day === date.daysInMonth);
    const dowOk = dow.values.has(date.dayOfWeek % 7);
    if (!(dom.restricted && dow.restricted ? domOk || dowOk : domOk && dowOk)) continue;
    for (const h of hours) {
      for (const mi of mins) {
        const minute = date.toPlainDateTime({ hour: h, minute: mi });
        if (stopAt !== undefined && Temporal.PlainDateTime.compare(minute, stopAt) > 0)
          return firstN(found, count);
        if (Temporal.PlainDateTime.compare(minute.add({ minutes: 1 }), start) <= 0) continue;
        const base = wallToInstant(minute, tz);
        const gap =
          Temporal.PlainDateTime.compare(
            Temporal.Instant.fromEpochMilliseconds(base).toZonedDateTimeISO(tz).toPlainDateTime(),
            minute,
          ) !== 0;
        for (const s of secs) {
          const t = gap ? base : base + s * 1000;
          if (t > afterMs) found.add(t);
        }
        if (stopAt === undefined && found.size >= count) stopAt = minute.add({ hours: 3 });
      }
    }
  }
  return firstN(found, count);
}

function firstN(found: Set<number>, count: number): number[] {
  return [...found].sort((a, b) => a - b).slice(0, count);
}
