/**
 * The dashboard is plain JS the browser loads as is, so it cannot import the API model: its run
 * statuses are a copy. This keeps the copy equal to src/protocol/model.ts.
 */
import { it } from "node:test";
import assert from "node:assert/strict";
import { RUN_STATUSES, TERMINAL } from "../../../src/protocol/model.ts";
import {
  RUN_STATUSES as DASHBOARD_STATUSES,
  TERMINAL as DASHBOARD_TERMINAL,
} from "../../../src/dashboard/runs.js";

it("the dashboard's run statuses and terminal set are the API model's", () => {
  assert.deepEqual([...DASHBOARD_STATUSES], [...RUN_STATUSES]);
  assert.deepEqual([...DASHBOARD_TERMINAL].sort(), [...TERMINAL].sort());
});
