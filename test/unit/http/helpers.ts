/** Shared set-up for the route tests: an app over the fakes, a fake clock, request helpers. */
import assert from "node:assert/strict";
import { createApp } from "../../../src/http/app.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { FakeJobs, FakeTenants } from "./fakes.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import { KvSubscriptions } from "../../../src/notify/subscriptions.ts";
import type { TaskLimits } from "../../../src/sandbox/task-rules.ts";

export const NOW = Date.parse("2026-03-01T00:00:00Z");

export interface Harness {
  app: ReturnType<typeof createApp>;
  jobs: FakeJobs;
  clock: FakeClock;
  errors: unknown[];
  /** Sends a request as tenant A (JSON body unless `body` is a string). */
  req(
    method: string,
    path: string,
    opts?: { body?: unknown; headers?: Record<string, string>; key?: string | null },
  ): Promise<Response>;
}

export function harness(maxBodyBytes?: number, taskLimits?: TaskLimits): Harness {
  const clock = new FakeClock(NOW);
  const jobs = new FakeJobs(clock);
  const errors: unknown[] = [];
  // Route tests send hundreds of requests at one frozen instant: no per-tenant limit here (the
  // limits have their own tests, rate-limit.test.ts).
  const app = createApp({
    jobs,
    tenants: new FakeTenants(),
    clock,
    subscriptions: new KvSubscriptions(new MemoryKv("tenants"), clock),
    rateLimits: { tenantPerSecond: 0 },
    logError: (e) => errors.push(e),
    ...(maxBodyBytes ? { maxBodyBytes } : {}),
    ...(taskLimits ? { taskLimits } : {}),
  });
  return {
    app,
    jobs,
    clock,
    errors,
    req(method, path, opts = {}) {
      const headers: Record<string, string> = {};
      const key = opts.key === undefined ? FakeTenants.KEY_A : opts.key;
      if (key !== null) headers["authorization"] = `Bearer ${key}`;
      let body: string | undefined;
      if (opts.body !== undefined) {
        headers["content-type"] = "application/json";
        body = typeof opts.body === "string" ? opts.body : JSON.stringify(opts.body);
      }
      Object.assign(headers, opts.headers ?? {});
      return Promise.resolve(
        app.request(path, { method, headers, ...(body === undefined ? {} : { body }) }),
      );
    },
  };
}

/** A minimal valid create body. */
export function validJob(over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    schedule: { cron: "*/5 * * * *" },
    task: { image: "busybox", args: ["echo", "hi"], timeout_s: 30 },
    ...over,
  };
}

/** Asserts a well-formed error response and returns its error object. */
export async function expectError(
  res: Response,
  status: number,
  code: string,
  field?: string,
): Promise<{ code: string; message: string; field?: string }> {
  const text = await res.text();
  assert.equal(res.status, status, `status ${res.status}, body ${text}`);
  assert.match(res.headers.get("content-type") ?? "", /application\/json/);
  const body = JSON.parse(text) as { error: { code: string; message: string; field?: string } };
  assert.deepEqual(Object.keys(body), ["error"]);
  assert.equal(body.error.code, code, text);
  assert.equal(typeof body.error.message, "string");
  if (field !== undefined) assert.equal(body.error.field, field, text);
  return body.error;
}
