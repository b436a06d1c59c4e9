/**
 * A job's schedule in words, for people: `0 9 * * 1-5` in Asia/Kolkata is "at 09:00 on Monday to
 * Friday, Asia/Kolkata". Covers the server's grammar (src/schedule/cron-fields.ts: 5 or 6
 * fields, macros, lists, ranges, steps, names, `?`, `L`); what it cannot put simply it says
 * field by field ("minutes 0-30/10 past hours 9 to 17"), never wrongly. Pure: no DOM, no
 * clock, so the unit tests run it in Node.
 */

const MACROS = {
  "@yearly": "0 0 1 1 *",
  "@annually": "0 0 1 1 *",
  "@monthly": "0 0 1 * *",
  "@weekly": "0 0 * * 0",
  "@daily": "0 0 * * *",
  "@midnight": "0 0 * * *",
  "@hourly": "0 * * * *",
};
const MONTHS = [
  "January",
  "February",
  "March",
  "April",
  "May",
  "June",
  "July",
  "August",
  "September",
  "October",
  "November",
  "December",
];
const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const MONTH_ABBR = MONTHS.map((m) => m.slice(0, 3).toUpperCase());
const DAY_ABBR = DAYS.map((d) => d.slice(0, 3).toUpperCase());

/** @param {string[]} items @returns {string} "a", "a and b", "a, b and c" */
export function listWords(items) {
  if (items.length <= 1) return items.join("");
  return `${items.slice(0, -1).join(", ")} and ${items[items.length - 1]}`;
}

const pad = (/** @type {number} */ n) => String(n).padStart(2, "0");

/**
 * One field's items. `null` when the field is `*` or `?` (unrestricted).
 * @typedef {{ from: number, to: number | null, step: number | null, star: boolean }} Item
 * @param {string} text @param {string[] | null} names @param {number} base value of names[0]
 * @returns {Item[] | null}
 */
function parseField(text, names, base) {
  if (text === "*" || text === "?") return null;
  const value = (/** @type {string} */ s) => {
    const i = names ? names.indexOf(s.toUpperCase()) : -1;
    if (i >= 0) return i + base;
    if (!/^\d+$/.test(s)) throw new Error(`cannot read "${s}"`);
    return Number(s);
  };
  return text.split(",").map((part) => {
    const [range = "", stepText] = part.split("/");
    const step = stepText === undefined ? null : value(stepText);
    if (range === "*" || range === "?") return { from: 0, to: null, step, star: true };
    const [a = "", b] = range.split("-");
    return { from: value(a), to: b === undefined ? null : value(b), step, star: false };
  });
}

/** @param {Item[] | null} items */
const single = (items) =>
  items !== null && items.length === 1 && items[0].to === null && items[0].step === null
    ? items[0].from
    : null;

/** @param {Item[] | null} items */
const singles = (items) =>
  items !== null && items.every((i) => i.to === null && i.step === null && !i.star)
    ? items.map((i) => i.from)
    : null;

/** @param {Item[] | null} items */
const everyN = (items) =>
  items !== null && items.length === 1 && items[0].star && items[0].step !== null
    ? items[0].step
    : null;

/**
 * @param {Item[]} items @param {(n: number) => string} name
 * @returns {string} "Monday to Friday", "1, 15 and 20", "every 2nd from 1"
 */
function itemWords(items, name) {
  return listWords(
    items.map((i) => {
      const span = i.star
        ? "every"
        : i.to === null
          ? name(i.from)
          : `${name(i.from)} to ${name(i.to)}`;
      if (i.step === null) return span;
      if (i.star) return `every ${i.step}`;
      return `every ${i.step} from ${span}`;
    }),
  );
}

/**
 * @param {Item[] | null | undefined} sec undefined: no seconds field; null: every second
 * @param {Item[] | null} min @param {Item[] | null} hour
 */
function timeWords(sec, min, hour) {
  const s = sec === undefined ? 0 : single(sec);
  const m = single(min);
  const hours = singles(hour);
  if (s !== null && m !== null && hours !== null && hours.length <= 6) {
    const suffix = s === 0 ? "" : `:${pad(s)}`;
    return `at ${listWords(hours.map((x) => `${pad(x)}:${pad(m)}${suffix}`))}`;
  }
  const hourText = hour === null ? "every hour" : `hours ${itemWords(hour, String)}`;
  const minText = min === null ? "every minute" : `minute ${itemWords(min, String)}`;
  if (s === 0) {
    const n = everyN(min);
    if (min === null && hour === null) return "every minute";
    if (hour === null && n !== null) return `every ${n} minutes`;
    if (hour === null && m !== null) return `at minute ${m} of every hour`;
    return `${minText} past ${hourText}`;
  }
  if (min === null && hour === null) {
    if (sec === null) return "every second";
    const n = everyN(sec ?? null);
    if (n !== null) return `every ${n} seconds`;
  }
  const secText =
    sec === null || sec === undefined ? "every second" : `second ${itemWords(sec, String)}`;
  return `${secText} of ${minText} past ${hourText}`;
}

/** @param {string} dom @param {Item[] | null} dow */
function dayWords(dom, dow) {
  const dowName = (/** @type {number} */ n) => DAYS[n % 7] ?? String(n);
  const dowText = dow === null ? null : `on ${itemWords(dow, dowName)}`;
  let domText = null;
  if (dom === "L") domText = "on the last day of the month";
  else {
    const items = parseField(dom, null, 0);
    if (items !== null) {
      const one = single(items);
      domText =
        one !== null
          ? `on day ${one} of the month`
          : `on days ${itemWords(items, String)} of the month`;
    }
  }
  if (domText !== null && dowText !== null) return `${domText} or ${dowText}`;
  return domText ?? dowText;
}

/**
 * @param {string} expr a cron expression as the API accepts it
 * @returns {string} the expression in words (or a field-by-field reading)
 */
export function cronInWords(expr) {
  const trimmed = expr.trim();
  const body = MACROS[/** @type {keyof typeof MACROS} */ (trimmed.toLowerCase())] ?? trimmed;
  const f = body.split(/\s+/);
  if (f.length !== 5 && f.length !== 6) return `cron "${expr}"`;
  const [secText, minText, hourText, domText, monText, dowText] = f.length === 6 ? f : ["0", ...f];
  try {
    const sec = f.length === 6 ? parseField(secText, null, 0) : undefined;
    const min = parseField(minText, null, 0);
    const hour = parseField(hourText, null, 0);
    const mon = parseField(monText, MONTH_ABBR, 1);
    const dow = parseField(dowText, DAY_ABBR, 0);
    const parts = [timeWords(sec, min, hour)];
    const days = dayWords(domText, dow);
    if (days !== null) parts.push(days);
    else if (single(hour) !== null || singles(hour) !== null) parts.push("every day");
    if (mon !== null) parts.push(`in ${itemWords(mon, (n) => MONTHS[n - 1] ?? String(n))}`);
    return parts.join(" ");
  } catch {
    return `cron "${expr}"`;
  }
}

/**
 * @param {{ cron: string, time_zone: string } | { at: string }} schedule
 * @returns {string} "at 09:00 on Monday to Friday, Asia/Kolkata" or "once, at 2026-12-06 09:00:00 UTC"
 */
export function scheduleInWords(schedule) {
  if ("at" in schedule) {
    const d = new Date(schedule.at);
    const when = Number.isNaN(d.getTime())
      ? schedule.at
      : `${d.toISOString().slice(0, 19).replace("T", " ")} UTC`;
    return `once, at ${when}`;
  }
  return `${cronInWords(schedule.cron)}, ${schedule.time_zone}`;
}
