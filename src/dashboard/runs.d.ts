/** Types of runs.js's exports that Node code imports (plain JS: the browser loads it as it is). */
export const RUN_STATUSES: readonly string[];
export const TERMINAL: ReadonlySet<string>;
