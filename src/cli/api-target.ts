/**
 * Which API a customer command talks to and with which key: `--api-url` / `--api-key`, else
 * `KAIROS_API_URL` / `KAIROS_API_KEY`, else the dev cluster's `.kairos/dev.json` (written by
 * `kairos dev`; `KAIROS_STATE_DIR` moves it).
 *
 * Gotcha: the dev file's key is used only with the dev file's URL. With `--api-url` or
 * `KAIROS_API_URL` pointing anywhere else and no key given, the command fails rather than send
 * the dev tenant's key to another server.
 */
import { KairosError } from "../lib/errors.ts";
import { readDevFile } from "./dev-file.ts";

export interface ApiTargetFlags {
  apiUrl?: string;
  apiKey?: string;
}

export interface ApiTarget {
  url: string;
  key: string;
}

/** Longest URL or key taken (an API key is `kai_` + 43 characters). */
const MAX_LEN = 2048;

/** The URL, checked: http or https, no credentials, query or fragment; without a trailing `/`. */
export function parseApiUrl(raw: string, source: string): string {
  let u: URL | undefined;
  try {
    u = raw.length <= MAX_LEN ? new URL(raw) : undefined;
  } catch {
    u = undefined;
  }
  if (
    u === undefined ||
    (u.protocol !== "http:" && u.protocol !== "https:") ||
    u.username !== "" ||
    u.password !== "" ||
    u.search !== "" ||
    u.hash !== ""
  )
    throw new KairosError(
      "invalid_argument",
      `${source}: must be an http(s) URL such as http://127.0.0.1:7700, got ${JSON.stringify(raw.slice(0, 100))}`,
      { field: source },
    );
  return u.href.replace(/\/+$/, "");
}

/** The URL as `parseApiUrl` makes it, or undefined when it is not one. */
function normalised(raw: string): string | undefined {
  try {
    return parseApiUrl(raw, "api_url");
  } catch {
    return undefined;
  }
}

function checkKey(raw: string, source: string): string {
  const k = raw.trim();
  if (k === "" || k.length > MAX_LEN || !/^[\x21-\x7e]+$/.test(k))
    throw new KairosError(
      "invalid_argument",
      `${source}: must be an API key (printable characters, no spaces)`,
      { field: source },
    );
  return k;
}

/** The API URL and key from the flags, the environment, or the dev file, in that order. */
export function resolveApiTarget(f: ApiTargetFlags, env: NodeJS.ProcessEnv): ApiTarget {
  const dev = readDevFile(env);
  const devUrl = typeof dev?.api_url === "string" ? dev.api_url : undefined;
  const devKey = typeof dev?.api_key === "string" ? dev.api_key : undefined;
  const envUrl = env["KAIROS_API_URL"] || undefined;
  const envKey = env["KAIROS_API_KEY"] || undefined;
  const [rawUrl, urlSource] =
    f.apiUrl !== undefined
      ? [f.apiUrl, "--api-url"]
      : envUrl !== undefined
        ? [envUrl, "KAIROS_API_URL"]
        : [devUrl, "api_url of the dev file"];
  if (rawUrl === undefined)
    throw new KairosError(
      "invalid_argument",
      "no API: pass --api-url, set KAIROS_API_URL or start `kairos dev`",
      { field: "--api-url" },
    );
  const url = parseApiUrl(rawUrl, urlSource);
  const fromDev = devUrl !== undefined && url === normalised(devUrl);
  const [rawKey, keySource] =
    f.apiKey !== undefined
      ? [f.apiKey, "--api-key"]
      : envKey !== undefined
        ? [envKey, "KAIROS_API_KEY"]
        : [fromDev ? devKey : undefined, "api_key of the dev file"];
  if (rawKey === undefined)
    throw new KairosError(
      "unauthenticated",
      `no API key for ${url}: pass --api-key or set KAIROS_API_KEY` +
        (devUrl !== undefined && !fromDev
          ? " (the dev file's key is only sent to its own URL)"
          : ""),
      { field: "--api-key" },
    );
  return { url, key: checkKey(rawKey, keySource) };
}
