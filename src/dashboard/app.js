/**
 * The dashboard's entry: sign-in, the hash router and the page frame. Sign-in takes an API key
 * typed into the form, or `#key=<api key>` in the address (a non-interactive sign-in): the key
 * goes to sessionStorage and is removed from the address bar at once (history.replaceState), so
 * it is neither kept in history nor shown. Routes: #/jobs, #/jobs/new, #/jobs/<id>,
 * #/jobs/<id>/edit, #/runs (the tenant's), #/runs/<id>, #/dead-letters, #/activity (the live charts); and for an
 * operator key (`kop_…`) #/cluster, the operators' page (only it: the nav shows what the key reads).
 * A page that polls (a runs list, a running run, the charts; intervals: poll-intervals.js) stops
 * when the route changes and pauses while the tab is hidden. A 401 from the
 * API (a key revoked meanwhile) signs out and shows the sign-in form with the API's message.
 */
import { ApiError, api, clearKey, getKey, setKey } from "./api.js";
import { h, replace } from "./dom.js";
import { jobPage, jobsPage, newJobPage } from "./jobs.js";
import { editJobPage } from "./edit.js";
import { deadLettersPage, runPage, tenantRunsPage } from "./runs.js";
import { activityPage } from "./charts.js";
import { clusterPage } from "./cluster.js";

const main = /** @type {HTMLElement} */ (document.getElementById("main"));
const alertBox = /** @type {HTMLElement} */ (document.getElementById("alert"));
const statusBox = /** @type {HTMLElement} */ (document.getElementById("status"));
const nav = /** @type {HTMLElement} */ (document.getElementById("nav"));

/** Bumped on every route change: a page's pending work checks it before touching the DOM. */
let routeToken = 0;

/** Shows an error in the alert region (announced by screen readers). @param {string} text */
export function showError(text) {
  alertBox.textContent = text;
  alertBox.hidden = false;
}

function clearError() {
  alertBox.textContent = "";
  alertBox.hidden = true;
}

/** A polite announcement for screen readers. @param {string} text */
export function announce(text) {
  statusBox.textContent = text;
}

/**
 * What a page gets: where to draw, and whether it is still the current page.
 * @typedef {{ main: HTMLElement, query: URLSearchParams, live: () => boolean,
 *   poll: (fn: () => Promise<void>, ms: number) => void, fail: (e: unknown) => void,
 *   announce: (t: string) => void, clearError: () => void,
 *   reload: (focusId?: string) => void }} Ctx
 */

/** @param {unknown} e */
function fail(e) {
  if (e instanceof ApiError && e.status === 401) {
    clearKey();
    signIn(`The API refused the key: ${e.message}`);
    return;
  }
  showError(e instanceof Error ? e.message : String(e));
}

/** @param {string} [error] */
function signIn(error) {
  routeToken++;
  nav.hidden = true;
  if (error) showError(error);
  const input = h("input", {
    id: "api-key",
    name: "api-key",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    "aria-describedby": "api-key-hint",
  });
  const form = h(
    "form",
    { class: "stack", "aria-labelledby": "sign-in-title" },
    h("div", { class: "field" }, h("label", { for: "api-key" }, "API key"), input),
    h(
      "p",
      { id: "api-key-hint", class: "hint" },
      "Your tenant's API key (kai_…), or an operator key (kop_…) for the cluster page. It is kept in this tab only and sent only to this API.",
    ),
    h("div", {}, h("button", { type: "submit" }, "Sign in")),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const key = /** @type {HTMLInputElement} */ (input).value.trim();
    if (key === "") return;
    void tryKey(key);
  });
  replace(main, h("h1", { id: "sign-in-title", tabindex: "-1" }, "Sign in"), form);
  input.focus();
}

/** Whether a key is an operator's (the operators' views) rather than a tenant's. @param {string | null} key */
const isOperator = (key) => key !== null && key.startsWith("kop_");

/** Checks a key against the API before keeping it. @param {string} key */
async function tryKey(key) {
  setKey(key);
  const home = isOperator(key) ? "#/cluster" : "#/jobs";
  try {
    await api("GET", isOperator(key) ? "/v1/admin/cluster" : "/v1/jobs?limit=1");
  } catch (e) {
    clearKey();
    if (e instanceof ApiError && e.status === 401) signIn(`The API refused the key: ${e.message}`);
    else fail(e);
    return;
  }
  clearError();
  if (location.hash === home) void route();
  else location.hash = home;
}

