/**
 * The tenant's live charts (#/activity), from GET /v1/stats re-read every 5 s (with the page
 * frame's back-off on failure): runs started per second, runs waiting, dispatch lag p50/p99 over
 * the last 10 minutes, and the forecast of runs due per minute over the next hour. Each chart is
 * an SVG drawn with DOM calls (no library, no HTML strings: the page runs under Trusted Types),
 * with a text alternative (its title and a one-sentence summary) and its figures in a table
 * below it. The page's structure is built once; each read replaces only the drawings, the
 * summaries and the tables' rows, so an open table and the keyboard focus stay where they are.
 */
import { api } from "./api.js";
import { h, replace } from "./dom.js";
import {
  bars,
  formatCount,
  formatSeconds,
  lineSegments,
  niceCeil,
  peak,
  plotBox,
  slotX,
  valueY,
} from "./chart-scale.js";
import { STATS_POLL_MS } from "./poll-intervals.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 640;
const HEIGHT = 180;

/** @typedef {import("./app.js").Ctx} Ctx */

/**
 * An SVG element from attributes and children (text as text nodes).
 * @param {string} tag @param {Record<string, string | number>} [attrs] @param {...(Node | string)} children
 */
function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c);
  return el;
}

/** "HH:MM:SS" of an instant, UTC. @param {string} iso */
const clock = (iso) => iso.slice(11, 19);
/** "HH:MM" of an instant, UTC. @param {string} iso */
const minute = (iso) => iso.slice(11, 16);

/**
 * @typedef {{ name: string, cls: string, kind: "line" | "bars", values: (number | null)[] }} Series
 * @typedef {{ series: Series[], labels: string[], max: number, format: (v: number) => string }} Drawing
 */

/** Draws a chart's axes, grid and series into `svg` (replacing what was there). @param {SVGElement} svg @param {Drawing} d */
function draw(svg, d) {
  const box = plotBox(WIDTH, HEIGHT);
  const n = d.labels.length;
  const parts = [];
  for (const frac of [0, 0.5, 1]) {
    const y = valueY(box, d.max * frac, d.max);
    parts.push(
      s("line", { class: "chart-grid", x1: box.left, x2: box.right, y1: y, y2: y }),
      s(
        "text",
        { class: "chart-label", x: box.left - 6, y: y + 4, "text-anchor": "end" },
        d.format(d.max * frac),
      ),
    );
  }
  for (const i of [0, Math.floor((n - 1) / 2), n - 1]) {
    const label = d.labels[i];
    if (label === undefined) continue;
    const anchor = i === 0 ? "start" : i === n - 1 ? "end" : "middle";
    parts.push(
      s(
        "text",
        { class: "chart-label", x: slotX(box, i, n), y: HEIGHT - 8, "text-anchor": anchor },
        label,
      ),
    );
  }
  for (const ser of d.series) {
    if (ser.kind === "bars") {
      for (const b of bars(ser.values, box, d.max))
        parts.push(
          s(
            "rect",
            { class: ser.cls, x: b.x, y: b.y, width: b.width, height: b.height },
            s("title", {}, `${d.labels[b.i] ?? ""}: ${d.format(ser.values[b.i] ?? 0)}`),
          ),
        );
    } else {
      for (const pts of lineSegments(ser.values, box, d.max))
        parts.push(s("polyline", { class: ser.cls, points: pts }));
    }
  }
  svg.replaceChildren(s("title", {}, svg.dataset.title ?? ""), ...parts);
}

/**
 * A chart's frame: a figure with a heading, the SVG (role img, labelled by the heading and a
 * summary), a legend, and its figures in a table.
 * @param {string} id @param {string} title @param {{ name: string, cls: string }[]} legend
 * @param {string[]} columns the table's column headers
 */
