import type { Command } from "commander";

/** Registers `kairos cron …` (implemented with the schedule engine). */
export function registerCronCommands(program: Command): void {
  program.command("cron").description("schedule tools");
}
