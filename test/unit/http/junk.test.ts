/**
 * Property: no input makes the API answer 5xx. Random methods, paths, query strings, headers
 * and bodies (random JSON, random text, valid bodies with one field replaced by junk) are thrown
 * at the app over the fake JobsService; every answer must be < 500, and every 4xx must carry a
 * well-formed `{"error": {code, message, field?}}` body. fast-check prints the seed on failure.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { FakeTenants } from "./fakes.ts";
import { harness, validJob } from "./helpers.ts";

const printable = fc.string({
  unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)),
  maxLength: 80,
});
const anyText = fc.string({ unit: "binary", maxLength: 200 });

const segment = fc.oneof(
  fc.constantFrom(
    "job000001",
    "run000002",
    "jobs",
    "runs",
    "",
    "..",
    "%2F",
    "%00",
    "%E2%82%AC",
    "x".repeat(70),
  ),
  anyText.map((s) => encodeURIComponent(s)),
);
const path = fc.oneof(
  fc
    .tuple(
      fc.constantFrom(
        "/v1/jobs/",
        "/v1/runs/",
        "/v1/jobs/job000001/runs/",
        "/v1/",
        "/",
        "/healthz/",
        "/openapi.json/",
      ),
      segment,
    )
    .map(([a, b]) => a + b),
  fc.tuple(segment, segment).map(([a, b]) => `/v1/jobs/${a}/${b}`),
  fc.constantFrom(
    "/v1/jobs",
    "/v1/jobs/job000001",
    "/v1/jobs/job000001/runs",
    "/v1/runs/run000002",
    "/healthz",
    "/openapi.json",
  ),
);
const query = fc.option(
  fc
    .array(
      fc.tuple(
        fc.constantFrom("limit", "cursor", "status", "x", ""),
        fc.oneof(
          anyText,
          fc.constantFrom("0", "1", "200", "201", "-1", "1e3", "queued", "retry_wait", "job000001"),
        ),
      ),
      { maxLength: 3 },
    )
    .map((kv) => "?" + kv.map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join("&")),
  { nil: "" },
);

const FIELD_PATHS = [
  [],
  ["name"],
  ["schedule"],
  ["schedule", "cron"],
  ["schedule", "time_zone"],
  ["schedule", "at"],
  ["task"],
  ["task", "image"],
  ["task", "args"],
  ["task", "args", "0"],
  ["task", "env"],
  ["task", "env", "K"],
  ["task", "timeout_s"],
  ["task", "resources"],
  ["task", "resources", "cpus"],
  ["retry"],
  ["retry", "max_s"],
  ["overlap"],
  ["misfire"],
  ["misfire", "policy"],
  ["flex_window_s"],
  ["enabled"],
  ["__proto__"],
  ["constructor"],
];

function setPath(obj: Record<string, unknown>, p: readonly string[], value: unknown): unknown {
  if (p.length === 0) return value;
  const copy: Record<string, unknown> = structuredClone(obj);
  let cur: Record<string, unknown> = copy;
  for (const k of p.slice(0, -1)) {
    const next = cur[k];
    if (typeof next !== "object" || next === null) cur[k] = {};
    cur = cur[k] as Record<string, unknown>;
  }
  Object.defineProperty(cur, p.at(-1)!, {
    value,
    enumerable: true,
    configurable: true,
    writable: true,
  });
  return copy;
}

const junkValue = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.constantFrom(
    1e308,
    -0,
    2 ** 53,
    "",
    " ",
    "\u0000",
    "@daily",
    "2030-01-01T00:00:00Z",
    "* * * * *",
    "Europe/Berlin",
  ),
);
const body = fc.oneof(
  fc.constant(undefined),
  fc
    .tuple(fc.constantFrom(...FIELD_PATHS), junkValue)
    .map(([p, v]) => JSON.stringify(setPath(validJob(), p, v))),
  fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)),
  anyText,
  fc.constantFrom(
    "[".repeat(5000),
    '{"a":'.repeat(3000),
    "\u0000",
    "{}",
    "null",
    JSON.stringify(validJob()),
  ),
);
const headers = fc.record(
  {
    authorization: fc.oneof(
      fc.constant(`Bearer ${FakeTenants.KEY_A}`),
      fc.constant(`Bearer ${FakeTenants.KEY_B}`),
      printable.map((s) => `Bearer ${s}`),
      printable,
    ),
    "content-type": fc.oneof(fc.constant("application/json"), printable),
    "if-match": printable,
    "idempotency-key": printable,
    "content-length": fc.nat({ max: 1_000_000 }).map(String),
  },
  { requiredKeys: [] },
);
const method = fc.constantFrom("GET", "POST", "PATCH", "DELETE", "PUT", "OPTIONS", "HEAD");

describe("junk never makes a 5xx", () => {
  it("random requests answer < 500 with a well-formed error body", async () => {
    const h = harness();
    // A few jobs so that some random ids and If-Match values hit real objects.
    for (let i = 0; i < 2; i++) await h.req("POST", "/v1/jobs", { body: validJob() });
    await h.req("POST", "/v1/jobs/job000001/runs");
    await fc.assert(
      fc.asyncProperty(method, path, query, headers, body, async (m, p, q, hs, b) => {
        const init: RequestInit = { method: m, headers: hs };
        if (b !== undefined && m !== "GET" && m !== "HEAD") init.body = b;
        if (init.body === undefined) delete (hs as Record<string, string>)["content-length"];
        else
          (hs as Record<string, string>)["content-length"] = String(
            new TextEncoder().encode(b).length,
          );
        const res = await h.app.request(p + q, init);
        const text = await res.text();
        assert.ok(res.status < 500, `${m} ${p}${q} → ${res.status} ${text.slice(0, 300)}`);
        if (res.status >= 400 && m !== "HEAD") {
          const parsed = JSON.parse(text) as {
            error?: { code?: unknown; message?: unknown; field?: unknown };
          };
          assert.equal(typeof parsed.error?.code, "string", text);
          assert.equal(typeof parsed.error?.message, "string", text);
          assert.ok(
            parsed.error?.field === undefined || typeof parsed.error.field === "string",
            text,
          );
        }
      }),
      { numRuns: 1500 },
    );
    assert.deepEqual(h.errors, [], "nothing was logged as an internal error");
  });

  it("authenticated JSON writes with junk bodies answer 2xx or a 400/404/409/412/413 naming a field", async () => {
    const h = harness();
    await h.req("POST", "/v1/jobs", { body: validJob() });
    const statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom("POST /v1/jobs", "PATCH /v1/jobs/job000001"),
        body,
        fc.option(printable, { nil: undefined }),
        async (route, b, ifMatch) => {
          const [m, p] = route.split(" ") as [string, string];
          const hs: Record<string, string> = {
            authorization: `Bearer ${FakeTenants.KEY_A}`,
            "content-type": "application/json",
          };
          if (ifMatch !== undefined) hs["if-match"] = ifMatch;
          const res = await h.app.request(p, {
            method: m,
            headers: hs,
            ...(b === undefined ? {} : { body: b }),
          });
          const text = await res.text();
          statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
          assert.ok(
            [200, 201, 400, 404, 409, 412, 413].includes(res.status),
            `${route} → ${res.status} ${text.slice(0, 300)}`,
          );
          if (res.status === 400) {
            const e = (JSON.parse(text) as { error: { field?: string; message: string } }).error;
            assert.equal(typeof e.field, "string", text);
            assert.ok(e.message.startsWith(`${e.field}: `), text);
          }
        },
      ),
      { numRuns: 1500 },
    );
    assert.ok(
      (statuses.get(201) ?? 0) + (statuses.get(200) ?? 0) > 0,
      `some junk is valid: ${JSON.stringify([...statuses])}`,
    );
    assert.ok((statuses.get(400) ?? 0) > 100, `mostly rejected: ${JSON.stringify([...statuses])}`);
    assert.deepEqual(h.errors, []);
  });
});
