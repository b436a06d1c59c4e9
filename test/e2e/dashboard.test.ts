/**
 * The web dashboard in headless Chromium (Debian's package, driven by playwright-core) against a
 * real `kairos node` (api, scheduler and worker roles, process executor) on a real nats-server:
 * a wrong key is refused with the API's message; sign-in by typing the key and by `#key=` (the
 * key then in sessionStorage and gone from the address bar); creating a job in the form and
 * watching its runs appear; pausing it; editing its schedule (a bad one refused, its field
 * marked); deleting it; a failed run's attempts, the tenant's dead letters and its runs across its
 * jobs (filtered by status); cancelling a running run;
 * paging through the jobs list and filtering it by a part of the name and by state;
 * the live charts of a job due every second (runs started, waiting, lag, the forecast), drawn
 * and given as tables; an operator key's cluster page (nodes, partitions, workers, fair shares),
 * which a tenant's key is refused.
 * Along the way: the page is served with its strict Content-Security-Policy and breaks none of
 * it, and every request the page makes goes to the API's own origin. Waits are the browser's
 * own waits for what the page shows (it re-reads the API every few seconds: poll-intervals.js);
 * an open list stops re-reading while its tab is hidden (the page's clock moved by the test).
 * Screenshots of each step go to test-artifacts/dashboard/.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { apiClient, startKairosFixture, type Api, type KairosFixture } from "../support/kairos.ts";
import { artefactDir, launchChromium } from "../support/browser.ts";
import { openBuckets } from "../../src/cluster/buckets.ts";
import { systemClock } from "../../src/lib/clock.ts";
import { KvOperatorKeys } from "../../src/tenants/operator-keys.ts";
import { RUNS_POLL_MS } from "../../src/dashboard/poll-intervals.js";

const WAIT_MS = 30_000;
/** Evaluated in the page (a string: the page's globals are not Node's). */
const KEY_IN_STORAGE = 'sessionStorage.getItem("kairos.apiKey")';

