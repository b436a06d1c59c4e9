/**
 * Run views: a job's runs (newest first, status filter and cursor paging in the address; the
 * first page re-reads itself every 5 s so new runs appear) and a run's page (times, attempts
 * with worker, exit code, outcome and error, the output tail; re-read every 2 s until the run
 * ends; cancel while it has not), the tenant's runs across its jobs (the same table with a job
 * column) and its dead letters. Endpoints: GET /v1/jobs/{id}/runs, GET /v1/runs/{id},
 * POST /v1/runs/{id}/cancel, GET /v1/runs, GET /v1/runs?status=dead_lettered.
 */
import { api } from "./api.js";
import { h, link, pager, replace, statusBadge, time } from "./dom.js";
import { RUN_POLL_MS, RUNS_POLL_MS } from "./poll-intervals.js";

const PAGE_SIZE = 20;
export const RUN_STATUSES = [
  "queued",
  "leased",
  "running",
  "retry_wait",
  "succeeded",
  "failed",
  "timed_out",
  "cancelled",
  "skipped",
  "missed",
  "throttled",
];
export const TERMINAL = new Set([
  "succeeded",
  "failed",
  "timed_out",
  "cancelled",
  "skipped",
  "missed",
  "throttled",
]);

/** @typedef {import("./app.js").Ctx} Ctx */

/** @param {any} r @param {boolean} withJob */
function runRow(r, withJob) {
  return h(
    "tr",
    {},
    h(
      "td",
      {},
      h("a", { href: `#/runs/${encodeURIComponent(r.run_id)}` }, h("code", {}, r.run_id)),
    ),
    withJob
      ? h(
          "td",
          {},
          h("a", { href: `#/jobs/${encodeURIComponent(r.job_id)}` }, h("code", {}, r.job_id)),
        )
      : null,
    h("td", {}, statusBadge(r.status)),
    h("td", {}, r.trigger),
    h("td", {}, time(r.scheduled_for)),
    h("td", {}, time(r.started_at)),
    h("td", {}, time(r.finished_at)),
    h("td", {}, String(r.attempt)),
  );
}

/**
 * The runs part of a job's page.
 * @param {Ctx} ctx @param {string} jobId @param {string} path the job page's route
 */
export function runsSection(ctx, jobId, path) {
  return runList(ctx, {
    path,
    endpoint: `/v1/jobs/${encodeURIComponent(jobId)}/runs`,
    statuses: RUN_STATUSES,
    withJob: false,
  });
}

/**
 * A paged runs table with its status filter; the first page re-reads itself every RUNS_POLL_MS.
 * @param {Ctx} ctx
 * @param {{ path: string, endpoint: string, statuses: readonly string[], withJob: boolean }} o
 *   `path`: the page's route; `endpoint`: the list's API path; `statuses`: the filter's choices
 */
async function runList(ctx, { path, endpoint, statuses, withJob }) {
  const status = ctx.query.get("status");
  const cursor = ctx.query.get("cursor");
  const read = async () => {
    const qs = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (status) qs.set("status", status);
    if (cursor) qs.set("cursor", cursor);
    return api("GET", `${endpoint}?${qs}`);
  };
  const tbody = h("tbody", {});
  const pagerBox = h("div", {});
  const empty = h(
    "p",
    { class: "empty" },
    status ? `No ${status.replace("_", " ")} runs.` : "No runs yet.",
  );
  let shown = "";
  const draw = (/** @type {any} */ page) => {
    // Unchanged: leave the DOM (and the keyboard focus in it) alone.
    const json = JSON.stringify(page);
    if (json === shown) return;
    shown = json;
    replace(
      tbody,
      page.runs.map((/** @type {any} */ r) => runRow(r, withJob)),
    );
    empty.hidden = page.runs.length > 0;
    replace(pagerBox, pager(path, { status }, cursor, page.next_cursor));
  };
  draw(await read());
  if (!cursor) ctx.poll(async () => draw(await read()), RUNS_POLL_MS);
  const select = h(
    "select",
    { id: "run-status" },
    h("option", { value: "" }, "all"),
    statuses.map((s) => h("option", { value: s, selected: s === status }, s.replace("_", " "))),
  );
  select.addEventListener("change", () => {
    location.hash = link(path, { status: /** @type {HTMLSelectElement} */ (select).value });
  });
  return h(
    "section",
    { "aria-labelledby": "runs-title" },
    h("h2", { id: "runs-title" }, "Runs"),
    h("div", { class: "filters" }, h("label", { for: "run-status" }, "Status"), select),
    empty,
    h(
      "table",
      { "aria-labelledby": "runs-title" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          [
            "Run",
            ...(withJob ? ["Job"] : []),
            "Status",
            "Trigger",
            "Scheduled for",
            "Started",
            "Finished",
            "Attempt",
          ].map((t) => h("th", { scope: "col" }, t)),
        ),
      ),
      tbody,
    ),
    pagerBox,
  );
}

/** @param {string} label @param {unknown} value */
const fact = (label, value) => [h("dt", {}, label), h("dd", {}, value)];

/** @param {any} a */
function attemptRow(a) {
  return h(
    "tr",
    {},
    h("td", {}, String(a.attempt)),
    h("td", {}, a.worker ?? "—"),
    h("td", {}, time(a.started_at)),
    h("td", {}, time(a.finished_at)),
    h("td", {}, a.exit_code === null ? "—" : String(a.exit_code)),
    h("td", {}, a.outcome ?? "—"),
    h("td", {}, a.error ?? ""),
  );
}