/** @param {URLSearchParams} query @returns {Ctx} */
function context(query) {
  const token = ++routeToken;
  const live = () => token === routeToken;
  return {
    main,
    query,
    live,
    fail: (e) => live() && fail(e),
    announce,
    clearError,
    reload: (focusId) => {
      if (live()) void route(focusId);
    },
    poll(fn, ms) {
      // A transient failure (unreachable, 429, 5xx) is shown and retried, less often each time
      // (at most every 30 s), so a page left open resumes by itself; any other error stops it.
      // A hidden tab does not read: the next read waits until the tab is shown again, and is
      // made at once then.
      let wait = ms;
      /** @type {ReturnType<typeof setTimeout> | undefined} */
      let timer;
      let reading = false;
      let paused = false;
      const stop = () => document.removeEventListener("visibilitychange", onVisibility);
      const later = (/** @type {number} */ delay) => {
        timer = setTimeout(tick, delay);
      };
      const tick = () => {
        timer = undefined;
        if (!live()) return stop();
        if (document.hidden) {
          paused = true;
          return;
        }
        reading = true;
        fn().then(
          () => {
            reading = false;
            wait = ms;
            if (live()) later(wait);
            else stop();
          },
          (e) => {
            reading = false;
            if (!live()) return stop();
            fail(e);
            if (e instanceof ApiError && (e.status === 0 || e.status === 429 || e.status >= 500)) {
              wait = Math.min(wait * 2, 30_000);
              later(wait);
            } else stop();
          },
        );
      };
      const onVisibility = () => {
        if (!live()) return stop();
        if (document.hidden || !paused || reading || timer !== undefined) return;
        paused = false;
        tick();
      };
      document.addEventListener("visibilitychange", onVisibility);
      later(ms);
    },
  };
}

/** Draws the page the address names; then focuses `focusId` (default: its heading). */
async function route(focusId) {
  const key = getKey();
  if (key === null) return signIn();
  nav.hidden = false;
  const mode = isOperator(key) ? "operator" : "tenant";
  for (const a of nav.querySelectorAll("[data-for]"))
    /** @type {HTMLElement} */ (a).hidden = /** @type {HTMLElement} */ (a).dataset.for !== mode;
  const raw = location.hash.replace(/^#/, "");
  const [path = "", q = ""] = raw.split("?");
  const ctx = context(new URLSearchParams(q));
  const seg = path
    .split("/")
    .filter((s) => s !== "")
    .map(decodeURIComponent);
  try {
    if (mode === "operator" && (seg.length === 0 || (seg.length === 1 && seg[0] === "cluster")))
      await clusterPage(ctx);
    else if (seg.length === 0 || (seg.length === 1 && seg[0] === "jobs")) await jobsPage(ctx);
    else if (seg[0] === "jobs" && seg[1] === "new" && seg.length === 2) await newJobPage(ctx);
    else if (seg[0] === "jobs" && seg.length === 2) await jobPage(ctx, seg[1] ?? "");
    else if (seg[0] === "jobs" && seg[2] === "edit" && seg.length === 3)
      await editJobPage(ctx, seg[1] ?? "");
    else if (seg[0] === "dead-letters" && seg.length === 1) await deadLettersPage(ctx);
    else if (seg[0] === "activity" && seg.length === 1) await activityPage(ctx);
    else if (seg[0] === "cluster" && seg.length === 1) await clusterPage(ctx);
    else if (seg[0] === "runs" && seg.length === 2) await runPage(ctx, seg[1] ?? "");
    else if (seg[0] === "runs" && seg.length === 1) await tenantRunsPage(ctx);
    else replace(main, h("h1", { tabindex: "-1" }, "Not found"), h("p", {}, `No page ${raw}.`));
  } catch (e) {
    ctx.fail(e);
    return;
  }
  if (!ctx.live()) return;
  const title = main.querySelector("h1");
  document.title = title ? `${title.textContent} · Kairos` : "Kairos";
  title?.setAttribute("tabindex", "-1");
  const target = focusId ? document.getElementById(focusId) : null;
  (target ?? title)?.focus();
}

function boot() {
  const m = /^#key=([^&]*)/.exec(location.hash);
  if (m) {
    let key = "";
    try {
      key = decodeURIComponent(m[1] ?? "").trim();
    } catch {
      key = "";
    }
    // Out of the address bar (and so of history) before anything else happens.
    const home = isOperator(key) ? "#/cluster" : "#/jobs";
    history.replaceState(null, "", `${location.pathname}${location.search}${home}`);
    if (key !== "") {
      void tryKey(key);
    } else signIn("The link's #key= was empty.");
  } else void route();
  window.addEventListener("hashchange", () => {
    clearError();
    void route();
  });
  document.getElementById("sign-out")?.addEventListener("click", () => {
    clearKey();
    clearError();
    signIn();
  });
}

boot();
