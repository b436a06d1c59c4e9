/**
 * How often the dashboard's open pages re-read the API (the page frame, app.js `poll`, pauses
 * them while the tab is hidden). Shared with the burst benchmark's stand-in for an open dashboard
 * (bench/dashboard-poller.ts), so it reads what the dashboard reads.
 */

/** A runs list's first page (a job's or the tenant's). */
export const RUNS_POLL_MS = 5000;
/** A run's page, until the run ends. */
export const RUN_POLL_MS = 2000;
/** The Activity charts: `/v1/stats` moves in 5 s steps. */
export const STATS_POLL_MS = 5000;
/** The operators' cluster view. */
export const CLUSTER_POLL_MS = 5000;
