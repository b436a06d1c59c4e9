/**
 * The `kairos` command tree and how one invocation ends: each area registers its own
 * sub-commands; `runCli` parses the arguments, runs the command and returns the exit code —
 * the customer commands' own (exit-codes.ts), 2 for a usage error the parser finds or a
 * `KairosError` another command throws, 1 for anything else (a bug). The process entry is
 * main.ts; tests call `runCli` with their own io.
 */
import { Command, CommanderError } from "commander";
import { isKairosError } from "../lib/errors.ts";
import { registerAdminCommands } from "./admin.ts";
import type { CliContext } from "./api-command.ts";
import { registerClusterCommands } from "./cluster.ts";
import { registerCompletionCommand } from "./completion.ts";
import { registerCronCommands } from "./cron.ts";
import { registerDevCommand } from "./dev.ts";
import { EXIT } from "./exit-codes.ts";
import { registerJobCommands } from "./jobs.ts";
import { registerNatsAuthCommand } from "./nats-auth.ts";
import { registerNodeCommand } from "./node.ts";
import { registerRunCommands } from "./runs.ts";
import { registerRunTokenKeysCommand } from "./run-token-keys.ts";

export function buildProgram(ctx: CliContext): Command {
  const program = new Command("kairos")
    .description("Kairos: a distributed job scheduler")
    .configureOutput({ writeOut: (s) => ctx.io.out(s), writeErr: (s) => ctx.io.err(s) })
    .showHelpAfterError()
    .exitOverride();
  registerJobCommands(program, ctx);
  registerRunCommands(program, ctx);
  registerCronCommands(program);
  registerDevCommand(program);
  registerNodeCommand(program);
  registerClusterCommands(program);
  registerAdminCommands(program);
  registerNatsAuthCommand(program);
  registerRunTokenKeysCommand(program);
  registerCompletionCommand(program, ctx);
  return program;
}

/** Runs `kairos <argv…>` (the arguments after the program name); resolves to its exit code. */
export async function runCli(argv: readonly string[], ctx: CliContext): Promise<number> {
  try {
    await buildProgram(ctx).parseAsync([...argv], { from: "user" });
    return ctx.exitCode;
  } catch (e) {
    // Help and --version are exit 0; every other parser error is a usage error.
    if (e instanceof CommanderError) return e.exitCode === 0 ? EXIT.ok : EXIT.usage;
    if (isKairosError(e)) {
      ctx.io.err(`kairos: ${e.message}\n`);
      return EXIT.usage;
    }
    ctx.io.err(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    return EXIT.internal;
  }
}
