/**
 * The one way benchmarks record results: a section appended to BENCHMARKS.md with the date, the
 * machine, the command and the figures exactly as printed.
 */
import { readFileSync } from "node:fs";
import { appendFile } from "node:fs/promises";
import { cpus } from "node:os";

/** `N cores, <CPU model>, node vX` — from /proc/cpuinfo when present. */
export function machine(): string {
  let model = cpus()[0]?.model ?? "unknown";
  try {
    model =
      /^model name\s*:\s*(.+)$/m.exec(readFileSync("/proc/cpuinfo", "utf8"))?.[1]?.trim() ?? model;
  } catch {
    // not Linux: keep os.cpus()'s model
  }
  return `${cpus().length} cores, ${model}, node ${process.version}`;
}

/** Appends `## <title>`, the bullet lines, and `figures` (as a code block when `fenced`). */
export async function appendSection(
  title: string,
  bullets: string[],
  figures: string[],
  fenced = true,
): Promise<void> {
  const body = fenced ? ["```", ...figures, "```"] : figures.map((l) => `- ${l}`);
  const section = [
    "",
    `## ${title}`,
    "",
    ...bullets.map((b) => `- ${b}`),
    ...(fenced ? [""] : []),
    ...body,
    "",
  ].join("\n");
  await appendFile(new URL("../BENCHMARKS.md", import.meta.url), section);
  console.log(`appended "${title}" to BENCHMARKS.md`);
}
