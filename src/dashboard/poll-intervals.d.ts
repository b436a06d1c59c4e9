/** Types of poll-intervals.js for Node code (plain JS: the browser loads it as it is). */
export const RUNS_POLL_MS: number;
export const RUN_POLL_MS: number;
export const STATS_POLL_MS: number;
export const CLUSTER_POLL_MS: number;
