/**
 * The `kairos` command line. Each area registers its own sub-commands; this file only wires
 * them together and turns errors into a message and an exit code.
 */
import { Command, CommanderError } from "commander";
import { isKairosError } from "../lib/errors.ts";
import { registerAdminCommands } from "./admin.ts";
import { registerClusterCommands } from "./cluster.ts";
import { registerCronCommands } from "./cron.ts";
import { registerDevCommand } from "./dev.ts";
import { registerNodeCommand } from "./node.ts";
import { registerNatsAuthCommand } from "./nats-auth.ts";

const program = new Command("kairos")
  .description("Kairos: a distributed job scheduler")
  .showHelpAfterError()
  .exitOverride();

registerCronCommands(program);
registerDevCommand(program);
registerNodeCommand(program);
registerClusterCommands(program);
registerAdminCommands(program);
registerNatsAuthCommand(program);

try {
  await program.parseAsync(process.argv);
} catch (e) {
  if (e instanceof CommanderError) process.exit(e.exitCode);
  if (isKairosError(e)) {
    console.error(`kairos: ${e.message}`);
    process.exit(2);
  }
  console.error(e);
  process.exit(1);
}