function chartFrame(id, title, legend, columns) {
  const svg = /** @type {SVGElement} */ (
    /** @type {unknown} */ (
      s("svg", {
        viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
        role: "img",
        class: "chart",
        "aria-labelledby": `${id}-title ${id}-summary`,
        "data-title": title,
      })
    )
  );
  const summary = h("p", { id: `${id}-summary`, class: "chart-summary" });
  const tbody = h("tbody", {});
  const figure = h(
    "figure",
    { class: "chart-box", id, "aria-labelledby": `${id}-title` },
    h("h2", { id: `${id}-title` }, title),
    summary,
    svg,
    legend.length > 1
      ? h(
          "ul",
          { class: "legend", "aria-hidden": "true" },
          legend.map((l) => h("li", {}, h("span", { class: `swatch ${l.cls}` }), l.name)),
        )
      : null,
    h(
      "details",
      {},
      h("summary", {}, `${title}: the figures`),
      h(
        "table",
        { "aria-label": `${title}: the figures` },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            columns.map((c) => h("th", { scope: "col" }, c)),
          ),
        ),
        tbody,
      ),
    ),
  );
  return { figure, svg, summary, tbody };
}

/**
 * Fills a chart's frame from one read: draws `series` on a scale up to the nice ceiling of the
 * last series' peak (the lag chart's p99, above its p50), sets the summary `summary(peak)` says,
 * and replaces the table's rows (one array of cell texts a row).
 * @param {ReturnType<typeof chartFrame>} chart
 * @param {{ labels: string[], format: (v: number) => string, series: Series[],
 *   summary: (top: ReturnType<typeof peak>) => string, rows: string[][] }} d
 */
function fillChart(chart, d) {
  const top = peak(d.series[d.series.length - 1]?.values ?? []);
  draw(chart.svg, {
    labels: d.labels,
    max: niceCeil(top?.value ?? 0),
    format: d.format,
    series: d.series,
  });
  chart.summary.textContent = d.summary(top);
  replace(
    chart.tbody,
    d.rows.map((cells) =>
      h(
        "tr",
        {},
        cells.map((c) => h("td", {}, c)),
      ),
    ),
  );
}

