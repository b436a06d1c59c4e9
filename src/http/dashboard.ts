/**
 * The web dashboard's static assets (src/dashboard: one HTML page, plain ES modules and CSS,
 * shipped in the package as they are — no build step on either side), served at `/` and
 * `/dashboard/<file>`, outside `/v1` and its authentication: the page holds no data, and it
 * signs in to the API from the browser with the tenant's API key.
 *
 * Every answer carries a strict Content-Security-Policy: scripts, styles and fetches from this
 * origin only, no inline script or style, no frames, no forms posting elsewhere, Trusted Types
 * enforced (the page builds its DOM with textContent, never HTML strings). `Referrer-Policy:
 * no-referrer` and `nosniff` ride along. The files are read once, when the first app is built
 * (a few dozen KiB), and only names that look like `name.js`, `name.css` or `name.svg` are
 * served: nothing else of the folder is reachable.
 */
import { readFileSync, readdirSync } from "node:fs";
import type { Context, Hono } from "hono";
import type { ApiEnv } from "./auth.ts";

/** The policy of every dashboard answer. */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
  "require-trusted-types-for 'script'",
  "trusted-types 'none'",
].join("; ");

const TYPES = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
  svg: "image/svg+xml",
} as const;
type AssetKind = keyof typeof TYPES;

interface Asset {
  body: string;
  kind: AssetKind;
}

/** The asset folder, beside this module's area in the package. */
const ASSET_DIR = new URL("../dashboard/", import.meta.url);
const ASSET_NAME = /^[a-z][a-z0-9-]*\.(js|css|svg)$/;
/** An upper bound on what the folder may hold; a larger file is a packaging mistake. */
const MAX_ASSET_BYTES = 256 * 1024;

/** Reads the page and its assets (name → asset). Throws if the page is missing. */
export function loadDashboardAssets(dir: URL = ASSET_DIR): ReadonlyMap<string, Asset> {
  const assets = new Map<string, Asset>();
  const read = (name: string): string => {
    const body = readFileSync(new URL(name, dir), "utf8");
    if (body.length > MAX_ASSET_BYTES)
      throw new Error(`dashboard asset ${name} is larger than ${MAX_ASSET_BYTES} bytes`);
    return body;
  };
  assets.set("index.html", { body: read("index.html"), kind: "html" });
  for (const name of readdirSync(dir)) {
    const m = ASSET_NAME.exec(name);
    if (m === null) continue;
    assets.set(name, { body: read(name), kind: m[1] as AssetKind });
  }
  return assets;
}

function send(c: Context<ApiEnv>, asset: Asset): Response {
  c.header("Content-Type", TYPES[asset.kind]);
  c.header("Content-Security-Policy", DASHBOARD_CSP);
  c.header("X-Content-Type-Options", "nosniff");
  c.header("Referrer-Policy", "no-referrer");
  c.header("Cache-Control", "no-cache");
  return c.body(asset.body, 200);
}

let loaded: ReadonlyMap<string, Asset> | undefined;

/** Mounts `GET /` (the page) and `GET /dashboard/:file` (its scripts and styles). */
export function registerDashboard(app: Hono<ApiEnv>): void {
  loaded ??= loadDashboardAssets();
  const assets = loaded;
  const page = assets.get("index.html")!;
  app.get("/", (c) => send(c, page));
  app.get("/dashboard/:file", (c, next) => {
    const file = c.req.param("file");
    const asset = file === "index.html" ? undefined : assets.get(file);
    return asset === undefined ? next() : Promise.resolve(send(c, asset));
  });
}
