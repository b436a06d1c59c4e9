/**
 * The `kairos` process: runs the command line (program.ts) on the process's own io. A command
 * that ends with an exit code (every one-shot command, and any failure) exits with it at once;
 * one whose action returns while it keeps serving (`kairos dev`, `kairos node`) keeps the
 * process alive until it stops.
 */
import { cliContext } from "./api-command.ts";
import { processIo } from "./io.ts";
import { runCli } from "./program.ts";

const ctx = cliContext(processIo);
const code = await runCli(process.argv.slice(2), ctx);
if (code !== 0 || ctx.settled) process.exit(code);
