/**
 * Job pages: the tenant's jobs (paged, filtered by a part of the name and the state; cursor and
 * filters in the address so a page can be linked), a job
 * (schedule in words, next 5 runs in UTC and local time, pause/resume, run now, delete, and its
 * runs: runs.js; editing: edit.js), and the form that creates a job. Only the API's own endpoints are used:
 * GET/POST /v1/jobs, GET/PATCH/DELETE /v1/jobs/{id}, POST /v1/jobs/{id}/runs.
 */
import { api } from "./api.js";
import { scheduleInWords } from "./cron-words.js";
import { field, h, link, local, localZone, pager, replace, time, utc } from "./dom.js";
import { runsSection } from "./runs.js";

const PAGE_SIZE = 20;

/** @typedef {import("./app.js").Ctx} Ctx */

/** Most requests made to fill one page of a filtered list (the API may answer short pages). */
const MAX_FILL_REQUESTS = 10;

/**
 * A page of jobs: a filtered list may answer short pages with a cursor (the API examines a
 * bounded number of jobs per request), so the page is filled from the next ones, a few at most.
 * @param {{ name: string, state: string }} filter @param {string | null} cursor
 */
async function readJobs(filter, cursor) {
  /** @type {any[]} */
  const jobs = [];
  /** @type {string | null} */
  let next = cursor;
  for (let i = 0; i < MAX_FILL_REQUESTS; i++) {
    const qs = new URLSearchParams({ limit: String(PAGE_SIZE - jobs.length) });
    if (filter.name) qs.set("name", filter.name);
    if (filter.state) qs.set("state", filter.state);
    if (next) qs.set("cursor", next);
    const page = await api("GET", `/v1/jobs?${qs}`);
    jobs.push(...page.jobs);
    next = page.next_cursor;
    if (next === null || jobs.length >= PAGE_SIZE) break;
  }
  return { jobs, next_cursor: next };
}

/**
 * The filter box: a part of the name and the state; applied by navigating (linkable).
 * @param {{ name: string, state: string }} filter
 */
function filterForm(filter) {
  const name = h("input", {
    id: "job-name",
    name: "name",
    type: "search",
    maxlength: "200",
    value: filter.name,
  });
  const state = h(
    "select",
    { id: "job-state", name: "state" },
    [
      ["", "any"],
      ["enabled", "active"],
      ["paused", "paused"],
    ].map(([v, t]) => h("option", { value: v, selected: v === filter.state }, t)),
  );
  const form = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter jobs" },
    h("label", { for: "job-name" }, "Name contains"),
    name,
    h("label", { for: "job-state" }, "State"),
    state,
    h("button", { type: "submit" }, "Filter"),
  );
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    location.hash = link("/jobs", {
      name: /** @type {HTMLInputElement} */ (name).value.trim(),
      state: /** @type {HTMLSelectElement} */ (state).value,
    });
  });
  return form;
}

/** @param {Ctx} ctx */
export async function jobsPage(ctx) {
  const cursor = ctx.query.get("cursor");
  const filter = { name: ctx.query.get("name") ?? "", state: ctx.query.get("state") ?? "" };
  const filtered = filter.name !== "" || filter.state !== "";
  const page = await readJobs(filter, cursor);
  if (!ctx.live()) return;
  /** @type {any[]} */
  const jobs = page.jobs;
  const rows = jobs.map((j) =>
    h(
      "tr",
      {},
      h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(j.job_id)}` }, j.name ?? j.job_id)),
      h("td", {}, scheduleInWords(j.schedule)),
      h("td", {}, j.enabled ? "active" : "paused"),
      h("td", {}, time(j.next_run_at)),
    ),
  );
  replace(
    ctx.main,
    h("h1", {}, "Jobs"),
    h("div", { class: "actions" }, h("a", { href: "#/jobs/new" }, "Create a job")),
    filterForm(filter),
    jobs.length === 0
      ? h(
          "p",
          { class: "empty" },
          filtered
            ? page.next_cursor
              ? "No matching jobs on this page."
              : "No matching jobs."
            : cursor
              ? "No more jobs."
              : "No jobs yet.",
        )
      : h(
          "table",
          { "aria-label": "Jobs" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ["Name", "Schedule", "State", "Next run (UTC)"].map((t) =>
                h("th", { scope: "col" }, t),
              ),
            ),
          ),
          h("tbody", {}, rows),
        ),
    pager("/jobs", filter, cursor, page.next_cursor),
  );
}

/** @param {string} label @param {unknown} value */
const fact = (label, value) => [h("dt", {}, label), h("dd", {}, value)];

/** @param {Ctx} ctx @param {string} jobId */
export async function jobPage(ctx, jobId) {
  const job = await api("GET", `/v1/jobs/${encodeURIComponent(jobId)}`);
  if (!ctx.live()) return;
  const path = `/jobs/${encodeURIComponent(jobId)}`;
  /** @param {() => Promise<unknown>} fn @param {string} done @param {string} focusId */
  const act = async (fn, done, focusId) => {
    try {
      await fn();
      ctx.announce(done);
      ctx.clearError();
      ctx.reload(focusId);
    } catch (e) {
      ctx.fail(e);
    }
  };
  const toggle = h(
    "button",
    {
      type: "button",
      onclick: () =>
        act(
          () =>
            api("PATCH", `/v1/jobs/${encodeURIComponent(jobId)}`, {
              body: { enabled: !job.enabled },
            }),
          job.enabled ? "Job paused" : "Job resumed",
          "toggle-job",
        ),
      id: "toggle-job",
    },
    job.enabled ? "Pause" : "Resume",
  );
  const runNow = h(
    "button",
    {
      type: "button",
      class: "secondary",
      onclick: () =>
        act(
          () => api("POST", `/v1/jobs/${encodeURIComponent(jobId)}/runs`),
          "Run requested",
          "run-now",
        ),
      id: "run-now",
    },
    "Run now",
  );
  const confirmDelete = h(
    "button",
    {
      type: "button",
      class: "danger",
      hidden: true,
      onclick: async () => {
        try {
          await api("DELETE", `/v1/jobs/${encodeURIComponent(jobId)}`);
          ctx.announce("Job deleted");
          location.hash = "#/jobs";
        } catch (e) {
          ctx.fail(e);
        }
      },
    },
    "Yes, delete this job",
  );
  const del = h(
    "button",
    {
      type: "button",
      class: "secondary",
      onclick: () => {
        confirmDelete.hidden = false;
        confirmDelete.focus();
      },
    },
    "Delete",
  );
  const schedule = job.schedule;
  const zone = localZone();
  /** @type {string[]} */
  const next = job.next_runs ?? [];
  const runs = await runsSection(ctx, jobId, path);
  if (!ctx.live()) return;
  replace(
    ctx.main,
    h("h1", {}, job.name ?? job.job_id),
    h(
      "dl",
      { class: "facts" },
      fact("Job id", h("code", {}, job.job_id)),
      fact("State", job.enabled ? "active" : "paused"),
      fact("Schedule", scheduleInWords(schedule)),
      fact("Expression", h("code", {}, "cron" in schedule ? schedule.cron : schedule.at)),
      fact("Image", h("code", {}, job.task.image)),
      fact("Command", h("code", {}, job.task.args.join(" "))),
      fact("Timeout", `${job.task.timeout_s} s`),
      fact("Attempts", `up to ${job.retry.max_attempts} (${job.retry.backoff} backoff)`),
      fact("Overlap", job.overlap),
    ),
    h(
      "div",
      { class: "actions" },
      toggle,
      runNow,
      h("a", { href: `#/jobs/${encodeURIComponent(jobId)}/edit` }, "Edit"),
      del,
      confirmDelete,
    ),
    h("h2", { id: "next-runs" }, "Next runs"),
    next.length === 0
      ? h("p", { class: "empty" }, job.enabled ? "No run is due." : "None while paused.")
      : h(
          "table",
          { "aria-labelledby": "next-runs" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              h("th", { scope: "col" }, "UTC"),
              h("th", { scope: "col" }, `Local (${zone})`),
            ),
          ),
          h(
            "tbody",
            {},
            next.slice(0, 5).map((t) => h("tr", {}, h("td", {}, utc(t)), h("td", {}, local(t)))),
          ),
        ),
    runs,
  );
}