/** @param {Ctx} ctx */
export async function activityPage(ctx) {
  const first = await api("GET", "/v1/stats");
  if (!ctx.live()) return;
  const started = chartFrame(
    "chart-started",
    "Runs started per second",
    [],
    ["Time (UTC)", "Runs started", "Per second"],
  );
  const waiting = chartFrame("chart-waiting", "Runs waiting", [], ["Time (UTC)", "Runs waiting"]);
  const lag = chartFrame(
    "chart-lag",
    "Dispatch lag",
    [
      { name: "p50", cls: "chart-p50" },
      { name: "p99 (dashed)", cls: "chart-p99" },
    ],
    ["Time (UTC)", "p50", "p99"],
  );
  const forecast = chartFrame(
    "chart-forecast",
    "Runs due per minute, next hour",
    [],
    ["Minute (UTC)", "Runs due"],
  );
  const facts = h("dl", { class: "facts" });
  const note = h("p", { class: "hint" });
  replace(
    ctx.main,
    h("h1", {}, "Activity"),
    h(
      "p",
      { class: "hint" },
      "Your tenant's runs over the last 10 minutes, in 5-second steps, and the runs its schedules make due over the next hour. Re-read every 5 seconds.",
    ),
    facts,
    note,
    h("div", { class: "charts" }, started.figure, waiting.figure, lag.figure, forecast.figure),
  );
  let shown = "";
  const update = (/** @type {any} */ st) => {
    const json = JSON.stringify(st);
    if (json === shown) return;
    shown = json;
    /** @type {any[]} */
    const series = st.series;
    const labels = series.map((p) => clock(p.at));
    const perSecond = series.map((p) => p.started_per_s);
    const waits = series.map((p) => p.waiting);
    const p50 = series.map((p) => p.lag_p50_s);
    const p99 = series.map((p) => p.lag_p99_s);
    fillChart(started, {
      labels,
      format: formatCount,
      series: [{ name: "runs/s", cls: "chart-bar", kind: "bars", values: perSecond }],
      summary: (top) =>
        top
          ? `Over the last 10 minutes ${st.totals.started} runs started, at most ${formatCount(top.value)} a second (at ${labels[top.i]} UTC).`
          : "No run started in the last 10 minutes.",
      rows: series
        .filter((p) => p.started > 0)
        .map((p) => [clock(p.at), String(p.started), formatCount(p.started_per_s)]),
    });
    fillChart(waiting, {
      labels,
      format: formatCount,
      series: [{ name: "waiting", cls: "chart-line", kind: "line", values: waits }],
      summary: (top) =>
        `${st.waiting.slot + st.waiting.worker} runs waiting now (${st.waiting.slot} for a slot of your tenant, ${st.waiting.worker} for a worker)${top ? `; at most ${top.value} in the last 10 minutes (at ${labels[top.i]} UTC)` : ""}.`,
      rows: series
        .filter((p) => p.waiting !== null && p.waiting > 0)
        .map((p) => [clock(p.at), String(p.waiting)]),
    });
    fillChart(lag, {
      labels,
      format: formatSeconds,
      series: [
        { name: "p50", cls: "chart-p50", kind: "line", values: p50 },
        { name: "p99", cls: "chart-p99", kind: "line", values: p99 },
      ],
      summary: () =>
        st.totals.lag_p50_s === null
          ? "No run started in the last 10 minutes: no dispatch lag to show."
          : `Dispatch lag (a run's start after its due time) over the last 10 minutes: p50 ${formatSeconds(st.totals.lag_p50_s)}, p99 ${formatSeconds(st.totals.lag_p99_s)}.`,
      rows: series
        .filter((p) => p.lag_p50_s !== null)
        .map((p) => [clock(p.at), formatSeconds(p.lag_p50_s), formatSeconds(p.lag_p99_s)]),
    });
    drawForecast(st.forecast);
    replace(
      facts,
      h("dt", {}, "Runs started (10 min)"),
      h("dd", {}, String(st.totals.started)),
      h("dt", {}, "Dispatch lag p50 / p99"),
      h("dd", {}, `${formatSeconds(st.totals.lag_p50_s)} / ${formatSeconds(st.totals.lag_p99_s)}`),
      h("dt", {}, "Runs waiting now"),
      h("dd", {}, String(st.waiting.slot + st.waiting.worker)),
      h("dt", {}, "Runs due next hour"),
      h("dd", {}, st.forecast ? String(st.forecast.total) : "—"),
    );
    note.textContent = st.partial
      ? `${st.nodes.answered} of ${st.nodes.asked} scheduler nodes answered in time: the figures are partial.`
      : "";
    note.hidden = !st.partial;
  };
  const drawForecast = (/** @type {any} */ f) => {
    const per = f ? f.per_minute : [];
    const from = f ? Date.parse(f.from) : 0;
    const labels = per.map((/** @type {number} */ _n, /** @type {number} */ m) =>
      minute(new Date(from + m * 60_000).toISOString()),
    );
    fillChart(forecast, {
      labels,
      format: formatCount,
      series: [{ name: "runs due", cls: "chart-bar-forecast", kind: "bars", values: per }],
      summary: (top) =>
        !f
          ? "No forecast yet (the schedulers compute it once a minute)."
          : top
            ? `${f.total} runs due over the next hour; the busiest minute is ${labels[top.i]} UTC with ${top.value}.`
            : "No run is due over the next hour.",
      rows: per.flatMap((/** @type {number} */ n, /** @type {number} */ m) =>
        n > 0 ? [[labels[m] ?? "", String(n)]] : [],
      ),
    });
  };
  update(first);
  ctx.poll(async () => {
    const st = await api("GET", "/v1/stats");
    if (ctx.live()) update(st);
  }, STATS_POLL_MS);
}