describe("web dashboard in headless Chromium", { timeout: 300_000 }, () => {
  let fx: KairosFixture;
  let url: string;
  let key: string;
  let rest: Api;
  let browser: Browser;
  let tickerId = "";
  const shots = artefactDir("dashboard");
  const contexts: BrowserContext[] = [];
  /** Requests the pages made, and the page errors and console errors they reported. */
  const requests: { url: string; auth: string | undefined }[] = [];
  const problems: string[] = [];

  before(async () => {
    fx = await startKairosFixture();
    const node = fx.spawn("dash-1", "api,scheduler,worker", ["--slots", "4"]);
    url = await fx.apiUrl(node);
    const t = await fx.newTenant("dash");
    key = t.api_key;
    rest = apiClient(url, key);
    // Due every second from the start: by the charts' test, its runs and its forecast are there.
    const ticker = await rest.call<{ job_id: string }>("POST", "/v1/jobs", {
      name: "ticker",
      schedule: { cron: "* * * * * *", time_zone: "UTC" },
      task: { image: "busybox", args: ["true"], timeout_s: 10 },
      overlap: "allow",
    });
    assert.equal(ticker.status, 201, JSON.stringify(ticker.body));
    tickerId = ticker.body.job_id;
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await fx?.stop();
  });

  const newPage = async (): Promise<Page> => {
    // A browser in India: the "local time" columns must differ from UTC.
    const ctx = await browser.newContext({
      viewport: { width: 1280, height: 900 },
      timezoneId: "Asia/Kolkata",
    });
    contexts.push(ctx);
    const page = await ctx.newPage();
    page.on("request", (r) => requests.push({ url: r.url(), auth: r.headers()["authorization"] }));
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("console", (m) => {
      if (m.type() === "error") problems.push(`console error: ${m.text()}`);
    });
    return page;
  };
  const shot = (page: Page, name: string) =>
    page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  const signIn = async (page: Page, withKey: string): Promise<void> => {
    await page.goto(`${url}/`);
    await page.getByLabel("API key").fill(withKey);
    await page.getByRole("button", { name: "Sign in" }).click();
  };
  const heading = (page: Page, name: string | RegExp) =>
    page.getByRole("heading", { level: 1, name }).waitFor({ timeout: WAIT_MS });
  const job = async (name: string, script: string, retry?: object): Promise<string> => {
    const r = await rest.call<{ job_id: string }>("POST", "/v1/jobs", {
      name,
      schedule: { at: new Date(Date.now() + 3600_000).toISOString() },
      task: { image: "busybox", args: ["/bin/sh", "-c", script], timeout_s: 120 },
      overlap: "allow",
      ...(retry ? { retry } : {}),
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.job_id;
  };

  it("serves the page with a strict Content-Security-Policy", async () => {
    const res = await fetch(`${url}/`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /^text\/html/);
    const csp = res.headers.get("content-security-policy") ?? "";
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'(;|$)/);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|\*/);
    const html = await res.text();
    assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/, "an inline script");
    assert.doesNotMatch(html, /\bon[a-z]+=|style=/, "an inline handler or style");
    const js = await fetch(`${url}/dashboard/app.js`);
    assert.equal(js.status, 200);
    assert.match(js.headers.get("content-type") ?? "", /^text\/javascript/);
  });

  it("refuses a wrong key with the API's message", async () => {
    const page = await newPage();
    await signIn(page, "kai_thisisnotakey0000000000000000");
    await page
      .getByRole("alert")
      .getByText(/refused the key: invalid or revoked API key/)
      .waitFor({
        timeout: WAIT_MS,
      });
    assert.equal(await page.evaluate(KEY_IN_STORAGE), null);
    await heading(page, "Sign in");
    await shot(page, "01-wrong-key");
  });

  it("signs in by #key=, keeps the key in sessionStorage and out of the address bar", async () => {
    const page = await newPage();
    await page.goto(`${url}/#key=${encodeURIComponent(key)}`);
    await heading(page, "Jobs");
    assert.ok(!page.url().includes(key), `the key is still in the address: ${page.url()}`);
    assert.equal(await page.evaluate(KEY_IN_STORAGE), key);
    // about:blank, then the link's entry, replaced in place by #/jobs (not one more pushed).
    assert.equal(await page.evaluate("history.length"), 2);
    // The policy is in force: HTML from a string is refused (Trusted Types), as is an inline script.
    const sink = await page.evaluate(
      "(() => { try { document.body.innerHTML = '<b>x</b>'; return 'allowed'; } catch (e) { return e.name; } })()",
    );
    assert.equal(sink, "TypeError");
    await shot(page, "02-signed-in-by-link");
  });

  it("signs in by key, creates a job, watches its runs appear and pauses it", async () => {
    const page = await newPage();
    // By keyboard alone: the key field has the focus, Enter signs in.
    await page.goto(`${url}/`);
    await heading(page, "Sign in");
    assert.equal(await page.evaluate("document.activeElement?.id"), "api-key");
    await page.keyboard.type(key);
    await page.keyboard.press("Enter");
    await heading(page, "Jobs");
    await page.getByRole("link", { name: "Create a job" }).click();
    await heading(page, "Create a job");
    await page.getByLabel("Name").fill("every-two-seconds");
    await page.getByLabel("Schedule").fill("*/2 * * * * *");
    await page.getByLabel("Time zone").fill("Asia/Kolkata");
    await page.getByLabel("Command").fill("echo hello from the dashboard");
    await shot(page, "03-create-job");
    await page.getByRole("button", { name: "Create job" }).click();
    await heading(page, "every-two-seconds").catch(async (e) => {
      await shot(page, "03-create-job-failed");
      throw e;
    });
    await page.getByText("every 2 seconds, Asia/Kolkata").waitFor({ timeout: WAIT_MS });
    // Its next runs, in UTC and local time.
    const next = page.getByRole("table", { name: "Next runs" });
    assert.equal(await next.getByRole("row").count(), 6);
    await next
      .getByRole("columnheader", { name: /^Local \(Asia\/(Kolkata|Calcutta)\)$/ })
      .waitFor();
    assert.match((await next.getByRole("row").nth(1).textContent()) ?? "", /UTC.*GMT\+5:30/);
    // Runs appear as the scheduler fires them (the page re-reads them every 5 s).
    const runs = page.getByRole("table", { name: "Runs" });
    await runs.getByText("succeeded").first().waitFor({ timeout: WAIT_MS });
    await shot(page, "04-job-with-runs");
    await page.getByRole("button", { name: "Pause" }).click();
    await page.getByRole("button", { name: "Resume" }).waitFor({ timeout: WAIT_MS });
    // The keyboard focus stays on the button that was pressed.
    assert.equal(await page.evaluate("document.activeElement?.id"), "toggle-job");
    await page.getByText("None while paused.").waitFor({ timeout: WAIT_MS });
    const jobs = await rest.call<{ jobs: { job_id: string; name: string; enabled: boolean }[] }>(
      "GET",
      "/v1/jobs",
    );
    const created = jobs.body.jobs.find((j) => j.name === "every-two-seconds");
    assert.ok(created);
    assert.equal(created.enabled, false);
    await shot(page, "05-job-paused");
    // Edit its schedule: a bad one is refused with its field marked, a good one is saved.
    await page.getByRole("link", { name: "Edit" }).click();
    await heading(page, "Edit every-two-seconds");
    const schedule = page.getByLabel("Schedule");
    await schedule.fill("61 9 * * *");
    await page.getByRole("button", { name: "Save changes" }).click();
    await page
      .getByRole("alert")
      .getByText(/minute/)
      .waitFor({ timeout: WAIT_MS });
    assert.equal(await schedule.getAttribute("aria-invalid"), "true");
    await shot(page, "05b-edit-refused");
    await schedule.fill("0 9 * * 1-5");
    await page.getByRole("button", { name: "Save changes" }).click();
    await heading(page, "every-two-seconds");
    await page
      .getByText("at 09:00 on Monday to Friday, Asia/Kolkata")
      .waitFor({ timeout: WAIT_MS });
    // The list shows it paused.
    await page.getByRole("link", { name: "Jobs", exact: true }).first().click();
    const row = page.getByRole("row", { name: /every-two-seconds/ });
    await row.getByText("paused").waitFor({ timeout: WAIT_MS });
    // Delete it: one click shows the confirmation, the second deletes.
    await row.getByRole("link", { name: "every-two-seconds" }).click();
    await heading(page, "every-two-seconds");
    await page.getByRole("button", { name: "Delete" }).click();
    await page.getByRole("button", { name: "Yes, delete this job" }).click();
    await heading(page, "Jobs");
    await page.getByRole("row", { name: /every-two-seconds/ }).waitFor({ state: "detached" });
    const gone = await rest.call("GET", `/v1/jobs/${created.job_id}`);
    assert.equal(gone.status, 404);
  });

  it("opens a failed run's attempts", async () => {
    const jobId = await job("fails", "echo about to fail; exit 3", {
      max_attempts: 2,
      backoff: "fixed",
      base_s: 1,
    });
    const page = await newPage();
    await page.goto(`${url}/#key=${encodeURIComponent(key)}`);
    await heading(page, "Jobs");
    await page.getByRole("link", { name: "fails" }).click();
    await heading(page, "fails");
    await page.getByRole("button", { name: "Run now" }).click();
    await page.getByRole("table", { name: "Runs" }).getByRole("link").first().click();
    await heading(page, /^Run /);
    await page.locator(".status-failed").first().waitFor({ timeout: WAIT_MS });
    const attempts = page.getByRole("table", { name: "Attempts" });
    await attempts.getByRole("row").nth(2).waitFor({ timeout: WAIT_MS });
    assert.equal(await attempts.getByRole("row").count(), 3, "header + 2 attempts");
    assert.equal(await attempts.getByRole("cell", { name: "3", exact: true }).count(), 2);
    await page.getByText("about to fail").waitFor({ timeout: WAIT_MS });
    // The job's runs by status.
    await page.getByRole("link", { name: jobId }).click();
    await heading(page, "fails");
    await page.getByLabel("Status").selectOption("succeeded");
    await page.getByText("No succeeded runs.").waitFor({ timeout: WAIT_MS });
    await page.getByLabel("Status").selectOption("failed");
    const failed = page.getByRole("table", { name: "Runs" }).locator(".status-failed");
    await failed.first().waitFor({ timeout: WAIT_MS });
    assert.equal(await failed.count(), 1);
    await page.getByRole("table", { name: "Runs" }).getByRole("link").first().click();
    await heading(page, /^Run /);
    assert.equal(await page.getByRole("button", { name: "Cancel run" }).count(), 0);
    await shot(page, "06-failed-run");
    // The tenant's dead letters list it.
    const runId = (await page.getByRole("heading", { level: 1 }).textContent())!.replace(
      "Run ",
      "",
    );
    await page.getByRole("link", { name: "Dead letters" }).click();
    await heading(page, "Dead letters");
    const row = page.getByRole("table", { name: "Dead letters" }).getByRole("row", { name: runId });
    await row.waitFor({ timeout: WAIT_MS });
    await row.getByRole("link", { name: jobId, exact: true }).waitFor();
    await shot(page, "06b-dead-letters");
    // The tenant's runs across its jobs: the ticker's runs, and this one under "failed".
    await page.getByRole("link", { name: "Runs", exact: true }).click();
    await heading(page, "Runs");
    const all = page.getByRole("table", { name: "Runs" });
    await all
      .getByRole("link", { name: tickerId, exact: true })
      .first()
      .waitFor({ timeout: WAIT_MS });
    await page.getByLabel("Status").selectOption("failed");
    const mine = all.getByRole("row", { name: runId });
    await mine.waitFor({ timeout: WAIT_MS });
    await mine.getByRole("link", { name: jobId, exact: true }).waitFor();
    // The failed run is in the unfiltered list too: wait for the filtered list to replace it.
    await all
      .locator("tbody tr:not(:has(.status-failed))")
      .first()
      .waitFor({ state: "detached", timeout: WAIT_MS });
    assert.equal(
      await all.locator(".status-failed").count(),
      await all.locator("tbody tr").count(),
    );
    await shot(page, "06c-tenant-runs");
  });

  it("cancels a running run", async () => {
    await job("sleeper", "echo started; sleep 120");
    const page = await newPage();
    await page.goto(`${url}/#key=${encodeURIComponent(key)}`);
    await page.getByRole("link", { name: "sleeper" }).click();
    await heading(page, "sleeper");
    await page.getByRole("button", { name: "Run now" }).click();
    await page.getByRole("table", { name: "Runs" }).getByRole("link").first().click();
    await heading(page, /^Run /);
    await page.locator(".status-running").first().waitFor({ timeout: WAIT_MS });
    await shot(page, "07-running-run");
    const runId = (await page.getByRole("heading", { level: 1 }).textContent())!.replace(
      "Run ",
      "",
    );
    // The tenant's runs list shows it running too (its record says queued until it ends), and
    // its filter finds it under running.
    const list = await newPage();
    await list.goto(`${url}/#key=${encodeURIComponent(key)}`);
    await list.getByRole("link", { name: "Runs", exact: true }).click();
    await heading(list, "Runs");
    await list.getByLabel("Status").selectOption("running");
    await list
      .getByRole("table", { name: "Runs" })
      .getByRole("row", { name: runId })
      .locator(".status-running")
      .waitFor({ timeout: WAIT_MS });
    await shot(list, "07b-tenant-runs-running");
    await page.getByRole("button", { name: "Cancel run" }).click();
    await page.locator(".status-cancelled").first().waitFor({ timeout: WAIT_MS });
    const r = await rest.call<{ status: string; reason: string }>("GET", `/v1/runs/${runId}`);
    assert.equal(r.body.status, "cancelled");
    await shot(page, "08-cancelled-run");
  });

  it("re-reads an open list while its tab is shown, not while it is hidden", async () => {
    const page = await newPage();
    // The page's timers on a clock the test moves: each poll is one step, no waiting.
    await page.clock.install();
    const reads: string[] = [];
    page.on("request", (r) => {
      if (new URL(r.url()).pathname === "/v1/runs") reads.push(r.url());
    });
    await page.goto(`${url}/#key=${encodeURIComponent(key)}`);
    await page.getByRole("link", { name: "Runs", exact: true }).click();
    await heading(page, "Runs");
    const polled = page.waitForRequest((r) => new URL(r.url()).pathname === "/v1/runs");
    await page.clock.runFor(RUNS_POLL_MS);
    await (await polled).response(); // answered: the next read is on the clock
    const setHidden = (hidden: boolean) =>
      page.evaluate(
        `Object.defineProperty(document, "hidden", { configurable: true, get: () => ${hidden} });` +
          `document.dispatchEvent(new Event("visibilitychange"));`,
      );
    await setHidden(true);
    const before = reads.length;
    await page.clock.runFor(RUNS_POLL_MS * 4);
    assert.equal(reads.length, before, "no reads while hidden");
    // Shown again: a read at once, then every RUNS_POLL_MS as before.
    const resumed = page.waitForRequest((r) => new URL(r.url()).pathname === "/v1/runs");
    await setHidden(false);
    await resumed;
    const next = page.waitForRequest((r) => new URL(r.url()).pathname === "/v1/runs");
    await page.clock.runFor(RUNS_POLL_MS);
    await next;
  });

  it("draws the tenant's live charts, with their figures as tables", async () => {
    const page = await newPage();
    await page.goto(`${url}/#key=${encodeURIComponent(key)}`);
    await heading(page, "Jobs");
    await page.getByRole("link", { name: "Activity" }).click();
    await heading(page, "Activity");
    for (const name of [
      "Runs started per second",
      "Runs waiting",
      "Dispatch lag",
      "Runs due per minute, next hour",
    ])
      await page.getByRole("figure", { name }).getByRole("img").waitFor({ timeout: WAIT_MS });
    // The ticker's runs (every second): bars, a lag line, and words for them.
    await page.getByText(/runs started, at most \d/).waitFor({ timeout: WAIT_MS });
    assert.ok((await page.locator("#chart-started rect").count()) > 0, "bars of runs started");
    assert.ok((await page.locator("#chart-lag polyline").count()) > 0, "a lag line");
    await page.getByText(/^Dispatch lag \(a run's start after its due time\)/).waitFor();
    // Its forecast: the schedulers compute it at :30 of each minute (75 s covers one).
    await page
      .getByText(/runs due over the next hour; the busiest minute is/)
      .waitFor({ timeout: 75_000 });
    assert.ok((await page.locator("#chart-forecast rect").count()) >= 58);
    // The figures behind a chart, as a table (a text alternative).
    await page.getByText("Runs started per second: the figures").click();
    const table = page.getByRole("table", { name: "Runs started per second: the figures" });
    await table.getByRole("row").nth(1).waitFor({ timeout: WAIT_MS });
    assert.match((await table.getByRole("row").nth(1).textContent()) ?? "", /^\d\d:\d\d:\d\d\d+/);
    await shot(page, "09a-activity");
    const paused = await rest.call("PATCH", `/v1/jobs/${tickerId}`, { enabled: false });
    assert.equal(paused.status, 200, JSON.stringify(paused.body));
  });

  it("shows an operator key the cluster page, and refuses it to a tenant's key", async () => {
    const b = await openBuckets(fx.nc, { clusterName: "kairos", replicas: 1 });
    const op = await new KvOperatorKeys(b.tenants, systemClock).create("dashboard-test");
    const page = await newPage();
    await page.goto(`${url}/#key=${encodeURIComponent(op.key)}`);
    await heading(page, "Cluster");
    assert.ok(!page.url().includes(op.key));
    // The nav shows what an operator key reads: the cluster page, not the tenant's pages.
    await page.getByRole("link", { name: "Cluster" }).waitFor();
    assert.equal(await page.getByRole("link", { name: "Jobs", exact: true }).count(), 0);
    await page.getByRole("table", { name: "Nodes" }).getByRole("cell", { name: "dash-1" }).waitFor({
      timeout: WAIT_MS,
    });
    const workers = page.getByRole("table", { name: "Workers" });
    await workers.getByRole("row").nth(1).waitFor({ timeout: WAIT_MS });
    assert.match((await workers.getByRole("row").nth(1).textContent()) ?? "", /process4/);
    await page.getByText(/^8 of 8$/).waitFor({ timeout: WAIT_MS });
    await shot(page, "09b-cluster");
    // A tenant's key on the same page: the API's refusal, no figures.
    const tenantPage = await newPage();
    await tenantPage.goto(`${url}/#key=${encodeURIComponent(key)}`);
    await heading(tenantPage, "Jobs");
    await tenantPage.goto(`${url}/#/cluster`);
    await tenantPage
      .getByRole("alert")
      .getByText(/operator key/)
      .waitFor({ timeout: WAIT_MS });
    assert.equal(await tenantPage.getByRole("table", { name: "Nodes" }).count(), 0);
  });

  it("pages through the jobs list", async () => {
    for (let i = 0; i < 21; i++) await job(`page-${String(i).padStart(2, "0")}`, "true");
    const all = await rest.call<{ jobs: { name: string }[] }>("GET", "/v1/jobs?limit=100");
    const names = all.body.jobs.map((j) => j.name).sort();
    assert.ok(names.length > 20 && names.length <= 40, `${names.length} jobs`);
    const page = await newPage();
    await page.goto(`${url}/#key=${encodeURIComponent(key)}`);
    await heading(page, "Jobs");
    const rows = page.getByRole("table", { name: "Jobs" }).locator("tbody tr");
    await rows.first().waitFor({ timeout: WAIT_MS });
    assert.equal(await rows.count(), 20);
    const seen = await rows.locator("td:first-child").allTextContents();
    assert.equal(await page.getByRole("link", { name: "First page" }).count(), 0);
    await page.getByRole("link", { name: "Next page" }).click();
    await page.getByRole("link", { name: "First page" }).waitFor({ timeout: WAIT_MS });
    await rows.first().waitFor({ timeout: WAIT_MS });
    seen.push(...(await rows.locator("td:first-child").allTextContents()));
    assert.deepEqual(seen.sort(), names, "the two pages hold every job once");
    assert.equal(await page.getByRole("link", { name: "Next page" }).count(), 0);
    await shot(page, "09-jobs-second-page");
  });

  it("filters the jobs list by a part of the name and by state", async () => {
    const page = await newPage();
    await page.goto(`${url}/#key=${encodeURIComponent(key)}`);
    await heading(page, "Jobs");
    await page.getByLabel("Name contains").fill("PAGE-1");
    await page.getByLabel("State").selectOption("paused");
    await page.getByRole("button", { name: "Filter" }).click();
    await page.getByText("No matching jobs.").waitFor({ timeout: WAIT_MS });
    assert.match(page.url(), /name=PAGE-1&state=paused/, "the filter is in the address");
    await page.getByLabel("State").selectOption("");
    await page.getByRole("button", { name: "Filter" }).click();
    const rows = page.getByRole("table", { name: "Jobs" }).locator("tbody tr");
    await rows.first().waitFor({ timeout: WAIT_MS });
    const names = await rows.locator("td:first-child").allTextContents();
    assert.deepEqual(
      names.sort(),
      Array.from({ length: 10 }, (_, i) => `page-1${i}`),
      "page-10 … page-19, in any case",
    );
    assert.equal(await page.getByLabel("Name contains").inputValue(), "PAGE-1");
    await shot(page, "10-jobs-filtered");
  });

  it("signs out with the API's message when the key is revoked meanwhile", async () => {
    const other = await fx.tenants.createKey(
      (await fx.tenants.authenticateKey(key))!.tenant.tenant_id,
    );
    const page = await newPage();
    await page.goto(`${url}/#key=${encodeURIComponent(other.apiKey)}`);
    await heading(page, "Jobs");
    const jobs = await rest.call<{ jobs: { job_id: string; name: string }[] }>(
      "GET",
      "/v1/jobs?limit=100",
    );
    const sleeper = jobs.body.jobs.find((j) => j.name === "sleeper");
    assert.ok(sleeper);
    await page.goto(`${url}/#/jobs/${sleeper.job_id}`);
    await heading(page, "sleeper");
    await fx.tenants.revokeKey(other.keyId);
    // The job page re-reads its runs every 2 s; API nodes trust a key for up to 5 s.
    await heading(page, "Sign in");
    await page
      .getByRole("alert")
      .getByText(/refused the key: invalid or revoked API key/)
      .waitFor();
    assert.equal(await page.evaluate(KEY_IN_STORAGE), null);
    await shot(page, "10-key-revoked");
  });

  it("sent the key only to the API, and broke no policy", async () => {
    for (const c of contexts) await c.close();
    const origin = new URL(url).origin;
    const elsewhere = requests.filter((r) => new URL(r.url).origin !== origin);
    assert.deepEqual(elsewhere, [], "requests to another origin");
    const keyed = requests.filter((r) => r.auth !== undefined);
    assert.ok(keyed.length > 0);
    for (const r of keyed) assert.match(new URL(r.url).pathname, /^\/v1\//, r.url);
    // Expected: the wrong and the revoked key's 401, the refused edit's 400 and the tenant key's
    // 403 on the cluster page (failed loads, to Chromium), and
    // the test's own innerHTML probe; nothing else.
    const unexpected = problems.filter(
      (p) => !/status of (401|400|403) |requires 'TrustedHTML' assignment/.test(p),
    );
    assert.deepEqual(unexpected, []);
  });
});
