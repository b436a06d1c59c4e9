/**
 * `.kairos/dev.json`: where `kairos dev` records how to reach the dev cluster, so that other
 * `kairos` commands work without flags.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

export interface DevFile {
  nats_url: string;
  api_url?: string;
  api_key?: string;
  tenant_id?: string;
  /** Prometheus metrics of the dev node (`<api_url>/metrics`). */
  metrics_url?: string;
  cluster?: string;
  pid?: number;
}

export function stateDir(): string {
  return process.env["KAIROS_STATE_DIR"] ?? ".kairos";
}

export function devFilePath(): string {
  return join(stateDir(), "dev.json");
}

export function readDevFile(): DevFile | undefined {
  try {
    return JSON.parse(readFileSync(devFilePath(), "utf8")) as DevFile;
  } catch {
    return undefined;
  }
}

export function writeDevFile(d: DevFile): void {
  mkdirSync(dirname(devFilePath()), { recursive: true });
  writeFileSync(devFilePath(), JSON.stringify(d, null, 2) + "\n");
}

/** The NATS URL from a flag, the environment, or the dev file, in that order. */
export function resolveNatsUrl(flag: string | undefined): string | undefined {
  return flag ?? process.env["KAIROS_NATS_URL"] ?? readDevFile()?.nats_url;
}
