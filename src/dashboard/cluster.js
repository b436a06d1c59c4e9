/**
 * The operators' page (#/cluster), for a dashboard signed in with an operator key (`kop_…`):
 * nodes, schedulers with the partitions they hold, workers and their slots, and each tenant's
 * fair share against its demand and use — GET /v1/admin/cluster, re-read every 5 s (with the
 * page frame's back-off on failure). A tenant's key gets the API's refusal (403) instead.
 */
import { api } from "./api.js";
import { h, replace, time } from "./dom.js";
import { formatCount } from "./chart-scale.js";
import { CLUSTER_POLL_MS } from "./poll-intervals.js";

/** @typedef {import("./app.js").Ctx} Ctx */

/** @param {string} label @param {string[]} cols @param {unknown[][]} rows @param {string} empty */
function table(label, cols, rows, empty) {
  if (rows.length === 0) return h("p", { class: "empty" }, empty);
  return h(
    "table",
    { "aria-label": label },
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        cols.map((c) => h("th", { scope: "col" }, c)),
      ),
    ),
    h(
      "tbody",
      {},
      rows.map((r) =>
        h(
          "tr",
          {},
          r.map((v) => h("td", {}, v)),
        ),
      ),
    ),
  );
}

/** Partitions as ranges: [0,1,2,5] → "0–2, 5". @param {number[]} ps */
export function ranges(ps) {
  /** @type {string[]} */
  const out = [];
  const sorted = [...ps].sort((a, b) => a - b);
  for (let i = 0; i < sorted.length; i++) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === (sorted[j] ?? 0) + 1) j++;
    out.push(j > i ? `${sorted[i]}–${sorted[j]}` : String(sorted[i]));
    i = j;
  }
  return out.join(", ");
}

/** @param {any} v the cluster view */
function body(v) {
  /** @type {Map<string, number[]>} */
  const byNode = new Map();
  for (const p of v.partitions.held)
    byNode.set(p.node, [...(byNode.get(p.node) ?? []), p.partition]);
  /** @type {any[]} */
  const workers = v.workers;
  const slots = workers.reduce((n, w) => n + w.slots, 0);
  const free = workers.reduce((n, w) => n + w.free, 0);
  const fs = v.fair_shares;
  return [
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Nodes"),
      h("dd", {}, String(v.nodes.length)),
      h("dt", {}, "Partitions held"),
      h("dd", {}, `${v.partitions.held.length} of ${v.partitions.count}`),
      h("dt", {}, "Workers"),
      h("dd", {}, `${workers.length} (${slots} slots, ${free} free places)`),
      h("dt", {}, "Fleet capacity"),
      h("dd", {}, fs ? String(fs.capacity) : "— (the fleet actor did not answer)"),
    ),
    h("h2", { id: "nodes-title" }, "Nodes"),
    table(
      "Nodes",
      ["Node", "Roles", "Started", "Last heartbeat"],
      v.nodes.map((/** @type {any} */ n) => [
        n.node_id,
        n.roles.join(", "),
        time(n.started_at),
        time(n.last_heartbeat),
      ]),
      "No node records.",
    ),
    h("h2", {}, "Schedulers and partitions"),
    table(
      "Schedulers",
      [
        "Node",
        "Partitions",
        "Actors active",
        "Mailbox depth",
        "Waiting for a slot",
        "Waiting for a worker",
      ],
      v.schedulers.map((/** @type {any} */ s) =>
        s.answered
          ? [
              s.node_id,
              `${s.partitions}: ${ranges(byNode.get(s.node_id) ?? []) || "none"}`,
              String(s.actors_active),
              String(s.mailbox_depth),
              String(s.runs_waiting.slot),
              String(s.runs_waiting.worker),
            ]
          : [s.node_id, "did not answer in time", "—", "—", "—", "—"],
      ),
      "No live scheduler.",
    ),
    v.partitions.unheld.length > 0
      ? h("p", { class: "alert-inline" }, `Not held by any node: ${ranges(v.partitions.unheld)}.`)
      : null,
    h("h2", {}, "Workers and slots"),
    table(
      "Workers",
      ["Worker", "Executor", "Slots", "Free places", "Prefetch", "Standing", "Heard by"],
      workers.map((w) => [
        w.worker_id,
        w.executor,
        String(w.slots),
        String(w.free),
        String(w.prefetch),
        w.standing.replace("_", " "),
        `${w.seen_by} scheduler${w.seen_by === 1 ? "" : "s"}`,
      ]),
      "No worker heard.",
    ),
    h("h2", {}, "Fair shares"),
    h(
      "p",
      { class: "hint" },
      "Each tenant with runs to place: its weight, the slots it asks for (demand), its fair share of the fleet, and the slots it held on average (use).",
    ),
    table(
      "Fair shares",
      ["Tenant", "Weight", "Demand", "Share", "Use", "Use against share"],
      (fs ? fs.tenants : []).map((/** @type {any} */ t) => [
        h("code", {}, t.tenant_id),
        formatCount(t.weight),
        formatCount(t.demand),
        t.share === null ? "—" : formatCount(t.share),
        t.used === null ? "—" : formatCount(t.used),
        t.share === null || t.used === null
          ? "—"
          : h(
              "meter",
              {
                min: 0,
                max: Math.max(t.share, t.used, 1),
                value: t.used,
                "aria-label": `${t.tenant_id}: use ${formatCount(t.used)} of a share of ${formatCount(t.share)}`,
              },
              `${formatCount(t.used)} of ${formatCount(t.share)}`,
            ),
      ]),
      fs ? "No tenant has runs to place." : "The fleet actor did not answer in time.",
    ),
  ];
}

/** @param {Ctx} ctx */
export async function clusterPage(ctx) {
  const first = await api("GET", "/v1/admin/cluster");
  if (!ctx.live()) return;
  const box = h("div", {});
  let shown = "";
  const draw = (/** @type {any} */ v) => {
    const { at: _at, ...rest } = v;
    const json = JSON.stringify(rest);
    if (json === shown) return;
    shown = json;
    replace(box, body(v));
  };
  draw(first);
  replace(
    ctx.main,
    h("h1", {}, "Cluster"),
    h("p", { class: "hint" }, "Signed in with an operator key. Re-read every 5 seconds."),
    box,
  );
  ctx.poll(async () => {
    const v = await api("GET", "/v1/admin/cluster");
    if (ctx.live()) draw(v);
  }, CLUSTER_POLL_MS);
}