/** @param {Ctx} ctx @param {string} runId */
export async function runPage(ctx, runId) {
  const path = `/v1/runs/${encodeURIComponent(runId)}`;
  const body = h("div", {});
  let lastStatus = "";
  let shown = "";
  const draw = (/** @type {any} */ run) => {
    const json = JSON.stringify(run);
    if (json === shown) return;
    shown = json;
    const cancel = TERMINAL.has(run.status)
      ? null
      : h(
          "button",
          {
            type: "button",
            class: "danger",
            id: "cancel-run",
            onclick: async (/** @type {Event} */ ev) => {
              const b = /** @type {HTMLButtonElement} */ (ev.currentTarget);
              b.disabled = true;
              try {
                draw(
                  await api("POST", `${path}/cancel`, {
                    body: { reason: "cancelled from the dashboard" },
                  }),
                );
                ctx.announce("Run cancelled");
              } catch (e) {
                b.disabled = false;
                ctx.fail(e);
              }
            },
          },
          "Cancel run",
        );
    if (run.status !== lastStatus && lastStatus !== "")
      ctx.announce(`Run ${run.status.replace("_", " ")}`);
    lastStatus = run.status;
    replace(
      body,
      h(
        "dl",
        { class: "facts" },
        fact("Status", statusBadge(run.status)),
        fact(
          "Job",
          h("a", { href: `#/jobs/${encodeURIComponent(run.job_id)}` }, h("code", {}, run.job_id)),
        ),
        fact("Trigger", run.trigger),
        fact("Scheduled for", time(run.scheduled_for)),
        fact("Created", time(run.created_at)),
        fact("Started", time(run.started_at)),
        fact("Finished", time(run.finished_at)),
        fact("Attempt", String(run.attempt)),
        run.next_attempt_at ? fact("Next attempt", time(run.next_attempt_at)) : null,
        run.reason ? fact("Reason", run.reason) : null,
        run.result
          ? fact("Exit code", run.result.exit_code === null ? "—" : String(run.result.exit_code))
          : null,
      ),
      cancel ? h("div", { class: "actions" }, cancel) : null,
      h("h2", { id: "attempts-title" }, "Attempts"),
      run.attempts.length === 0
        ? h("p", { class: "empty" }, "No attempt yet.")
        : h(
            "table",
            { "aria-labelledby": "attempts-title" },
            h(
              "thead",
              {},
              h(
                "tr",
                {},
                ["Attempt", "Worker", "Started", "Finished", "Exit code", "Outcome", "Error"].map(
                  (t) => h("th", { scope: "col" }, t),
                ),
              ),
            ),
            h("tbody", {}, run.attempts.map(attemptRow)),
          ),
      h("h2", { id: "output-title" }, "Output"),
      run.result && run.result.output !== ""
        ? h("pre", { "aria-labelledby": "output-title", tabindex: "0" }, run.result.output)
        : h("p", { class: "empty" }, "No output."),
    );
  };
  const run = await api("GET", path);
  if (!ctx.live()) return;
  draw(run);
  replace(ctx.main, h("h1", {}, `Run ${runId}`), body);
  ctx.poll(async () => {
    if (TERMINAL.has(lastStatus)) return;
    const r = await api("GET", path);
    if (ctx.live()) draw(r);
  }, RUN_POLL_MS);
}

/**
 * The tenant's runs across its jobs (newest first by creation, paged; the first page re-reads
 * itself). A run that has not ended shows its live status (the API overlays what the schedulers
 * hold in memory on the records); the filter offers every status.
 * @param {Ctx} ctx
 */
export async function tenantRunsPage(ctx) {
  const section = await runList(ctx, {
    path: "/runs",
    endpoint: "/v1/runs",
    statuses: RUN_STATUSES,
    withJob: true,
  });
  if (!ctx.live()) return;
  replace(
    ctx.main,
    h("h1", {}, "Runs"),
    h("p", { class: "hint" }, "Every run of your jobs, newest first."),
    section,
  );
}

/**
 * The tenant's dead-lettered runs across its jobs (oldest first, paged).
 * @param {Ctx} ctx
 */
export async function deadLettersPage(ctx) {
  const cursor = ctx.query.get("cursor");
  const qs = new URLSearchParams({ status: "dead_lettered", limit: String(PAGE_SIZE) });
  if (cursor) qs.set("cursor", cursor);
  const page = await api("GET", `/v1/runs?${qs}`);
  if (!ctx.live()) return;
  /** @type {any[]} */
  const runs = page.runs;
  replace(
    ctx.main,
    h("h1", {}, "Dead letters"),
    h(
      "p",
      { class: "hint" },
      "Runs that ended failed or timed out after their last attempt, across your jobs, oldest first.",
    ),
    runs.length === 0
      ? h("p", { class: "empty" }, cursor ? "No more dead letters." : "No dead letters.")
      : h(
          "table",
          { "aria-label": "Dead letters" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ["Run", "Job", "Status", "Finished", "Reason"].map((t) =>
                h("th", { scope: "col" }, t),
              ),
            ),
          ),
          h(
            "tbody",
            {},
            runs.map((r) =>
              h(
                "tr",
                {},
                h(
                  "td",
                  {},
                  h(
                    "a",
                    { href: `#/runs/${encodeURIComponent(r.run_id)}` },
                    h("code", {}, r.run_id),
                  ),
                ),
                h(
                  "td",
                  {},
                  h(
                    "a",
                    { href: `#/jobs/${encodeURIComponent(r.job_id)}` },
                    h("code", {}, r.job_id),
                  ),
                ),
                h("td", {}, statusBadge(r.status)),
                h("td", {}, time(r.finished_at)),
                h("td", {}, r.reason ?? ""),
              ),
            ),
          ),
        ),
    pager("/dead-letters", {}, cursor, page.next_cursor),
  );
}
