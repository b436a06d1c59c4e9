/**
 * Child of log-drop.test.ts: logs `LINES` lines of ~200 bytes through the node's stdout logger
 * (the parent does not read its stdout until told on stderr), then reports what it dropped.
 */
import { createLogger, droppedLogLines } from "../../../src/lib/log.ts";
import { registry } from "../../../src/metrics/index.ts";

const lines = Number(process.argv[2]);
const log = createLogger("drop-test");
const pad = "x".repeat(160);
for (let i = 0; i < lines; i++) log.info({ evt: "line", i, pad }, "line");
const metric = /^kairos_log_lines_dropped_total (\d+)$/m.exec(await registry.metrics())?.[1];
process.stderr.write(`${JSON.stringify({ dropped: droppedLogLines(), metric: Number(metric) })}\n`);
