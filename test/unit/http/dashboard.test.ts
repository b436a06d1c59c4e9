/**
 * The dashboard's static serving: the page at `/` and its assets under `/dashboard/`, each with
 * the strict Content-Security-Policy, no API key needed and none looked at; only the asset
 * folder's `name.js|css|svg` files are reachable (no other file, no path tricks); every script
 * the page loads is one of them.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { harness } from "./helpers.ts";
import { DASHBOARD_CSP } from "../../../src/http/dashboard.ts";

const ASSETS = new URL("../../../src/dashboard/", import.meta.url);

describe("dashboard assets", () => {
  const h = harness();

  it("serves the page at / with the strict policy, without a key", async () => {
    const res = await h.req("GET", "/", { key: null });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), "text/html; charset=utf-8");
    assert.equal(res.headers.get("content-security-policy"), DASHBOARD_CSP);
    assert.equal(res.headers.get("x-content-type-options"), "nosniff");
    assert.equal(res.headers.get("referrer-policy"), "no-referrer");
    for (const d of [
      "default-src 'none'",
      "script-src 'self'",
      "require-trusted-types-for 'script'",
    ])
      assert.ok(DASHBOARD_CSP.includes(d), d);
    assert.doesNotMatch(DASHBOARD_CSP, /unsafe|\*|data:|https?:/);
    const html = await res.text();
    assert.match(html, /<script type="module" src="\/dashboard\/app\.js"><\/script>/);
  });

  it("serves every script and stylesheet of the folder with its type and the policy", async () => {
    const files = readdirSync(ASSETS).filter((f) => /\.(js|css|svg)$/.test(f));
    assert.ok(files.includes("app.js") && files.includes("style.css"));
    for (const f of files) {
      const res = await h.req("GET", `/dashboard/${f}`, { key: null });
      assert.equal(res.status, 200, f);
      const type = f.endsWith(".js")
        ? "text/javascript"
        : f.endsWith(".css")
          ? "text/css"
          : "image/svg";
      assert.ok(
        res.headers.get("content-type")?.startsWith(type),
        `${f}: ${res.headers.get("content-type")}`,
      );
      assert.equal(res.headers.get("content-security-policy"), DASHBOARD_CSP);
    }
  });

  it("imports only modules that it serves, from its own origin", async () => {
    const files = readdirSync(ASSETS).filter((f) => f.endsWith(".js"));
    for (const f of files) {
      const src = await (await h.req("GET", `/dashboard/${f}`, { key: null })).text();
      for (const m of src.matchAll(/^import .* from "([^"]+)";$/gm)) {
        const target = m[1]!;
        assert.match(target, /^\.\/[a-z-]+\.js$/, `${f} imports ${target}`);
        assert.ok(files.includes(target.slice(2)), `${f} imports ${target}, which is not served`);
      }
    }
  });

  it("serves nothing else: other files, traversal, the page's own name", async () => {
    for (const path of [
      "/dashboard/cron-words.d.ts",
      "/dashboard/index.html",
      "/dashboard/..%2Fhttp%2Fapp.ts",
      "/dashboard/../http/app.ts",
      "/dashboard/%2e%2e%2fpackage.json",
      "/dashboard/",
      "/dashboard/nope.js",
      "/index.html",
    ]) {
      const res = await h.req("GET", path, { key: null });
      assert.equal(res.status, 404, path);
      const body = (await res.json()) as { error: { code: string } };
      assert.equal(body.error.code, "not_found", path);
    }
  });
});
