/**
 * Headless Chromium for the dashboard's browser tests: Debian's `chromium` (apt), driven by
 * playwright-core — never a downloaded browser build. KAIROS_CHROMIUM names another binary.
 * A missing browser fails the test with the command that installs it (scripts/bootstrap.sh
 * --browser does so as root; `npm test` passes it). Screenshots go to the artefact folder
 * (KAIROS_TEST_ARTIFACTS, default test-artifacts/, git-ignored).
 */
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium, type Browser } from "playwright-core";

export const CHROMIUM = process.env["KAIROS_CHROMIUM"] ?? "/usr/bin/chromium";

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `the browser tests need Debian's chromium at ${CHROMIUM} (none there): as root run ` +
        `"apt-get install -y chromium" or "bash scripts/bootstrap.sh --browser", ` +
        `or set KAIROS_CHROMIUM to a Chromium binary`,
    );
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    // As root (CI, containers) Chromium's own sandbox cannot start.
    args: process.getuid?.() === 0 ? ["--no-sandbox"] : [],
  });
}

/** The folder for a suite's artefacts (made if missing). */
export function artefactDir(suite: string): string {
  const dir = join(process.env["KAIROS_TEST_ARTIFACTS"] ?? "test-artifacts", suite);
  mkdirSync(dir, { recursive: true });
  return dir;
}
