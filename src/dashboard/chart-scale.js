/**
 * The arithmetic of the dashboard's charts (pure: no DOM, so Node tests import it): the top of
 * an axis rounded up to 1, 2 or 5 × 10^k, the points of a line in plot coordinates (broken where
 * a value is missing), the bars of a series, and the words a chart's text alternative uses.
 */

/** The smallest 1, 2 or 5 × 10^k at or above `x` (1 for nothing above 0). @param {number} x */
export function niceCeil(x) {
  if (!(x > 0) || !Number.isFinite(x)) return 1;
  const p = 10 ** Math.floor(Math.log10(x));
  for (const m of [1, 2, 5, 10]) if (m * p >= x * (1 - 1e-12)) return m * p;
  return 10 * p;
}

/**
 * The plot box of a chart of `width` × `height` (its axes' labels outside it).
 * @param {number} width @param {number} height
 */
export function plotBox(width, height) {
  return { left: 52, top: 10, right: width - 10, bottom: height - 26 };
}

/**
 * @typedef {{ left: number, top: number, right: number, bottom: number }} Box
 */

/** The x of the middle of slot `i` of `n` across the box. @param {Box} box @param {number} i @param {number} n */
export function slotX(box, i, n) {
  const w = (box.right - box.left) / Math.max(1, n);
  return box.left + w * (i + 0.5);
}

/** The y of `v` on an axis from 0 to `max`. @param {Box} box @param {number} v @param {number} max */
export function valueY(box, v, max) {
  const clamped = Math.min(Math.max(v, 0), max);
  return box.bottom - ((box.bottom - box.top) * clamped) / max;
}

const round = (/** @type {number} */ x) => Math.round(x * 10) / 10;

/**
 * A line's runs of consecutive values as SVG `points` strings; a missing value (null) breaks
 * the line, so nothing is drawn where nothing is known.
 * @param {(number | null)[]} values @param {Box} box @param {number} max
 * @returns {string[]}
 */
export function lineSegments(values, box, max) {
  /** @type {string[]} */
  const out = [];
  /** @type {string[]} */
  let run = [];
  values.forEach((v, i) => {
    if (v === null || !Number.isFinite(v)) {
      if (run.length > 0) out.push(run.join(" "));
      run = [];
      return;
    }
    run.push(`${round(slotX(box, i, values.length))},${round(valueY(box, v, max))}`);
  });
  if (run.length > 0) out.push(run.join(" "));
  return out;
}

/**
 * The bars of a series (none for 0 or a missing value).
 * @param {(number | null)[]} values @param {Box} box @param {number} max
 * @returns {{ i: number, x: number, y: number, width: number, height: number }[]}
 */
export function bars(values, box, max) {
  const slot = (box.right - box.left) / Math.max(1, values.length);
  const width = Math.max(1, slot * 0.8);
  /** @type {{ i: number, x: number, y: number, width: number, height: number }[]} */
  const out = [];
  values.forEach((v, i) => {
    if (v === null || !(v > 0)) return;
    const y = valueY(box, v, max);
    out.push({
      i,
      x: round(box.left + slot * i + (slot - width) / 2),
      y: round(y),
      width: round(width),
      height: round(box.bottom - y),
    });
  });
  return out;
}

/** Seconds for people: "—", "850 ms", "1.25 s", "2 min 5 s". @param {number | null} s */
export function formatSeconds(s) {
  if (s === null || !Number.isFinite(s)) return "—";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${Number(s.toPrecision(3))} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - m * 60)} s`;
}

/** A count for people: at most 2 decimals, none for whole numbers. @param {number | null} n */
export function formatCount(n) {
  if (n === null || !Number.isFinite(n)) return "—";
  return String(Math.round(n * 100) / 100);
}

/**
 * The largest value of a series and where it is (undefined when there is none above 0).
 * @param {(number | null)[]} values
 * @returns {{ i: number, value: number } | undefined}
 */
export function peak(values) {
  /** @type {{ i: number, value: number } | undefined} */
  let best;
  values.forEach((v, i) => {
    if (v !== null && v > 0 && (best === undefined || v > best.value)) best = { i, value: v };
  });
  return best;
}
