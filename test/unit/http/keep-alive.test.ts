/**
 * Early answers over a real socket, from a keep-alive client (Node's fetch: undici, one pooled
 * client for the whole test): a 1 MiB body answered 413 before it was read — with a
 * Content-Length, and streamed without one — and a big body answered 401 (no key) or 404 (no
 * route) must leave the client able to go on: every later request on it gets an HTTP status.
 * The early answer says `Connection: close` so the client does not reuse a connection whose
 * body the server never read; an answer to a request without a body keeps the connection.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createApp } from "../../../src/http/app.ts";
import { serveApi, type ApiServer } from "../../../src/http/server.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { FakeJobs, FakeTenants } from "./fakes.ts";
import { NOW, validJob } from "./helpers.ts";

const JSON_AUTH = {
  authorization: `Bearer ${FakeTenants.KEY_A}`,
  "content-type": "application/json",
};
const MIB = 1024 * 1024;

describe("early answers on a keep-alive connection", () => {
  let server: ApiServer;
  before(async () => {
    const clock = new FakeClock(NOW);
    const app = createApp({
      jobs: new FakeJobs(clock),
      tenants: new FakeTenants(),
      clock,
      rateLimits: { tenantPerSecond: 0 },
    });
    server = await serveApi(app);
  });
  after(async () => {
    await server?.close();
  });

  /** Answers of `n` ordinary requests after the early one: statuses, or the error that replaced one. */
  const followUps = async (n: number): Promise<string[]> => {
    const out: string[] = [];
    for (let i = 0; i < n; i++) {
      try {
        const r = await fetch(`${server.url}/v1/jobs`, {
          method: "POST",
          headers: JSON_AUTH,
          body: JSON.stringify(validJob()),
        });
        await r.text();
        out.push(String(r.status));
      } catch (e) {
        out.push(`no HTTP answer: ${String((e as Error).cause ?? e)}`);
      }
    }
    return out;
  };

  const big = JSON.stringify({ padding: "a".repeat(MIB) });
  const cases: [string, () => Promise<Response>, number, "close" | "keep-alive"][] = [
    [
      "1 MiB with Content-Length → 413",
      () => fetch(`${server.url}/v1/jobs`, { method: "POST", headers: JSON_AUTH, body: big }),
      413,
      "keep-alive",
    ],
    [
      "1 MiB streamed, no Content-Length → 413",
      () =>
        fetch(`${server.url}/v1/jobs`, {
          method: "POST",
          headers: JSON_AUTH,
          body: new Blob([big]).stream(),
          duplex: "half",
        }),
      413,
      "close",
    ],
    [
      "1 MiB without a key → 401",
      () =>
        fetch(`${server.url}/v1/jobs`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: big,
        }),
      401,
      "keep-alive",
    ],
    [
      "1 MiB to no route → 404",
      () => fetch(`${server.url}/nowhere`, { method: "POST", headers: JSON_AUTH, body: big }),
      404,
      "keep-alive",
    ],
  ];
  for (const [name, send, status, connection] of cases) {
    it(`${name}, then every request on the same client gets an HTTP status`, async () => {
      for (let round = 0; round < 3; round++) {
        const r = await send();
        const text = await r.text();
        assert.equal(r.status, status, text);
        assert.equal(r.headers.get("connection"), connection);
        assert.deepEqual(await followUps(5), ["201", "201", "201", "201", "201"], `round ${round}`);
      }
    });
  }

  it("a body several times the socket's buffers, answered 413, gives the client its status", async () => {
    // Answered before the body was read and the connection closed, the client, still writing,
    // failed with EPIPE before it read the status (CI, 5 MiB to /v1/jobs:batch).
    const huge = JSON.stringify({ padding: "a".repeat(5 * MIB) });
    for (let i = 0; i < 5; i++) {
      const r = await fetch(`${server.url}/v1/jobs`, {
        method: "POST",
        headers: JSON_AUTH,
        body: huge,
      });
      assert.equal(r.status, 413, await r.text());
    }
  });

  it("an error answer to a request without a body keeps the connection", async () => {
    const r = await fetch(`${server.url}/v1/jobs/nosuchjob1`, { headers: JSON_AUTH });
    await r.text();
    assert.equal(r.status, 404);
    assert.equal(r.headers.get("connection"), "keep-alive");
  });
});