/** The API field an error names → the form's input. */
const FIELD_INPUT = /** @type {Record<string, string>} */ ({
  name: "job-name",
  "schedule.cron": "job-cron",
  "schedule.time_zone": "job-zone",
  "schedule.at": "job-cron",
  "task.image": "job-image",
  "task.args": "job-command",
  "task.timeout_s": "job-timeout",
  "retry.max_attempts": "job-attempts",
});

/** @param {Ctx} ctx */
export async function newJobPage(ctx) {
  const form = h(
    "form",
    { class: "stack", "aria-labelledby": "new-job-title", novalidate: true },
    field("job-name", "Name", { type: "text", maxlength: "200" }),
    field(
      "job-cron",
      "Schedule",
      { type: "text", required: true, value: "0 9 * * 1-5", spellcheck: "false" },
      "A cron expression (5 fields, or 6 with seconds first), or a time in RFC 3339 for a single run.",
    ),
    field(
      "job-zone",
      "Time zone",
      { type: "text", required: true, value: localZone() },
      "An IANA zone, e.g. Asia/Kolkata.",
    ),
    field("job-image", "Image", { type: "text", required: true, value: "busybox" }),
    field(
      "job-command",
      "Command",
      { type: "text", required: true, value: "echo hello" },
      "Run with /bin/sh -c.",
    ),
    field("job-timeout", "Timeout (seconds)", { type: "number", min: "1", value: "60" }),
    field("job-attempts", "Attempts at most", { type: "number", min: "1", value: "1" }),
    h("div", {}, h("button", { type: "submit" }, "Create job")),
  );
  const val = (/** @type {string} */ id) =>
    /** @type {HTMLInputElement} */ (form.querySelector(`#${id}`)).value.trim();
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
    const when = val("job-cron");
    const isAt = /^\d{4}-\d\d-\d\dT/.test(when);
    const body = {
      ...(val("job-name") ? { name: val("job-name") } : {}),
      schedule: isAt ? { at: when } : { cron: when, time_zone: val("job-zone") },
      task: {
        image: val("job-image"),
        args: ["/bin/sh", "-c", val("job-command")],
        timeout_s: Number(val("job-timeout")),
      },
      retry: { max_attempts: Number(val("job-attempts")) },
    };
    api("POST", "/v1/jobs", { body, headers: { "idempotency-key": crypto.randomUUID() } }).then(
      (job) => {
        ctx.announce("Job created");
        location.hash = `#/jobs/${encodeURIComponent(job.job_id)}`;
      },
      (e) => {
        const input = e.field ? form.querySelector(`#${FIELD_INPUT[e.field] ?? "none"}`) : null;
        input?.setAttribute("aria-invalid", "true");
        ctx.fail(e);
        /** @type {HTMLElement | null} */ (input)?.focus();
      },
    );
  });
  replace(ctx.main, h("h1", { id: "new-job-title" }, "Create a job"), form);
}
