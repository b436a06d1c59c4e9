/**
 * Editing a job: its name, schedule and number of attempts, sent as a PATCH with `If-Match`
 * (the version the form was filled from), so a change made meanwhile by someone else is a 412
 * shown as an error, not overwritten. The task is not edited here: a PATCH of `task` replaces
 * the whole task, its secrets included, which a form that never sees them cannot send back.
 */
import { api } from "./api.js";
import { field, h, replace } from "./dom.js";

/** @typedef {import("./app.js").Ctx} Ctx */

/** The API field an error names → the form's input. */
const FIELD_INPUT = /** @type {Record<string, string>} */ ({
  name: "edit-name",
  "schedule.cron": "edit-schedule",
  "schedule.at": "edit-schedule",
  "schedule.time_zone": "edit-zone",
  "retry.max_attempts": "edit-attempts",
});

/** @param {Ctx} ctx @param {string} jobId */
export async function editJobPage(ctx, jobId) {
  const path = `/v1/jobs/${encodeURIComponent(jobId)}`;
  const job = await api("GET", path);
  if (!ctx.live()) return;
  const s = job.schedule;
  const form = h(
    "form",
    { class: "stack", "aria-labelledby": "edit-title", novalidate: true },
    field("edit-name", "Name", { type: "text", maxlength: "200", value: job.name ?? "" }),
    field(
      "edit-schedule",
      "Schedule",
      { type: "text", required: true, spellcheck: "false", value: "cron" in s ? s.cron : s.at },
      "A cron expression (5 fields, or 6 with seconds first), or a time in RFC 3339 for a single run.",
    ),
    field(
      "edit-zone",
      "Time zone",
      { type: "text", value: "cron" in s ? s.time_zone : "UTC" },
      "An IANA zone, e.g. Asia/Kolkata (for a cron schedule).",
    ),
    field("edit-attempts", "Attempts at most", {
      type: "number",
      min: "1",
      value: String(job.retry.max_attempts),
    }),
    h(
      "p",
      { class: "hint" },
      "The task (image, command, environment, secrets) is changed through the API or the CLI: a change replaces the whole task, secrets included.",
    ),
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit" }, "Save changes"),
      h("a", { href: `#/jobs/${encodeURIComponent(jobId)}` }, "Cancel"),
    ),
  );
  const val = (/** @type {string} */ id) =>
    /** @type {HTMLInputElement} */ (form.querySelector(`#${id}`)).value.trim();
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
    const when = val("edit-schedule");
    /** @type {Record<string, unknown>} */
    const body = {
      schedule: /^\d{4}-\d\d-\d\dT/.test(when)
        ? { at: when }
        : { cron: when, time_zone: val("edit-zone") },
      retry: { ...job.retry, max_attempts: Number(val("edit-attempts")) },
    };
    if (val("edit-name") !== "") body["name"] = val("edit-name");
    api("PATCH", path, { body, headers: { "if-match": `"${job.version}"` } }).then(
      () => {
        ctx.announce("Job saved");
        location.hash = `#/jobs/${encodeURIComponent(jobId)}`;
      },
      (e) => {
        const input = e.field ? form.querySelector(`#${FIELD_INPUT[e.field] ?? "none"}`) : null;
        input?.setAttribute("aria-invalid", "true");
        ctx.fail(e);
        /** @type {HTMLElement | null} */ (input)?.focus();
      },
    );
  });
  replace(ctx.main, h("h1", { id: "edit-title" }, `Edit ${job.name ?? job.job_id}`), form);
}
